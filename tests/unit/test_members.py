"""node/raft/members.py (the member set as a function of the log) and the journal hook
that applies membership entries when they are appended and undoes them when a conflict
truncates them (node/raft/log.py)."""

from __future__ import annotations

import pickle

import msgpack
import pytest

from statekeeper.node.raft.log import RaftLog
from statekeeper.node.raft.members import (
    ADD,
    REMOVE,
    Member,
    MemberError,
    check_change,
    decode_change,
    encode_change,
    replay,
)

A = Member("node-0", "127.0.0.1", 7100, 7000)
B = Member("node-1", "127.0.0.1", 7101, 7001)
C = Member("node-3", "127.0.0.1", 7103, 7003)
BASE = {m.raft_address: m for m in (A, B)}


def test_a_change_round_trips_and_other_commands_are_not_changes() -> None:
    assert decode_change(encode_change(ADD, C)) == (ADD, C)
    assert decode_change(encode_change(REMOVE, C)) == (REMOVE, C)
    assert decode_change(b"\x00anything") is None
    # Never unpickled: pysyncobj's own (pickled) shape, and any other garbage, is refused.
    for bad in (
        b"\x02" + pickle.dumps(["rem", C.raft_address, C.raft_address]),
        b"\x02" + msgpack.packb(["rem", C.raft_address, C.raft_address]),
        b"\x02" + msgpack.packb(["drop", C.raft_address, C.to_dict()]),
        b"\x02\xc1",
    ):
        with pytest.raises(MemberError):
            decode_change(bad)


def test_replay_the_last_entry_naming_a_member_decides() -> None:
    log = [encode_change(ADD, C), b"\x00w", encode_change(REMOVE, C), encode_change(ADD, C)]
    assert replay(BASE, log) == {**BASE, C.raft_address: C}
    assert replay(BASE, log[:3]) == BASE
    # replaying entries the base already reflects changes nothing
    assert replay(replay(BASE, log), log) == replay(BASE, log)


@pytest.mark.parametrize(
    ("kind", "member", "code"),
    [
        (ADD, A, "member_exists"),
        (ADD, Member("node-0", "127.0.0.2", 1, 2), "member_exists"),  # same id elsewhere
        (REMOVE, C, "member_not_found"),
        (REMOVE, A, "member_is_leader"),
    ],
)
def test_check_change_refusals(kind, member, code) -> None:
    with pytest.raises(MemberError) as e:
        check_change(BASE, kind, member, self_address=A.raft_address)
    assert e.value.code == code


def test_check_change_accepts_real_changes() -> None:
    check_change(BASE, ADD, C, self_address=A.raft_address)
    check_change(BASE, REMOVE, B, self_address=A.raft_address)


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"id": "node-3", "host": "h", "raft_port": 1},
        {"id": "", "host": "h", "raft_port": 1, "http_port": 2},
        {"id": "n", "host": "h", "raft_port": 0, "http_port": 2},
        {"id": "n", "host": "h", "raft_port": True, "http_port": 2},
        {"id": "n", "host": "bad host", "raft_port": 1, "http_port": 2},
        {"id": "n", "host": "h", "raft_port": 1, "http_port": 2, "extra": 1},
        # Names the resolver refuses with UnicodeError (not OSError): the add route's probe
        # answered 500 internal (schemathesis, issue 27): a label over 63, an empty label.
        {"id": "n", "host": "a" * 64, "raft_port": 1, "http_port": 2},
        {"id": "n", "host": "a" * 253, "raft_port": 1, "http_port": 2},
        {"id": "n", "host": "a..b", "raft_port": 1, "http_port": 2},
        {"id": "n", "host": "a:b", "raft_port": 1, "http_port": 2},  # ':' only in IPv6
    ],
)
def test_member_descriptions_are_validated(bad) -> None:
    with pytest.raises(MemberError) as e:
        Member.from_dict(bad)
    assert e.value.code == "invalid_argument"


def test_the_journal_applies_appended_changes_and_undoes_truncated_ones(tmp_path) -> None:
    seen: list[tuple[str, int, bool]] = []
    j = RaftLog(str(tmp_path / "journal.log"), fsync="never")
    j.on_membership = lambda cmd, idx, rev: seen.append((decode_change(cmd)[0], idx, rev))
    j.add(b"\x01", 1, 1)
    j.add(encode_change(ADD, C), 2, 1)
    j.add(b"\x00w", 3, 1)
    assert seen == [(ADD, 2, False)]
    j.add(encode_change(ADD, C), 2, 1)  # a repeated AppendEntries: kept, not re-applied
    assert seen == [(ADD, 2, False)]
    j.add(b"\x00x", 2, 2)  # a real conflict at index 2: the change is undone
    assert seen == [(ADD, 2, False), (ADD, 2, True)]
    assert [e[1] for e in j] == [1, 2] and j[1][0] == b"\x00x"
    j.close()
