"""Ops the proposing node marked as validate_op's output (node/entry.py, `validated_op`):
apply takes them as they are, and gets the same results as when it validates them."""

from __future__ import annotations

import pytest

from statekeeper.node import entry as raft_entry
from statekeeper.node.config import Limits
from statekeeper.node.ops.core import OPS, validate_op
from tests.unit.store.util import Node, raw_items

LIMITS = Limits()
# Every shape a put or delete normalizes to (the fields of TRUSTED_OPS that can appear).
BODIES = [
    {"op": "put", "key": "k", "value": b"v"},
    {"op": "put", "ns": "a", "key": "k", "value": b"w", "prev_kv": True, "idempotency_key": "i1"},
    {"op": "put", "key": "k2", "value": b"", "ttl_ms": 60_000},
    {"op": "put", "key": "k3", "value": b"x", "fence": {"name": "l", "token": 1}},
    {"op": "delete", "key": "k"},
    {"op": "delete", "key": "k", "prefix": True, "prev_kv": True, "idempotency_key": "i2"},
    {"op": "delete", "ns": "a", "key": "k", "fence": {"name": "l", "token": 1}},
    {
        "op": "txn",
        "compare": [
            {"key": "k", "target": "value", "op": "==", "value": b"v"},
            {"key": "k2", "target": "version", "op": ">", "value": 0},
        ],
        "success": [
            {"op": "put", "key": "k", "value": b"t", "prev_kv": True},
            {"op": "delete", "key": "gone", "prefix": True},
            {"op": "get", "key": "k"},
        ],
        "failure": [{"op": "put", "key": "k", "value": b"f", "lease": 1}],
        "idempotency_key": "i3",
    },
    {"op": "txn", "ns": "a", "success": [{"op": "put", "key": "t", "value": b"x"}]},
    {"op": "append", "stream": "s", "events": [{"data": b"e1"}, {"data": b"e2", "type": "t"}]},
    {
        "op": "append",
        "ns": "a",
        "stream": "s",
        "events": [{"data": b"e3", "meta": {"step": 3, "score": 0.5, "tag": "x", "n": None}}],
        "expect": 2,
        "idempotency_key": "i4",
        "fence": {"name": "l", "token": 1},
    },
]


def _entry(ops: list[dict], marked: bool, t: int = 1_000) -> bytes:
    ops = [validate_op(o, LIMITS) for o in ops]
    if marked:
        ops = [raft_entry.mark_validated(o) for o in ops]
    return raft_entry.encode(t, ops)


@pytest.mark.parametrize("body", BODIES)
def test_an_entry_gives_back_exactly_what_validate_op_made(body):
    """What lets apply skip validation: the decoded op is validate_op's output, and
    validating it again changes nothing."""
    op = validate_op(body, LIMITS)
    (decoded,) = raft_entry.decode(raft_entry.encode(1, [raft_entry.mark_validated(dict(op))]))[1]
    trusted = raft_entry.validated_op(decoded)
    assert trusted == op
    assert list(trusted) == list(op)  # same field order (op_digest sorts, the bytes do not)
    assert validate_op(trusted, LIMITS, internal=True) == trusted


def test_marked_and_unmarked_entries_apply_alike(tmp_path):
    nodes = {m: Node(tmp_path / str(m)) for m in (True, False)}
    lease = {"op": "lease_grant", "ttl_ms": 60_000}
    lock = {"op": "lock_acquire", "name": "l", "owner": "me", "lease": 1}
    results = {}
    for marked, n in nodes.items():
        n.index += 1
        results[marked] = [n.sm.apply(n.index, _entry([lease, lock], marked))]
        for i, body in enumerate(BODIES + BODIES, start=1):
            n.index += 1
            results[marked].append(n.sm.apply(n.index, _entry([body], marked, t=1_000 + i)))
    assert results[True] == results[False]
    assert raw_items(nodes[True].sm) == raw_items(nodes[False].sm)
    for n in nodes.values():
        n.sm.close()


def test_a_marked_op_is_not_validated_again(tmp_path):
    """The trust is real: a marked put above this node's max_value_bytes is applied
    (its proposer's limits admitted it), the same put unmarked is refused."""
    n = Node(tmp_path / "db", limits=Limits(max_value_bytes=4))
    op = validate_op({"op": "put", "key": "k", "value": b"too long"}, LIMITS)
    n.index += 1
    (unmarked,) = n.sm.apply(n.index, raft_entry.encode(1_000, [dict(op)]))
    assert unmarked["error"]["code"] == "value_too_large"
    n.index += 1
    (marked,) = n.sm.apply(n.index, raft_entry.encode(1_000, [raft_entry.mark_validated(op)]))
    assert marked == {"revision": 1}
    n.sm.close()


@pytest.mark.parametrize(
    "body",
    [
        {"op": "txn", "success": [{"op": "put", "key": "k", "value": b"too long"}]},
        {"op": "append", "stream": "s", "events": [{"data": b"too long"}]},
    ],
    ids=["txn", "append"],
)
def test_a_marked_txn_or_append_is_not_validated_again(tmp_path, body):
    """Issue 28: txn and append are trusted too (validate_op cost 27.6 us for a txn of
    ten puts and 393 us for an append of 100 events, on every node)."""
    n = Node(tmp_path / "db", limits=Limits(max_value_bytes=4))
    op = validate_op(body, LIMITS)
    n.index += 1
    (unmarked,) = n.sm.apply(n.index, raft_entry.encode(1_000, [dict(op)]))
    assert "error" in unmarked
    n.index += 1
    (marked,) = n.sm.apply(n.index, raft_entry.encode(1_000, [raft_entry.mark_validated(op)]))
    assert "error" not in marked, marked
    n.sm.close()


@pytest.mark.parametrize("mark", [True, 0, raft_entry.VALIDATED_SHAPE + 1, "1", None], ids=repr)
def test_only_the_current_mark_on_a_trusted_op_skips_validation(mark):
    op = {"op": "put", "key": "k", "value": b"v", raft_entry.VALIDATED: mark}
    assert raft_entry.validated_op(dict(op)) is None
    lease = {"op": "lease_grant", "ttl_ms": 1, raft_entry.VALIDATED: raft_entry.VALIDATED_SHAPE}
    assert raft_entry.validated_op(lease) is None
    assert raft_entry.mark_validated({"op": "lease_grant", "ttl_ms": 1}) == {
        "op": "lease_grant",
        "ttl_ms": 1,
    }


def test_an_older_node_drops_the_mark_as_an_unknown_field():
    """A node without this code validates a marked op into the unmarked one (apply validates
    with internal=True, which drops unknown fields; a request's are refused)."""
    op = validate_op({"op": "put", "key": "k", "value": b"v"}, LIMITS)
    assert validate_op(raft_entry.mark_validated(dict(op)), LIMITS, internal=True) == op


def test_the_trusted_shapes_are_pinned_to_their_version():
    """Changing the fields a put or delete normalizes to must bump VALIDATED_SHAPE (marks
    written by the old shape then get validated again): update both together."""
    shapes = {name: [f.name for f in OPS[name].fields] for name in sorted(raft_entry.TRUSTED_OPS)}
    assert (raft_entry.VALIDATED_SHAPE, shapes) == (
        1,
        {
            "append": ["ns", "stream", "events", "expect", "lease", "idempotency_key", "fence"],
            "delete": ["ns", "key", "prefix", "prev_kv", "idempotency_key", "fence"],
            "put": ["ns", "key", "value", "prev_kv", "idempotency_key", "lease", "ttl_ms", "fence"],
            "txn": ["ns", "compare", "success", "failure", "idempotency_key", "fence"],
        },
    )
    # What a txn's compares and an append's events normalize to (nested shapes).
    txn = validate_op(BODIES[7], LIMITS)
    append = validate_op(BODIES[10], LIMITS)
    assert (list(txn["compare"][0]), list(append["events"][0])) == (
        ["ns", "key", "target", "op", "value"],
        ["data", "type", "id", "meta"],
    )
