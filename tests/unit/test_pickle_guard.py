"""node/raft/pickle_guard.py without a network: which peer messages and commands are
refused before pysyncobj could unpickle them. The cluster tests are
tests/integration/test_raft_pickle_paths.py."""

from __future__ import annotations

import inspect
import logging
import pickle

import pysyncobj.syncobj
import pytest

from statekeeper.node.config import RAFT_ENTRY_LIMIT_BYTES, RaftSettings
from statekeeper.node.raft import peer_encoding, syncobj
from statekeeper.node.raft.log import ENTRY_COMMAND
from statekeeper.node.raft.members import MEMBERSHIP_COMMAND
from statekeeper.node.raft.pickle_guard import VERSION_COMMAND, PicklePathsMixin, forwardable

ENTRY = ENTRY_COMMAND + b"\x82\xa1t\xcf" + bytes(8) + b"\xa3ops\x90"


@pytest.mark.parametrize(
    ("command", "ok"),
    [
        (ENTRY, True),
        (MEMBERSHIP_COMMAND + b"\x93\xa3add", True),  # decoded as msgpack (membership.py)
        (VERSION_COMMAND + pickle.dumps(0), False),
        (ENTRY_COMMAND + pickle.dumps((0, (b"entry",)), 2), False),  # older code's format
        (b"\x01", False),  # a NO_OP is the leader's own
        (ENTRY_COMMAND + bytes(RAFT_ENTRY_LIMIT_BYTES), False),
        (bytearray(ENTRY), False),
        ("text", False),
        (None, False),
    ],
)
def test_a_leader_appends_only_entries_and_membership_changes_of_followers(command, ok) -> None:
    assert forwardable(command) is ok


class _Node(PicklePathsMixin):
    _REQUEST_DENIED = 4

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []
        sent = self.sent
        self._SyncObj__transport = type("T", (), {"send": lambda _, n, m: sent.append((n, m))})()


def test_transmission_chunks_are_dropped_and_logged_once(caplog) -> None:
    peer_encoding.refusals._last.clear()
    caplog.set_level(logging.DEBUG, logger="statekeeper.raft")
    node = _Node()
    head = {
        "type": "append_entries",
        "term": 1,
        "commit_index": 0,
        "prevLogIdx": 0,
        "prevLogTerm": 0,
    }
    for part in ("start", "process", "finish"):
        assert node.refused_pickle_path(
            "10.0.0.9:7100", "append_entries", {**head, "transmission": part, "data": b"\x80"}
        )
    assert not node.refused_pickle_path("10.0.0.9:7100", "append_entries", {**head, "entries": []})
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "transmission" in errors[0] and "10.0.0.9:7100" in errors[0]
    assert node.sent == []  # no answer: the leader learns nothing from it


def test_a_refused_forwarded_command_is_answered_denied() -> None:
    node = _Node()
    bad = {"type": "apply_command", "command": VERSION_COMMAND + pickle.dumps(1), "request_id": 3}
    assert node.refused_pickle_path("p", "apply_command", bad)
    assert node.sent == [("p", {"type": "apply_command_response", "request_id": 3, "error": 4})]
    assert not node.refused_pickle_path("p", "apply_command", {**bad, "command": ENTRY})


def test_version_commands_are_skipped_and_never_written(caplog) -> None:
    node = _Node()
    assert node.skipped_version_command(VERSION_COMMAND + b"\x80anything")
    assert not node.skipped_version_command(ENTRY)
    with pytest.raises(RuntimeError, match="pickle"):
        node.setCodeVersion(1)


def test_pysyncobj_never_reaches_its_chunking_size() -> None:
    """pysyncobj chunks (and pickles) a lone entry of appendEntriesBatchSizeBytes or more;
    a peer frame cannot even carry 2 GiB (its length prefix is a signed 32-bit int)."""
    conf = syncobj.build_conf(
        "/nonexistent",
        "127.0.0.1:1",
        RaftSettings(),
        serializer=None,
        deserializer=None,
        serialize_checker=None,
    )
    assert conf.appendEntriesBatchSizeBytes >= 2**31
    assert RAFT_ENTRY_LIMIT_BYTES < syncobj.MAX_MESSAGE_BYTES <= 64 * 1024 * 1024


def test_pysyncobj_unpickles_where_pickle_guard_says() -> None:
    """pickle_guard.py's docstring lists pysyncobj 0.3.17's pickle.loads sites: a new one
    (another pysyncobj) must be looked at before it reaches peers' bytes."""
    source = inspect.getsource(pysyncobj.syncobj)
    assert source.count("pickle.loads(") == 4
    assert "newEntries = [pickle.loads(self.__recvTransmission)]" in source
    assert "ver = pickle.loads(command[1:])" in source
