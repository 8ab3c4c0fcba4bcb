"""node/store as a whole: ops, MVCC reads, cas and txn, what apply guarantees, the op registry."""

import threading

import msgpack
import pytest

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops import core as node_ops
from statekeeper.node.store import StateMachine
from statekeeper.node.store import apply as store_apply
from statekeeper.node.store import reads as store_reads
from tests.unit.store.util import Node, entry, put, raw_items

# -- basic ops ----------------------------------------------------------------


def test_put_get_delete_and_versions(node):
    assert node.sm.revision == 0 and node.sm.applied_index == 0
    assert node.put("a", b"1") == {"revision": 1}
    assert node.put("a", b"2", prev_kv=True) == {
        "revision": 2,
        "prev_kv": {
            "key": "a",
            "value": b"1",
            "version": 1,
            "create_revision": 1,
            "mod_revision": 1,
        },
    }
    assert node.sm.get("default", "a") == {
        "revision": 2,
        "kv": {"key": "a", "value": b"2", "version": 2, "create_revision": 1, "mod_revision": 2},
    }
    assert node.delete("a", prev_kv=True)["prev_kvs"][0]["value"] == b"2"
    assert node.sm.get("default", "a") == {"revision": 3, "kv": None}
    # Deleting a missing key does not take a revision.
    assert node.delete("a") == {"revision": 3, "deleted": 0}
    # Re-creating resets version and create_revision.
    node.put("a", b"3")
    kv = node.sm.get("default", "a")["kv"]
    assert (kv["version"], kv["create_revision"], kv["mod_revision"]) == (1, 4, 4)
    assert node.sm.revision == 4 and node.sm.applied_index == 5


def test_namespaces_are_isolated(node):
    node.one(put("k", b"default"))
    node.one(put("k", b"a", ns="a"))
    node.one(put("k", b"ab", ns="ab"))
    assert node.value("k") == b"default"
    assert node.value("k", ns="a") == b"a"
    assert [kv["value"] for kv in node.sm.range("a")["kvs"]] == [b"a"]
    node.one({"op": "delete", "ns": "a", "key": "k", "prefix": True})
    assert node.value("k", ns="ab") == b"ab" and node.value("k", ns="a") is None


def test_empty_value_and_unicode_keys(node):
    node.put("ключ/é", b"")
    assert node.sm.get("default", "ключ/é")["kv"]["value"] == b""
    assert node.sm.range("default", prefix="ключ")["kvs"][0]["key"] == "ключ/é"


def test_range_order_bounds_limit_and_continuation(node):
    keys = ["a", "a/1", "a/2", "a/10", "ab", "b", "b/x", "c"]
    node.one({"op": "txn", "success": [put(k, k.encode()) for k in keys]})  # all at revision 1
    rng = node.sm.range
    assert [kv["key"] for kv in rng("default")["kvs"]] == sorted(keys)
    assert [kv["key"] for kv in rng("default", prefix="a/")["kvs"]] == ["a/1", "a/10", "a/2"]
    assert [kv["key"] for kv in rng("default", start="a/2", end="b/x")["kvs"]] == ["a/2", "ab", "b"]
    assert [kv["key"] for kv in rng("default", start="b")["kvs"]] == ["b", "b/x", "c"]
    keys_only = rng("default", prefix="b", keys_only=True)["kvs"]
    assert keys_only[0] == {"key": "b", "version": 1, "create_revision": 1, "mod_revision": 1}

    pages, cont = [], None
    while True:
        page = rng("default", limit=3, continuation=cont)
        pages.append([kv["key"] for kv in page["kvs"]])
        assert page["revision"] == 1
        if not page["more"]:
            assert "continuation" not in page
            break
        cont = page["continuation"]
    assert pages == [["a", "a/1", "a/10"], ["a/2", "ab", "b"], ["b/x", "c"]]

    # Pages after the first stay at the first page's revision.
    first = rng("default", prefix="a", limit=2)
    node.one({"op": "delete", "key": "a", "prefix": True})
    node.put("a/3", b"new")
    second = rng("default", prefix="a", limit=2, continuation=first["continuation"])
    assert second["revision"] == 1
    assert [kv["key"] for kv in second["kvs"]] == ["a/10", "a/2"]
    assert rng("default", prefix="a")["kvs"][0]["value"] == b"new"
    with pytest.raises(OpError) as ei:
        rng("default", continuation=first["continuation"], revision=2)
    assert ei.value.code == "invalid_argument"


def test_prefix_delete(node):
    node.one({"op": "txn", "success": [put(k, b"x") for k in ["p", "p/1", "p/2", "pq", "q"]]})
    res = node.one({"op": "delete", "key": "p/", "prefix": True, "prev_kv": True})
    assert res["deleted"] == 2 and res["revision"] == 2
    assert [kv["key"] for kv in res["prev_kvs"]] == ["p/1", "p/2"]
    assert [kv["key"] for kv in node.sm.range("default")["kvs"]] == ["p", "pq", "q"]
    # Prefix delete sees writes of earlier ops in the same entry.
    res = node.apply(put("r/1", b""), {"op": "delete", "key": "r", "prefix": True})
    assert res[1] == {"revision": 4, "deleted": 1}


def test_reads_at_past_revisions(node):
    node.put("a", b"1")  # rev 1
    node.put("b", b"1")  # rev 2
    node.put("a", b"2")  # rev 3
    node.delete("b")  # rev 4
    node.put("c", b"1")  # rev 5
    assert node.value("a", revision=1) == b"1"
    assert node.value("a", revision=2) == b"1"
    assert node.value("a", revision=3) == b"2"
    assert node.value("b", revision=3) == b"1"
    assert node.value("b", revision=4) is None
    assert node.value("c", revision=0) is None

    def keys_at(r):
        return {kv["key"]: kv["value"] for kv in node.sm.range("default", revision=r)["kvs"]}

    assert keys_at(0) == {}
    assert keys_at(2) == {"a": b"1", "b": b"1"}
    assert keys_at(4) == {"a": b"2"}
    assert keys_at(5) == {"a": b"2", "c": b"1"}
    page = node.sm.range("default", revision=2, limit=1)
    assert page["more"] and page["revision"] == 2
    nxt = node.sm.range("default", continuation=page["continuation"], limit=1)
    assert [kv["key"] for kv in nxt["kvs"]] == ["b"] and not nxt["more"]
    assert node.sm.get("default", "a", revision=2)["revision"] == 2
    with pytest.raises(OpError) as ei:
        node.sm.get("default", "a", revision=6)
    assert ei.value.code == "future_revision"


def test_reads_inside_entries(node):
    node.put("a", b"1")
    res = node.apply(
        put("a", b"2"),
        {"op": "get", "key": "a"},
        {"op": "get", "key": "a", "revision": 1},
        {"op": "range", "prefix": "a", "revision": 1},
        {"op": "get", "key": "a", "revision": 2},  # written by this very entry
    )
    assert res[1]["kv"]["value"] == b"2" and res[1]["revision"] == 2
    assert res[2]["kv"]["value"] == b"1"
    assert res[3]["kvs"][0]["value"] == b"1"
    assert res[4] == {"revision": 2, "kv": res[1]["kv"]}


# -- cas, txn --------------------------------------------------------------------


def test_cas(node):
    cas = {"op": "cas", "key": "k", "value": b"1", "expect": {"exists": False}}
    res = node.one(cas)
    assert res["succeeded"] and res["revision"] == 1 and res["kv"]["version"] == 1
    fail = node.one(cas)
    assert fail == {"revision": 1, "succeeded": False, "kv": res["kv"]}
    assert node.one({**cas, "value": b"2", "expect": {"version": 2}})["succeeded"] is False
    assert node.one({**cas, "value": b"2", "expect": {"version": 1}})["succeeded"] is True
    assert node.one({**cas, "value": b"3", "expect": {"mod_revision": 1}})["succeeded"] is False
    assert node.one({**cas, "value": b"3", "expect": {"mod_revision": 2}})["revision"] == 3
    assert node.value("k") == b"3"
    missing = {"op": "cas", "key": "nope", "value": b"", "expect": {"version": 1}}
    assert node.one(missing) == {"revision": 3, "succeeded": False, "kv": None}
    assert node.one({**missing, "expect": {"version": 0}})["succeeded"] is True


def test_txn_branches_and_shared_revision(node):
    node.put("a", b"1")
    txn = {
        "op": "txn",
        "compare": [
            {"key": "a", "target": "value", "op": "==", "value": b"1"},
            {"key": "a", "target": "version", "op": ">", "value": 0},
            {"key": "zz", "target": "exists", "op": "==", "value": False},
        ],
        "success": [
            put("b", b"2"),
            put("c", b"3", ns="other"),
            {"op": "get", "key": "b"},
            {"op": "get", "key": "c", "ns": "other"},
            {"op": "delete", "key": "a"},
        ],
        "failure": [put("failed", b"1")],
    }
    res = node.one(txn)
    assert res["succeeded"] and res["revision"] == 2
    assert [r["revision"] for r in res["results"]] == [2] * 5
    assert res["results"][2]["kv"]["value"] == b"2"  # reads see the txn's own writes
    assert res["results"][3]["kv"]["ns"] == "other"
    for k in ("b", "a"):
        assert node.sm.get("default", k)["kv"] is None or k == "b"
    assert node.value("c", ns="other") == b"3"
    assert node.sm.get("default", "b")["kv"]["mod_revision"] == 2

    res = node.one(txn)  # "a" is gone now -> failure branch
    assert not res["succeeded"] and res["revision"] == 3
    assert node.value("failed") == b"1"
    # A txn whose chosen branch only reads takes no revision.
    ro = {"op": "txn", "compare": [], "success": [{"op": "range", "prefix": "f"}]}
    res = node.one(ro)
    assert res["revision"] == 3 and res["results"][0]["kvs"][0]["key"] == "failed"


def test_txn_compare_missing_key_value(node):
    def cmp_ok(op, value):
        c = {"key": "m", "target": "value", "op": op, "value": value}
        return node.one({"op": "txn", "compare": [c]})["succeeded"]

    assert cmp_ok("!=", b"") and not cmp_ok("==", b"") and not cmp_ok("<", b"z")
    node.put("m", b"b")
    assert cmp_ok("<", b"c") and cmp_ok(">", b"a") and not cmp_ok("!=", b"b")


def test_failing_op_leaves_no_trace(node, monkeypatch):
    node.put("x", b"0")
    bad_txn = {"op": "txn", "success": [put("y", b"1"), put("y", b"2")]}
    res = node.apply(put("a", b"1"), bad_txn, put("b", b"1"))
    assert res[0]["revision"] == 2 and res[2]["revision"] == 3
    assert res[1]["error"]["code"] == "invalid_argument"
    assert node.value("y") is None

    # An op that blows up after staging writes: nothing of it is kept.
    def boom(tx, op):
        raise RuntimeError("boom")

    monkeypatch.setitem(store_apply.HANDLERS, "range", boom)
    before = raw_items(node.sm)
    txn = {"op": "txn", "success": [put("y", b"1"), {"op": "range"}], "idempotency_key": "i1"}
    res = node.apply(txn, put("z", b"1"))
    assert res[0]["error"]["code"] == "internal"
    assert res[1] == {"revision": 4}
    assert node.value("y") is None and node.value("z") == b"1"
    assert node.sm.revision == 4
    after = dict(raw_items(node.sm))
    changed = {k for k, v in after.items() if dict(before).get(k) != v}
    assert all(k == b"m" or b"z" in k for k in changed)  # only meta and z's records
    assert not any(k.startswith(b"i") for k in after)  # failed ops store no idempotency record


# -- apply robustness -----------------------------------------------------------


@pytest.mark.parametrize(
    "raw, n_results",
    [
        (b"", 1),
        (b"\xc1", 1),
        (b"\x93\x01\x02", 1),  # trailing garbage / not a map
        (msgpack.packb([1, 2]), 1),
        (msgpack.packb({"t": "now", "ops": [{}, {}]}), 2),
        (msgpack.packb({"t": 1, "ops": "x"}), 1),
        (msgpack.packb({"ops": []}), 0),
        (msgpack.packb({"ops": [1, 2, 3]}), 3),
        (msgpack.packb({1: 2}), 1),
        (b"\x91" * 100_000, 1),  # deeply nested
        (msgpack.packb({"t": 1, "ops": [{"op": "put", "key": "k", "value": b"v"}]})[:-2], 1),
    ],
)
def test_garbage_entries_fail_every_op_and_advance(node, raw, n_results):
    res = node.sm.apply(1, raw)
    assert len(res) == n_results
    assert all(r["error"]["code"] == "invalid_request" for r in res)
    assert node.sm.applied_index == 1 and node.sm.revision == 0


def test_bad_ops_in_a_good_entry(node):
    res = node.apply(
        "string", 7, {"op": "nope"}, {"op": "put", "key": 1}, put("ok", b"1"), {"op": "get"}
    )
    codes = [r.get("error", {}).get("code") for r in res]
    assert codes == [
        "invalid_argument",
        "invalid_argument",
        "unknown_op",
        "invalid_argument",
        None,
        "invalid_argument",
    ]
    assert node.value("ok") == b"1"
    big = {"op": "put", "key": "k" * 5000, "value": b""}
    assert node.one(big)["error"]["code"] == "key_too_large"


def test_barrier_entry(node):
    assert node.apply() == []
    assert node.sm.applied_index == 1 and node.sm.revision == 0


def test_already_applied_entries_are_skipped(node):
    entries = [
        entry(put("a", b"1"), put("b", b"2"), t=1),
        entry({"op": "delete", "key": "a"}, put("c", b"3", idempotency_key="x"), t=2),
        entry({"op": "compact", "revision": 2}, t=3),
    ]
    for i, e in enumerate(entries, 1):
        assert node.sm.apply(i, e) is not None
    dump = raw_items(node.sm)
    for i, e in enumerate(entries, 1):
        assert node.sm.apply(i, e) is None
    assert node.sm.apply(2, entry(put("zzz", b"new"))) is None
    assert raw_items(node.sm) == dump
    assert node.sm.applied_index == 3


def test_state_survives_reopen(tmp_path):
    n = Node(tmp_path / "db", sync_writes=True)
    n.apply(put("a", b"1"), put("a", b"2"))
    n.one({"op": "compact", "revision": 1})
    dump = raw_items(n.sm)
    n.sm.close()
    sm = StateMachine(tmp_path / "db")
    assert (sm.applied_index, sm.revision, sm.compact_revision) == (2, 2, 1)
    assert raw_items(sm) == dump
    assert sm.apply(2, entry(put("x", b""))) is None
    sm.close()


def test_read_dispatch(node):
    node.put("a", b"1")
    assert node.sm.read({"op": "get", "ns": "default", "key": "a"})["kv"]["value"] == b"1"
    r = node.sm.read({"op": "range", "ns": "default", "prefix": "a", "limit": 10})
    assert r["kvs"][0]["key"] == "a"
    with pytest.raises(OpError):
        node.sm.read({"op": "put"})


def test_limits_are_enforced_in_apply(tmp_path):
    n = Node(tmp_path / "db", limits=Limits(max_value_bytes=4))
    assert n.put("k", b"12345")["error"]["code"] == "value_too_large"
    assert n.sm.revision == 0
    n.sm.close()


def test_concurrent_reads_see_whole_entries(node):
    """Each read is one consistent view: the revision it reports matches its data."""
    errors, done = [], threading.Event()

    def reader():
        while not done.is_set():
            r = node.sm.range("default")
            values = {kv["value"] for kv in r["kvs"]}
            if r["kvs"] and values != {b"%d" % r["revision"]}:
                errors.append(r)
            g = node.sm.get("default", "b")
            if g["kv"] and g["kv"]["mod_revision"] != g["revision"]:
                errors.append(g)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for rev in range(1, 300):
        node.one({"op": "txn", "success": [put("a", b"%d" % rev), put("b", b"%d" % rev)]})
    done.set()
    for t in threads:
        t.join()
    assert not errors


def test_reads_after_close_are_unavailable(tmp_path):
    sm = StateMachine(tmp_path / "db")
    sm.close()
    with pytest.raises(OpError) as ei:
        sm.get("default", "a")
    assert ei.value.code == "unavailable"
    sm.close()  # idempotent


# -- the op registry ---------------------------------------------------------------


def test_every_op_validation_accepts_has_one_handler():
    # validate_op(internal=True), which apply uses, also knows the node-internal ops.
    assert set(store_apply.HANDLERS) == node_ops.ALL_OPS | set(node_ops.INTERNAL_OPS)
    assert set(store_reads.READERS) == node_ops.READ_OPS  # what StateMachine.read serves
    with pytest.raises(ValueError):
        store_reads.serves("get")(lambda src, limits, op: {})
    with pytest.raises(ValueError):
        store_apply.handles("put")(lambda tx, op: {})


def test_a_new_op_family_registers_its_handler(node, monkeypatch):
    """What an op family in its own module does: register a handler (and maybe an
    after-entry hook); it runs atomically with idempotency like the built-in ops
    (validation is node/ops/core.py's, faked here)."""

    def touch(tx, op):  # writes through the same staging the kv ops use
        tx.stage(b"x-touched", b"")
        tx.wrote = True
        return {"revision": tx.revision + 1}

    entries_seen = []
    monkeypatch.setitem(store_apply.HANDLERS, "touch", touch)
    monkeypatch.setattr(store_apply, "AFTER_ENTRY", [*store_apply.AFTER_ENTRY, entries_seen.append])
    monkeypatch.setattr(store_apply, "validate_op", lambda raw, limits, **kw: raw)
    op = {"op": "touch", "ns": "default", "idempotency_key": "t1"}
    assert node.one(op) == {"revision": 1}
    assert node.one(op) == {"revision": 1, "replayed": True}
    assert b"x-touched" in dict(raw_items(node.sm))
    assert len(entries_seen) == 2  # the family's after-entry hook ran once per entry
