"""The storage quota and its NOSPACE alarm: the decision, sans I/O (sizes in, verdict out).

A node refuses writes that would grow its store once its disk use reaches the quota, or
its filesystem's free space falls under a reserve, instead of writing until RocksDB or the
journal hits ENOSPC and the node stops (node/fatal.py). node/quota/disk_watch.py measures and
feeds this module; node/quota/gate.py asks `check` before node/api/routes.py hands a write
to the proposer.

Usage is what the node's data dir holds on disk (RocksDB files with its WAL, the raft
journal, snapshot files): measured by a timer, not per request. Between two measurements
the bytes this node admitted are added, times AMPLIFICATION (each entry lands in the raft
journal and in RocksDB's WAL before a flush), so a burst cannot overrun the quota. Against
the free space they count once more per node whose data dir shares the filesystem (a
local cluster's three nodes on one disk write every entry three times).

Alarm semantics (etcd's NOSPACE, with an automatic disarm):
- raised when usage + the write's cost would exceed the quota, or free disk minus that
  cost would fall under the reserve (a refused write raises it), or when a measurement
  finds usage over the quota or free space under the reserve;
- while raised, every write that grows the store gets 507 `insufficient_storage`: "this
  attempt was not proposed", which is all the refusal itself knows (an earlier attempt
  of the same write may have been applied: node/quota/gate.py answers a retry whose
  idempotency key has a record with that record, and says what it knows otherwise); reads, deletes, compaction, lease revokes /
  keepalives, lock releases, stream truncation, archival seals and the leader's own GC
  and lease expiry still pass (each op's OpSpec says which: its `grows` flag, which
  tests/unit/test_quota.py checks for every write op);
- cleared by a measurement that finds room for a write of `margin` bytes (5 % of the
  quota, at least 1 MiB) under both limits (hysteresis: one freed byte does not flap it).
  Deleting is not enough to free space: deleted values stay in the history until a
  compaction, and on disk until RocksDB rewrites its files and raft snapshots its journal,
  which node/quota/disk_watch.py asks for after a compaction while space is tight.

Each node raises its own alarm from its own disk, and refuses the writes it receives while
its alarm or a peer's is raised (peers' alarms are polled, node/quota/peers.py): every
entry lands on every node, so the alarm holds for the whole cluster, as etcd's does. A
node whose disk fills anyway (another process filled it within a poll) stops with a log
line saying why (node/fatal.py), and the others go on.

The quota in force is min(quota_bytes, usage + free - reserve) at each measurement: never
more than the disk can give. reserve_bytes 0 means 5 % of the filesystem, at least 64 MiB
but at most a quarter of it (a 48 MiB filesystem keeps 12 MiB).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import INTERNAL_OPS, OPS

MIB = 1024 * 1024
# Bytes on this node's disk per byte of an entry before RocksDB flushes: journal + WAL.
AMPLIFICATION = 2
DEFAULT_RESERVE_MIN = 64 * MIB
DEFAULT_RESERVE_FRACTION = 0.05
# Seconds a statvfs taken for `check` serves later growing writes. One per write was
# ~1 % of a leader's GIL time at 64 clients doing puts (py-spy --gil, issue 28), and one
# per 10 ms still 1.7 %: 4 us alone, but it releases the GIL to the raft thread and the
# sample stays on it until the HTTP loop has it back. A write judged by a reading up to
# 50 ms old also counts every byte admitted since that reading, so what it can miss is
# only what other processes wrote to the disk in those 50 ms.
FREE_READING_MAX_AGE = 0.05

# Write ops refused under the alarm: those whose OpSpec declares they add data (`grows`;
# a txn only when a branch does). tests/unit/test_quota.py pins the classification.
GROWING_OPS = frozenset(s.name for s in (*OPS.values(), *INTERNAL_OPS.values()) if s.grows)


def grows(op: dict) -> bool:
    """True when a (validated) write op adds data: refused while the alarm is raised."""
    name = op.get("op")
    if name == "txn":
        branches = (op.get("success") or []) + (op.get("failure") or [])
        return any(grows(o) for o in branches)
    return name in GROWING_OPS


def default_reserve(total_bytes: int) -> int:
    floor = min(DEFAULT_RESERVE_MIN, total_bytes // 4)
    return max(floor, int(total_bytes * DEFAULT_RESERVE_FRACTION))


@dataclass(frozen=True)
class Sample:
    """One measurement: the node's data dir on disk, and its filesystem's free and total
    bytes (statvfs: blocks available to this unprivileged use x block size)."""

    usage_bytes: int
    free_bytes: int
    total_bytes: int
    sharing: int = 1  # nodes' data dirs on this filesystem (this one included)


class StorageQuota:
    """The alarm state of one node. Not thread-safe: the HTTP loop owns it."""

    def __init__(
        self, quota_bytes: int, reserve_bytes: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.configured_quota = quota_bytes
        self.configured_reserve = reserve_bytes
        self.quota_bytes = quota_bytes
        self.reserve_bytes = reserve_bytes
        self.usage_bytes = 0
        self.free_bytes: int | None = None  # None: never measured (nothing is refused)
        self.total_bytes = 0
        # Admitted since the last sample or still in flight: not in usage_bytes yet.
        self.pending_bytes = 0
        # Admitted and not released (proposed, not yet answered): maybe not on disk yet.
        self.inflight_bytes = 0
        self.sharing = 1
        self.alarm: str | None = None  # the reason, while raised
        self.refused = 0
        self.alarms_raised = 0
        # The report of the previous run's fatal stop (node/fatal.py), if it left one.
        self.last_stop: dict | None = None
        # Peers (node id -> reason) whose alarm is raised (node/quota/peers.py): their
        # disks take every entry too, so growing writes are refused here as well.
        self.peer_alarms: dict[str, str] = {}
        # Called with the reason each time the alarm goes from cleared to raised (a log).
        self.on_raise: Callable[[str], None] = lambda reason: None
        # check's last statvfs (FREE_READING_MAX_AGE): its free bytes, when it was taken,
        # and the admitted bytes it does not show (in flight then, or admitted since).
        self._clock = clock
        self._reading_free: int | None = None
        self._reading_at = -FREE_READING_MAX_AGE
        self._unseen_bytes = 0

    @property
    def margin(self) -> int:
        """The write (before amplification) a measurement must find room for before the
        alarm clears: 5 % of the quota, at least 1 MiB (a max-size value)."""
        return max(MIB, self.quota_bytes // 20)

    def sample(self, s: Sample) -> None:
        """A new measurement: recompute the quota in force, raise or clear the alarm."""
        self.usage_bytes, self.free_bytes, self.total_bytes = (
            s.usage_bytes,
            s.free_bytes,
            s.total_bytes,
        )
        self.pending_bytes = self.inflight_bytes
        self.sharing = max(1, s.sharing)
        self.reserve_bytes = self.configured_reserve or default_reserve(s.total_bytes)
        cap = max(0, s.usage_bytes + s.free_bytes - self.reserve_bytes)
        self.quota_bytes = min(self.configured_quota, cap)
        over = self._over(0, s.free_bytes, self.inflight_bytes)
        if over:
            self._raise(over)
        elif self.alarm is not None:
            # Hysteresis: clear only once a write of `margin` bytes would pass.
            if self._over(self.margin * AMPLIFICATION, s.free_bytes, self.inflight_bytes) is None:
                self.alarm = None

    @property
    def tight(self) -> bool:
        """The alarm is raised, or close: free space under twice the reserve, or usage over
        80 % of the quota (node/quota/disk_watch.py then reclaims space after a compaction)."""
        return (
            self.alarm is not None
            or (self.free_bytes is not None and self.free_bytes < 2 * self.reserve_bytes)
            or self.usage_bytes > self.quota_bytes * 0.8
        )

    def _over(self, cost: int, free: int, backlog: int) -> str | None:
        """Why `cost` more bytes would be too many, or None. `backlog`: admitted bytes
        that `free` does not show yet."""
        left = free - (backlog * AMPLIFICATION + cost) * self.sharing
        if left < self.reserve_bytes:
            return (
                f"disk almost full: {max(0, left) / MIB:.1f} MiB would be free, under the "
                f"{self.reserve_bytes / MIB:.1f} MiB reserve"
            )
        used = self.usage_bytes + self.pending_bytes * AMPLIFICATION + cost
        if used > self.quota_bytes:
            return (
                f"storage quota reached: {used / MIB:.1f} MiB would be used of a "
                f"{self.quota_bytes / MIB:.1f} MiB quota"
            )
        return None

    def _raise(self, reason: str) -> None:
        raised = self.alarm is None
        self.alarm = reason
        if raised:
            self.alarms_raised += 1
            self.on_raise(reason)

    def admit(
        self,
        op_sizes: int,
        growing: bool,
        free_now: int | None = None,
        unseen: int | None = None,
    ) -> str | None:
        """None if a write of `op_sizes` bytes may be proposed, else why not (507).

        `growing`: it holds an op in GROWING_OPS; other writes always pass. `free_now`: a
        fresh statvfs (it costs ~2 us), else the last measurement's. `unseen`: the
        admitted bytes `free_now` does not show (default: those still in flight)."""
        if not growing:
            return None
        if self.alarm is None and self.peer_alarms:
            self.refused += 1
            peer, why = next(iter(sorted(self.peer_alarms.items())))
            return f"{peer} is out of space ({why})"
        fresh = free_now is not None
        free = free_now if fresh else self.free_bytes
        if free is None:
            return None
        if self.alarm is None:
            if fresh:
                backlog = self.inflight_bytes if unseen is None else unseen
            else:
                backlog = self.pending_bytes
            over = self._over(op_sizes * AMPLIFICATION, free, backlog)
            if over is None:
                self.pending_bytes += op_sizes
                self.inflight_bytes += op_sizes
                self._unseen_bytes += op_sizes
                return None
            self._raise(over)
        self.refused += 1
        return self.alarm

    def release(self, admitted: int) -> None:
        """The write `check` admitted (its return value) was answered: it is on disk, or
        will never be."""
        self.inflight_bytes = max(0, self.inflight_bytes - admitted)

    def check(
        self, node_id: str, ops: list[dict], size: int, disk_free: Callable[[], int | None]
    ) -> int:
        """Raise 507 insufficient_storage, before anything is proposed, for validated write
        `ops` (`size` request bytes) that add data while the alarm is (or would be) raised.
        `disk_free` is called only for such writes, at most once per FREE_READING_MAX_AGE.
        Returns the bytes admitted (0 for writes that do not grow the store): pass them to
        `release` once the write is answered."""
        if not (grows(ops[0]) if len(ops) == 1 else any(grows(op) for op in ops)):
            return 0
        now = self._clock()
        if now - self._reading_at >= FREE_READING_MAX_AGE:
            self._reading_free, self._reading_at = disk_free(), now
            self._unseen_bytes = self.inflight_bytes
        reason = self.admit(size, True, self._reading_free, self._unseen_bytes)
        if reason is None:
            return size
        raise OpError(
            "insufficient_storage",
            f"{node_id} refuses writes that add data: {reason}; this attempt was not "
            "proposed. Reads, deletes and compaction still work; the alarm clears once "
            "space is freed",
            alarm="nospace",
        )

    def status(self) -> dict:
        """The `storage` object of GET /v1/status."""
        return {
            "alarm": "nospace" if self.alarm else None,
            "reason": self.alarm,
            "usage_bytes": self.usage_bytes,
            "quota_bytes": self.quota_bytes,
            "free_bytes": self.free_bytes,
            "reserve_bytes": self.reserve_bytes,
            "refused_writes": self.refused,
            "last_stop": self.last_stop,
            "peer_alarms": dict(self.peer_alarms),
        }
