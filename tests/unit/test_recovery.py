"""node/recovery.py on real RocksDB directories (no cluster): what counts as corruption,
that only corruption moves a DB aside, the marker a run leaves for the next start, and the
chunked background scan."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.node import recovery
from statekeeper.node.errors import OpError
from statekeeper.node.store import StateMachine
from statekeeper.node.store.backend import StorageError, open_db, read_verified


def make_db(path: Path, n: int = 5000) -> None:
    db = open_db(path)
    for i in range(n):
        db.put(b"k%06d" % i, b"v" * 200)
    db.flush()
    db.close()


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 64] = bytes(b ^ 0xFF for b in data[mid : mid + 64])
    path.write_bytes(bytes(data))


def scan(sm: StateMachine, chunk: int = 700) -> recovery.BackgroundVerify:
    """A BackgroundVerify over `sm` run to its end on this thread; the corruption it met
    (if any) in .found."""
    found: list[BaseException] = []
    v = recovery.BackgroundVerify(sm.verify_chunk, found.append, chunk_records=chunk, pause=0)
    v.run()
    v.found = found
    return v


def test_a_sound_db_is_opened_in_place_and_verifies_chunk_by_chunk(tmp_path: Path) -> None:
    db = tmp_path / "db"
    make_db(db)
    sm = recovery.open_state_machine(db, lambda: StateMachine(db))
    try:
        v = scan(sm, chunk=700)  # 5000 = 7 full chunks and a short one: no key twice or lost
        assert (v.records, v.done, v.found) == (5000, True, [])
    finally:
        sm.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]


def test_chunks_resume_after_the_last_key_and_end_with_none(tmp_path: Path) -> None:
    db_path = tmp_path / "db"
    make_db(db_path, n=5)
    db = open_db(db_path)
    try:
        assert read_verified(db, None, 2) == (2, b"k000001")
        assert read_verified(db, b"k000001", 2) == (2, b"k000003")
        assert read_verified(db, b"k000003", 2) == (1, None)  # the end
        assert read_verified(db, b"k000004", 2) == (0, None)
        assert read_verified(db, b"k000000\x00", 1) == (1, b"k000001")
    finally:
        db.close()


def test_garbled_sst_blocks_open_fine_but_the_scan_finds_them(tmp_path: Path) -> None:
    db = tmp_path / "db"
    make_db(db)
    for sst in db.glob("*.sst"):
        flip(sst)
    sm = recovery.open_state_machine(db, lambda: StateMachine(db))  # no scan at open now
    try:
        v = scan(sm)
        assert not v.done and len(v.found) == 1
        assert recovery.is_corruption(v.found[0]), v.found[0]
    finally:
        sm.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]


def test_the_scan_ends_quietly_when_the_store_is_closed(tmp_path: Path) -> None:
    db = tmp_path / "db"
    make_db(db)
    sm = StateMachine(db)
    sm.close()
    v = scan(sm)
    assert (v.records, v.done, v.found) == (0, False, [])


def test_stop_ends_the_scan_after_the_chunk_in_progress(tmp_path: Path) -> None:
    db = tmp_path / "db"
    make_db(db)
    sm = StateMachine(db)
    try:
        v: recovery.BackgroundVerify

        def one_chunk_then_stop(after, limit):
            v.stop()
            return sm.verify_chunk(after, limit)

        v = recovery.BackgroundVerify(one_chunk_then_stop, pytest.fail, chunk_records=100)
        v.run()
        assert (v.records, v.done) == (100, False)
    finally:
        sm.close()


def test_corruption_is_recognised_through_a_wrapping_error() -> None:
    try:
        try:
            raise Exception("Corruption: block checksum mismatch")
        except Exception as e:
            raise StorageError(f"RocksDB read failed: {e}") from e
    except StorageError as wrapped:
        assert recovery.is_corruption(wrapped)
    assert not recovery.is_corruption(StorageError("RocksDB write failed: IO error: No space"))
    assert not recovery.is_corruption(OpError("unavailable", "the state machine is closed"))


def test_a_marked_db_is_moved_aside_at_the_next_start_and_the_marker_removed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "db"
    make_db(db)
    recovery.mark_corrupt(db, Exception("Corruption: block checksum mismatch"), now=lambda: 0.0)
    marker = tmp_path / "db.corrupt-detected"
    assert marker.read_text() == "1970-01-01T00:00:00Z Corruption: block checksum mismatch\n"
    sm = recovery.open_state_machine(db, lambda: StateMachine(db))
    try:
        assert sm.applied_index == 0 and sm.revision == 0
        with sm.read_view() as view:
            assert not list(view.scan(b"k", b"l"))  # the old keys went with the old DB
    finally:
        sm.close()
    aside = list(tmp_path.glob("db.corrupt-2*"))
    assert len(aside) == 1 and (aside[0] / "CURRENT").exists()
    assert not marker.exists()


def test_a_marker_without_a_db_is_only_removed(tmp_path: Path) -> None:
    """A crash after the move and before the marker's removal: nothing more is moved."""
    db = tmp_path / "db"
    recovery.mark_corrupt(db, Exception("Corruption: x"))
    sm = recovery.open_state_machine(db, lambda: StateMachine(db))
    sm.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]


def test_a_db_whose_open_fails_with_corruption_is_moved_aside_at_once(tmp_path: Path) -> None:
    """Garbled SST data blocks are no longer found at open (the background scan or an apply
    finds them: the tests above); a DB RocksDB cannot even open is still moved aside now."""
    db = tmp_path / "db"
    make_db(db)
    (db / "CURRENT").write_text("garbage\n")
    sm = recovery.open_state_machine(db, lambda: StateMachine(db))
    try:
        assert sm.applied_index == 0 and sm.revision == 0
    finally:
        sm.close()
    aside = list(tmp_path.glob("db.corrupt-*"))
    assert len(aside) == 1 and (aside[0] / "CURRENT").exists()  # kept whole


def test_a_db_locked_by_another_process_is_not_corruption_and_stays(tmp_path: Path) -> None:
    db = tmp_path / "db"
    make_db(db)
    holder = StateMachine(db)  # holds RocksDB's LOCK, like a node still running
    try:
        with pytest.raises(Exception, match="lock") as ei:
            recovery.open_state_machine(db, lambda: StateMachine(db))
        assert not recovery.is_corruption(ei.value)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]
    finally:
        holder.close()


def test_quarantine_never_overwrites_an_earlier_one(tmp_path: Path) -> None:
    for _ in range(2):
        db = tmp_path / "db"
        db.mkdir()
        recovery.quarantine(db, now=lambda: 0.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "db.corrupt-19700101T000000Z",
        "db.corrupt-19700101T000000Z-2",
    ]
