"""Measures a node's disk use for its storage quota (node/quota/alarm.py decides).

A timer on the HTTP loop walks the data dir every `check_interval_seconds` (a few dozen
files: RocksDB's SSTs and WAL, the raft journal, snapshot files) and reads statvfs; a
growing write reads statvfs once more (~2 us), or uses one read less than 50 ms before
(node/quota/alarm.py FREE_READING_MAX_AGE), so a filesystem filled by someone else is seen
within 50 ms. Nothing here runs inside a raft tick. Measured with `python -m
statekeeper.node.quota.disk_watch DATA_DIR` on the 2-core dev machine, a running node's dir of 14 files
(75.6 MiB): dir_bytes 222 us, statvfs 8.6 us (2.2 us on an idle machine); the walk, once
a second, costs nothing that matters.

While space is tight (node/quota/alarm.py StorageQuota.tight: the alarm is raised or close to
it), a measurement that sees the store's compact revision move
(someone compacted) asks RocksDB to flush and compact its files in a worker thread, then
raft to snapshot: the automatic version of etcd's defrag. Deleted and compacted data
leaves the disk only when RocksDB rewrites its files and the journal entries that carried
it are dropped, which happens at a raft snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statekeeper.node.config import ClusterConfig
from statekeeper.node.fatal import take_report
from statekeeper.node.log_files import is_log_file
from statekeeper.node.quota.alarm import Sample, StorageQuota
from statekeeper.node.quota.peers import PeerStorage

log = logging.getLogger("statekeeper.storage")


def dir_bytes(path: Path) -> int:
    """Bytes the files under `path` take on disk (allocated blocks; files that vanish while
    walking, as RocksDB and snapshots replace theirs, are skipped). node.log and its
    rotations are not counted: they have their own bound (node/log_files.py), and counting
    them let log lines raise the NOSPACE alarm (issue 27, item 1)."""
    total = 0
    stack = [str(path)]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.is_file(follow_symlinks=False) and not is_log_file(e.name):
                        st = e.stat(follow_symlinks=False)
                        total += min(st.st_size, st.st_blocks * 512) or st.st_size
                except OSError:
                    continue
    return total


def disk_free(path: Path) -> tuple[int, int]:
    """(free, total) bytes of the filesystem holding `path`, as an unprivileged writer
    sees them (f_bavail: without the blocks reserved for root)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


class DiskWatch:
    """Feeds a StorageQuota from the data dir; `run` is the timer task."""

    def __init__(
        self,
        quota: StorageQuota,
        data_dir: Path,
        interval: float,
        compact_revision: Callable[[], int] = lambda: 0,
        reclaim: Callable[[], None] | None = None,
    ) -> None:
        self.quota = quota
        self.data_dir = data_dir
        self.interval = interval
        self._compact_revision = compact_revision
        self._reclaim = reclaim
        self._reclaimed_at = compact_revision()
        self._reclaiming: asyncio.Future | None = None
        quota.on_raise = lambda reason: log.warning(
            "NOSPACE alarm raised: %s; writes that add data get 507 until space is freed", reason
        )
        # Other nodes' data dirs: those that exist here on the same filesystem share it.
        self.others: list[Path] = []
        self.peers: PeerStorage | None = None  # polls the peers' alarms when set

    @classmethod
    def for_node(
        cls, cfg: ClusterConfig, node_id: str, sm: Any, compact_journal: Callable
    ) -> DiskWatch:
        """The watch of a node's data dir, measured once; takes the report a previous
        run's fatal stop left (node/fatal.py) into the status."""
        settings, data_dir = cfg.storage, cfg.node_data_dir(node_id)
        quota = StorageQuota(settings.quota_bytes, settings.reserve_bytes)
        quota.last_stop = take_report(data_dir)
        watch = cls(
            quota,
            data_dir,
            settings.check_interval_seconds,
            lambda: sm.compact_revision,
            lambda: (sm.reclaim(), compact_journal()),
        )
        watch.others = [cfg.node_data_dir(n.id) for n in cfg.nodes if n.id != node_id]
        watch.peers = PeerStorage(quota, cfg, node_id, settings.check_interval_seconds)
        watch.measure()
        return watch

    def measure(self) -> None:
        """One measurement into the quota; logs the alarm's changes."""
        before = self.quota.alarm
        free, total = disk_free(self.data_dir)
        usage = dir_bytes(self.data_dir)
        self.quota.sample(Sample(usage, free, total, self._sharing()))
        if before and not self.quota.alarm:
            log.info("NOSPACE alarm cleared: %s", self._summary())

    def _sharing(self) -> int:
        dev = os.stat(self.data_dir).st_dev
        shared = 1
        for d in self.others:
            try:
                shared += os.stat(d).st_dev == dev
            except OSError:
                continue
        return shared

    def _summary(self) -> str:
        q = self.quota
        return (
            f"{q.usage_bytes / 2**20:.1f} MiB used of a {q.quota_bytes / 2**20:.1f} MiB "
            f"quota, {(q.free_bytes or 0) / 2**20:.1f} MiB free"
        )

    def free_now(self) -> int | None:
        try:
            return disk_free(self.data_dir)[0]
        except OSError:
            return None

    async def run(self) -> None:
        peers = asyncio.create_task(self.peers.run()) if self.peers is not None else None
        try:
            await self._measure_forever()
        finally:
            if peers is not None:
                peers.cancel()

    async def _measure_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.measure()
            except OSError as e:
                log.warning("measuring disk use of %s failed: %s", self.data_dir, e)
                continue
            busy = self._reclaiming is not None and not self._reclaiming.done()
            rev = self._compact_revision()
            if self.quota.tight and self._reclaim and not busy and rev != self._reclaimed_at:
                self._reclaimed_at = rev
                self._reclaiming = loop.run_in_executor(None, self._reclaim_once)

    def _reclaim_once(self) -> None:
        try:
            self._reclaim()
            log.info("NOSPACE alarm: RocksDB flushed and compacted its files to free space")
        except Exception as e:  # the disk may be too full for it: tried after the next compact
            log.warning("freeing space under the NOSPACE alarm failed: %s", e)


def _bench(path: Path, n: int = 2000) -> dict[str, float]:
    """Microseconds per dir_bytes / disk_free call on `path` (a node's data dir)."""
    import time

    out = {}
    for name, fn in (("dir_bytes", dir_bytes), ("statvfs", disk_free)):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(path)
        out[name] = (time.perf_counter() - t0) / n * 1e6
    files = sum(len(f) for _, _, f in os.walk(path))
    print(f"{path}: {files} files, {dir_bytes(path) / 2**20:.1f} MiB")
    return out


if __name__ == "__main__":  # python -m statekeeper.node.quota.disk_watch DATA_DIR
    import sys

    for k, v in _bench(Path(sys.argv[1])).items():
        print(f"{k:10s} {v:8.1f} us")
