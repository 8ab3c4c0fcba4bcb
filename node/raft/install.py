"""The follower's side of snapshots, a mixin of syncobj.PatchedSyncObj (no pysyncobj import: it
reaches pysyncobj through self and super(), the name-mangled attributes spelt out).

What pysyncobj got wrong, and what this does instead (node/raft/DESIGN.md lists each
with its test):
- an AppendEntries sets commit = min(leaderCommit, our last index), which committed a
  deposed leader's stale tail: commit only what the message vouched for;
- only a snapshot's last chunk was answered, so a leader dropped a follower that was busy
  receiving a long snapshot: every chunk is acknowledged (SNAPSHOT_CHUNK_ACK), with the
  follower's term, and the leader's check-quorum counts an ack of its term as contact;
- snapshot chunks carry no position: when a connection died with chunks in flight and the
  leader went on over a new one, the follower appended the rest after a gap and installed
  a broken file (the 10M-key sweep: a restore found no CURRENT and the node stopped, then
  failed the same way at every start). The leader stamps each chunk with its offset
  (ChunkOffsets), and a follower drops a transfer at the first gap; the leader then sends
  the snapshot again from its start;
- loading a snapshot cut the journal to the snapshot's two entries unless it started with
  them, losing acknowledged entries after a crash between a snapshot's rename and the
  journal's prefix drop: keep what follows the snapshot's last entry (Raft's rule);
- the state machine was restored inside the raft step, on the node's loop: RaftNode
  restores it on a helper thread (raft_node._deserialize), and while
  `state_machine_restoring()` is true raft stands at the snapshot, the state machine before
  it: nothing is applied, no snapshot is taken or received, no election is stood for, no
  hand-over accepted, and no ReadIndex answered;
- a received snapshot reached the disk only at its install, in one fsync of the whole file
  on the loop (fsync=always): the file is synced while it arrives (SyncBehind), on a
  helper thread, so the install waits only for its tail;
- pysyncobj renames the received file over snapshot.bin before anything synced it (a
  power cut then left it empty): it is synced before that rename (_sync_before_rename).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from statekeeper.node import failpoints, snapshot_file
from statekeeper.node.raft.log import entry_tuple

log = logging.getLogger("statekeeper.raft")

SNAPSHOT_CHUNK_ACK = "sk_snapshot_chunk_ack"  # a follower got a snapshot chunk
CHUNK_OFFSET = "sk_offset"  # where a snapshot chunk's bytes start in the snapshot file


class ChunkOffsets:
    """Sans-IO: the byte offset of each snapshot chunk, stamped by the leader per follower
    (stamp) and checked by the follower (in_order), which so sees a chunk that never came.

    pysyncobj's chunk is (data, first, last); a transfer restarts with first=True. A chunk
    that was never delivered (its connection died, or the follower was not connected)
    still advances the leader's offset: the next one arrives past a gap."""

    def __init__(self) -> None:
        self._sent: dict[object, int] = {}
        self._received: int | None = None  # bytes of the transfer under way, None: broken

    def stamp(self, node: object, message: dict) -> None:
        chunk = message.get("serialized")
        if chunk is None:
            return
        data, first, _last = chunk
        at = 0 if first else self._sent.get(node, 0)
        message[CHUNK_OFFSET] = at
        self._sent[node] = at + len(data)

    def in_order(self, message: dict) -> bool:
        """Whether this chunk continues the transfer under way (False also for every chunk
        after a gap, until the leader starts the transfer again)."""
        data, first, _last = message["serialized"]
        at = message.get(CHUNK_OFFSET)
        if first:
            self._received = 0
        if at is None:  # a leader that does not stamp (mixed versions are not supported)
            return True
        if at != self._received:
            self._received = None
            return False
        self._received = at + len(data)
        return True


SYNC_BEHIND_BYTES = 64 * 1024 * 1024


def _start_thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="snapshot-sync-behind", daemon=True).start()


class SyncBehind:
    """Syncs the snapshot file a follower is receiving while it arrives (fsync=always).

    pysyncobj appends each chunk to its incoming file on the loop and renames the file into
    place after the last one; the install fsyncs it, on the loop, just before that rename
    (complete()). A large snapshot arrives faster than the kernel writes it back, so that one
    fsync wrote the whole file (a 1.47 GB snapshot at 10M keys) while the node stood still.
    Here, every `every` bytes received, a helper thread fdatasyncs a duplicate of the file's
    descriptor (one sync at a time), and the install waits only for what came after.

    Measured on this machine's disk (1,500 chunks of 1 MiB written 2 ms apart, then the
    install's wait and fsync; two runs each): 0.81 and 1.12 s without, 0.020 s with (23
    syncs behind, the receive time unchanged at 3.7 s). A new member taking a 300 MiB
    snapshot (benchmarks/membership_catchup.py --mib 300 --fsync always) stayed under the
    0.1 s RaftNode logs either way: the stall grows with the snapshot, 1.47 GB at 10M keys.

    A failed sync is kept and raised by finish(): after a failed fsync, Linux reports the
    error once, so the install's own fsync (on a new descriptor) could succeed although
    the data never reached the disk."""

    def __init__(
        self,
        every: int = SYNC_BEHIND_BYTES,
        start: Callable[[Callable[[], None]], None] = _start_thread,
    ) -> None:
        self._every = every
        self._start = start
        self._synced_to = 0
        self._idle = threading.Event()  # set by the helper when its sync is done
        self._idle.set()
        self._failed: BaseException | None = None
        self.syncs = 0  # syncs started (tests, logs)

    def received(self, incoming) -> None:
        """After a chunk was written to `incoming` (pysyncobj's file object), on the loop."""
        position = incoming.tell()
        if position < self._synced_to:
            self._synced_to = 0  # a new transfer
        if position - self._synced_to < self._every or not self._idle.is_set():
            return
        incoming.flush()  # to the OS: the helper syncs what the kernel has
        fd = os.dup(incoming.fileno())  # outlives pysyncobj closing its file
        self._synced_to = position
        self._idle.clear()
        self.syncs += 1
        self._start(lambda: self._sync(fd))

    def _sync(self, fd: int) -> None:
        try:
            os.fdatasync(fd)
        except BaseException as e:
            self._failed = e
        finally:
            os.close(fd)
            self._idle.set()

    def finish(self) -> None:
        """Before the install's own fsync: wait for the sync in flight, raise its failure."""
        self._idle.wait()
        self._synced_to = 0
        failed, self._failed = self._failed, None
        if failed is not None:
            raise OSError(f"syncing the snapshot being received failed: {failed}") from failed

    def complete(self, incoming) -> None:
        """The whole file on disk, before pysyncobj renames it into place (on the loop):
        the sync in flight, then an fsync of what came after it. Raises OSError."""
        started = time.monotonic()
        self.finish()
        incoming.flush()
        os.fsync(incoming.fileno())
        took = time.monotonic() - started
        if took > 0.1:  # on the loop: worth a line
            log.info("received snapshot synced in %.2f s", took)


class SnapshotInstallMixin:
    """Call _init_install() before SyncObj.__init__; the subclass routes AppendEntries of
    the current term to _on_append_entries, calls _stand_for_no_election() from its tick
    while restoring, and drops what `dropped_while_restoring` says."""

    def _init_install(
        self, state_machine_restoring: Callable[[], bool], sync_behind: SyncBehind | None
    ) -> None:
        # True while RaftNode replaces the state machine from a snapshot off the loop.
        self._state_machine_restoring = state_machine_restoring
        self._sync_behind = sync_behind  # None: fsync off
        self._installed_snapshot: int | None = None  # last index of a snapshot just installed
        self.chunk_offsets = ChunkOffsets()  # stamped as leader, checked as follower

    def dropped_while_restoring(self, kind: str | None, message: dict) -> bool:
        """No hand-over to a node that cannot serve yet, and no second snapshot while the
        first is restored from the same file: dropped, as if lost (raft resends)."""
        return self._state_machine_restoring() and (
            kind == "timeout_now" or (kind == "append_entries" and "serialized" in message)
        )

    def _stand_for_no_election(self) -> None:
        """A leader must serve reads and apply writes at once; this node can do neither
        until its state machine holds the snapshot raft already stands at."""
        self._SyncObj__raftElectionDeadline = (
            self.raft_clock() + self._SyncObj__generateRaftTimeout()
        )
        self._prevote, self._prevote_won = None, False

    def _SyncObj__applyLogEntries(self) -> bool:
        if self._state_machine_restoring():
            return False  # they wait in the journal for the restored state machine
        return super()._SyncObj__applyLogEntries()  # type: ignore[misc]

    def _SyncObj__tryLogCompaction(self) -> None:
        if self._state_machine_restoring():
            return  # a checkpoint now would label the old state with the snapshot's index
        return super()._SyncObj__tryLogCompaction()  # type: ignore[misc]

    def _answer_confirmed_reads(self) -> None:
        if not self._state_machine_restoring():
            super()._answer_confirmed_reads()  # type: ignore[misc]

    def _on_append_entries(self, node, message: dict) -> None:
        """pysyncobj sets commit = min(leaderCommit, our last index) after any AppendEntries.
        Our log may end in a stale term's entries (we truncate only at a real conflict), so
        commit only what THIS message vouched for: up to prevLogIdx + its entries, or, for a
        snapshot-install message (no prevLogIdx: a chunk, or None while the leader is still
        packing), up to the snapshot's last index once it is installed, else not at all."""
        if message.get("serialized") is not None and not self.chunk_offsets.in_order(message):
            return self._drop_broken_transfer(message)
        if message.get("serialized") is not None and message["serialized"][2]:
            self._sync_before_rename(message)
        before = self.raftCommitIndex
        self._installed_snapshot = None
        super()._SyncObj__onMessageReceived(node, message)  # type: ignore[misc]
        if "prevLogIdx" in message:
            n = 1 if message.get("transmission") == "finish" else len(message.get("entries", ()))
            vouched = min(message["commit_index"], message["prevLogIdx"] + n)
        else:
            vouched = self._installed_snapshot or 0
            if message.get("serialized") is not None and self._installed_snapshot is None:
                incoming = self._incoming_file()
                if self._sync_behind is not None and incoming is not None:
                    self._sync_behind.received(incoming)
                # pysyncobj answers only the last chunk, and the leader's connection drops a
                # peer silent for connectionTimeout even while writing to it: a snapshot
                # streaming longer than that restarted forever, or lost a chunk and the
                # follower exited restoring it (benchmarks/membership_catchup.py --mib 200).
                # Tagged with our term: the leader counts it as contact (_on_chunk_ack).
                self._SyncObj__transport.send(
                    node, {"type": SNAPSHOT_CHUNK_ACK, "term": self.raftCurrentTerm}
                )
        bound = max(before, vouched)
        if self.raftCommitIndex > bound:
            self._SyncObj__raftCommitIndex = bound
            self._journal.setRaftCommitIndex(bound)

    def _on_chunk_ack(self, node, message: dict) -> None:
        """The leader's side of SNAPSHOT_CHUNK_ACK. Its arrival kept the connection alive;
        check-quorum (leaderFallbackTimeout) counts only replies to AppendEntries, and a
        follower receiving a snapshot sends none until the last chunk: when that follower
        was the leader's majority (a 3-node cluster with one node down), the leader stepped
        down every leaderFallbackTimeout of the transfer (a receiver slowed to 0.3 s per
        MiB: 16 leadership losses, 28.8 s without a leader). An ack of this leader's term
        is contact with that follower; one of another term (or untagged) is not."""
        if not self._isLeader() or message.get("term") != self.raftCurrentTerm:
            return
        heard = self._SyncObj__lastResponseTime
        if node in heard:  # the leader's followers (pysyncobj sets them on election)
            heard[node] = self.raft_clock()

    def _incoming_file(self):
        """pysyncobj's file of the snapshot being received (None: no transfer under way)."""
        return getattr(self._SyncObj__serializer, "_Serializer__incomingTransmissionFile", None)

    def _drop_transfer(self) -> None:
        """pysyncobj appends chunks to its incoming file until the last one, then installs
        it: close that file, so it takes no more chunks until the leader starts the
        transfer again (the leader does once its AppendEntries after the snapshot fail)."""
        self._incoming_file().close()
        self._SyncObj__serializer._Serializer__incomingTransmissionFile = None

    def _drop_broken_transfer(self, message: dict) -> None:
        """A chunk went missing: what was received is useless."""
        if self._incoming_file() is not None:
            log.warning(
                "a snapshot chunk from the leader arrived at offset %s after a gap (a chunk "
                "was lost with a dropped connection): transfer dropped, the leader sends "
                "the snapshot again",
                message.get(CHUNK_OFFSET),
            )
            self._drop_transfer()
        return None

    def _sync_before_rename(self, message: dict) -> None:
        """pysyncobj handles a snapshot's last chunk by closing its incoming file and
        renaming it over snapshot.bin (Serializer.setTransmissionData), and only the load
        after that synced it: a power cut in between, once any later fsync committed the
        rename, left snapshot.bin empty (LazyFS), and the node failed at every start. So
        the file is synced here, before pysyncobj sees that chunk; the directory is synced
        after the rename, before raft takes the snapshot's position (RaftNode
        _durable_header). A sync that fails drops the transfer (nothing is renamed, the
        node keeps the snapshot it had, the leader sends this one again)."""
        incoming = self._incoming_file()
        data, first, _last = message["serialized"]
        if self._sync_behind is None or incoming is None or first:
            return  # fsync off; no transfer under way; a one-chunk transfer (never a real one)
        if data:  # pysyncobj's last chunk is empty (getTransmissionData); if not, it is ours
            incoming.write(data)
            message["serialized"] = (b"", first, True)
        try:
            self._sync_behind.complete(incoming)
        except OSError:
            log.exception("syncing the received snapshot failed: transfer dropped")
            self._drop_transfer()

    def _SyncObj__loadDumpFile(self, clearJournal: bool) -> None:
        """Load the snapshot at start (clearJournal False) or after receiving it from the
        leader (True). pysyncobj keeps the journal only if it starts exactly with the
        snapshot's (prev, last) entries, and otherwise cuts it to those two: after a crash
        between the snapshot's rename and the journal's prefix drop that threw away every
        entry after the snapshot, entries this node had fsynced, acknowledged and applied.
        Raft's rule instead: if the journal holds the snapshot's last entry (same index and
        term), keep what follows it and drop only what precedes; else start from the
        snapshot alone."""
        try:
            header, _ = snapshot_file.read_header(self._SyncObj__conf.fullDumpFile)
            prev, last = entry_tuple(header["prev"]), entry_tuple(header["last"])
        except Exception:
            log.exception("reading the snapshot header failed")
            return super()._SyncObj__loadDumpFile(clearJournal)  # type: ignore[misc]
        if clearJournal:
            failpoints.hit("snapshot-install")
        self._cut_journal_before(prev, last)
        super()._SyncObj__loadDumpFile(False)  # type: ignore[misc]
        if clearJournal:
            self._installed_snapshot = last[1]

    def _cut_journal_before(self, prev: tuple, last: tuple) -> None:
        j = self._journal
        if len(j) < 2 or not j[0][1] <= prev[1] < j[-1][1]:
            return
        pos = prev[1] - j[0][1]
        if j[pos] == prev and j[pos + 1] == last and pos > 0:
            j.deleteEntriesTo(pos)  # crash-safe: new file, fsync, rename, fsync dir
