"""Pre-vote (Raft thesis 9.6): a node asks whether a majority would vote for it before it
starts a real election, so a node returning from a partition cannot raise the term and
depose a healthy leader.

A mixin of the SyncObj subclass (node/raft/syncobj.py): it works through pysyncobj's
attributes on self (the name-mangled ones spelt out: self._SyncObj__raftElectionDeadline)
and never imports pysyncobj. pysyncobj's deadlines are on its own clock (CLOCK_MONOTONIC_RAW,
which NTP does not slew: it drifts from time.monotonic by up to 0.05% of the uptime), so
they are read and set through `self.raft_clock`, never time.monotonic.

A refusal carries the voter's term (`voter_term`), and a node whose term is lower adopts
it (as etcd's raft does with a rejected pre-vote answer of a higher term). Without it two
voters could refuse each other for ever: one with the newer log but the lower term asks
for term t+1, the other has t+1 already (it voted in it, say, just before a crash) and
refuses, and its own older log wins nothing. The simulator found that (seed 300018: the
third member had lost its disk; no leader in 36 s of virtual time, then never);
tests/unit/test_prevote.py. Adopting a higher term is what any raft message does; it
starts no election and deposes nobody (a node that pre-votes has no leader)."""

from __future__ import annotations

import math
import time

PREVOTE_REQUEST = "sk_prevote"
PREVOTE_RESPONSE = "sk_prevote_resp"


class PreVoteMixin:
    """Call _init_prevote() before SyncObj.__init__ starts the raft thread; the subclass
    calls _prevote_tick() at every tick, records _last_leader_contact (and clears the
    pre-vote) on an AppendEntries of the current term, and routes PREVOTE_REQUEST /
    PREVOTE_RESPONSE messages to the _on_prevote_* handlers."""

    def _init_prevote(self, election_timeout_min: float) -> None:
        self._election_timeout_min = election_timeout_min
        self._last_leader_contact = -math.inf
        self._prevote: tuple[int, set] | None = None
        self._prevote_won = False

    def may_vote(self) -> bool:
        """Whether this node may grant votes at all (catchup.py: not while catching up)."""
        return True

    def _log_position(self) -> tuple[int, int]:
        last = self._journal[-1]
        return last[2], last[1]  # (term, index): compared as a tuple

    def _prevote_tick(self) -> None:
        """Hold back pysyncobj's election until a majority says it would vote for us, so a
        node returning from a partition cannot raise the term and depose a healthy leader."""
        if self._isLeader() or self._SyncObj__transferInProgress:
            self._prevote, self._prevote_won = None, False
            return
        now = self.raft_clock()
        if self._SyncObj__raftElectionDeadline >= now:
            return
        if self._prevote_won:  # pysyncobj starts the real election in this tick
            self._prevote_won = False
            return
        if not self._SyncObj__connectedToAnyone():
            return
        term = self.raftCurrentTerm + 1
        self._prevote = (term, {self.selfNode})
        last_term, last_index = self._log_position()
        request = {
            "type": PREVOTE_REQUEST,
            "term": term,
            "last_log_term": last_term,
            "last_log_index": last_index,
        }
        transport = self._SyncObj__transport
        for peer in self.otherNodes:
            transport.send(peer, request)
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        self._count_prevotes()  # a one-node cluster has its majority already

    def _on_prevote_request(self, node, m: dict) -> None:
        heard_from_leader = (
            time.monotonic() - self._last_leader_contact < self._election_timeout_min
        )
        up_to_date = (
            m.get("last_log_term", -1),
            m.get("last_log_index", -1),
        ) >= self._log_position()
        granted = (
            self.may_vote()
            and isinstance(m.get("term"), int)
            and m["term"] > self.raftCurrentTerm
            and up_to_date
            and not self._isLeader()
            and not heard_from_leader
        )
        self._SyncObj__transport.send(
            node,
            {
                "type": PREVOTE_RESPONSE,
                "term": m.get("term"),
                "granted": granted,
                "voter_term": self.raftCurrentTerm,
            },
        )

    def _on_prevote_response(self, node, m: dict) -> None:
        voter_term = m.get("voter_term")
        if (
            not m.get("granted")
            and isinstance(voter_term, int)
            and voter_term > self.raftCurrentTerm
            and not self._isLeader()
        ):
            self._SyncObj__setCurrentTerm(voter_term, None)  # persisted, no vote cast
            self._prevote = None
            return
        if self._prevote is None or m.get("term") != self._prevote[0] or not m.get("granted"):
            return
        self._prevote[1].add(node)
        self._count_prevotes()

    def _count_prevotes(self) -> None:
        if self._prevote is not None and len(self._prevote[1]) > (len(self.otherNodes) + 1) / 2:
            self._prevote, self._prevote_won = None, True
            self._SyncObj__raftElectionDeadline = 0
