"""node/main.py's apply callback: an apply failing with RocksDB Corruption marks the DB for
the next start before the node stops; any other failure stops it unmarked (node/recovery.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.node import main as node_main
from statekeeper.node.fatal import STATE_MACHINE_EXIT_CODE
from statekeeper.node.store.backend import StorageError


class Stopped(Exception):
    pass


class FailingStore:
    def __init__(self, path: Path, error: str) -> None:
        self.path = path
        self._error = error

    def apply(self, index: int, payload: bytes):
        try:
            raise Exception(self._error)  # what rocksdict raises
        except Exception as e:
            raise StorageError(f"RocksDB read failed: {e}") from e


@pytest.fixture
def stops(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    seen: list[tuple[str, int]] = []

    def stop_now(msg: str, exc: BaseException | None, code: int):
        seen.append((msg, code))
        raise Stopped(msg)

    monkeypatch.setattr(node_main, "stop_now", stop_now)
    return seen


def test_a_corrupt_block_met_by_an_apply_leaves_the_marker(tmp_path: Path, stops) -> None:
    apply = node_main._apply_fn(FailingStore(tmp_path / "db", "Corruption: bad block"), [])
    with pytest.raises(Stopped):
        apply(7, b"entry")
    marker = tmp_path / "db.corrupt-detected"
    assert "Corruption: bad block" in marker.read_text()
    assert stops == [
        (
            "applying raft entry 7 failed: RocksDB is corrupt; the next start moves it aside "
            f"({marker})",
            STATE_MACHINE_EXIT_CODE,
        )
    ]


def test_any_other_apply_failure_stops_without_a_marker(tmp_path: Path, stops) -> None:
    apply = node_main._apply_fn(FailingStore(tmp_path / "db", "IO error: No space left"), [])
    with pytest.raises(Stopped):
        apply(7, b"entry")
    assert not (tmp_path / "db.corrupt-detected").exists()
    assert stops == [("applying raft entry 7 failed", STATE_MACHINE_EXIT_CODE)]
