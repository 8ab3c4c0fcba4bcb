"""node/store/tokens.py: auth_token_create / revoke / list in apply, the state machine's
in-memory token view (updated by apply, rebuilt on reopen and snapshot restore), expiry
stamped from the entry's time, and no revision taken."""

from __future__ import annotations

import hashlib

from client.auth_tokens import new_token, parse_token
from node.store import StateMachine
from tests.unit.store.util import Node, write_snapshot

GRANTS = [{"ns": "agent-42", "role": "writer"}]


def create(token_id: str, digest: str, ttl_ms: int = 0, **kw) -> dict:
    return {
        "op": "auth_token_create",
        "id": token_id,
        "hash": digest,
        "grants": GRANTS,
        "ttl_ms": ttl_ms,
        **kw,
    }


def test_create_stamps_times_from_the_entry_and_takes_no_revision(node: Node) -> None:
    node.put("k", b"v")
    token, tid, digest = new_token()
    res = node.one(create(tid, digest, ttl_ms=60_000, name="n"), t=5_000)
    assert res == {"revision": 1, "id": tid, "created_ms": 5_000, "expires_ms": 65_000}
    assert node.sm.revision == 1
    rec = node.sm.tokens[tid]
    assert rec.hash == hashlib.sha256(parse_token(token)[1].encode()).digest()
    assert rec.grants == (("agent-42", "", "writer"),)
    assert (rec.created_ms, rec.expires_ms, rec.name) == (5_000, 65_000, "n")
    never = new_token()
    assert node.one(create(never[1], never[2]), t=6_000)["expires_ms"] == 0


def test_list_never_shows_the_hash(node: Node) -> None:
    _, tid, digest = new_token()
    node.one(create(tid, digest))
    listed = node.sm.read({"op": "auth_token_list"})
    assert [t["id"] for t in listed["tokens"]] == [tid]
    assert digest not in repr(listed)
    assert listed["tokens"][0]["grants"] == [{"ns": "agent-42", "prefix": "", "role": "writer"}]


def test_revoke_removes_it_from_the_view(node: Node) -> None:
    _, tid, digest = new_token()
    node.one(create(tid, digest))
    before = node.sm.tokens
    assert node.one({"op": "auth_token_revoke", "id": tid})["id"] == tid
    assert tid not in node.sm.tokens and tid in before  # replaced whole, not mutated
    again = node.one({"op": "auth_token_revoke", "id": tid})
    assert again["error"]["code"] == "not_found"


def test_duplicate_id_fails_and_idempotent_retry_replays(node: Node) -> None:
    _, tid, digest = new_token()
    first = node.one(create(tid, digest, idempotency_key="ik"))
    assert node.one(create(tid, digest, idempotency_key="ik"))["replayed"] is True
    assert node.one(create(tid, digest, idempotency_key="ik"))["id"] == first["id"]
    assert node.one(create(tid, digest))["error"]["code"] == "token_exists"


def test_a_failed_op_leaves_the_view_alone(node: Node) -> None:
    _, tid, digest = new_token()
    res = node.one(create(tid, digest, grants=[{"ns": "a", "role": "god"}]))
    assert res["error"]["code"] == "invalid_argument"
    assert node.sm.tokens == {}


def test_view_is_rebuilt_on_reopen_and_restore(tmp_path) -> None:
    src = Node(tmp_path / "a")
    ids = []
    for _ in range(3):
        _, tid, digest = new_token()
        src.one(create(tid, digest))
        ids.append(tid)
    src.one({"op": "auth_token_revoke", "id": ids[0]})
    snap = tmp_path / "snap"
    write_snapshot(src.sm, snap)
    src.sm.close()
    reopened = StateMachine(tmp_path / "a")
    assert set(reopened.tokens) == set(ids[1:])
    reopened.close()
    dst = Node(tmp_path / "b")
    _, other, digest = new_token()
    dst.one(create(other, digest))
    dst.sm.restore(snap)
    assert set(dst.sm.tokens) == set(ids[1:])
    dst.sm.close()
