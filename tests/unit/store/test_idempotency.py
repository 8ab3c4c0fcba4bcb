"""Idempotency keys in apply (node/store/apply.py): replay, expiry, scope, binding; and the
read idempotency_status (node/store/idempotency.py) of the records apply keeps."""

from statekeeper.node.config import Limits, Retention
from statekeeper.node.ops.core import validate_op
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


def _status(n: Node, key: str, **kw) -> dict:
    """idempotency_status as a node serves it (validated, through StateMachine.read)."""
    op = validate_op({"op": "idempotency_status", "idempotency_key": key, **kw}, Limits())
    return n.sm.read(op)


def test_status_of_an_applied_write_names_its_revision_and_expiry(tmp_path):
    n = Node(tmp_path / "db", retention=Retention(idempotency_seconds=10))
    n.put("a", b"1")
    applied = n.one(put("k", b"v", idempotency_key="w1"), t=2_000)
    n.one(put("b", b"2"), t=3_000)
    want = {"applied": True, "revision": applied["revision"], "expires_ms": 12_000}
    assert _status(n, "w1") == want
    # A write that took no revision (a grant) is recorded at the then-current one.
    n.one({"op": "lease_grant", "ttl_ms": 60_000, "idempotency_key": "g"}, t=4_000)
    assert _status(n, "g") == {"applied": True, "revision": 3, "expires_ms": 14_000}
    # Also served inside an entry (a read carried by raft): the same answer.
    assert n.one({"op": "idempotency_status", "idempotency_key": "w1"}, t=5_000) == want
    n.sm.close()


def test_status_of_an_unknown_key_says_since_when_records_are_kept(tmp_path):
    n = Node(tmp_path / "db", retention=Retention(idempotency_seconds=10))
    n.one(put("a", b"1"), t=25_000)
    assert _status(n, "never") == {"applied": False, "revision": 1, "remembered_after_ms": 15_000}
    # Apply runs every op an entry carries, reads too (apply.read_op); a status there must
    # not leave a record of its own: the write sent with that key would then be refused
    # as idempotency_key_reused. (The node serves reads locally, a batch's too.)
    asked = n.one({"op": "idempotency_status", "idempotency_key": "later"}, t=25_000)
    assert asked["applied"] is False
    assert "error" not in n.one(put("b", b"2", idempotency_key="later"), t=25_000)
    assert _status(n, "later")["applied"] is True
    # A failed write leaves no record: "not applied" is true.
    n.one(put("a", b"x", idempotency_key="bad", fence=5), t=25_000)
    assert _status(n, "bad")["applied"] is False
    n.sm.close()
    young = Node(tmp_path / "young", retention=Retention(idempotency_seconds=10))
    young.one(put("a", b"1"), t=3_000)  # the clock is younger than the window: nothing forgotten
    assert _status(young, "never")["remembered_after_ms"] == 0
    young.sm.close()


def test_status_after_the_record_expired_and_was_pruned(tmp_path):
    n = Node(tmp_path / "db", retention=Retention(idempotency_seconds=10))
    n.one(put("k", b"v", idempotency_key="w1"), t=1_000)
    assert _status(n, "w1")["applied"] is True
    n.one(put("other", b"x"), t=20_000)  # clock past 11_000: the record is pruned
    assert not [k for k, _ in raw_items(n.sm) if k[:1] == b"i"]
    # Not "not applied" bare: the answer says a write applied at or before 10_000 (ours,
    # at 1_000) may have been forgotten.
    assert _status(n, "w1") == {"applied": False, "revision": 2, "remembered_after_ms": 10_000}
    n.sm.close()


def test_status_of_an_expired_record_not_yet_pruned_still_says_applied(tmp_path):
    """Pruning is bounded per entry (compaction.IDEM_PRUNE_MIN + 2 per record stored): an
    expired record can outlive its expiry by some entries; it still proves the write."""
    n = Node(tmp_path / "db", retention=Retention(idempotency_seconds=10))
    n.apply(*(put(f"k{i}", b"v", idempotency_key=f"w{i:03}") for i in range(100)), t=1_000)
    n.one(put("other", b"x"), t=20_000)  # prunes 64 of the 100 expired records
    left = sorted(k for k, _ in raw_items(n.sm) if k[:1] == b"i")
    assert left and len(left) < 100
    last = left[-1].split(b"\x00")[1].decode()
    assert _status(n, last) == {"applied": True, "revision": 100, "expires_ms": 11_000}
    n.sm.close()


def test_status_is_scoped_to_the_namespace(tmp_path):
    n = Node(tmp_path / "db", retention=Retention(idempotency_seconds=10))
    n.one({**put("k", b"v", idempotency_key="w1"), "ns": "agent-1"}, t=1_000)
    assert _status(n, "w1", ns="agent-1")["applied"] is True
    assert _status(n, "w1", ns="agent-2")["applied"] is False
    assert _status(n, "w1")["applied"] is False  # ns defaults to "default"
    n.sm.close()


def test_status_without_records_kept_forgets_everything_before_now(tmp_path):
    n = Node(tmp_path / "db", retention=Retention(idempotency_seconds=0))
    n.one(put("k", b"v", idempotency_key="w1"), t=7_000)
    assert _status(n, "w1") == {"applied": False, "revision": 1, "remembered_after_ms": 7_000}
    n.sm.close()
