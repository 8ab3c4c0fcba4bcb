"""Idempotency keys in apply (node/store/apply.py): replay, expiry, scope, binding."""

from statekeeper.node.config import Retention
from tests.unit.store.util import Node, put, raw_items


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
    idem = [k for k, _ in raw_items(n.sm) if k[:1] in (b"i", b"e")]
    assert sorted(idem)[-1] == b"idefault\x00req-1"  # only the re-stored req-1 (its "i" + "e") remains
    assert len(idem) == 2
    n.apply(t=30_000)
    assert not [k for k, _ in raw_items(n.sm) if k[:1] in (b"i", b"e")]
    # Time going backwards (new leader with a slow clock) does not resurrect anything.
    assert n.one(op, t=1_500) == {"revision": 4}
    n.sm.close()


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


def test_the_record_lookup_outside_apply_gives_apply_s_replay(tmp_path):
    """Issue 26 defect 3: a retry refused under the NOSPACE alarm is answered from its
    record (node/quota/gate.py, StateMachine.recorded_result), so the lookup must find
    what apply replays, for every op that grows the store, from the op as the HTTP layer
    validated it (the digest binding included): else a retry of an applied write gets a
    507 or a false idempotency_key_reused."""
    from statekeeper.client.crdt import model
    from statekeeper.node.config import Limits
    from statekeeper.node.ops.core import validate_op

    n = Node(tmp_path / "db")
    lease = n.one({"op": "lease_grant", "ttl_ms": 60_000, "idempotency_key": "g"})["lease"]
    growing = [
        put("k", b"v", idempotency_key="p"),
        {"op": "cas", "key": "k", "value": b"w", "expect": {"version": 1}, "idempotency_key": "c"},
        {"op": "append", "stream": "s", "events": [{"data": b"e", "id": "e1"}], "idempotency_key": "a"},
        {"op": "lock_acquire", "name": "l", "owner": "me", "lease": lease, "idempotency_key": "l"},
        {"op": "merge", "key": "m", "type": "gcounter", "idempotency_key": "m",
         "state": model.encode("gcounter", {"r1": 3})},
        {"op": "txn", "compare": [], "success": [put("t", b"1")], "failure": [], "idempotency_key": "t"},
    ]
    for raw in growing:
        op = validate_op(dict(raw), Limits())
        assert n.sm.recorded_result(op) is None  # no record yet
        first = n.one(op)
        assert "error" not in first, first
        assert n.sm.recorded_result(validate_op(dict(raw), Limits())) == {**first, "replayed": True}
        other = validate_op({**raw, "idempotency_key": raw["idempotency_key"], "ns": "x"}, Limits())
        assert n.sm.recorded_result(other) is None  # scoped to its namespace
    bound = validate_op(put("k", b"another", idempotency_key="p"), Limits())
    try:
        n.sm.recorded_result(bound)
    except Exception as e:  # noqa: BLE001 - checked below
        assert getattr(e, "code", None) == "idempotency_key_reused"
    else:
        raise AssertionError("a key bound to another request was replayed")
    n.sm.close()
