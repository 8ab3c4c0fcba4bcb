"""node/store/leases.py and lease_state.py: grant, attach/detach, keepalive, revoke and
leader-proposed expiry in apply, with no network; every time comes from the entries."""

from __future__ import annotations

import tempfile

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import validate_op
from statekeeper.node.store import StateMachine, keys
from statekeeper.node.store.leases import due_leases
from tests.unit.store.util import Node, entry, put, raw_items

LEASE_TAGS = (keys.LEASE, keys.LEASE_EXP, keys.LEASE_KEY, keys.KEY_LEASE)


def grant(ttl_ms=5_000, **kw) -> dict:
    return {"op": "lease_grant", "ttl_ms": ttl_ms, **kw}


def keepalive(*ids) -> dict:
    return {"op": "lease_keepalive", "leases": list(ids)}


def expire(*ids) -> dict:
    return {"op": "lease_expire", "leases": list(ids)}


def revoke(lease, **kw) -> dict:
    return {"op": "lease_revoke", "lease": lease, **kw}


def info(node: Node, lease: int) -> dict:
    return node.sm.read({"op": "lease_info", "lease": lease})


def lease_records(sm: StateMachine) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in raw_items(sm) if k[:1] in LEASE_TAGS]


def live_keys(node: Node, ns="default") -> list[str]:
    return [kv["key"] for kv in node.sm.range(ns)["kvs"]]


# -- grant, attach, detach -----------------------------------------------------------------


def test_grant_assigns_ids_in_apply_and_expires_from_the_entry_time(node):
    # A grant changes no key: it takes no revision and answers the current one (it took
    # one each before issue 12's gap 9: revision 1, then 2).
    r1 = node.one(grant(5_000), t=10_000)
    assert r1 == {"revision": 0, "lease": 1, "ttl_ms": 5_000, "expires_ms": 15_000}
    node.put("k", b"v")
    r2 = node.one(grant(3_000, ns="other"), t=11_000)
    assert (r2["lease"], r2["revision"], r2["expires_ms"]) == (2, 1, 14_000)
    assert node.sm.revision == 1
    again = node.one(grant(3_000, ns="other", idempotency_key="g"), t=12_000)
    assert node.one(grant(3_000, ns="other", idempotency_key="g"), t=13_000) == {
        **again,
        "replayed": True,
    }
    assert again["lease"] == 3  # ids are never reused, replay gives the same one
    listed = node.sm.read({"op": "lease_list"})["leases"]
    assert [(x["lease"], x["ns"]) for x in listed] == [(1, "default"), (2, "other"), (3, "other")]


def test_put_with_lease_attaches_and_put_without_detaches(node):
    node.one(grant(), t=1_000)
    node.one(grant(), t=1_000)
    node.put("a", b"1", lease=1)
    node.put("b", b"2", lease=1)
    node.put("c", b"3")
    assert info(node, 1)["keys"] == ["a", "b"]
    node.put("b", b"2'", lease=2)  # moved to lease 2
    node.put("a", b"1'")  # detached (etcd: a put without a lease drops it)
    assert info(node, 1)["keys"] == []
    assert info(node, 2)["keys"] == ["b"]
    node.one({"op": "cas", "key": "b", "value": b"x", "expect": {"version": 2}})
    assert info(node, 2)["keys"] == []  # a cas is a put: detached
    node.put("c", b"3'", lease=2)
    node.delete("c")
    assert info(node, 2)["keys"] == []
    # Only the two lease records, their index entries and the counter are left.
    assert sorted(k[:1] for k, _ in lease_records(node.sm)) == [b"l"] * 3 + [b"x"] * 2


def test_put_with_an_unknown_lease_writes_nothing(node):
    node.put("k", b"old")
    before = raw_items(node.sm)
    r = node.put("k", b"new", lease=7)
    assert r["error"]["code"] == "lease_not_found" and r["error"]["lease"] == 7
    # Only the meta record (applied_index) changed.
    assert [kv for kv in raw_items(node.sm) if kv[0] != keys.META] == [
        kv for kv in before if kv[0] != keys.META
    ]
    assert node.value("k") == b"old"


def test_a_key_and_its_lease_share_a_namespace(node):
    node.one(grant(ns="a"))
    r = node.one(put("k", b"v", ns="b", lease=1))
    # Issue 27 item 11: another namespace's lease is not found there (its ns is not named).
    assert r["error"]["code"] == "lease_not_found" and r["error"]["lease"] == 1
    assert "'a'" not in r["error"]["message"]
    assert node.value("k", ns="b") is None


def test_put_ttl_grants_a_lease_of_its_own_also_in_a_txn(node):
    r = node.one(put("k", b"v", ttl_ms=3_000), t=1_000)
    assert r == {"revision": 1, "lease": 1}
    assert info(node, 1) | {"revision": 0} == {
        "revision": 0,
        "lease": 1,
        "ns": "default",
        "ttl_ms": 3_000,
        "expires_ms": 4_000,
        "remaining_ms": 3_000,
        "keys": ["k"],
        "more_keys": False,
        "streams": [],
        "more_streams": False,
    }
    t = node.one(
        {
            "op": "txn",
            "compare": [],
            "success": [put("x", b"1", ttl_ms=2_000), put("y", b"2", lease=1)],
        },
        t=2_000,
    )
    assert t["revision"] == 2 and t["results"][0] == {"revision": 2, "lease": 2}
    assert info(node, 1)["keys"] == ["k", "y"] and info(node, 2)["keys"] == ["x"]


def test_validation_of_lease_fields():
    lim = Limits()
    plain = validate_op({"op": "put", "key": "k", "value": b"v"}, lim)
    assert "lease" not in plain and "ttl_ms" not in plain  # old puts keep their bytes
    assert validate_op({"op": "put", "key": "k", "value": b"v", "lease": 3}, lim)["lease"] == 3
    bad = [
        {"op": "put", "key": "k", "value": b"v", "lease": 1, "ttl_ms": 5_000},
        {"op": "put", "key": "k", "value": b"v", "ttl_ms": 1_999},
        {"op": "put", "key": "k", "value": b"v", "lease": 0},
        {"op": "lease_grant", "ttl_ms": 86_400_001},
        {"op": "lease_grant", "ttl_ms": True},
        {"op": "lease_grant"},
        {"op": "lease_keepalive", "leases": []},
        {"op": "lease_keepalive", "leases": list(range(1, 1002))},
        {"op": "lease_revoke", "lease": "1"},
    ]
    for op in bad:
        with pytest.raises(OpError) as ei:
            validate_op(op, lim)
        assert ei.value.code == "invalid_argument", op
    with pytest.raises(OpError) as ei:
        validate_op({"op": "lease_expire", "leases": [1]}, lim)  # never from a request
    assert ei.value.code == "unknown_op"
    assert validate_op({"op": "lease_expire", "leases": [1]}, lim, internal=True)["leases"] == [1]
    with pytest.raises(OpError):
        validate_op({"op": "txn", "success": [{"op": "lease_grant", "ttl_ms": 5_000}]}, lim)
    assert validate_op({"op": "lease_grant", "ttl_ms": 500}, Limits(min_lease_ttl_ms=500))


# -- keepalive, revoke, expire -------------------------------------------------------------


def test_keepalive_renews_many_at_once_and_reports_the_missing(node):
    node.one(grant(5_000), t=1_000)
    node.one(grant(2_000), t=1_000)
    node.put("k", b"v")
    r = node.one(keepalive(1, 9, 2), t=4_000)
    assert r == {
        "revision": 1,  # no revision taken (was 4 before gap 9: one per renewal)
        "leases": [
            {"lease": 1, "ttl_ms": 5_000, "expires_ms": 9_000},
            {"lease": 9, "error": "lease_not_found"},
            {"lease": 2, "ttl_ms": 2_000, "expires_ms": 6_000},
        ],
    }
    # Past its expiry but not expired by the leader yet: a late keepalive still renews it.
    late = node.one(keepalive(2), t=7_000)
    assert late["leases"][0]["expires_ms"] == 9_000
    nothing = node.one(keepalive(9), t=7_000)
    assert nothing["revision"] == late["revision"] == node.sm.revision == 1
    # One index entry per lease, at its current expiry.
    with node.sm.read_view() as view:
        assert due_leases(view, 9_000, 10) == [1, 2]
        assert due_leases(view, 8_999, 10) == []


def test_revoke_deletes_every_attached_key_at_one_revision(node):
    node.one(grant())
    node.one(grant())
    for k in ("a", "b", "c"):
        node.put(k, b"v", lease=1)
    node.put("d", b"v", lease=2)
    node.put("e", b"v")
    rev_before = node.sm.revision
    r = node.one(revoke(1))
    assert r == {"revision": rev_before + 1, "deleted": 3, "deleted_streams": 0}
    assert live_keys(node) == ["d", "e"]
    for k in ("a", "b", "c"):  # all three tombstones at the one revision
        assert node.sm.get("default", k, rev_before)["kv"] is not None
        assert node.sm.get("default", k, r["revision"])["kv"] is None
    assert node.one(revoke(1))["error"]["code"] == "lease_not_found"
    with pytest.raises(OpError) as ei:
        info(node, 1)
    assert ei.value.code == "lease_not_found"
    assert node.sm.revision == r["revision"]  # the failed revoke took no revision
    assert info(node, 2)["keys"] == ["d"]


def test_expire_rechecks_the_entry_time_and_expires_due_leases_at_one_revision(node):
    node.one(grant(2_000), t=1_000)  # expires 3_000
    node.one(grant(2_000), t=1_000)
    node.one(grant(9_000), t=1_000)  # expires 10_000
    node.put("a", b"1", lease=1)
    node.put("b", b"2", lease=2)
    node.put("c", b"3", lease=3)
    rev = node.sm.revision
    early = node.one(expire(1, 2), t=2_999)  # the leader's clock ran ahead: nothing due
    assert early == {"revision": rev, "expired": [], "deleted": 0, "deleted_streams": 0}
    node.one(keepalive(2), t=2_999)  # the keepalive wins the race for lease 2
    r = node.one(expire(1, 2, 3, 42), t=3_000)
    assert r == {
        "revision": rev + 1,
        "expired": [1],
        "deleted": 1,
        "deleted_streams": 0,
    }  # keepalive: none
    assert live_keys(node) == ["b", "c"]
    r2 = node.one(expire(2, 3), t=5_000)
    assert r2["expired"] == [2] and live_keys(node) == ["c"]
    assert [x["lease"] for x in node.sm.read({"op": "lease_list"})["leases"]] == [3]


def test_expiring_many_leases_is_one_revision(node):
    for _ in range(5):
        node.one(grant(2_000), t=0)
    for i in range(5):
        node.put(f"k{i}", b"v", lease=i + 1)
    r = node.one(expire(1, 2, 3, 4, 5), t=2_000)
    assert (r["expired"], r["deleted"]) == ([1, 2, 3, 4, 5], 5)
    assert live_keys(node) == []
    assert lease_records(node.sm) == [(keys.lease_key(0), msgpack.packb(6))]


def test_lease_ids_with_a_0xff_byte_keep_their_keys_apart(node):
    """lease8 of 255 ends in 0xff: its keys must be bounded by lease 256's prefix."""
    for _ in range(256):
        node.one(grant())
    node.put("x", b"1", lease=255)
    node.put("y", b"2", lease=256)
    assert info(node, 255)["keys"] == ["x"] and info(node, 256)["keys"] == ["y"]
    assert node.one(revoke(255))["deleted"] == 1
    assert live_keys(node) == ["y"]


def test_prefix_delete_detaches_every_key(node):
    node.one(grant())
    for k in ("p/1", "p/2", "q"):
        node.put(k, b"v", lease=1)
    node.delete("p/", prefix=True)
    assert info(node, 1)["keys"] == ["q"]
    assert node.one(revoke(1))["deleted"] == 1


def test_lease_list_pages_and_info_caps_keys(node, monkeypatch):
    monkeypatch.setattr("statekeeper.node.store.leases.MAX_LEASE_KEYS_SHOWN", 2)
    for _ in range(3):
        node.one(grant())
    for k in ("a", "b", "c"):
        node.put(k, b"v", lease=1)
    i = info(node, 1)
    assert (i["keys"], i["more_keys"]) == (["a", "b"], True)
    page = node.sm.read({"op": "lease_list", "limit": 2})
    assert [x["lease"] for x in page["leases"]] == [1, 2] and page["more"]
    page2 = node.sm.read({"op": "lease_list", "after": 2, "limit": 2})
    assert [x["lease"] for x in page2["leases"]] == [3] and not page2["more"]


def test_remaining_ms_uses_the_stores_clock(node):
    node.one(grant(5_000), t=1_000)
    node.apply(t=4_000)  # a read barrier moves the replicated clock
    assert info(node, 1)["remaining_ms"] == 2_000
    node.apply(t=9_000)
    assert info(node, 1)["remaining_ms"] == 0  # due; the leader expires it soon


# -- determinism -----------------------------------------------------------------------------

KEYS = ["a", "b", "c"]
lease_op = st.one_of(
    st.builds(lambda ttl: grant(ttl), st.sampled_from([2_000, 3_000])),
    st.builds(lambda k, lease: put(k, b"v", lease=lease), st.sampled_from(KEYS), st.integers(1, 4)),
    st.builds(lambda k: put(k, b"v", ttl_ms=2_000), st.sampled_from(KEYS)),
    st.builds(lambda k: put(k, b"w"), st.sampled_from(KEYS)),
    st.builds(lambda k: {"op": "delete", "key": k}, st.sampled_from(KEYS)),
    st.builds(lambda ids: keepalive(*ids), st.lists(st.integers(1, 5), min_size=1, max_size=3)),
    st.builds(lambda ids: expire(*ids), st.lists(st.integers(1, 5), min_size=1, max_size=3)),
    st.builds(revoke, st.integers(1, 5)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3_000), st.lists(lease_op, max_size=4)), max_size=10))
def test_lease_entries_are_deterministic_and_keep_the_invariants(entries):
    with tempfile.TemporaryDirectory() as d:
        a, b = StateMachine(f"{d}/a"), StateMachine(f"{d}/b")
        t = 0
        for i, (dt, ops) in enumerate(entries, start=1):
            t += dt
            ra = a.apply(i, entry(*ops, t=t))
            assert ra == b.apply(i, entry(*ops, t=t))
        assert raw_items(a) == raw_items(b)
        _check_invariants(a)
        a.close()
        b.close()


def _check_invariants(sm: StateMachine) -> None:
    items = dict(raw_items(sm))
    leases = {keys.u64(k[1:]): keys.unpack(v) for k, v in items.items() if k[:1] == keys.LEASE}
    leases.pop(0, None)
    index = {(keys.u64(k[1:9]), keys.u64(k[9:])) for k in items if k[:1] == keys.LEASE_EXP}
    assert index == {(rec[2], lease) for lease, rec in leases.items()}
    attached = {(keys.u64(k[1:9]), k[9:]) for k in items if k[:1] == keys.LEASE_KEY}
    by_key = {(keys.unpack(v), k[1:]) for k, v in items.items() if k[:1] == keys.KEY_LEASE}
    assert attached == by_key
    lease_of = {member: lease for lease, member in by_key}
    for k, v in items.items():  # a "c" record names the key's lease (keys.py)
        if k[:1] == keys.CUR:
            assert keys.cur_lease(keys.unpack(v)) == lease_of.get(k[1:], 0)
    for lease, member in attached:
        assert lease in leases
        assert keys.CUR + member in items  # only live keys are attached
        assert member.split(keys.SEP)[0].decode() == leases[lease][0]  # same namespace


def test_keepalives_and_grants_take_no_revision_and_leave_no_change(node):
    """Audit gap 9: renewing must not eat the history window. A keepalive or a grant
    changes no key: the store revision stays, the change log gets nothing (a watch sees
    nothing), the records are still replicated state (every node applies them alike), and
    an idempotent grant's replay is the same answer."""
    node.put("w", b"0")
    rev = node.sm.revision
    changes_before = [kv for kv in raw_items(node.sm) if kv[0][:1] == keys.CHANGE]
    assert changes_before  # the put of "w" is there
    g = node.one(grant(5_000, idempotency_key="g1"), t=1_000)
    assert g["revision"] == rev and node.sm.revision == rev
    assert node.one(grant(5_000, idempotency_key="g1"), t=1_500) == {**g, "replayed": True}
    for t in range(2_000, 12_000, 1_000):
        r = node.one(keepalive(g["lease"]), t=t)
        assert r["revision"] == rev and r["leases"][0]["expires_ms"] == t + 5_000
    assert node.sm.revision == rev
    assert [kv for kv in raw_items(node.sm) if kv[0][:1] == keys.CHANGE] == changes_before
    assert info(node, g["lease"])["expires_ms"] == 16_000
    # Keys still take revisions as before, lease or not, and expiry deletes at one.
    node.put("a", b"1", lease=g["lease"])
    assert node.sm.revision == rev + 1
    r = node.one(expire(g["lease"]), t=16_000)
    assert r == {"revision": rev + 2, "expired": [g["lease"]], "deleted": 1, "deleted_streams": 0}
