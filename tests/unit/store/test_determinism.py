"""Property-based: apply is deterministic, matches a model, and never raises on junk."""

import os
import tempfile

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper.node.config import Retention
from statekeeper.node.store import StateMachine
from tests.unit.store.util import entry, put, raw_items

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
            assert raw_items(a) == raw_items(b)
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


junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.binary(max_size=8)
    | st.text(max_size=8)
    | st.sampled_from(["put", "delete", "txn", "cas", "range", "key", "append", "read_stream"]),
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
                    "stream",
                    "events",
                    "data",
                    "id",
                    "meta",
                    "direction",
                    "wait_ms",
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
