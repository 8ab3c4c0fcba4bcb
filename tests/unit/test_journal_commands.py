"""node/raft/log.py: the journal command formats, old (@replicated pickle) and new."""

from __future__ import annotations

import os
import pickle

import pytest

from statekeeper.node import entry
from statekeeper.node.raft import log
from statekeeper.node.raft.members import MEMBERSHIP_COMMAND

PAYLOAD = entry.encode(5, [{"op": "put", "ns": "a", "key": "k", "value": b"v" * 300}])


def test_new_entries_are_the_payload_behind_one_byte() -> None:
    assert log.entry_payload(log.ENTRY_COMMAND + PAYLOAD) == PAYLOAD
    assert not log.is_pickled(log.ENTRY_COMMAND + PAYLOAD)
    assert log.entry_payload(log.ENTRY_COMMAND + b"anything else") == b"anything else"


def test_older_code_fails_loudly_on_new_entries() -> None:
    # Older code unpickles every REGULAR command: a new entry must raise there (its raft
    # thread stops), never be skipped as an unknown command type (its state would diverge).
    with pytest.raises((ValueError, pickle.UnpicklingError)):
        pickle.loads((log.ENTRY_COMMAND + PAYLOAD)[1:])


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_pickled_commands_of_earlier_code_still_read(protocol: int) -> None:
    old = log.REGULAR_COMMAND + pickle.dumps((0, (PAYLOAD,)), protocol=protocol)
    assert log.is_pickled(old)
    assert log.entry_payload(old) == PAYLOAD


class _Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickled_command_builds_no_objects(tmp_path) -> None:
    marker = tmp_path / "pwned"
    evil = log.REGULAR_COMMAND + pickle.dumps((0, (_Exploit(str(marker)),)))
    assert log.entry_payload(evil) == b""  # the state machine fails it, on every node
    assert not marker.exists()
    assert log.entry_payload(log.REGULAR_COMMAND + b"\x80garbage") == b""
    assert log.entry_payload(log.REGULAR_COMMAND + pickle.dumps((0, ("str",)))) == b""


def test_pysyncobj_commands_are_left_to_it() -> None:
    assert log.entry_payload(b"\x01") is None  # NO_OP
    assert log.entry_payload(MEMBERSHIP_COMMAND + b"\x93") is None
    assert log.entry_payload(b"\x03" + pickle.dumps(1)) is None  # VERSION


def test_the_leader_restamps_new_entries(tmp_path) -> None:
    j = log.RaftLog(str(tmp_path / "journal.log"))
    try:
        j.stamp = lambda: 777
        j.add(log.ENTRY_COMMAND + PAYLOAD, 1, 1)
        t, ops = entry.decode(log.entry_payload(j[0][0]))
        assert t == 777 and ops[0]["key"] == "k"
    finally:
        j.close()
