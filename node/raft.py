"""The only module that knows pysyncobj.

Interface (what the rest of the node uses):
    RaftNode(cluster_config, node_id, apply_fn, snapshotter)
    .submit(payload, callback)   payload: bytes; callback(results | None, SubmitError | None)
                                 called from the raft thread once the entry is applied HERE
    .status() -> RaftStatus
    .transfer_leadership()
    .destroy()

pysyncobj 0.3.17 facts this module works around (see ../shared/DESIGN.md):
- appendEntriesUseBatch=True sends only every 0.1 s: we disable it and batch ourselves.
- journalFile without fullDumpFile comes back empty after the first compaction: we set both.
- restart re-applies journal entries after the last snapshot: apply_fn skips indexes the
  state machine already recorded (the index being applied is raftLastApplied + 1).
- one thread does networking, elections, apply and callbacks: callbacks must not block.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import msgpack
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj import pickle as _pysyncobj_pickle

from node.config import ClusterConfig

log = logging.getLogger("statekeeper.raft")

# One append_entries message may carry this many bytes of entries. The default (64 KiB)
# sends a group-committed entry of a few MiB as dozens of chunked messages; on loopback
# one message per entry is cheaper.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

SNAPSHOT_MAGIC = b"SKSNAP01"


class SubmitError(Enum):
    """Why a submitted entry has no result."""

    # Definitely not applied: safe to retry anywhere.
    NO_LEADER = "no_leader"
    # May or may not be applied: retry only with the same idempotency key.
    OUTCOME_UNKNOWN = "outcome_unknown"


_FAIL_MAP = {
    FAIL_REASON.QUEUE_FULL: SubmitError.NO_LEADER,
    FAIL_REASON.MISSING_LEADER: SubmitError.NO_LEADER,
    FAIL_REASON.NOT_LEADER: SubmitError.NO_LEADER,
    FAIL_REASON.REQUEST_DENIED: SubmitError.NO_LEADER,
    FAIL_REASON.DISCARDED: SubmitError.OUTCOME_UNKNOWN,
    FAIL_REASON.LEADER_CHANGED: SubmitError.OUTCOME_UNKNOWN,
    FAIL_REASON.UNKNOWN_OUTCOME: SubmitError.OUTCOME_UNKNOWN,
}


@dataclass(frozen=True)
class RaftStatus:
    node_id: str
    is_leader: bool
    leader_id: str | None
    term: int
    commit_index: int
    applied_index: int
    leader_commit_index: int | None
    has_quorum: bool
    ready: bool


class Snapshotter(Protocol):
    """What the state machine offers for raft snapshots."""

    def snapshot(self, path: str) -> None: ...
    def restore(self, path: str) -> None: ...
    @property
    def applied_index(self) -> int: ...


ApplyFn = Callable[[int, bytes], object]
Callback = Callable[[object, "SubmitError | None"], None]


def _write_snapshot_file(path: str, header: dict, db_file: str) -> None:
    head = msgpack.packb(header, use_bin_type=True)
    with open(path, "wb") as out, open(db_file, "rb") as src:
        out.write(SNAPSHOT_MAGIC + struct.pack(">I", len(head)) + head)
        while chunk := src.read(1 << 20):
            out.write(chunk)


def _read_snapshot_header(path: str) -> tuple[dict, int]:
    with open(path, "rb") as f:
        magic = f.read(len(SNAPSHOT_MAGIC))
        if magic != SNAPSHOT_MAGIC:
            raise ValueError(f"{path}: not a statekeeper snapshot")
        (n,) = struct.unpack(">I", f.read(4))
        header = msgpack.unpackb(f.read(n), raw=False)
        return header, f.tell()


def _entry_tuple(e) -> tuple:
    # pysyncobj compares journal entries with ==, so they must come back as
    # (bytes, int, int) tuples exactly, or it clears the journal on restart.
    return (bytes(e[0]), int(e[1]), int(e[2]))


def replicated_command_size(payload: bytes) -> int:
    """Bytes pysyncobj journals and ships for one entry carrying `payload`
    (command-type byte + its pickle of (method id, args)); used by tests that probe
    pysyncobj's chunking boundary."""
    return 1 + len(_pysyncobj_pickle.dumps((0, (payload,))))


class _SyncObj(SyncObj):
    def __init__(self, self_addr: str, peers: list[str], conf: SyncObjConf, apply_fn: ApplyFn):
        self._apply_fn = apply_fn
        super().__init__(self_addr, peers, conf=conf)

    @replicated
    def _apply_entry(self, payload: bytes):
        # The index being applied is not passed in; pysyncobj increments
        # raftLastApplied right after this returns.
        return self._apply_fn(self.raftLastApplied + 1, payload)

    def leader_commit_index(self) -> int | None:
        return self._SyncObj__leaderCommitIndex  # type: ignore[attr-defined]


class RaftNode:
    """A cluster member: replicates opaque byte entries and applies them in order."""

    def __init__(
        self,
        cluster: ClusterConfig,
        node_id: str,
        apply_fn: ApplyFn,
        snapshotter: Snapshotter,
        max_ready_lag: int = 1000,
    ):
        self.node_id = node_id
        self._me = cluster.node(node_id)
        self._snapshotter = snapshotter
        self._max_ready_lag = max_ready_lag
        self._addr_to_id = {n.raft_address: n.id for n in cluster.nodes}
        raft_dir = cluster.node_data_dir(node_id) / "raft"
        raft_dir.mkdir(parents=True, exist_ok=True)
        self._snapshot_tmp = str(raft_dir / "snapshot.db.tmp")
        r = cluster.raft
        conf = SyncObjConf(
            journalFile=str(raft_dir / "journal.bin"),
            fullDumpFile=str(raft_dir / "snapshot.bin"),
            appendEntriesUseBatch=False,
            appendEntriesBatchSizeBytes=MAX_MESSAGE_BYTES,
            raftMinTimeout=r.election_timeout_min,
            raftMaxTimeout=r.election_timeout_max,
            # Heartbeats well inside the election timeout.
            appendEntriesPeriod=min(0.1, r.election_timeout_min / 4),
            logCompactionMinEntries=r.snapshot_min_entries,
            logCompactionMinTime=r.snapshot_min_seconds,
            logCompactionBatchSize=1 << 20,
            serializer=self._serialize,
            deserializer=self._deserialize,
            connectionRetryTime=0.5,
            connectionTimeout=2.0,
            dynamicMembershipChange=False,
        )
        peers = [n.raft_address for n in cluster.peers_of(node_id)]
        self._obj = _SyncObj(self._me.raft_address, peers, conf, apply_fn)

    # -- snapshots (called on the raft thread by pysyncobj) ---------------------------

    def _serialize(self, path: str, data) -> None:
        last_entry, prev_entry, cluster_nodes = data
        self._snapshotter.snapshot(self._snapshot_tmp)
        header = {
            "last": list(last_entry),
            "prev": list(prev_entry),
            "cluster": sorted(n.address for n in cluster_nodes),
        }
        _write_snapshot_file(path, header, self._snapshot_tmp)
        os.unlink(self._snapshot_tmp)

    def _deserialize(self, path: str):
        header, offset = _read_snapshot_header(path)
        last = _entry_tuple(header["last"])
        # Restore only when the snapshot is ahead of what RocksDB already holds: on a
        # plain restart RocksDB is newer than the last snapshot and must be kept.
        if last[1] > self._snapshotter.applied_index:
            log.info("restoring state machine from snapshot at index %d", last[1])
            with open(path, "rb") as src, open(self._snapshot_tmp, "wb") as dst:
                src.seek(offset)
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            self._snapshotter.restore(self._snapshot_tmp)
            os.unlink(self._snapshot_tmp)
        return last, _entry_tuple(header["prev"]), list(header["cluster"])

    # -- the small interface ------------------------------------------------------------

    def submit(self, payload: bytes, callback: Callback) -> None:
        """Replicate one entry; callback(results, None) once it is applied on this node."""

        def on_done(result, err):
            if err == FAIL_REASON.SUCCESS:
                callback(result, None)
            else:
                callback(None, _FAIL_MAP.get(err, SubmitError.OUTCOME_UNKNOWN))

        self._obj._apply_entry(payload, callback=on_done)

    def status(self) -> RaftStatus:
        o = self._obj
        leader = o._getLeader()
        leader_id = self._addr_to_id.get(leader.address) if leader is not None else None
        applied = o.raftLastApplied
        leader_commit = o.leader_commit_index()
        caught_up = leader_commit is not None and applied >= leader_commit - self._max_ready_lag
        return RaftStatus(
            node_id=self.node_id,
            is_leader=o._isLeader(),
            leader_id=leader_id,
            term=o.raftCurrentTerm,
            commit_index=o.raftCommitIndex,
            applied_index=applied,
            leader_commit_index=leader_commit,
            has_quorum=o.hasQuorum,
            ready=leader_id is not None and o.isReady() and caught_up,
        )

    def transfer_leadership(self) -> None:
        """Ask the most caught-up follower to take over (used on graceful shutdown)."""
        if self._obj._isLeader():
            self._obj.transferLeadership()

    def destroy(self) -> None:
        self._obj.destroy_synchronous()
