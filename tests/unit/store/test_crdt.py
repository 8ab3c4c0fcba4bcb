"""node/store/crdt.py: merge in apply (each type, no revision when nothing changes, type
mismatch, bad state, limits, txns, leases, the change log) and crdt_get over the store,
with no network; and the wire pieces (validation, the JSON codec)."""

from __future__ import annotations

import base64
import json

import msgpack
import pytest

from statekeeper.client.crdt import model
from statekeeper.node.api import codec
from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import validate_op
from statekeeper.node.store import StateMachine, keys
from statekeeper.node.store.changes import read_changes, selection
from statekeeper.node.store.crdt import envelope, split_envelope
from tests.unit.store.util import Node, entry, put, raw_items, write_snapshot


def merge(key: str, t: str, state, **kw) -> dict:
    return {"op": "merge", "key": key, "type": t, "state": model.encode(t, state), **kw}


def get(node: Node, key: str, **kw) -> dict:
    return node.sm.read({"op": "crdt_get", "ns": "default", "key": key, **kw})


def txn(*ops, **kw) -> dict:
    return {"op": "txn", "success": list(ops), **kw}


def inc(rid: str, n: int = 1) -> dict:
    return model.gcounter_inc(model.empty("gcounter"), rid, n)


def data_items(sm: StateMachine) -> list[tuple[bytes, bytes]]:
    """Every record but the meta record (whose applied_index every entry moves)."""
    return [kv for kv in raw_items(sm) if kv[0] != keys.META]


def code_of(result: dict) -> str | None:
    return result.get("error", {}).get("code")


# -- merge, per type -------------------------------------------------------------------------


def test_gcounter_merges_replicas_and_takes_one_revision_per_change(node):
    r1 = node.one(merge("visits", "gcounter", inc("a", 2)))
    assert r1 == {"revision": 1, "changed": True, "value": 2}
    r2 = node.one(merge("visits", "gcounter", inc("b", 5)))
    assert r2 == {"revision": 2, "changed": True, "value": 7}
    # A replica's later total replaces its earlier one (max per replica), never adds to it.
    r3 = node.one(merge("visits", "gcounter", {"a": 3}))
    assert r3 == {"revision": 3, "changed": True, "value": 8}
    g = get(node, "visits", state=True)
    assert g == {
        "revision": 3,
        "type": "gcounter",
        "value": 8,
        "state": model.encode("gcounter", {"a": 3, "b": 5}),
        "mod_revision": 3,
        "version": 3,
    }


def test_pncounter_goes_both_ways(node):
    zero = model.empty("pncounter")
    node.one(merge("c", "pncounter", model.pncounter_add(zero, "a", 10)))
    r = node.one(merge("c", "pncounter", model.pncounter_add(zero, "b", -4)))
    assert (r["changed"], r["value"]) == (True, 6)
    assert get(node, "c")["value"] == 6


def test_orset_add_wins_over_a_concurrent_remove(node):
    a = model.orset_add(model.empty("orset"), "A", "x")
    node.one(merge("s", "orset", a))
    node.one(merge("s", "orset", model.orset_add(model.empty("orset"), "B", b"\xff")))
    seen_by_b = model.decode("orset", get(node, "s", state=True)["state"])
    remove = model.orset_remove(seen_by_b, "x")  # B removes the x it saw
    again = model.orset_add(a, "A", "x")  # concurrently A adds x again (a new dot)
    node.one(merge("s", "orset", again))
    r = node.one(merge("s", "orset", remove))
    # A's re-add already replaced the dot B saw, so the remove has nothing left to remove.
    assert r == {"revision": 3, "changed": False, "value": ["x", b"\xff"]}
    # A remove that has seen every dot removes the element.
    state = model.decode("orset", get(node, "s", state=True)["state"])
    r = node.one(merge("s", "orset", model.orset_remove(state, "x")))
    assert r["value"] == [b"\xff"]


def test_lww_register_keeps_the_latest_write(node):
    empty = model.empty("lwwreg")
    assert node.one(merge("r", "lwwreg", empty))["value"] is None
    node.one(merge("r", "lwwreg", model.lwwreg_set(empty, "a", {"v": 1}, 200)))
    r = node.one(merge("r", "lwwreg", model.lwwreg_set(empty, "b", "older", 100)))
    assert r == {"revision": 2, "changed": False, "value": {"v": 1}}
    r = node.one(merge("r", "lwwreg", model.lwwreg_set(empty, "b", "tie: b > a", 200)))
    assert r["value"] == "tie: b > a"


def test_mv_register_keeps_concurrent_values(node):
    empty = model.empty("mvreg")
    node.one(merge("m", "mvreg", model.mvreg_set(empty, "a", "from a")))
    r = node.one(merge("m", "mvreg", model.mvreg_set(empty, "b", "from b")))
    assert r["value"] == ["from a", "from b"]
    seen = model.decode("mvreg", get(node, "m", state=True)["state"])
    r = node.one(merge("m", "mvreg", model.mvreg_set(seen, "a", "resolved")))
    assert r["value"] == ["resolved"]


def test_ormap_of_counters_and_sets(node):
    empty = model.empty("ormap")
    hits = model.ormap_update(empty, "a", "hits", "gcounter", inc("a", 2))
    node.one(merge("doc", "ormap", hits))
    tags = model.ormap_update(
        empty, "b", "tags", "orset", model.orset_add(model.empty("orset"), "b", "red")
    )
    r = node.one(merge("doc", "ormap", tags))
    assert r["value"] == {"hits": 2, "tags": ["red"]}
    seen = model.decode("ormap", get(node, "doc", state=True)["state"])
    r = node.one(merge("doc", "ormap", model.ormap_remove(seen, "tags")))
    assert r["value"] == {"hits": 2}


# -- changed: false ----------------------------------------------------------------------------


def test_a_merge_that_changes_nothing_takes_no_revision_and_writes_nothing(node):
    delta = inc("a", 3)
    first = node.one(merge("k", "gcounter", delta))
    before = data_items(node.sm)
    for op in (
        merge("k", "gcounter", delta),  # the same delta again (a retry)
        merge("k", "gcounter", inc("a", 1)),  # an older total of the same replica
        merge("k", "gcounter", model.empty("gcounter")),
    ):
        again = node.one(op)
        assert again == {"revision": first["revision"], "changed": False, "value": 3}
    assert node.sm.revision == first["revision"]
    assert data_items(node.sm) == before


def test_merging_into_an_absent_key_creates_it_even_when_empty(node):
    r = node.one(merge("new", "orset", model.empty("orset")))
    assert r == {"revision": 1, "changed": True, "value": []}
    assert get(node, "new")["type"] == "orset"
    assert node.one(merge("new", "orset", model.empty("orset")))["changed"] is False


def test_idempotency_key_replays_the_first_result(node):
    op = merge("k", "gcounter", inc("a"), idempotency_key="i1")
    first = node.one(op)
    node.one(merge("k", "gcounter", inc("b")))
    assert node.one(op) == {**first, "replayed": True}
    other = node.one(merge("k", "gcounter", inc("c"), idempotency_key="i1"))
    assert code_of(other) == "idempotency_key_reused"


# -- errors: nothing applied -------------------------------------------------------------------


def test_type_mismatch_with_a_plain_value_and_another_type(node):
    node.put("plain", b"hello")
    node.one(merge("g", "gcounter", inc("a")))
    before = data_items(node.sm)
    r = node.one(merge("plain", "gcounter", inc("a")))
    assert r["error"]["code"] == "crdt_type_mismatch" and r["error"]["found"] is None
    assert "'plain'" in r["error"]["message"] and "plain value" in r["error"]["message"]
    r = node.one(merge("g", "pncounter", model.empty("pncounter")))
    assert r["error"]["code"] == "crdt_type_mismatch" and r["error"]["found"] == "gcounter"
    assert data_items(node.sm) == before and node.sm.revision == 2
    with pytest.raises(OpError) as ei:
        get(node, "plain")
    assert ei.value.code == "crdt_type_mismatch" and ei.value.status == 409
    # put over a CRDT simply replaces it; merging after that is a mismatch.
    node.put("g", b"now plain")
    assert code_of(node.one(merge("g", "gcounter", inc("a")))) == "crdt_type_mismatch"


def test_an_envelope_of_an_unknown_version_or_with_a_corrupt_state_is_a_mismatch(node):
    future = msgpack.packb([b"skcrdt", 2, "gcounter", {}], use_bin_type=True)
    corrupt = msgpack.packb([b"skcrdt", 1, "gcounter", {"a": -1}], use_bin_type=True)
    for value in (future, corrupt):
        node.put("k", value)
        assert code_of(node.one(merge("k", "gcounter", inc("a")))) == "crdt_type_mismatch"
        with pytest.raises(OpError) as ei:
            get(node, "k")
        assert ei.value.code == "crdt_type_mismatch"


@pytest.mark.parametrize(
    ("op", "code"),
    [
        # State bytes that are not a valid encoding: opaque to the OpenAPI document, so a
        # code of their own (invalid_crdt_state); a wrong shape is invalid_argument.
        ({"op": "merge", "key": "k", "type": "gcounter", "state": b"\xc1garbage"}, "invalid_crdt_state"),
        ({"op": "merge", "key": "k", "type": "gcounter", "state": msgpack.packb({"a": 0})}, "invalid_crdt_state"),
        ({"op": "merge", "key": "k", "type": "gcounter", "state": msgpack.packb([1, 2])}, "invalid_crdt_state"),
        ({"op": "merge", "key": "k", "type": "orset", "state": msgpack.packb({"e": {}})}, "invalid_crdt_state"),
        ({"op": "merge", "key": "k", "type": "counter", "state": msgpack.packb({})}, "invalid_argument"),
        ({"op": "merge", "key": "k", "type": "gcounter", "state": "text, not bytes"}, "invalid_argument"),
        ({"op": "merge", "key": "k", "type": "gcounter"}, "invalid_argument"),
        ({"op": "merge", "type": "gcounter", "state": msgpack.packb({})}, "invalid_argument"),
    ],
    ids=["junk", "zero-count", "list", "missing-fields", "type", "str", "no-state", "no-key"],
)  # fmt: skip
def test_bad_input_is_refused_in_validation_and_in_apply(node, op, code):
    with pytest.raises(OpError) as ei:
        validate_op(op, Limits())
    assert ei.value.code == code and ei.value.status == 400
    r = node.one(op)  # an entry carrying it anyway fails the op the same way
    assert code_of(r) == code
    assert node.sm.revision == 0 and get_missing(node, op.get("key", "k"))


def get_missing(node: Node, key: str) -> bool:
    with pytest.raises(OpError) as ei:
        get(node, key)
    assert ei.value.code == "not_found" and ei.value.status == 404
    assert ei.value.extra == {"revision": node.sm.revision}
    return True


def test_size_limits(tmp_path):
    small = Node(tmp_path / "db", limits=Limits(max_value_bytes=200))
    big = model.orset_add(model.empty("orset"), "a", "x" * 300)
    with pytest.raises(OpError) as ei:
        validate_op(merge("s", "orset", big), small.sm.limits)
    assert ei.value.code == "value_too_large" and ei.value.status == 413
    assert code_of(small.one(merge("s", "orset", big))) == "value_too_large"
    # Each delta fits, but the merged state outgrows max_value_bytes: refused, nothing stored.
    results = [
        small.one(merge("s", "orset", model.orset_add(model.empty("orset"), f"r{i}", f"{i}" * 40)))
        for i in range(5)
    ]
    assert [code_of(r) for r in results][:2] == [None, None]
    refused = [r for r in results if code_of(r) == "value_too_large"]
    assert refused and "max_value_bytes (200)" in refused[0]["error"]["message"]
    stored = small.sm.get("default", "s")["kv"]["value"]
    assert len(stored) <= 200 and small.sm.revision == len(results) - len(refused)
    small.sm.close()


def test_merged_state_beyond_a_model_limit_fails_cleanly(node, monkeypatch):
    monkeypatch.setattr(model, "MAX_REPLICAS", 2)
    node.one(merge("g", "gcounter", {"a": 1, "b": 1}))
    r = node.one(merge("g", "gcounter", inc("c")))
    assert code_of(r) == "invalid_argument" and "nothing was changed" in r["error"]["message"]
    assert get(node, "g")["value"] == 2


# -- crdt_get ------------------------------------------------------------------------------


def test_crdt_get_at_a_past_revision_and_without_state(node):
    node.one(merge("g", "gcounter", inc("a")))
    node.one(merge("g", "gcounter", inc("b", 4)))
    past = get(node, "g", revision=1)
    assert past == {"revision": 1, "type": "gcounter", "value": 1, "mod_revision": 1, "version": 1}
    assert get(node, "g")["value"] == 5
    node.delete("g")
    get_missing(node, "g")
    assert get(node, "g", revision=2)["value"] == 5


def test_reads_inside_an_entry_see_its_earlier_merges(node):
    results = node.apply(
        merge("g", "gcounter", inc("a")),
        {"op": "crdt_get", "key": "g", "state": True},
        merge("g", "gcounter", inc("a")),
    )
    assert results[1]["value"] == 1 and results[1]["state"] == model.encode("gcounter", {"a": 1})
    assert results[2]["changed"] is False


# -- the envelope, history, watch, leases ----------------------------------------------------------


def test_the_stored_value_is_the_envelope(node):
    state = inc("a", 2)
    node.one(merge("g", "gcounter", state))
    value = node.value("g")
    assert msgpack.unpackb(value, raw=False) == [b"skcrdt", 1, "gcounter", {"a": 2}]
    assert value == envelope("gcounter", model.encode("gcounter", state))
    assert value == msgpack.packb([b"skcrdt", 1, "gcounter", {"a": 2}], use_bin_type=True)
    assert split_envelope(value) == (1, "gcounter", model.encode("gcounter", state))
    assert split_envelope(b"plain") is None and split_envelope(b"") is None


def test_merges_are_puts_in_history_and_the_change_log(node):
    node.one(merge("g", "gcounter", inc("a")))
    node.one(merge("g", "gcounter", inc("a")))  # nothing changed: no change record
    node.one(merge("g", "gcounter", inc("a", 2)))
    assert node.sm.revision == 2
    with node.sm.read_view() as view:
        lo, hi = selection("default", "g", None, None, None)
        page = read_changes(view, lo, hi, 1)
    assert [f["revision"] for f in page.frames] == [1, 2]
    values = [f["events"][0]["kv"]["value"] for f in page.frames]
    assert [split_envelope(v)[2] for v in values] == [
        model.encode("gcounter", {"a": n}) for n in (1, 2)
    ]
    assert [f["events"][0]["type"] for f in page.frames] == ["put", "put"]


def test_a_merge_keeps_the_keys_lease(node):
    lease = node.one({"op": "lease_grant", "ttl_ms": 10_000})["lease"]
    node.one(put("g", envelope("gcounter", model.encode("gcounter", {})), lease=lease))
    node.one(merge("g", "gcounter", inc("a")))
    info = node.sm.read({"op": "lease_info", "lease": lease})
    assert info["keys"] == ["g"]
    revoked = node.one({"op": "lease_revoke", "lease": lease})
    assert revoked["deleted"] == 1
    get_missing(node, "g")


# -- txns ----------------------------------------------------------------------------------


def test_merge_in_a_txn_shares_its_revision(node):
    r = node.one(txn(merge("g", "gcounter", inc("a")), put("k", b"v")))
    assert r["succeeded"] and r["revision"] == 1
    assert r["results"][0] == {"revision": 1, "changed": True, "value": 1}
    # An unchanged merge inside a txn that writes nothing else takes no revision.
    r = node.one(txn(merge("g", "gcounter", inc("a"))))
    assert r["revision"] == 1 and r["results"][0]["changed"] is False
    assert node.sm.revision == 1


def test_a_failing_merge_fails_the_whole_txn(node):
    node.put("plain", b"x")
    r = node.one(txn(put("k", b"v"), merge("plain", "gcounter", inc("a"))))
    assert code_of(r) == "crdt_type_mismatch"
    assert node.value("k") is None and node.sm.revision == 1


def test_a_txn_may_not_write_a_crdt_key_twice():
    for ops in (
        [merge("g", "gcounter", inc("a")), put("g", b"v")],
        [merge("g", "gcounter", inc("a")), merge("g", "gcounter", inc("b"))],
        [{"op": "delete", "key": "", "prefix": True}, merge("g", "gcounter", inc("a"))],
    ):
        with pytest.raises(OpError) as ei:
            validate_op(txn(*ops), Limits())
        assert ei.value.code == "invalid_argument", ops
    validate_op(txn(merge("g", "gcounter", inc("a")), merge("h", "gcounter", inc("a"))), Limits())


# -- the wire -----------------------------------------------------------------------------------


def test_json_bodies_carry_the_state_as_base64_and_values_with_bytes():
    state = model.encode("gcounter", inc("a"))
    body = json.dumps(
        {"key": "g", "type": "gcounter", "state_b64": base64.b64encode(state).decode()}
    )
    raw = codec.decode(body.encode(), codec.JSON)
    assert raw["state"] == state
    op = validate_op({**raw, "op": "merge"}, Limits())
    assert op == {
        "op": "merge",
        "ns": "default",
        "key": "g",
        "type": "gcounter",
        "state": state,
        "idempotency_key": None,
    }
    get_body = codec.decode(b'{"key": "g", "state": true}', codec.JSON)
    assert get_body["state"] is True  # crdt_get's flag is untouched
    answer = {"value": ["text", b"\xff", 3], "state": state}
    out = json.loads(codec.encode(answer, codec.JSON))
    assert out["value"] == ["text", {"b64": "/w=="}, 3]
    assert base64.b64decode(out["state_b64"]) == state


# -- determinism and snapshots -------------------------------------------------------------------


def crdt_entries() -> list[list[dict]]:
    o = model.empty("orset")
    return [
        [merge("g", "gcounter", inc("a")), merge("s", "orset", model.orset_add(o, "a", 1))],
        [merge("g", "gcounter", inc("a")), put("plain", b"v")],  # unchanged
        [txn(merge("m", "mvreg", model.mvreg_set(model.empty("mvreg"), "b", [1, "x"])))],
        [merge("plain", "gcounter", inc("a"))],  # fails
        [merge("s", "orset", model.orset_add(o, "b", b"bytes")), merge("g", "gcounter", inc("c"))],
    ]


def test_two_state_machines_fed_the_same_entries_end_byte_identical(tmp_path):
    a, b = StateMachine(tmp_path / "a"), StateMachine(tmp_path / "b")
    for index, ops in enumerate(crdt_entries(), 1):
        raw = entry(*ops, t=1_000 * index)
        assert a.apply(index, raw) == b.apply(index, raw)
    assert raw_items(a) == raw_items(b)
    a.close()
    b.close()


def test_snapshot_restore_keeps_crdts(tmp_path):
    src = Node(tmp_path / "src")
    for ops in crdt_entries():
        src.apply(*ops)
    snap = tmp_path / "snap"
    write_snapshot(src.sm, snap)
    dst = StateMachine(tmp_path / "dst")
    dst.restore(snap)
    assert raw_items(dst) == raw_items(src.sm)
    op = {"op": "crdt_get", "ns": "default", "key": "s", "state": True}
    assert dst.read(op) == src.sm.read(op)
    more = entry(merge("g", "gcounter", inc("d", 7)))
    assert dst.apply(src.index + 1, more) == src.sm.apply(src.index + 1, more)
    assert dst.read({**op, "key": "g"})["value"] == 9
    dst.close()
    src.sm.close()
