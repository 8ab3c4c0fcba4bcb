"""How much slower is an fsync-bound workload on LazyFS than on the backing disk?

``python -m statekeeper.chaos.lazyfs.bench [--seconds S]`` mounts a LazyFS in a temp dir (root
needed) and runs the same sequential 4 KiB write + fdatasync loop on the mount and
directly on the backing filesystem.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class LoopResult:
    ops: int
    seconds: float

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.seconds if self.seconds else 0.0

    @property
    def mib_per_s(self) -> float:
        return self.ops_per_s * 4096 / 2**20


def write_fdatasync_loop(
    path: str | os.PathLike[str], seconds: float = 1.0, max_ops: int = 100_000
) -> LoopResult:
    """Append 4 KiB and fdatasync, repeatedly, for about `seconds`."""
    block = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        ops = 0
        start = time.perf_counter()
        deadline = start + seconds
        while ops < max_ops:
            os.write(fd, block)
            os.fdatasync(fd)
            ops += 1
            if ops % 16 == 0 and time.perf_counter() > deadline:
                break
        return LoopResult(ops, time.perf_counter() - start)
    finally:
        os.close(fd)
        os.unlink(path)


def compare(seconds: float = 1.0) -> dict[str, LoopResult]:
    """The same loop directly on the backing filesystem and through LazyFS.

    "lazyfs" fsyncs the backing file on every fsync (the default); "lazyfs-nosync" is
    LazyFS(backing_sync=False), which models crashes just as well (the host does not
    crash) and skips the real disk flush.
    """
    from statekeeper.chaos.lazyfs import LazyFS

    results: dict[str, LoopResult] = {}
    with tempfile.TemporaryDirectory(prefix="lazyfs-bench-") as tmp:
        backing, mnt = Path(tmp, "backing"), Path(tmp, "mnt")
        backing.mkdir()
        mnt.mkdir()
        results["direct"] = write_fdatasync_loop(backing / "direct.dat", seconds)
        for name, sync in (("lazyfs", True), ("lazyfs-nosync", False)):
            with LazyFS(backing, mnt, backing_sync=sync):
                results[name] = write_fdatasync_loop(mnt / "lazy.dat", seconds)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    results = compare(args.seconds)
    for name, r in results.items():
        print(
            f"{name:14s} {r.ops_per_s:8.0f} write+fdatasync/s {r.mib_per_s:7.2f} MiB/s "
            f"{1000 / max(r.ops_per_s, 1e-9):6.2f} ms/op"
        )


if __name__ == "__main__":
    main()
