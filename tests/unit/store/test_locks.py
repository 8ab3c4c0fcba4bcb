"""node/store/locks.py: the lock queue (fair, fence = the waiter's revision), hand-over on
release, revoke and expiry, the generic fence check of every fenced write, and determinism;
no network, every time from the entries."""

from __future__ import annotations

import tempfile

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import validate_op
from statekeeper.node.store import StateMachine
from tests.unit.store.util import Node, entry, put, raw_items


def grant(ttl_ms=5_000, **kw) -> dict:
    return {"op": "lease_grant", "ttl_ms": ttl_ms, **kw}


def acquire(name, lease, **kw) -> dict:
    return {"op": "lock_acquire", "name": name, "lease": lease, **kw}


def release(name, fence, **kw) -> dict:
    return {"op": "lock_release", "name": name, "fence": fence, **kw}


def fence(name, token) -> dict:
    return {"name": name, "token": token}


def lock_list(sm: StateMachine, **kw) -> dict:
    return sm.read(validate_op({"op": "lock_list", **kw}, Limits()))


def locks(node: Node, **kw) -> list[dict]:
    return lock_list(node.sm, **kw)["locks"]


def holder(node: Node, name: str, ns="default") -> int | None:
    found = [x for x in locks(node, ns=ns, prefix=name) if x["name"] == name]
    return found[0]["holder_fence"] if found else None


def leases(node: Node, n: int, t=1_000) -> list[int]:
    return [node.one(grant(), t=t)["lease"] for _ in range(n)]


# -- the queue -----------------------------------------------------------------------------


def test_waiters_queue_in_arrival_order_and_the_fence_is_their_revision(node):
    a, b, c = leases(node, 3)  # grants take no revision (issue 12, gap 9): still at 0
    ra = node.one(acquire("job", a, owner="agent-a"))
    assert ra == {
        "revision": 1,
        "name": "job",
        "key": "__lock/job/00000000000000000001",
        "fence": 1,
        "holder_fence": 1,
        "acquired": True,
        "ahead": None,
    }
    rb, rc = node.apply(acquire("job", b), acquire("job", c))  # one entry: still in order
    assert (rb["fence"], rb["acquired"], rb["ahead"], rb["holder_fence"]) == (
        2,
        False,
        ra["key"],
        1,
    )
    assert (rc["fence"], rc["acquired"], rc["ahead"], rc["holder_fence"]) == (
        3,
        False,
        rb["key"],
        1,
    )
    kv = node.sm.get("default", ra["key"])["kv"]
    assert kv["create_revision"] == 1 and msgpack.unpackb(kv["value"]) == {"owner": "agent-a"}
    (listed,) = locks(node)
    assert listed["name"] == "job" and listed["holder_fence"] == 1 and listed["count"] == 3
    assert listed["holder_lease"] == a
    assert [(w["fence"], w["lease"], w["owner"]) for w in listed["waiters"]] == [
        (1, a, "agent-a"),
        (2, b, None),
        (3, c, None),
    ]


def test_release_hands_the_lock_to_the_next_waiter_in_order(node):
    a, b, c = leases(node, 3)  # no revision taken: the acquires are revisions 1-3
    fa, fb, fc = (node.one(acquire("q", x))["fence"] for x in (a, b, c))
    assert node.one(release("q", fb)) == {"revision": 4, "name": "q", "fence": fb, "held": False}
    assert holder(node, "q") == fa  # a waiter leaving changes nothing ahead of it
    assert node.one(release("q", fa))["held"] is True
    assert holder(node, "q") == fc  # b left: c is next
    r = node.one(release("q", fa))
    assert r["error"]["code"] == "lock_not_held" and r["error"]["fence"] == fa
    node.one(release("q", fc))
    assert holder(node, "q") is None and locks(node) == []
    rd = node.one(acquire("q", a))
    assert rd["acquired"] and rd["fence"] > fc  # tokens only grow


def test_a_lease_revoke_or_expiry_passes_the_lock_on(node):
    a, b, c = leases(node, 3, t=1_000)
    node.one({"op": "lease_keepalive", "leases": [b, c]}, t=4_000)  # b, c: expire at 9 000
    fa, fb, fc = (node.one(acquire("q", x), t=4_000)["fence"] for x in (a, b, c))
    node.one({"op": "lease_expire", "leases": [a]}, t=6_000)  # a was due at 6 000
    assert holder(node, "q") == fb
    node.one({"op": "lease_revoke", "lease": b}, t=6_500)
    assert holder(node, "q") == fc
    assert fa < fb < fc


def test_wait_false_takes_only_a_free_lock_and_writes_nothing_otherwise(node):
    a, b = leases(node, 2)
    r = node.one(acquire("q", a, wait=False))
    assert r["acquired"]
    rev = node.sm.revision
    refused = node.one(acquire("q", b, wait=False))
    assert refused["error"]["code"] == "lock_held"
    assert refused["error"]["holder_fence"] == r["fence"] and node.sm.revision == rev
    assert locks(node)[0]["count"] == 1


def test_acquire_needs_a_live_lease_of_its_namespace(node):
    (a,) = leases(node, 1)
    rev = node.sm.revision
    assert node.one(acquire("q", 99))["error"]["code"] == "lease_not_found"
    # Another namespace's lease is not found there (issue 27, item 11).
    assert node.one(acquire("q", a, ns="other"))["error"]["code"] == "lease_not_found"
    assert node.sm.revision == rev and locks(node) == []


def test_locks_named_like_a_prefix_of_another_are_separate(node):
    a, b = leases(node, 2)
    sub = node.one(acquire("a/b", a))
    top = node.one(acquire("a", b))
    assert sub["acquired"] and top["acquired"] and top["ahead"] is None
    assert holder(node, "a") == top["fence"] and holder(node, "a/b") == sub["fence"]
    node.put("__lock/a/not-a-waiter", b"x")  # not 20 digits: ignored
    assert [x["name"] for x in locks(node)] == ["a", "a/b"]
    assert [x["name"] for x in locks(node, prefix="a/")] == ["a/b"]


def test_lock_list_pages_by_name_and_keeps_namespaces_apart(node):
    (a,) = leases(node, 1)
    for name in ("l1", "l2", "l3"):
        node.one(acquire(name, a))
    first = lock_list(node.sm, limit=2)
    assert [x["name"] for x in first["locks"]] == ["l1", "l2"] and first["more"]
    rest = lock_list(node.sm, limit=2, after="l2")
    assert [x["name"] for x in rest["locks"]] == ["l3"] and not rest["more"]
    assert locks(node, ns="other") == []


# -- fencing ---------------------------------------------------------------------------------


def _two_holders(node: Node) -> tuple[int, int]:
    """Lock "q": a's fence, then b's after a's lease was revoked (b holds now)."""
    a, b = leases(node, 2)
    fa = node.one(acquire("q", a))["fence"]
    fb = node.one(acquire("q", b))["fence"]
    node.one({"op": "lease_revoke", "lease": a})
    return fa, fb


FENCED = [
    put("k", b"new"),
    {"op": "delete", "key": "k"},
    {"op": "cas", "key": "k", "value": b"new", "expect": {"version": 1}},
    {"op": "txn", "compare": [], "success": [put("k", b"new"), put("k2", b"x")]},
    {"op": "append", "stream": "s", "events": [{"data": b"e"}]},
]


@pytest.mark.parametrize("op", FENCED, ids=[o["op"] for o in FENCED])
def test_every_fenced_write_needs_the_holders_fence(node, op):
    node.put("k", b"old")
    fa, fb = _two_holders(node)
    rev = node.sm.revision
    stale = node.one({**op, "fence": fence("q", fa)})
    err = stale["error"]
    assert (err["code"], err["holder_fence"], err["token"], err["name"]) == (
        "fence_mismatch",
        fb,
        fa,
        "q",
    )
    assert node.sm.revision == rev and node.value("k") == b"old"  # nothing applied
    with pytest.raises(OpError):  # not even the append's stream
        node.sm.read(validate_op({"op": "stream_info", "stream": "s"}, Limits()))
    ok = node.one({**op, "fence": fence("q", fb)})
    assert "error" not in ok and node.sm.revision == rev + 1


def test_a_fence_of_a_lock_nobody_holds_or_of_another_namespace_fails(node):
    (a,) = leases(node, 1)
    f = node.one(acquire("q", a))["fence"]
    r = node.one(put("k", b"v", ns="other", fence=fence("q", f)))
    assert r["error"]["code"] == "fence_mismatch" and r["error"]["holder_fence"] is None
    assert node.one(put("k", b"v", fence=fence("never", 1)))["error"]["holder_fence"] is None
    assert "error" not in node.one(put("k", b"v", fence=fence("q", f)))


def test_the_fence_is_checked_against_the_entrys_earlier_ops(node):
    a, b = leases(node, 2)
    fa = node.one(acquire("q", a))["fence"]
    fb = node.one(acquire("q", b))["fence"]
    ok, moved, stale, fresh = node.apply(
        put("k", b"1", fence=fence("q", fa)),
        release("q", fa),
        put("k", b"2", fence=fence("q", fa)),
        put("k", b"3", fence=fence("q", fb)),
    )
    assert "error" not in ok and moved["held"]
    assert stale["error"]["code"] == "fence_mismatch" and "error" not in fresh
    assert node.value("k") == b"3"


def test_a_fenced_txn_can_release_its_own_lock_atomically(node):
    (a,) = leases(node, 1)
    r = node.one(acquire("q", a))
    done = node.one(
        {
            "op": "txn",
            "compare": [],
            "success": [put("result", b"done"), {"op": "delete", "key": r["key"]}],
            "fence": fence("q", r["fence"]),
        }
    )
    assert done["succeeded"] and node.value("result") == b"done"
    assert holder(node, "q") is None  # written and released at one revision


def test_a_retry_of_an_applied_fenced_write_replays_after_the_lock_moved_on(node):
    fa, fb = _two_holders(node)
    node.one({"op": "lease_grant", "ttl_ms": 5_000})
    first = node.one(put("k", b"v", fence=fence("q", fb), idempotency_key="w1"))
    node.one(release("q", fb))
    again = node.one(put("k", b"v", fence=fence("q", fb), idempotency_key="w1"))
    assert again == {**first, "replayed": True}


def test_old_entries_without_a_fence_validate_to_the_same_op():
    """Raft entries written before fences existed: their normalized ops are unchanged."""
    lim = Limits()
    old = {
        "put": {
            "op": "put",
            "ns": "n",
            "key": "k",
            "value": b"v",
            "prev_kv": False,
            "idempotency_key": "i",
        },
        "put_lease": {
            "op": "put",
            "ns": "n",
            "key": "k",
            "value": b"v",
            "prev_kv": False,
            "idempotency_key": None,
            "lease": 3,
        },
        "delete": {
            "op": "delete",
            "ns": "n",
            "key": "k",
            "prefix": False,
            "prev_kv": False,
            "idempotency_key": None,
        },
        "cas": {
            "op": "cas",
            "ns": "n",
            "key": "k",
            "value": b"v",
            "expect": {"version": 1},
            "idempotency_key": None,
        },
        "txn": {
            "op": "txn",
            "ns": "n",
            "compare": [],
            "success": [],
            "failure": [],
            "idempotency_key": None,
        },
        "append": {
            "op": "append",
            "ns": "n",
            "stream": "s",
            "events": [{"data": b"x", "type": "", "id": None, "meta": {}}],
            "expect": "any",
            "idempotency_key": None,
        },
    }
    for name, op in old.items():
        out = validate_op(op, lim, internal=True)
        assert out == op and list(out) == list(op), name
        assert msgpack.packb(out) == msgpack.packb(op), name


def test_fence_field_validation():
    lim = Limits(max_key_bytes=64)
    for bad in (
        {"name": "q"},
        {"name": "q", "token": 0},
        {"name": "", "token": 1},
        {"name": "q", "token": 1, "x": 2},
        ["q", 1],
        {"name": "q", "token": "1"},
    ):
        with pytest.raises(OpError) as ei:
            validate_op(put("k", b"v", fence=bad), lim)
        assert ei.value.code == "invalid_argument", bad
    with pytest.raises(OpError) as ei:
        validate_op(put("k", b"v", fence=fence("n" * 37, 1)), lim)  # 64 - 28 = 36 bytes
    assert ei.value.code == "key_too_large"
    with pytest.raises(OpError) as ei:
        validate_op({"op": "txn", "success": [put("k", b"v", fence=fence("q", 1))]}, lim)
    assert "give it to the txn" in ei.value.message
    for bad_name in ("", 7, "a\x00b", "n" * 37):
        with pytest.raises(OpError):
            validate_op(acquire(bad_name, 1), lim)


# -- determinism ---------------------------------------------------------------------------

NAMES = ["a", "a/b", "b"]
lock_op = st.one_of(
    st.builds(lambda ttl: grant(ttl), st.sampled_from([2_000, 4_000])),
    st.builds(acquire, st.sampled_from(NAMES), st.integers(1, 4)),
    st.builds(
        lambda n, lease: acquire(n, lease, wait=False), st.sampled_from(NAMES), st.integers(1, 4)
    ),
    st.builds(release, st.sampled_from(NAMES), st.integers(1, 30)),
    st.builds(lambda lease: {"op": "lease_revoke", "lease": lease}, st.integers(1, 4)),
    st.builds(lambda ids: {"op": "lease_expire", "leases": ids}, st.lists(st.integers(1, 4))),
    st.builds(
        lambda n, tok: put("k", b"v", fence=fence(n, tok)),
        st.sampled_from(NAMES),
        st.integers(1, 30),
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3_000), st.lists(lock_op, max_size=4)), max_size=12))
def test_lock_entries_are_deterministic_and_fences_only_grow(entries):
    with tempfile.TemporaryDirectory() as d:
        a, b = StateMachine(f"{d}/a"), StateMachine(f"{d}/b")
        t, last_holder = 0, {}
        for i, (dt, ops) in enumerate(entries, start=1):
            t += dt
            ra = a.apply(i, entry(*ops, t=t))
            assert ra == b.apply(i, entry(*ops, t=t))
            for x in lock_list(a)["locks"]:
                fences = [w["fence"] for w in x["waiters"]]
                assert fences == sorted(fences) and x["holder_fence"] == fences[0]
                assert x["holder_fence"] >= last_holder.get(x["name"], 0)  # only grows
                last_holder[x["name"]] = x["holder_fence"]
        assert raw_items(a) == raw_items(b)
        a.close()
        b.close()
