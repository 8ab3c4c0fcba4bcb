"""node/recovery.py on real RocksDB directories (no cluster): what counts as corruption,
and that only corruption moves a DB aside."""

from __future__ import annotations

from pathlib import Path

import pytest

from node import recovery
from node.store import StateMachine
from node.store.backend import open_db


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


def test_a_sound_db_verifies_and_is_opened_in_place(tmp_path: Path) -> None:
    db = tmp_path / "db"
    make_db(db)
    assert recovery.verify_db(db) == 5000
    sm = recovery.open_state_machine(db, lambda: StateMachine(db))
    sm.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]


def test_garbled_sst_blocks_open_fine_but_fail_verification(tmp_path: Path) -> None:
    db = tmp_path / "db"
    make_db(db)
    for sst in db.glob("*.sst"):
        flip(sst)
    open_db(db).close()  # RocksDB itself does not notice at open
    with pytest.raises(Exception, match="^Corruption"):
        recovery.verify_db(db)


@pytest.mark.parametrize("garble", ["sst", "current"])
def test_a_corrupt_db_is_moved_aside_and_an_empty_one_opened(tmp_path: Path, garble) -> None:
    db = tmp_path / "db"
    make_db(db)
    if garble == "sst":
        for sst in db.glob("*.sst"):
            flip(sst)
    else:
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
