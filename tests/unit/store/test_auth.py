"""node/store/auth.py: auth_token_create / revoke / list in apply, the state machine's
in-memory token view (updated by apply, rebuilt on reopen and snapshot restore), expiry
stamped from the entry's time, and no revision taken."""

from __future__ import annotations

import hashlib

from statekeeper.client.auth.tokens import new_token, parse_token
from statekeeper.node.store import StateMachine
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


def test_child_expiry_is_capped_at_its_creators(node: Node) -> None:
    # Issue 27 item 6: a 1-hour admin minted a ttl-0 child that outlived it.
    _, parent, digest = new_token()
    node.one(create(parent, digest, ttl_ms=3_600_000), t=1_000)
    _, child, cdigest = new_token()
    res = node.one(create(child, cdigest, ttl_ms=0, parent=parent), t=2_000)
    assert res["expires_ms"] == 3_601_000
    assert node.sm.tokens[child].expires_ms == 3_601_000
    assert node.sm.tokens[child].parent == parent
    _, longer, ldigest = new_token()
    capped = node.one(create(longer, ldigest, ttl_ms=9_000_000, parent=parent), t=2_000)
    assert capped["expires_ms"] == 3_601_000


def test_a_child_of_a_revoked_creator_is_refused(node: Node) -> None:
    _, parent, digest = new_token()
    node.one(create(parent, digest))
    node.one({"op": "auth_token_revoke", "id": parent})
    _, child, cdigest = new_token()
    res = node.one(create(child, cdigest, parent=parent))
    assert res["error"]["code"] == "unauthenticated"
    assert child not in node.sm.tokens


def test_revoke_takes_every_token_minted_from_it_transitively(node: Node) -> None:
    _, top, d0 = new_token()
    node.one(create(top, d0))
    _, mid, d1 = new_token()
    node.one(create(mid, d1, parent=top))
    _, leaf, d2 = new_token()
    node.one(create(leaf, d2, parent=mid))
    _, other, d3 = new_token()
    node.one(create(other, d3))
    res = node.one({"op": "auth_token_revoke", "id": top})
    assert set(node.sm.tokens) == {other}
    assert sorted(res["revoked"]) == sorted([top, mid, leaf])


def test_expired_tokens_are_pruned_by_later_token_ops(node: Node) -> None:
    # Issue 27 item 7: expired records stayed in every node's memory forever.
    _, old, d0 = new_token()
    node.one(create(old, d0, ttl_ms=1_000), t=1_000)
    _, keep, d1 = new_token()
    node.one(create(keep, d1), t=1_500)
    assert old in node.sm.tokens  # not expired yet at 1_500
    _, new, d2 = new_token()
    node.one(create(new, d2), t=2_000)  # old expired at 2_000
    assert set(node.sm.tokens) == {keep, new}
    assert [t["id"] for t in node.sm.read({"op": "auth_token_list"})["tokens"]].count(old) == 0


def test_an_entry_without_parent_replays_as_before(node: Node) -> None:
    # The shape older journals hold: no parent, ttl 0 stays 0.
    _, tid, digest = new_token()
    res = node.one(create(tid, digest), t=7_000)
    assert res["expires_ms"] == 0 and node.sm.tokens[tid].parent is None


def test_apply_takes_a_record_over_the_request_bounds_from_an_older_journal(node: Node) -> None:
    # The bounds of issue 27 item 7 refuse requests (node/ops/auth.py); an entry written
    # before them replays to the token it made then.
    _, tid, digest = new_token()
    wide = [{"ns": f"n{i}", "prefix": "p" * 300, "role": "reader"} for i in range(20)]
    assert node.one(create(tid, digest, grants=wide))["id"] == tid
    assert len(node.sm.tokens[tid].grants) == 20
