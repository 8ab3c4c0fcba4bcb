"""ReadIndex (Raft thesis 6.4): the leader confirms it still leads with one round of
messages to its peers, for every read waiting, instead of a log entry per read.

A mixin of the SyncObj subclass (node/raft/syncobj.py): it works through pysyncobj's
attributes on self (the name-mangled ones spelt out: self._SyncObj__transport) and
never imports pysyncobj."""

from __future__ import annotations

import threading
from collections.abc import Callable

READ_INDEX_REQUEST = "sk_readindex"
READ_INDEX_ACK = "sk_readindex_ack"
# read_index() answers: the leader could not confirm itself / has not committed its no-op.
READ_INDEX_NOT_LEADER = -1
READ_INDEX_NOT_YET = -2


class ReadIndexMixin:
    """Reads confirmed by a heartbeat round, no log entry. Call _init_read_index() before
    SyncObj.__init__ starts the raft thread; the subclass calls _start_read_round(),
    _fail_read_rounds() and _answer_confirmed_reads() from its tick, and routes
    READ_INDEX_REQUEST / READ_INDEX_ACK messages to the _on_read_index_* handlers."""

    def _init_read_index(self) -> None:
        self._read_lock = threading.Lock()
        self._read_requests: list[Callable[[int], None]] = []  # from the HTTP thread
        self._read_round = 0  # id of the last confirmation round sent
        self._read_rounds: dict[int, tuple[int, set, list[Callable[[int], None]]]] = {}
        self._reads_confirmed: list[tuple[int, Callable[[int], None]]] = []

    def request_read_index(self, callback: Callable[[int], None]) -> None:
        """Any thread. callback(index) on the raft thread once this node has confirmed it
        still leads (a majority acknowledged a round sent after this call) and has applied
        up to the commit index it had when the round started; or callback(READ_INDEX_*)."""
        with self._read_lock:
            self._read_requests.append(callback)
        self._SyncObj__pipeNotifier.notify()  # wake the raft thread now, not at its next tick

    def _start_read_round(self) -> None:
        with self._read_lock:
            waiting, self._read_requests = self._read_requests, []
        if not waiting:
            return
        if not self._isLeader():
            for cb in waiting:
                cb(READ_INDEX_NOT_LEADER)
            return
        commit = self.raftCommitIndex
        # Until its no-op is committed a new leader may not know the latest commit index.
        if commit < self._SyncObj__noopIDx:
            for cb in waiting:
                cb(READ_INDEX_NOT_YET)
            return
        self._read_round += 1
        self._read_rounds[self._read_round] = (commit, {self.selfNode}, waiting)
        request = {"type": READ_INDEX_REQUEST, "term": self.raftCurrentTerm, "id": self._read_round}
        transport = self._SyncObj__transport
        for peer in self.otherNodes:
            transport.send(peer, request)
        self._confirm_read_rounds()  # a one-node cluster needs no answers

    def _on_read_index_request(self, node, m: dict) -> None:
        # Only the leader of our term sends these (one leader per term): same term = we have
        # not moved on to a newer leader, which is what the leader needs to hear.
        if m.get("term") == self.raftCurrentTerm and not self._isLeader():
            self._SyncObj__transport.send(node, {"type": READ_INDEX_ACK, "term": m["term"], "id": m.get("id")})

    def _on_read_index_ack(self, node, m: dict) -> None:
        if not self._isLeader() or m.get("term") != self.raftCurrentTerm or not isinstance(m.get("id"), int):
            return
        # An answer to round n was sent after every round <= n started: it confirms them all.
        for rid, (_, acks, _) in self._read_rounds.items():
            if rid <= m["id"]:
                acks.add(node)
        self._confirm_read_rounds()

    def _confirm_read_rounds(self) -> None:
        quorum = (len(self.otherNodes) + 1) / 2
        for rid in sorted(self._read_rounds):
            index, acks, callbacks = self._read_rounds[rid]
            if len(acks) <= quorum:
                break  # later rounds cannot be confirmed before earlier ones
            del self._read_rounds[rid]
            self._reads_confirmed.extend((index, cb) for cb in callbacks)
        self._answer_confirmed_reads()

    def _answer_confirmed_reads(self) -> None:
        if not self._reads_confirmed:
            return
        applied = self.raftLastApplied
        ready = [(i, cb) for i, cb in self._reads_confirmed if i <= applied]
        if ready:
            self._reads_confirmed = [(i, cb) for i, cb in self._reads_confirmed if i > applied]
            for index, cb in ready:
                cb(index)

    def _fail_read_rounds(self) -> None:
        rounds, self._read_rounds = self._read_rounds, {}
        for _, _, callbacks in rounds.values():
            for cb in callbacks:
                cb(READ_INDEX_NOT_LEADER)

