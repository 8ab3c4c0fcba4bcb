"""The simulator's disks: one data directory per simulated node that can lose power on its own.

Each node's data dir is its own LazyFS mount (chaos/lazyfs/README.md states the rules: a
crash drops every write not fsynced and undoes every directory change whose directory was
not fsynced), so a power cut of one node leaves the others' unsynced writes alone. Without
FUSE ("auto" when ``chaos.lazyfs.available()`` says no) the dirs are plain directories: a
power cut then loses nothing a kill does not, and ``degraded_reason`` says why.

Precondition of ``power_cut``, ``wipe`` and ``reset``: the node has closed every file it
had open in its dir (the simulator's kill closes RocksDB and the journal first). LazyFS
makes every file handle from before a crash fail with ESTALE, so ``power_cut`` refuses to
run with handles open unless told to (``open_files=True``: see there).

Determinism: nothing here reads a clock or draws a random number; what a node reads back
after a power cut is a function of the file operations it made (LazyFS keeps all unsynced
data until a crash, never writing any of it back on its own). Not deterministic, and not
read back as data by the node: file mtimes (wall clock, in both modes) and LazyFS inode
numbers (they keep counting across worlds).

Costs (``python -m statekeeper.chaos.sim.disk_bench --ops 2000 --rounds 5``: medians
[min-max] of 5 alternating rounds, 2 cores shared with other jobs):

* mount one LazyFS (a Python daemon process) 231 ms [187-748], unmount 70 ms [39-120]:
  SimDisks mounts once and every world reuses the mounts (``reset``);
* ``power_cut`` (status + crash: two round trips to the daemon) 3.6 ms [2.6-5.9];
  ``wipe`` of a dir holding a 2000-key RocksDB and a journal 2.5 ms [1.9-3.7];
* a node-like loop of 2000 x (100-byte journal append + fdatasync, RocksDB put without
  sync), then close: plain dir on tmpfs (/dev/shm) 0.014 s wall [0.014-0.017]; plain dir
  on ext4 (real fdatasync) 0.63 s [0.52-0.70]; LazyFS with backing_sync=False 0.54 s
  [0.53-0.87] over ext4, 0.65 s [0.49-0.78] over tmpfs, of which this process's CPU is
  only 0.10 s: the rest is the daemon (0.45-0.52 s CPU), ~3 FUSE round trips of ~100 us
  per iteration (apart, on one mount: 2000 journal append + fdatasync 0.42 s, 2000
  RocksDB puts, each one WAL write, 0.26 s). So LazyFS costs ~0.25 ms
  per entry per node, ~40x a plain dir on tmpfs: run the worlds that draw no power cut
  on plain tmpfs dirs if seeds per hour matter (a seed must always replay in one mode:
  the mode changes what a power cut keeps, so it belongs in the trace).
* the power_cut reports of the 10 LazyFS rounds were all equal ({dirty_files: 2,
  dirty_bytes: 32768, pending_ops: 4}: RocksDB's info LOG and its renames are never
  synced).
"""

from __future__ import annotations

import os
import shutil
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

from statekeeper.chaos.lazyfs import LazyFS, available

Mode = Literal["lazyfs", "plain", "auto"]
# What power_cut returns for the trace: LazyFS's counters from just before the crash. Not
# dirty_bytes: RocksDB's info LOG is never synced and its lines (durations in microseconds,
# from background threads) vary in length, so seed 3's two runs once differed by a page.
TRACE_FIELDS = ("dirty_files", "pending_ops")


class SimDiskError(RuntimeError):
    pass


class SimDisks:
    """One data dir per node id under `root`; a context manager (LazyFS mounts live in it).

    lazyfs: backing dirs root/backing/<id>, mounts root/mnt/<id>, daemon logs
    root/lazyfs-<id>.log; plain: root/plain/<id>. `namespace` is LazyFS's directory model
    ("strict": POSIX, "journal": ext4/XFS; chaos/lazyfs/README.md). `backing_sync=False`:
    a LazyFS fsync does not flush the backing disk (the host never crashes), which is what
    makes the simulator fast; it changes nothing a crash keeps.
    """

    def __init__(
        self,
        root: Path,
        node_ids: list[str],
        mode: Mode = "auto",
        *,
        namespace: str = "strict",
        backing_sync: bool = False,
    ) -> None:
        if mode not in ("lazyfs", "plain", "auto"):
            raise ValueError(f"mode must be lazyfs, plain or auto, not {mode!r}")
        if len(set(node_ids)) != len(node_ids):
            raise ValueError(f"node ids must be unique: {node_ids}")
        self.root = Path(root)
        self.node_ids = list(node_ids)
        self.requested_mode = mode
        self.namespace = namespace
        self.backing_sync = backing_sync
        self.mode: Literal["lazyfs", "plain"] = "plain"
        self.degraded_reason: str | None = None
        self._mounts: dict[str, LazyFS] = {}
        self._stack = ExitStack()

    # -- lifecycle -------------------------------------------------------------

    def __enter__(self) -> SimDisks:
        self.mode, self.degraded_reason = self._resolve_mode()
        try:
            if self.mode == "lazyfs":
                self._mount_all()
            else:
                for node_id in self.node_ids:
                    self.data_dir(node_id).mkdir(parents=True, exist_ok=True)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Unmount every LazyFS (a power cut of whatever is unsynced; the backing dirs stay)."""
        self._stack.close()
        self._mounts.clear()

    def _resolve_mode(self) -> tuple[Literal["lazyfs", "plain"], str | None]:
        if self.requested_mode == "plain":
            return "plain", "plain mode requested: a power cut loses nothing beyond a kill"
        ok, why = available()
        if ok:
            return "lazyfs", None
        if self.requested_mode == "lazyfs":
            raise SimDiskError(f"LazyFS is not available: {why}")
        return "plain", f"LazyFS unavailable ({why}): a power cut loses nothing beyond a kill"

    def _mount_all(self) -> None:
        for node_id in self.node_ids:
            backing = self.root / "backing" / node_id
            mount = self.data_dir(node_id)
            backing.mkdir(parents=True, exist_ok=True)
            mount.mkdir(parents=True, exist_ok=True)
            self._mounts[node_id] = self._stack.enter_context(
                LazyFS(
                    backing,
                    mount,
                    backing_sync=self.backing_sync,
                    namespace=self.namespace,
                    log_path=self.root / f"lazyfs-{node_id}.log",
                )
            )

    # -- the disks -------------------------------------------------------------

    def data_dir(self, node_id: str) -> Path:
        """The node's data dir (a mount root in lazyfs mode: its own entry is always durable)."""
        if node_id not in self.node_ids:
            raise KeyError(f"unknown node {node_id!r}")
        return self.root / ("mnt" if self.mode == "lazyfs" else "plain") / node_id

    def power_cut(self, node_id: str, *, open_files: bool = False) -> dict[str, int | str]:
        """The node loses power: every write and directory change it did not fsync is gone.

        Returns what was dropped, for the trace: LazyFS's dirty_files and pending_ops from
        just before the crash (TRACE_FIELDS); in plain mode {"degraded": reason}.

        `open_files=True` cuts the power under files still open: they go stale (every
        later write, fsync or close of them fails with ESTALE and reaches no disk), so the
        caller closes them afterwards and ignores those errors. That is the truer power
        cut for RocksDB: rocksdict's close() flushes the memtables to synced SST files, so
        close-then-cut keeps every applied write even without a WAL sync, cut-then-close
        keeps only what RocksDB had synced (tests/loopback/test_sim_disk.py shows both).
        """
        fs = self._mount(node_id)
        if fs is None:
            return {"degraded": str(self.degraded_reason)}
        before = fs.status()
        self._check_idle(node_id, before, open_files_ok=open_files)
        fs.crash()
        return {k: int(before[k]) for k in TRACE_FIELDS}

    def wipe(self, node_id: str) -> None:
        """A lost disk: the node's data dir is emptied (the dir itself stays)."""
        fs = self._mount(node_id)
        if fs is None:
            _empty_dir(self.data_dir(node_id))
            return
        self._check_idle(node_id, fs.status())
        # The backing dir is the post-crash disk and a crash re-reads it: empty it, then
        # crash so LazyFS forgets its cached tree and unsynced data (faster than unlinking
        # every file through the mount and fsyncing).
        _empty_dir(fs.backing_dir)
        fs.crash()

    def reset(self) -> None:
        """Every node's dir empty, for the next world (the mounts are reused)."""
        for node_id in self.node_ids:
            self.wipe(node_id)

    def status(self, node_id: str) -> dict[str, object] | None:
        """LazyFS's counters for the node's mount (None in plain mode)."""
        fs = self._mount(node_id)
        return None if fs is None else fs.status()

    def daemon_pids(self) -> list[int]:
        """The LazyFS daemons' process ids (none in plain mode): their CPU is the disks' cost."""
        return [fs.pid for fs in self._mounts.values() if fs.pid is not None]

    def _mount(self, node_id: str) -> LazyFS | None:
        self.data_dir(node_id)  # KeyError for an unknown id
        if self.mode == "plain":
            return None
        fs = self._mounts.get(node_id)
        if fs is None or not fs.mounted:
            raise SimDiskError(f"{node_id}'s LazyFS is not mounted (SimDisks not entered?)")
        return fs

    @staticmethod
    def _check_idle(node_id: str, status: dict[str, object], open_files_ok: bool = False) -> None:
        if status.get("open_handles") and not open_files_ok:
            raise SimDiskError(
                f"{node_id} still has {status['open_handles']} file(s) open on its disk: "
                "close them (kill the node) before a power cut or wipe"
            )
        if status.get("errors"):
            raise SimDiskError(f"LazyFS of {node_id} reports model errors: {status['errors']}")


def _empty_dir(path: Path) -> None:
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
