"""LazyFS (chaos/lazyfs): the crash model on the real FUSE mount.

These tests need root, /dev/fuse, fusermount3 and pyfuse3; without them they skip with the
reason from chaos.lazyfs.available(). The model without FUSE: tests/unit/test_lazyfs_core.py.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper.chaos.lazyfs import CONTROL_NAME, LazyFS, available
from statekeeper.chaos.lazyfs.core import STAGING_NAME
from tests.unit.test_lazyfs_core import backing_listing

pytestmark = pytest.mark.timeout(120)


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes, *, sync: bool, sync_dir: bool = False) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    if sync_dir:
        fsync_path(path.parent)


@pytest.fixture
def lazyfs(tmp_path: Path) -> Iterator[LazyFS]:
    ok, why = available()
    if not ok:
        pytest.skip(why)
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    with LazyFS(backing, mnt) as fs:
        yield fs
        assert fs.status()["errors"] == [], fs.log_text()


# --------------------------------------------------------------------------- file data


def test_unsynced_write_is_lost(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "f", b"", sync=True, sync_dir=True)  # a durable, empty file
    write_file(mnt / "f", b"not synced", sync=False)
    assert (mnt / "f").read_bytes() == b"not synced"  # visible before the crash
    assert (lazyfs.backing_dir / "f").read_bytes() == b""  # but only in memory
    lazyfs.crash()
    assert (mnt / "f").read_bytes() == b""


def test_fsynced_write_survives(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "f", b"synced", sync=True, sync_dir=True)
    lazyfs.crash()
    assert (mnt / "f").read_bytes() == b"synced"
    assert (lazyfs.backing_dir / "f").read_bytes() == b"synced"


def test_append_after_fsync_loses_only_the_tail(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    first, second = os.urandom(10_000), os.urandom(7_000)
    with open(mnt / "journal", "ab") as f:
        f.write(first)
        f.flush()
        os.fsync(f.fileno())
        fsync_path(mnt)
        f.write(second)
        f.flush()
        assert (mnt / "journal").read_bytes() == first + second
    lazyfs.crash()
    assert (mnt / "journal").read_bytes() == first


def test_pwrite_and_fdatasync(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    base = bytes(range(256)) * 64  # 16 KiB
    write_file(mnt / "f", base, sync=True, sync_dir=True)
    fd = os.open(mnt / "f", os.O_RDWR)
    try:
        os.pwrite(fd, b"A" * 100, 5000)  # straddles nothing, inside page 1
        os.fdatasync(fd)
        os.pwrite(fd, b"B" * 5000, 3000)  # lost: straddles pages 0-1
        os.pwrite(fd, b"C", 20_000)  # lost: sparse extension
        assert os.fstat(fd).st_size == 20_001
        assert os.pread(fd, 10, 16_384) == bytes(10)  # the hole reads as zeros
    finally:
        os.close(fd)
    lazyfs.crash()
    expect = bytearray(base)
    expect[5000:5100] = b"A" * 100
    assert (mnt / "f").read_bytes() == bytes(expect)


def test_truncate_is_cached_until_fsync(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    data = os.urandom(9000)
    write_file(mnt / "f", data, sync=True, sync_dir=True)
    os.truncate(mnt / "f", 100)
    os.truncate(mnt / "f", 5000)  # re-extended: [100, 5000) must read as zeros
    assert (mnt / "f").read_bytes() == data[:100] + bytes(4900)
    lazyfs.crash()
    assert (mnt / "f").read_bytes() == data
    # ... and once fsynced, the shrink is durable
    with open(mnt / "f", "r+b") as f:
        f.truncate(100)
        f.truncate(5000)
        os.fsync(f.fileno())
    lazyfs.crash()
    assert (mnt / "f").read_bytes() == data[:100] + bytes(4900)


# --------------------------------------------------------------------------- namespace


def test_new_file_needs_a_directory_fsync(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "kept", b"data", sync=True, sync_dir=True)
    write_file(mnt / "lost", b"data", sync=True)  # file fsynced, directory not
    lazyfs.crash()
    assert not (mnt / "lost").exists()
    assert (mnt / "kept").read_bytes() == b"data"
    assert backing_listing(lazyfs.backing_dir) == {"kept"}


def test_directory_fsync_without_file_fsync_keeps_an_empty_file(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "f", b"data", sync=False, sync_dir=True)
    lazyfs.crash()
    assert (mnt / "f").read_bytes() == b""


def test_rename_over_existing_file(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "CURRENT", b"old", sync=True, sync_dir=True)
    # without the directory fsync the rename is undone and the old file is back
    write_file(mnt / "CURRENT.tmp", b"new", sync=True)
    os.replace(mnt / "CURRENT.tmp", mnt / "CURRENT")
    lazyfs.crash()
    assert (mnt / "CURRENT").read_bytes() == b"old"
    assert not (mnt / "CURRENT.tmp").exists()
    # with it, the new content survives and the temp name is gone
    write_file(mnt / "CURRENT.tmp", b"new", sync=True)
    os.replace(mnt / "CURRENT.tmp", mnt / "CURRENT")
    fsync_path(mnt)
    lazyfs.crash()
    assert (mnt / "CURRENT").read_bytes() == b"new"
    assert sorted(os.listdir(mnt)) == ["CURRENT"]
    assert backing_listing(lazyfs.backing_dir) == {"CURRENT"}


def test_unlink_needs_a_directory_fsync(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "a", b"a", sync=True)
    write_file(mnt / "b", b"b", sync=True, sync_dir=True)
    os.unlink(mnt / "a")
    lazyfs.crash()
    assert (mnt / "a").read_bytes() == b"a"
    os.unlink(mnt / "a")
    fsync_path(mnt)
    lazyfs.crash()
    assert sorted(os.listdir(mnt)) == ["b"]


def test_open_unlinked_file_keeps_its_data(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "f", b"", sync=True, sync_dir=True)
    with open(mnt / "f", "r+b") as f:
        os.unlink(mnt / "f")
        fsync_path(mnt)  # the unlink is durable while the file is still open
        f.write(b"still readable")
        f.flush()
        os.fsync(f.fileno())
        f.seek(0)
        assert f.read() == b"still readable"
    lazyfs.crash()
    assert os.listdir(mnt) == []


def test_mkdir_and_nested_files(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    (mnt / "d").mkdir()
    write_file(mnt / "d" / "f", b"x", sync=True, sync_dir=True)  # fsyncs d, not mnt
    lazyfs.crash()
    assert not (mnt / "d").exists()  # d's own entry was never made durable
    (mnt / "d").mkdir()
    write_file(mnt / "d" / "f", b"x", sync=True, sync_dir=True)
    fsync_path(mnt)
    (mnt / "d" / "e").mkdir()  # not durable
    os.rename(mnt / "d", mnt / "d2")  # not durable
    lazyfs.crash()
    assert sorted(os.listdir(mnt)) == ["d"]
    assert os.listdir(mnt / "d") == ["f"]
    assert (mnt / "d" / "f").read_bytes() == b"x"


def test_cross_directory_rename_is_atomic(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    for d in ("src", "dst"):
        (mnt / d).mkdir()
    fsync_path(mnt)
    write_file(mnt / "src" / "f", b"x", sync=True)  # its create is pending in src
    os.rename(mnt / "src" / "f", mnt / "dst" / "f")
    fsync_path(mnt / "dst")  # commits the rename and the create it depends on
    lazyfs.crash()
    assert os.listdir(mnt / "src") == []
    assert (mnt / "dst" / "f").read_bytes() == b"x"


def test_unmount_is_a_power_cut_and_sync_is_not(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "a", b"a", sync=False)
    lazyfs.remount()
    assert not (mnt / "a").exists()
    write_file(mnt / "a", b"a", sync=False)
    lazyfs.sync()
    lazyfs.remount()
    assert (mnt / "a").read_bytes() == b"a"
    assert (lazyfs.backing_dir / "a").read_bytes() == b"a"


def test_control_file_is_hidden_and_reports_status(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "f", b"x" * 5000, sync=False)
    assert os.listdir(mnt) == ["f"]
    st = lazyfs.status()
    assert st["dirty_files"] == 1 and st["dirty_bytes"] == 8192 and st["pending_ops"] == 1
    with pytest.raises(PermissionError):
        (mnt / STAGING_NAME).mkdir()
    with pytest.raises(OSError):
        (mnt / CONTROL_NAME).write_text("bogus")
    lazyfs.crash()
    assert lazyfs.status()["crashes"] == 1 and lazyfs.status()["dirty_files"] == 0


def test_stale_handles_after_crash_fail_cleanly(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    write_file(mnt / "f", b"x", sync=True, sync_dir=True)
    with open(mnt / "f", "rb") as f:
        lazyfs.crash()
        with pytest.raises(OSError):
            f.read()
    assert (mnt / "f").read_bytes() == b"x"


def test_locks_statfs_and_fallocate_do_not_break(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    fd = os.open(mnt / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what RocksDB does on LOCK
        other = subprocess.run(
            [sys.executable, "-c",
             "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
             "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", str(mnt / "LOCK")],
            capture_output=True,
        )  # fmt: skip
        assert other.returncode != 0 and b"BlockingIOError" in other.stderr
        os.posix_fallocate(fd, 0, 8192)  # glibc falls back to writing zeros
        assert os.fstat(fd).st_size == 8192
    finally:
        os.close(fd)
    assert os.statvfs(mnt).f_bsize > 0


# --------------------------------------------------------------------------- RocksDB

ROCKS_WRITER = textwrap.dedent(
    """
    import sys, time
    from rocksdict import Options, Rdict, WriteOptions
    path, sync = sys.argv[1], sys.argv[2] == "sync"
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    db = Rdict(path, opts)
    wo = WriteOptions()
    wo.sync = sync
    for i in range(20):
        db.put(b"key%d" % i, b"value%d" % i, wo)
    print("written", flush=True)
    time.sleep(120)  # killed by the test: no close, no flush
    """
)


def _rocks_write_then_kill(db_dir: Path, sync: bool) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", ROCKS_WRITER, str(db_dir), "sync" if sync else "nosync"],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"written\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def _rocks_read(db_dir: Path) -> list[bytes | None]:
    from rocksdict import Options, Rdict

    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    db = Rdict(str(db_dir), opts)
    try:
        return [db.get(b"key%d" % i) for i in range(20)]
    finally:
        db.close()


@pytest.mark.parametrize("sync", [True, False], ids=["sync_writes", "unsynced_writes"])
def test_rocksdb_power_loss(lazyfs: LazyFS, sync: bool) -> None:
    pytest.importorskip("rocksdict")
    db_dir = lazyfs.mountpoint / "db"
    db_dir.mkdir()
    fsync_path(lazyfs.mountpoint)  # RocksDB does not fsync the parent of its directory
    _rocks_write_then_kill(db_dir, sync)
    lazyfs.crash()
    values = _rocks_read(db_dir)
    if sync:
        assert values == [b"value%d" % i for i in range(20)]
    else:
        assert values == [None] * 20  # the WAL tail was only in LazyFS's memory


# --------------------------------------------------------------------------- throughput


def test_fdatasync_throughput_report(lazyfs: LazyFS, capsys: pytest.CaptureFixture[str]) -> None:
    from statekeeper.chaos.lazyfs.bench import write_fdatasync_loop

    direct = write_fdatasync_loop(lazyfs.backing_dir / "bench.dat", seconds=0.5)
    lazy = write_fdatasync_loop(lazyfs.mountpoint / "bench.dat", seconds=0.5)
    assert direct.ops > 0 and lazy.ops > 0
    with capsys.disabled():
        print(
            f"\nlazyfs 4 KiB write+fdatasync: direct {direct.ops_per_s:.0f}/s, "
            f"through lazyfs {lazy.ops_per_s:.0f}/s"
        )
