import os
import tempfile
import threading

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import node.state_machine as sm_mod
from node.config import Limits, Retention
from node.errors import OpError
from node.state_machine import StateMachine


def entry(*ops, t=1_000):
    return msgpack.packb({"t": t, "ops": list(ops)}, use_bin_type=True)


class Node:
    """A state machine plus the next raft index, for terse tests."""

    def __init__(self, path, **kw):
        self.sm = StateMachine(path, **kw)
        self.index = 0

    def apply(self, *ops, t=1_000):
        self.index += 1
        return self.sm.apply(self.index, entry(*ops, t=t))

    def one(self, op, t=1_000):
        (result,) = self.apply(op, t=t)
        return result

    def put(self, key, value, **kw):
        return self.one({"op": "put", "key": key, "value": value, **kw})

    def delete(self, key, **kw):
        return self.one({"op": "delete", "key": key, **kw})

    def value(self, key, ns="default", revision=None):
        kv = self.sm.get(ns, key, revision)["kv"]
        return None if kv is None else kv["value"]


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "db")
    yield n
    n.sm.close()


def put(key, value, **kw):
    return {"op": "put", "key": key, "value": value, **kw}


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


# -- compaction ---------------------------------------------------------------


def history_records(sm):
    return [k for k, _ in sm.raw_items() if k.startswith(b"h")]


def test_explicit_compaction(node):
    for i in range(5):
        node.put("a", b"%d" % i)  # revs 1..5
    node.put("b", b"x")  # 6
    node.delete("b")  # 7
    node.put("c", b"x")  # 8
    snapshot = {r: node.sm.range("default", revision=r)["kvs"] for r in range(0, 9)}
    assert node.one({"op": "compact", "revision": 7}) == {"revision": 8, "compact_revision": 7}
    node.apply()  # physical pruning of what the entry above compacted
    assert node.sm.compact_revision == 7
    for r in range(7, 9):
        assert node.sm.range("default", revision=r)["kvs"] == snapshot[r]
    for r in range(0, 7):
        with pytest.raises(OpError) as ei:
            node.sm.get("default", "a", revision=r)
        assert ei.value.code == "compacted"
        with pytest.raises(OpError):
            node.sm.range("default", revision=r)
    # Only the newest record <= 7 of "a" and the live "c" remain; "b" is gone.
    assert len(history_records(node.sm)) == 2
    # Compacting backwards is a no-op; compacting the future is an error.
    assert node.one({"op": "compact", "revision": 3})["compact_revision"] == 7
    assert node.one({"op": "compact", "revision": 99})["error"]["code"] == "future_revision"


def test_continuation_of_compacted_revision(node):
    node.apply(put("a", b""), put("b", b""))
    page = node.sm.range("default", limit=1)
    node.put("c", b"")
    node.one({"op": "compact", "revision": 3})
    with pytest.raises(OpError) as ei:
        node.sm.range("default", continuation=page["continuation"])
    assert ei.value.code == "compacted"


def test_automatic_compaction_keeps_reads_exact(tmp_path):
    n = Node(tmp_path / "db", retention=Retention(history_revisions=16))
    seen = {}
    for i in range(100):
        n.put(f"k{i % 7}", b"%d" % i)
        if i % 5 == 0:
            n.delete(f"k{(i + 3) % 7}")
        seen[n.sm.revision] = n.sm.range("default")["kvs"]
    c = n.sm.compact_revision
    assert n.sm.revision - 18 <= c <= n.sm.revision - 16
    for r, kvs in seen.items():
        if r >= c:
            assert n.sm.range("default", revision=r)["kvs"] == kvs
        else:
            with pytest.raises(OpError):
                n.sm.range("default", revision=r)
    # History stays bounded: ~1 record per revision kept plus the live keys.
    assert len(history_records(n.sm)) <= (n.sm.revision - c) + 7
    n.sm.close()


def test_pruning_runs_in_bounded_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(sm_mod, "HIST_PRUNE_MIN", 1)
    n = Node(tmp_path / "db")
    for i in range(30):
        n.put("k", b"%d" % i)
    n.one({"op": "compact", "revision": 30})
    before = len(history_records(n.sm))
    n.apply()  # one empty entry prunes one record
    assert len(history_records(n.sm)) == before - 1
    for _ in range(40):
        n.apply()
        assert n.value("k", revision=30) == b"29"
    assert len(history_records(n.sm)) == 1
    n.sm.close()


# -- idempotency, cas, txn ------------------------------------------------------


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
    def boom(self, op):
        raise RuntimeError("boom")

    monkeypatch.setattr(sm_mod._Apply, "_op_range", boom)
    monkeypatch.setitem(sm_mod._HANDLERS, "range", boom)
    before = node.sm.raw_items()
    txn = {"op": "txn", "success": [put("y", b"1"), {"op": "range"}], "idempotency_key": "i1"}
    res = node.apply(txn, put("z", b"1"))
    assert res[0]["error"]["code"] == "internal"
    assert res[1] == {"revision": 4}
    assert node.value("y") is None and node.value("z") == b"1"
    assert node.sm.revision == 4
    after = dict(node.sm.raw_items())
    changed = {k for k, v in after.items() if dict(before).get(k) != v}
    assert all(k == b"m" or b"z" in k for k in changed)  # only meta and z's records
    assert not any(k.startswith(b"i") for k in after)  # failed ops store no idempotency record


def test_idempotency_replay_and_expiry(tmp_path):
    n = Node(tmp_path / "db", retention=Retention(idempotency_seconds=10))
    op = put("k", b"v", idempotency_key="req-1")
    first = n.one(op, t=1_000)
    again = n.one(op, t=5_000)
    assert again == {**first, "replayed": True}
    assert n.sm.revision == 1
    same_entry = n.apply(op, put("k", b"other", idempotency_key="req-2"), op, t=6_000)
    assert same_entry[0]["replayed"] and same_entry[2]["replayed"]
    assert same_entry[1] == {"revision": 2}
    # Identical bytes for the replayed result, including nested kvs.
    cas = {
        "op": "cas",
        "key": "k",
        "value": b"z",
        "expect": {"version": 99},
        "idempotency_key": "c",
    }
    r1 = n.one(cas, t=6_000)
    assert n.one(cas, t=6_001) == {**r1, "replayed": True}

    # Entry time (not wall clock) expires the keys; pruning removes the records.
    assert n.one(op, t=11_001) == {"revision": 3}
    n.apply(t=20_000)
    idem = [k for k, _ in n.sm.raw_items() if k[:1] in (b"i", b"e")]
    assert sorted(idem)[-1] == b"idefault\x00req-1"  # only the re-stored req-1 (its "i" + "e") remains
    assert len(idem) == 2
    n.apply(t=30_000)
    assert not [k for k, _ in n.sm.raw_items() if k[:1] in (b"i", b"e")]
    # Time going backwards (new leader with a slow clock) does not resurrect anything.
    assert n.one(op, t=1_500) == {"revision": 4}
    n.sm.close()


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
    dump = node.sm.raw_items()
    for i, e in enumerate(entries, 1):
        assert node.sm.apply(i, e) is None
    assert node.sm.apply(2, entry(put("zzz", b"new"))) is None
    assert node.sm.raw_items() == dump
    assert node.sm.applied_index == 3


def test_state_survives_reopen(tmp_path):
    n = Node(tmp_path / "db", sync_writes=True)
    n.apply(put("a", b"1"), put("a", b"2"))
    n.one({"op": "compact", "revision": 1})
    dump = n.sm.raw_items()
    n.sm.close()
    sm = StateMachine(tmp_path / "db")
    assert (sm.applied_index, sm.revision, sm.compact_revision) == (2, 2, 1)
    assert sm.raw_items() == dump
    assert sm.apply(2, entry(put("x", b""))) is None
    sm.close()


def test_read_dispatch(node):
    node.put("a", b"1")
    assert node.sm.read({"op": "get", "ns": "default", "key": "a"})["kv"]["value"] == b"1"
    r = node.sm.read({"op": "range", "ns": "default", "prefix": "a", "limit": 10})
    assert r["kvs"][0]["key"] == "a"
    with pytest.raises(OpError):
        node.sm.read({"op": "put"})


# -- determinism (property based) ---------------------------------------------------

KEYS = ["a", "a/1", "a/2", "ab", "b"]

op_strategy = st.one_of(
    st.builds(
        lambda k, v, ik: put(k, v, **({"idempotency_key": ik} if ik else {})),
        st.sampled_from(KEYS),
        st.binary(max_size=3),
        st.sampled_from([None, None, "i1", "i2"]),
    ),
    st.builds(
        lambda k, p: {"op": "delete", "key": k, "prefix": p}, st.sampled_from(KEYS), st.booleans()
    ),
    st.builds(
        lambda k, v, ver: {"op": "cas", "key": k, "value": v, "expect": {"version": ver}},
        st.sampled_from(KEYS),
        st.binary(max_size=2),
        st.integers(0, 3),
    ),
    st.builds(
        lambda k, ver, a, b: {
            "op": "txn",
            "compare": [{"key": k, "target": "version", "op": ">", "value": ver}],
            "success": [put(a, b"s")],
            "failure": [{"op": "delete", "key": b}],
        },
        st.sampled_from(KEYS),
        st.integers(0, 2),
        st.sampled_from(KEYS),
        st.sampled_from(KEYS),
    ),
    st.builds(lambda r: {"op": "compact", "revision": r}, st.integers(0, 12)),
    st.just({"op": "put", "key": ""}),  # invalid
)
entries_strategy = st.lists(
    st.tuples(st.integers(0, 20_000), st.lists(op_strategy, max_size=4)), min_size=1, max_size=12
)


class Model:
    """Latest value per key at every revision (what reads must return)."""

    def __init__(self):
        self.cur: dict[str, bytes] = {}
        self.at = {0: {}}

    def commit(self, revision):
        self.at[revision] = dict(self.cur)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries_strategy, st.integers(0, 12))
def test_random_entries_are_deterministic_and_match_a_model(entries, restart_at):
    retention = Retention(history_revisions=3, idempotency_seconds=5)
    with tempfile.TemporaryDirectory() as d:
        a = StateMachine(os.path.join(d, "a"), retention=retention)
        b = StateMachine(os.path.join(d, "b"), retention=retention)
        model = Model()
        for index, (t, ops) in enumerate(entries, 1):
            if index == restart_at:  # in-memory state must not influence what apply writes
                b.close()
                b = StateMachine(os.path.join(d, "b"), retention=retention)
            raw = entry(*ops, t=t)
            ra = a.apply(index, raw)
            assert b.apply(index, raw) == ra
            # Replay the model from the results: every successful write reports its revision.
            for op, res in zip(ops, ra, strict=True):
                _update_model(model, a, op, res)
            assert a.raw_items() == b.raw_items()
            latest = {kv["key"]: kv["value"] for kv in a.range("default")["kvs"]}
            assert latest == model.cur
            for r in range(a.compact_revision, a.revision + 1):
                if r in model.at:
                    got = {kv["key"]: kv["value"] for kv in a.range("default", revision=r)["kvs"]}
                    assert got == model.at[r], r
                    for k in KEYS:
                        kv = a.get("default", k, revision=r)["kv"]
                        assert (kv and kv["value"]) == model.at[r].get(k)
        a.close()
        b.close()


def _update_model(model, sm, op, res):
    if "error" in res or res.get("replayed"):
        return
    kind = op["op"]
    before = model.cur.copy()
    if kind in ("put", "cas") and res.get("succeeded", True):
        model.cur[op["key"]] = op["value"]
    elif kind == "delete":
        for k in list(model.cur):
            if k == op["key"] or (op["prefix"] and k.startswith(op["key"])):
                del model.cur[k]
    elif kind == "txn":
        inner = op["success"][0] if res["succeeded"] else op["failure"][0]
        if inner["op"] == "put":
            model.cur[inner["key"]] = inner["value"]
        else:
            model.cur.pop(inner["key"], None)
    if model.cur != before or res.get("revision") not in model.at:
        model.commit(res["revision"])


# -- snapshots -------------------------------------------------------------------


def populated(path, n=50):
    node = Node(path, retention=Retention(history_revisions=20))
    for i in range(n):
        node.apply(put(f"k{i % 10}", b"v%d" % i, idempotency_key=f"id{i}"), t=1000 + i)
    node.delete("k3")
    return node


def test_snapshot_restore_round_trip(tmp_path):
    src = populated(tmp_path / "src")
    snap = tmp_path / "snap.bin"
    src.sm.snapshot(snap)
    assert snap.exists() and not (tmp_path / "snap.bin.tmp").exists()
    assert StateMachine.snapshot_info(snap) == src.sm.applied_index == 51

    dst = StateMachine(tmp_path / "dst", retention=Retention(history_revisions=20))
    dst.restore(snap)
    assert dst.raw_items() == src.sm.raw_items()
    assert (dst.applied_index, dst.revision, dst.compact_revision) == (
        src.sm.applied_index,
        src.sm.revision,
        src.sm.compact_revision,
    )
    # Both continue identically.
    e = entry(put("k1", b"after", idempotency_key="id7"), put("new", b"1"), t=5000)
    assert dst.apply(52, e) == src.sm.apply(52, e)
    assert dst.raw_items() == src.sm.raw_items()
    assert sorted(os.listdir(tmp_path)) == ["dst", "snap.bin", "src"]
    dst.close()
    src.sm.close()


def test_restore_over_existing_data(tmp_path):
    src = populated(tmp_path / "src", n=5)
    snap = tmp_path / "snap"
    src.sm.snapshot(snap)
    other = populated(tmp_path / "other", n=80)
    other.put("only-here", b"x")
    other.sm.restore(snap)
    assert other.sm.raw_items() == src.sm.raw_items()
    assert other.sm.applied_index == src.sm.applied_index
    assert other.value("only-here") is None
    # Entries from the snapshot's index onwards apply; older ones are skipped.
    assert other.sm.apply(3, entry(put("x", b""))) is None
    assert other.sm.apply(7, entry(put("x", b""))) == [{"revision": src.sm.revision + 1}]
    other.sm.close()
    src.sm.close()


def test_restore_rejects_garbage_and_keeps_data(tmp_path, node):
    node.put("a", b"1")
    bad = tmp_path / "bad"
    bad.write_bytes(b"not a tar")
    with pytest.raises(ValueError):
        StateMachine.snapshot_info(bad)
    with pytest.raises(ValueError):
        node.sm.restore(bad)
    assert node.value("a") == b"1"


def test_interrupted_restore_rolls_back_or_forward(tmp_path):
    n = Node(tmp_path / "db")
    n.put("a", b"old")
    n.sm.close()
    # Crash after "db" -> "db.old" but before the new DB was moved in: keep the old one.
    os.replace(tmp_path / "db", tmp_path / "db.old")
    (tmp_path / "db.restore").mkdir()
    sm = StateMachine(tmp_path / "db")
    assert sm.get("default", "a")["kv"]["value"] == b"old"
    assert sorted(os.listdir(tmp_path)) == ["db"]
    sm.close()
    # Crash after the new DB is in place but before "db.old" was removed: finish.
    (tmp_path / "db.old").mkdir()
    sm = StateMachine(tmp_path / "db")
    assert sorted(os.listdir(tmp_path)) == ["db"]
    sm.close()


def test_reads_racing_restore_do_not_crash(tmp_path):
    src = populated(tmp_path / "src", n=20)
    snap = tmp_path / "snap"
    src.sm.snapshot(snap)
    target = populated(tmp_path / "t", n=30)
    errors, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            try:
                target.sm.get("default", "k1")
                target.sm.range("default", limit=5)
            except Exception as e:  # pragma: no cover - the failure we test for
                errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for _ in range(3):
        target.sm.restore(snap)
        target.sm.snapshot(tmp_path / "snap2")
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert target.sm.raw_items() == src.sm.raw_items()
    target.sm.close()
    src.sm.close()


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


junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.binary(max_size=8)
    | st.text(max_size=8)
    | st.sampled_from(["put", "delete", "txn", "cas", "range", "key"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "op",
                    "key",
                    "value",
                    "ns",
                    "prefix",
                    "expect",
                    "success",
                    "compare",
                    "limit",
                    "revision",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=12,
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(junk, max_size=5), t=st.integers(0, 2**63 - 1))
def test_apply_never_raises_on_junk_ops(node, ops, t):
    # One DB for all examples (they only append entries): opening RocksDB is the slow part.
    node.put("key", b"v")
    results = node.sm.apply(node.index + 1, msgpack.packb({"t": t, "ops": ops}, use_bin_type=True))
    node.index += 1
    assert len(results) == len(ops) and node.sm.applied_index == node.index
    assert all("error" not in r or r["error"]["code"] != "internal" for r in results)


def test_idempotency_keys_are_scoped_to_their_namespace(tmp_path):
    """Defect 3: records were stored under the bare key, so agent-2's put in another
    namespace with agent-1's key got agent-1's result (and prev_kv) and wrote nothing."""
    n = Node(tmp_path / "db")
    a = n.one({**put("result", b"A", idempotency_key="run-17/step-3"), "ns": "agent-1"})
    b = n.one({**put("result", b"B", idempotency_key="run-17/step-3"), "ns": "agent-2"})
    assert "replayed" not in b and b["revision"] == a["revision"] + 1
    assert n.sm.get("agent-2", "result")["kv"]["value"] == b"B"
    assert n.sm.get("agent-1", "result")["kv"]["value"] == b"A"
    n.sm.close()


def test_idempotency_key_reused_for_another_op_is_refused(tmp_path):
    """Defect 3: a put of a different key with a used idempotency key was "replayed"
    (a fake success, nothing written); now it fails with a code and writes nothing."""
    n = Node(tmp_path / "db")
    n.one(put("result", b"A", idempotency_key="k1"))
    before = n.sm.revision
    for other in (put("other", b"C", idempotency_key="k1"), put("result", b"changed", idempotency_key="k1"),
                  {"op": "delete", "key": "result", "idempotency_key": "k1"}):
        r = n.one(other)
        assert r["error"]["code"] == "idempotency_key_reused", r
    assert n.sm.revision == before
    assert n.sm.get("default", "other")["kv"] is None
    assert n.sm.get("default", "result")["kv"]["value"] == b"A"
    n.sm.close()


def test_an_idempotent_retry_replays_whatever_the_field_order(tmp_path):
    n = Node(tmp_path / "db")
    first = n.one({"op": "put", "key": "k", "value": b"v", "prev_kv": True, "idempotency_key": "x"})
    again = n.one({"idempotency_key": "x", "prev_kv": True, "value": b"v", "key": "k", "op": "put"})
    assert again == {**first, "replayed": True}
    n.sm.close()


def test_txn_idempotency_is_bound_to_the_txn(tmp_path):
    n = Node(tmp_path / "db")
    txn = {"op": "txn", "compare": [], "success": [put("a", b"1")], "failure": [], "idempotency_key": "t"}
    first = n.one(txn)
    assert n.one(txn) == {**first, "replayed": True}
    other = {**txn, "success": [put("b", b"1")]}
    assert n.one(other)["error"]["code"] == "idempotency_key_reused"
    n.sm.close()
