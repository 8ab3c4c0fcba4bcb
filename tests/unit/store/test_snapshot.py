"""node/store/snapshot.py: checkpoint -> write_checkpoint -> restore, as raft drives them."""

import os
import threading

import pytest

from statekeeper.node.config import Retention
from statekeeper.node.errors import OpError
from statekeeper.node.store import StateMachine
from statekeeper.node.store.snapshot import read_header
from tests.unit.store.util import Node, entry, populated, put, raw_items, write_snapshot


def test_a_snapshot_is_restored_in_place_at_an_offset(tmp_path):
    """RaftNode restores the snapshot inside the raft snapshot file, after that file's own
    header, without copying it out first."""
    src = populated(tmp_path / "src")
    snap = tmp_path / "snap.bin"
    write_snapshot(src.sm, snap)
    framed = tmp_path / "framed.bin"
    framed.write_bytes(b"raft header " * 100 + snap.read_bytes())
    assert read_header(framed, 1200)["applied_index"] == 51
    dst = StateMachine(tmp_path / "dst", retention=Retention(history_revisions=20))
    dst.restore(framed, 1200)
    assert raw_items(dst) == raw_items(src.sm)
    with pytest.raises(ValueError):
        dst.restore(framed, 0)  # not a snapshot there
    assert raw_items(dst) == raw_items(src.sm)  # and nothing was replaced
    dst.close()


def test_snapshot_restore_round_trip(tmp_path):
    src = populated(tmp_path / "src")
    snap = tmp_path / "snap.bin"
    write_snapshot(src.sm, snap)
    assert snap.exists()
    assert read_header(snap)["applied_index"] == src.sm.applied_index == 51

    dst = StateMachine(tmp_path / "dst", retention=Retention(history_revisions=20))
    dst.restore(snap)
    assert raw_items(dst) == raw_items(src.sm)
    assert (dst.applied_index, dst.revision, dst.compact_revision) == (
        src.sm.applied_index,
        src.sm.revision,
        src.sm.compact_revision,
    )
    # Both continue identically.
    e = entry(put("k1", b"after", idempotency_key="id7"), put("new", b"1"), t=5000)
    assert dst.apply(52, e) == src.sm.apply(52, e)
    assert raw_items(dst) == raw_items(src.sm)
    assert sorted(os.listdir(tmp_path)) == ["dst", "snap.bin", "src"]
    dst.close()
    src.sm.close()


def test_restore_over_existing_data(tmp_path):
    src = populated(tmp_path / "src", n=5)
    snap = tmp_path / "snap"
    write_snapshot(src.sm, snap)
    other = populated(tmp_path / "other", n=80)
    other.put("only-here", b"x")
    other.sm.restore(snap)
    assert raw_items(other.sm) == raw_items(src.sm)
    assert other.sm.applied_index == src.sm.applied_index
    assert other.value("only-here") is None
    # Entries from the snapshot's index onwards apply; older ones are skipped.
    assert other.sm.apply(3, entry(put("x", b""))) is None
    assert other.sm.apply(7, entry(put("x", b""))) == [{"revision": src.sm.revision + 1}]
    other.sm.close()
    src.sm.close()


def test_restore_rejects_garbage_and_keeps_data(tmp_path, node):
    node.put("a", b"1")
    bad = tmp_path / "bad"
    bad.write_bytes(b"not a tar")
    with pytest.raises(ValueError):
        read_header(bad)
    with pytest.raises(ValueError):
        node.sm.restore(bad)
    assert node.value("a") == b"1"


def test_interrupted_restore_rolls_back_or_forward(tmp_path):
    n = Node(tmp_path / "db")
    n.put("a", b"old")
    n.sm.close()
    # Crash after "db" -> "db.old" but before the new DB was moved in: keep the old one.
    os.replace(tmp_path / "db", tmp_path / "db.old")
    (tmp_path / "db.restore").mkdir()
    sm = StateMachine(tmp_path / "db")
    assert sm.get("default", "a")["kv"]["value"] == b"old"
    assert sorted(os.listdir(tmp_path)) == ["db"]
    sm.close()
    # Crash after the new DB is in place but before "db.old" was removed: finish.
    (tmp_path / "db.old").mkdir()
    sm = StateMachine(tmp_path / "db")
    assert sorted(os.listdir(tmp_path)) == ["db"]
    sm.close()


def test_reads_racing_restore_do_not_crash(tmp_path):
    src = populated(tmp_path / "src", n=20)
    snap = tmp_path / "snap"
    write_snapshot(src.sm, snap)
    target = populated(tmp_path / "t", n=30)
    errors, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            try:
                target.sm.get("default", "k1")
                target.sm.range("default", limit=5)
            except Exception as e:  # pragma: no cover - the failure we test for
                errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for _ in range(3):
        target.sm.restore(snap)
        write_snapshot(target.sm, tmp_path / "snap2")
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert raw_items(target.sm) == raw_items(src.sm)
    target.sm.close()
    src.sm.close()


def test_restore_while_a_finished_read_view_is_still_referenced(tmp_path):
    """A read view that outlives its `with` (node/api/watch.py kept one in its generator's
    frame across a long poll) held its RocksDB iterator and so the DB: restore's reopen
    then failed on RocksDB's LOCK, the DB handle stayed None, and the next apply stopped
    the node (status 70; seen in CI's crash-snapshot run). Leaving the `with` releases the
    iterator, and the stale view refuses to read instead of reading a replaced DB."""
    src = populated(tmp_path / "src", n=5)
    snap = tmp_path / "snap"
    write_snapshot(src.sm, snap)
    dst = populated(tmp_path / "dst", n=3)
    with dst.sm.read_view() as kept:
        assert kept.point(b"nothing") is None
    dst.sm.restore(snap)
    assert raw_items(dst.sm) == raw_items(src.sm)
    assert dst.sm.apply(100, entry(put("after", b"1"))) == [{"revision": src.sm.revision + 1}]
    with pytest.raises(OpError) as err:
        kept.point(b"nothing")
    assert err.value.code == "unavailable"
    dst.sm.close()
    src.sm.close()
