"""The simulator's disks on LazyFS (chaos/sim/disk.py): one mount per node, power cut per node.

Needs what LazyFS needs (root, /dev/fuse, fusermount3, pyfuse3); without it every test here
skips with chaos.lazyfs.available()'s reason. Plain mode: tests/unit/sim/test_disk.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper.chaos.lazyfs import available
from statekeeper.chaos.sim.disk import SimDiskError, SimDisks
from statekeeper.node.store.backend import open_db
from tests.loopback.test_lazyfs import fsync_path, write_file

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def mounted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimDisks]:
    ok, why = available()
    if not ok:
        pytest.skip(why)
    with SimDisks(tmp_path_factory.mktemp("simdisk"), ["n1", "n2"], "lazyfs") as disks:
        yield disks


@pytest.fixture
def disks(mounted: SimDisks) -> Iterator[SimDisks]:
    """The module's mounts, emptied (the simulator reuses them from world to world)."""
    mounted.reset()
    yield mounted
    for node_id in mounted.node_ids:
        assert mounted.status(node_id)["errors"] == []  # type: ignore[index]


def test_lazyfs_mode_has_no_degraded_reason(disks: SimDisks) -> None:
    assert disks.mode == "lazyfs"
    assert disks.degraded_reason is None
    assert disks.data_dir("n1") != disks.data_dir("n2")


def test_power_cut_keeps_only_the_fsynced_part_of_an_append(disks: SimDisks) -> None:
    journal = disks.data_dir("n1") / "journal"
    with open(journal, "ab") as f:
        f.write(b"synced;")
        f.flush()
        os.fsync(f.fileno())
        fsync_path(journal.parent)  # the file's entry
        f.write(b"not synced")
    assert journal.read_bytes() == b"synced;not synced"
    report = disks.power_cut("n1")
    assert journal.read_bytes() == b"synced;"
    assert report == {"dirty_files": 1, "pending_ops": 0}


def test_the_power_cut_report_leaves_out_how_many_bytes_were_unsynced(disks: SimDisks) -> None:
    # RocksDB's info LOG is never synced, and its lines (durations in microseconds, written
    # by background threads) vary in length from run to run: a byte count in the trace made
    # a seed's two runs differ by a page (tests/integration/test_sim.py, seen in a make test)
    reports = []
    for size in (100, 5000):
        write_file(disks.data_dir("n1") / "LOG", b"x" * size, sync=False)
        reports.append(disks.power_cut("n1"))
        disks.reset()
    assert reports[0] == reports[1] == {"dirty_files": 1, "pending_ops": 1}


def test_rename_over_a_file_without_fsync_of_the_data(disks: SimDisks) -> None:
    """LazyFS's rules (chaos/lazyfs/README.md, strict namespace): a rename is durable once
    its directory is fsynced, the data only once the file is: renamed + dir fsynced leaves
    the new name on an empty file; without the dir fsync the rename is undone."""
    d = disks.data_dir("n1")
    write_file(d / "a", b"old a", sync=True, sync_dir=True)
    write_file(d / "b", b"old b", sync=True, sync_dir=True)
    write_file(d / "a.tmp", b"new a", sync=False)
    os.rename(d / "a.tmp", d / "a")
    fsync_path(d)  # the rename is durable, the data of a.tmp is not
    write_file(d / "b.tmp", b"new b", sync=False)
    os.rename(d / "b.tmp", d / "b")  # no fsync of anything
    assert (d / "a").read_bytes() == b"new a"
    assert (d / "b").read_bytes() == b"new b"
    disks.power_cut("n1")
    assert (d / "a").read_bytes() == b""
    assert (d / "b").read_bytes() == b"old b"
    assert sorted(os.listdir(d)) == ["a", "b"]


def test_power_cut_of_one_node_leaves_the_others_unsynced_data(disks: SimDisks) -> None:
    for node_id in ("n1", "n2"):
        write_file(disks.data_dir(node_id) / "f", b"unsynced", sync=False)
    disks.power_cut("n1")
    assert not (disks.data_dir("n1") / "f").exists()
    assert (disks.data_dir("n2") / "f").read_bytes() == b"unsynced"
    disks.power_cut("n2")  # it was unsynced: it survived n1's cut only because it is apart
    assert not (disks.data_dir("n2") / "f").exists()


def test_wipe_empties_even_what_was_durable(disks: SimDisks) -> None:
    d = disks.data_dir("n1")
    (d / "raft").mkdir()
    fsync_path(d)
    write_file(d / "raft" / "journal", b"durable", sync=True, sync_dir=True)
    write_file(d / "unsynced", b"x", sync=False)
    write_file(disks.data_dir("n2") / "f", b"other", sync=False)
    disks.wipe("n1")
    assert d.is_dir() and os.listdir(d) == []
    disks.power_cut("n1")  # nothing comes back from the backing dir
    assert os.listdir(d) == []
    assert (disks.data_dir("n2") / "f").read_bytes() == b"other"


def test_reset_empties_every_dir_and_keeps_the_mounts(disks: SimDisks) -> None:
    pids = disks.daemon_pids()
    for node_id in ("n1", "n2"):
        write_file(disks.data_dir(node_id) / "f", b"x", sync=True, sync_dir=True)
    disks.reset()
    assert [os.listdir(disks.data_dir(n)) for n in ("n1", "n2")] == [[], []]
    assert disks.daemon_pids() == pids


def test_power_cut_refuses_while_files_are_open(disks: SimDisks) -> None:
    path = disks.data_dir("n1") / "f"
    with open(path, "wb") as f:
        f.write(b"x")
        with pytest.raises(SimDiskError, match="open"):
            disks.power_cut("n1")
        with pytest.raises(SimDiskError, match="open"):
            disks.wipe("n1")
    assert path.read_bytes() == b"x"  # nothing was cut


def _rocksdb_with_an_unsynced_put(data_dir: Path):  # -> Rdict
    db = open_db(data_dir / "db")
    fsync_path(data_dir)  # the db dir's entry, as node/main.py does at start
    db[b"k"] = b"v"  # WriteOptions without sync, as the store writes
    return db


def test_rocksdb_close_then_power_cut_keeps_an_unsynced_put(disks: SimDisks) -> None:
    """The limit of a kill that closes RocksDB before the cut: rocksdict's close() (what
    StateMachine.close() calls) flushes the memtable into synced SST files."""
    d = disks.data_dir("n1")
    _rocksdb_with_an_unsynced_put(d).close()
    disks.power_cut("n1")
    db = open_db(d / "db")
    try:
        assert db.get(b"k") == b"v"
    finally:
        db.close()


def test_rocksdb_power_cut_then_close_loses_an_unsynced_put(disks: SimDisks) -> None:
    """power_cut(open_files=True) before the close: the flush hits stale handles."""
    d = disks.data_dir("n1")
    db = _rocksdb_with_an_unsynced_put(d)
    disks.power_cut("n1", open_files=True)
    with pytest.raises(Exception, match="Stale file handle"):
        db.close()
    db = open_db(d / "db")
    try:
        assert db.get(b"k") is None
    finally:
        db.close()


def test_the_same_writes_give_the_same_power_cut_report(disks: SimDisks) -> None:
    def world() -> tuple[dict[str, int | str], bytes | None]:
        d = disks.data_dir("n1")
        db = _rocksdb_with_an_unsynced_put(d)
        for i in range(200):
            db[i.to_bytes(4, "big")] = b"v" * 100
        db.close()
        write_file(d / "journal", b"j" * 5000, sync=False)
        report = disks.power_cut("n1")
        db = open_db(d / "db")
        try:
            return report, db.get(b"k")
        finally:
            db.close()
            disks.reset()

    assert world() == world()


def _lazyfs_children(parent: int) -> dict[int, str]:
    """LazyFS daemons started by `parent`: pid -> mount point."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"statekeeper.chaos.lazyfs" in argv:
            out[int(entry.name)] = argv[argv.index(b"--mount") + 1].decode()
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_a_terminated_run_unmounts_its_disks_and_stops_their_daemons() -> None:
    """The daemons run in a session of their own (a ^C for the run must not cut a mount
    from under it), so a SIGTERM that killed the run outright left three daemons and their
    mounts behind (a stopped `sim explore`, seen on this machine)."""
    ok, why = available()
    if not ok:
        pytest.skip(why)
    run = subprocess.Popen(
        [sys.executable, "-m", "statekeeper.chaos.sim", "run", "--seed", "3", "--steps",
         "100000", "--fault", "@50000 power n1 hold=1.00s"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    daemons: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 60
        while len(daemons) < 3 and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
            daemons = _lazyfs_children(run.pid)
        assert len(daemons) == 3, f"the run did not mount three LazyFS disks: {daemons}"
        time.sleep(1.0)  # the world runs
        run.send_signal(signal.SIGTERM)
        assert run.wait(60) != 0
        deadline = time.monotonic() + 20
        while any(map(_alive, daemons)) and time.monotonic() < deadline:
            time.sleep(0.2)
        mounts = Path("/proc/mounts").read_text()
        assert not [m for m in daemons.values() if f" {m} " in mounts], mounts
        assert not [p for p in daemons if _alive(p)], "LazyFS daemons outlived their run"
    finally:  # on a failure: what the run left behind (its daemons are orphans by now)
        run.kill()
        run.wait()
        for pid, mount in daemons.items():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
            subprocess.run(["fusermount3", "-uz", mount], capture_output=True)
