"""LazyFS: a FUSE filesystem for power-loss tests (the model is in README.md beside this).

Typical use::

    ok, why = available()
    if not ok:
        pytest.skip(why)
    with LazyFS(backing, mnt) as fs:
        proc = start_node(data_dir=mnt)   # writes through the mount
        ...                               # acknowledged writes
        proc.kill(); proc.wait()          # every process using the mount dies first
        fs.crash()                        # power cut: unsynced data/entries vanish
        proc = start_node(data_dir=mnt)   # "reboot" on the same mount
        ...

Only this module is imported by tests; it does not import pyfuse3 (the daemon runs in a
subprocess: ``python -m statekeeper.chaos.lazyfs --backing DIR --mount DIR``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from statekeeper import IMPORT_ROOT
from statekeeper.chaos.lazyfs.core import CONTROL_NAME

__all__ = ["CONTROL_NAME", "LazyFS", "LazyFSError", "available", "is_mounted"]


class LazyFSError(RuntimeError):
    pass


def _unescape_mountinfo(s: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and len(s[i + 1 : i + 4]) == 3 and s[i + 1 : i + 4].isdigit():
            out.append(chr(int(s[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def is_mounted(mountpoint: str | os.PathLike[str], fstype: str = "fuse.lazyfs") -> bool:
    """Whether a filesystem of `fstype` is mounted exactly at `mountpoint`."""
    want = os.path.realpath(mountpoint)
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) > 4 and _unescape_mountinfo(fields[4]) == want:
                    if right.split(" ", 1)[0] == fstype:
                        return True
    except OSError:
        pass
    return False


class LazyFS:
    """Mount a LazyFS over `backing_dir` at `mountpoint` (both must exist).

    ``crash()`` drops every unsynced write and directory change, in place: the mount
    stays up and the backing dir then holds exactly the post-power-loss disk. Kill
    every process that uses the mount first (their open files would become stale).
    ``unmount()`` is also a power cut (nothing unsynced is written back); call
    ``sync()`` first for a clean shutdown.
    """

    def __init__(
        self,
        backing_dir: str | os.PathLike[str],
        mountpoint: str | os.PathLike[str],
        *,
        backing_sync: bool = True,
        namespace: str = "strict",
        start_timeout: float = 15.0,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.backing_dir = Path(backing_dir).resolve()
        self.mountpoint = Path(mountpoint).resolve()
        if os.path.commonpath([self.backing_dir, self.mountpoint]) in (
            str(self.backing_dir),
            str(self.mountpoint),
        ):
            raise ValueError("backing_dir and mountpoint must not contain each other")
        self.backing_sync = backing_sync
        self.namespace = namespace
        self.start_timeout = start_timeout
        self._own_log = log_path is None
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="lazyfs-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self._proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> LazyFS:
        self.mount()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.unmount()
        if self._own_log and exc_type is None:
            self.log_path.unlink(missing_ok=True)

    @property
    def control_path(self) -> Path:
        return self.mountpoint / CONTROL_NAME

    @property
    def pid(self) -> int | None:
        """The daemon's process id while mounted (its CPU is in /proc/<pid>/stat)."""
        return None if self._proc is None else self._proc.pid

    @property
    def mounted(self) -> bool:
        return self._proc is not None and is_mounted(self.mountpoint)

    def mount(self) -> None:
        """Start the daemon and wait until the mount answers."""
        if self._proc is not None:
            raise LazyFSError("already mounted")
        if is_mounted(self.mountpoint):
            raise LazyFSError(f"{self.mountpoint} is already a LazyFS mount (stale?)")
        cmd = [
            sys.executable, "-m", "statekeeper.chaos.lazyfs",
            "--backing", str(self.backing_dir), "--mount", str(self.mountpoint),
        ]  # fmt: skip
        if not self.backing_sync:
            cmd.append("--no-backing-sync")
        cmd += ["--namespace", self.namespace]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [IMPORT_ROOT, env.get("PYTHONPATH")]))
        with open(self.log_path, "ab") as log:
            # A file, not a pipe: a full pipe would block the daemon and hang the mount.
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True,  # a ^C meant for pytest must not kill the mount
            )  # fmt: skip
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self._proc.poll() is not None:
                rc = self._proc.returncode
                self._proc = None
                raise LazyFSError(f"lazyfs daemon exited with {rc}: {self.log_text()[-2000:]}")
            if is_mounted(self.mountpoint):
                try:
                    os.stat(self.control_path)  # the daemon's loop is serving
                    return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                self.unmount()
                raise LazyFSError(f"lazyfs did not mount in time: {self.log_text()[-2000:]}")
            time.sleep(0.02)

    def unmount(self, timeout: float = 10.0) -> None:
        """Unmount (a power cut for anything unsynced) and stop the daemon."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        mnt = str(self.mountpoint)
        if is_mounted(mnt) and _fusermount("-u", mnt) != 0:
            _fusermount("-u", "-z", mnt)  # busy: detach now, free when the last user goes
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if is_mounted(mnt):
            _fusermount("-u", "-z", mnt)

    def remount(self) -> None:
        self.unmount()
        self.mount()

    # ------------------------------------------------------------------ control

    def _command(self, command: str) -> None:
        if self._proc is None:
            raise LazyFSError("not mounted")
        fd = os.open(self.control_path, os.O_WRONLY)
        try:
            os.write(fd, command.encode() + b"\n")  # returns once the daemon has done it
        finally:
            os.close(fd)

    def crash(self) -> None:
        """Power cut: drop all unsynced data and undo all un-fsynced directory changes."""
        self._command("crash")

    def sync(self) -> None:
        """sync(2): make everything durable (data first, then directory changes)."""
        self._command("sync")

    def status(self) -> dict[str, Any]:
        """Counters: crashes, dirty_files, dirty_bytes, pending_ops, open_handles, errors."""
        return json.loads(self.control_path.read_bytes())

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def _fusermount(*args: str) -> int:
    exe = shutil.which("fusermount3") or shutil.which("fusermount")
    if exe is None:
        return subprocess.call(["umount", *(["-l"] if "-z" in args else []), args[-1]])
    return subprocess.call([exe, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@functools.cache
def available() -> tuple[bool, str]:
    """Whether LazyFS can run here; if not, a reason fit for pytest.skip.

    Checks the prerequisites, then mounts once in a temp dir (cached), since a container
    may have /dev/fuse but no right to mount.
    """
    if not sys.platform.startswith("linux"):
        return False, "LazyFS needs Linux (FUSE)"
    if not os.path.exists("/dev/fuse"):
        return False, "no /dev/fuse (FUSE is not available in this machine/container)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return False, "/dev/fuse is not readable and writable by this user"
    if os.geteuid() != 0:
        return False, "LazyFS tests need root (allow_other mounts and fsync of others' files)"
    if shutil.which("fusermount3") is None:
        return False, "fusermount3 not found (Debian package fuse3)"
    try:
        import pyfuse3  # noqa: F401
    except ImportError as e:
        return False, f"pyfuse3 is not importable ({e}); pip install pyfuse3 (needs libfuse3-dev)"
    with tempfile.TemporaryDirectory(prefix="lazyfs-probe-") as tmp:
        backing, mnt = Path(tmp, "b"), Path(tmp, "m")
        backing.mkdir()
        mnt.mkdir()
        try:
            with LazyFS(backing, mnt, start_timeout=10) as fs:
                (mnt / "probe").write_bytes(b"x")
                fs.crash()
                if (mnt / "probe").exists():
                    return False, "LazyFS probe: an unsynced file survived a crash"
        except (OSError, LazyFSError) as e:
            return False, f"cannot mount LazyFS here: {e}"
    return True, ""
