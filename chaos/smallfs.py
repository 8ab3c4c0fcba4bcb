"""A small filesystem for disk-full tests: a size-limited tmpfs mount, and ballast files
that take its free space down to a given amount (another process filling the disk).

Needs root (mount); `available()` says whether mounting works here. tmpfs honours its
size= limit exactly and allocates a ballast file's pages when they are fallocated, so
statvfs shows the space gone at once. Used by tests/integration/test_disk_full.py and the
disk-full chaos fault (chaos/faults/disk.py)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

__all__ = ["SmallFs", "available", "fill_to", "free_bytes"]


def _mount(path: Path, size: int) -> None:
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        check=True,
        capture_output=True,
        text=True,
    )


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def available() -> tuple[bool, str]:
    """(True, "") when a tmpfs can be mounted here (root, mount allowed), else why not."""
    if os.geteuid() != 0:
        return False, "mounting a small tmpfs needs root"
    with tempfile.TemporaryDirectory(prefix="sk-smallfs-probe-") as d:
        try:
            _mount(Path(d), 1 << 20)
        except (OSError, subprocess.CalledProcessError) as e:
            err = getattr(e, "stderr", "") or str(e)
            return False, f"mount -t tmpfs failed here: {err.strip()}"
        _umount(Path(d))
    return True, ""


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill_to(path: Path, leave: int, name: str = "ballast") -> Path:
    """Add a ballast file under `path` so that about `leave` bytes stay free; returns it
    (delete it to give the space back). Nothing is added when less is free already."""
    ballast = path / name
    n = max(0, free_bytes(path) - leave)
    with open(ballast, "ab") as f:
        if n:
            os.posix_fallocate(f.fileno(), f.seek(0, os.SEEK_END), n)
    return ballast


class SmallFs:
    """`with SmallFs(path, 48 << 20) as root:` a tmpfs of that many bytes mounted at
    `path` (made if missing) for the block; unmounted after (lazily: a process that still
    holds a file there does not keep it mounted for long)."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = Path(path)
        self.size = size

    def __enter__(self) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        _mount(self.path, self.size)
        return self.path

    def __exit__(self, *exc: object) -> None:
        _umount(self.path)
