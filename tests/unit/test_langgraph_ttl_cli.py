"""Issue 30 items 13 and 18 with no network: the thread TTL's config shapes and its plan
(saver_ttl.py: a put attaches every key to the thread's lease; two writers racing to
create a thread's lease end up sharing one), and the `statekeeper langgraph` commands'
formatting (cluster/langgraph_cli.py)."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from statekeeper.client.langgraph import inspect
from statekeeper.client.langgraph import keys as K
from statekeeper.client.langgraph.saver_codec import Limits
from statekeeper.client.langgraph.saver_plan import Ctx, put_ops, put_plan
from statekeeper.client.langgraph.saver_ttl import ThreadLeases, ThreadTTL, with_ttl
from statekeeper.client.leases.results import KeepaliveResult, LeaseGrant
from statekeeper.client.plan import BatchCall, Call
from statekeeper.client.results import KeyValue, RangeResult, TxnResult, WriteResult
from statekeeper.cluster import langgraph_cli as cli

SERDE = JsonPlusSerializer()
CTX = Ctx("langgraph", SERDE)
SMALL = Limits(value_bytes=1024, inline_bytes=2048, chunk_bytes=1024, request_bytes=64 * 1024)
BIG = bytes(range(256)) * 40  # 11 chunks of 1 KiB once encoded


def _put_args(thread: str, step: int = 0) -> tuple:
    cp = generate_checkpoint(channel_values={"x": step}, channel_versions={"x": step + 1})
    return generate_config(thread), cp, generate_metadata(step=step, run_id="r"), {"x": step + 1}


# -- the TTL config ------------------------------------------------------------------------


def test_ttl_shapes_seconds_and_langgraph_config() -> None:
    assert ThreadTTL.of(None) is None
    assert ThreadTTL.of(60) == ThreadTTL(60.0, False)
    assert ThreadTTL.of({"default_ttl": 30, "refresh_on_read": True}) == ThreadTTL(1800.0, True)
    assert ThreadTTL.of({"default_ttl": None, "sweep_interval_minutes": 5}) is None
    ttl = ThreadTTL.of(100)
    assert ttl.lease_seconds == pytest.approx(110) and ttl.renew_every == pytest.approx(10)
    for bad in (1, 80_000, True, "60", {"default_ttl": 1, "sweep_every": 3}):
        with pytest.raises(ValueError, match="ttl"):
            ThreadTTL.of(bad)


# -- the plan ------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _drive(plan, answers):
    """Run ``plan``, answering each call with ``answers(call)``; the calls and the result."""
    calls, result = [], None
    try:
        step = next(plan)
        while True:
            calls.append(step)
            step = plan.send(answers(step))
    except StopIteration as done:
        result = done.value
    return calls, result


def test_first_put_grants_then_puts_attach_and_renew_only_when_due() -> None:
    clock = Clock()
    leases = ThreadLeases(clock)
    ttl = ThreadTTL.of(100)
    args = _put_args("t1")
    ops = put_ops(CTX, *args).ops

    def answers(c: Call):
        if c.method == "get":
            return None
        if c.method == "lease_grant":
            assert c.args == (pytest.approx(110),)
            return LeaseGrant(7, 110_000, 0, 1)
        if c.method == "lease_keepalive":
            return KeepaliveResult(2, [], [])
        assert c.method == "txn"
        return TxnResult(True, 2, [None] * len(c.args[1]))

    calls, cfg = _drive(
        with_ttl(put_plan(CTX, *args), ttl, leases, "langgraph", renew=True), answers
    )
    assert [c.method for c in calls] == ["get", "lease_grant", "txn"]
    compares, success, _ = calls[-1].args
    assert compares[-1]["target"] == "version" and compares[-1]["key"] == K.ttl_key("t1")
    assert {op["lease"] for op in success} == {7}
    assert [op["key"] for op in success] == [op["key"] for op in ops] + [K.ttl_key("t1")]
    assert cfg["configurable"]["thread_id"] == "t1"

    clock.now += 9  # within ttl * 0.1 of the grant: no keepalive
    calls, _ = _drive(
        with_ttl(put_plan(CTX, *_put_args("t1", 1)), ttl, leases, "langgraph", renew=True), answers
    )
    assert [c.method for c in calls] == ["txn"]
    assert calls[0].args[0][-1]["target"] == "value"
    clock.now += 2  # past it: renewed before the put
    calls, _ = _drive(
        with_ttl(put_plan(CTX, *_put_args("t1", 2)), ttl, leases, "langgraph", renew=True), answers
    )
    assert [c.method for c in calls] == ["lease_keepalive", "txn"]


def test_two_writers_racing_share_the_first_lease() -> None:
    """Our grant loses the marker's compare to another writer's lease 5: ours is revoked,
    the marker's lease is renewed and the put is attached to it."""
    leases = ThreadLeases(Clock())
    marker = {"value": None}

    def answers(c: Call):
        if c.method == "get":
            return (
                None
                if marker["value"] is None
                else KeyValue(K.ttl_key("t"), marker["value"], 1, 2, 2)
            )
        if c.method == "lease_grant":
            marker["value"] = b"5"  # the other writer wins meanwhile
            return LeaseGrant(9, 2200, 0, 1)
        if c.method in ("lease_revoke", "lease_keepalive"):
            return KeepaliveResult(3, [], [])
        compares, success, failure = c.args
        if compares[-1]["target"] == "version":
            return TxnResult(False, 3, [KeyValue(K.ttl_key("t"), b"5", 1, 2, 2)])
        return TxnResult(True, 4, [None] * len(success))

    plan = with_ttl(
        put_plan(CTX, *_put_args("t")), ThreadTTL.of(2), leases, "langgraph", renew=True
    )
    calls, _ = _drive(plan, answers)
    assert [c.method for c in calls] == [
        "get",
        "lease_grant",
        "txn",
        "lease_revoke",
        "get",
        "lease_keepalive",
        "txn",
    ]
    assert calls[3].args == (9,)
    assert {op["lease"] for op in calls[-1].args[1]} == {5}
    assert leases.get("t")[0] == 5


def test_maintenance_without_a_lease_leaves_the_txn_alone() -> None:
    txn = Call("txn", ([], [{"op": "put", "key": K.ckpt_key("t", "", "x"), "value": b""}]), {})

    def inner():
        return (yield txn)

    calls, _ = _drive(
        with_ttl(inner(), ThreadTTL.of(2), ThreadLeases(), "langgraph", renew=False),
        lambda c: None if c.method == "get" else "done",
    )
    assert [c.method for c in calls] == ["get", "txn"] and calls[1] is txn


def test_chunks_of_a_thread_are_attached_to_its_lease_granted_before_the_upload() -> None:
    """A value over the inline limit is uploaded as chunks before the txn: the chunk puts
    carry the thread's lease (granted first), and the txn then creates the marker for
    that same lease (compare version 0), so the chunks expire with the thread."""
    ctx = Ctx("langgraph", SERDE, SMALL)
    cp = generate_checkpoint(channel_values={"big": BIG}, channel_versions={"big": 1})
    args = generate_config("t"), cp, generate_metadata(step=0, run_id="r"), {"big": 1}
    leases = ThreadLeases(Clock())

    def answers(step):
        if isinstance(step, BatchCall):
            return [WriteResult(3) for _ in step.calls]
        if step.method == "range":
            return RangeResult([], 2, False)
        if step.method == "get":
            return None
        if step.method == "lease_grant":
            return LeaseGrant(7, 2200, 0, 1)
        return TxnResult(True, 4, [None] * len(step.args[1]))

    plan = with_ttl(put_plan(ctx, *args), ThreadTTL.of(2), leases, "langgraph", renew=True)
    calls, _ = _drive(plan, answers)
    uploads = [c for c in calls if isinstance(c, BatchCall)]
    chunk_puts = [c for b in uploads for c in b.calls]
    assert chunk_puts and all(c.args[0].startswith("chunk/blob/t/") for c in chunk_puts)
    assert {c.kwargs.get("lease") for c in chunk_puts} == {7}
    methods = [type(c).__name__ if isinstance(c, BatchCall) else c.method for c in calls]
    assert methods.index("lease_grant") < methods.index("BatchCall")
    assert methods.count("lease_grant") == 1
    compares, success, _ = calls[-1].args
    assert compares[-1]["target"] == "version" and compares[-1]["key"] == K.ttl_key("t")
    assert {op["lease"] for op in success} == {7}
    assert success[-1]["key"] == K.ttl_key("t")


def test_chunks_lost_with_a_raced_lease_are_uploaded_again_on_the_winner() -> None:
    """Our fresh lease 9 loses the marker to lease 5: ours is revoked (the chunks on it
    go), the txn fails its chunk compares on lease 5, and the plan's retry uploads the
    chunks again, now on lease 5."""
    ctx = Ctx("langgraph", SERDE, SMALL)
    cp = generate_checkpoint(channel_values={"big": BIG}, channel_versions={"big": 1})
    args = generate_config("t"), cp, generate_metadata(step=0, run_id="r"), {"big": 1}
    marker = {"value": None}
    txns = []

    def answers(step):
        if isinstance(step, BatchCall):
            return [WriteResult(3) for _ in step.calls]
        if step.method == "range":
            return RangeResult([], 2, False)
        if step.method == "get":
            if step.args[0] == K.ttl_key("t") and marker["value"] is not None:
                return KeyValue(K.ttl_key("t"), marker["value"], 1, 2, 2)
            return None
        if step.method == "lease_grant":
            marker["value"] = b"5"  # the other writer wins meanwhile
            return LeaseGrant(9, 2200, 0, 1)
        if step.method in ("lease_revoke", "lease_keepalive"):
            return KeepaliveResult(3, [], [])
        txns.append(step)
        compares = step.args[0]
        if compares[-1]["target"] == "version":
            return TxnResult(False, 3, [KeyValue(K.ttl_key("t"), b"5", 1, 2, 2)])
        if len(txns) == 2:  # the chunks went with lease 9: a chunk compare fails
            return TxnResult(False, 4, [KeyValue(K.ttl_key("t"), b"5", 1, 2, 2)])
        return TxnResult(True, 5, [None] * len(step.args[1]))

    leases = ThreadLeases(Clock())
    plan = with_ttl(put_plan(ctx, *args), ThreadTTL.of(2), leases, "langgraph", renew=True)
    calls, _ = _drive(plan, answers)
    uploads = [c for c in calls if isinstance(c, BatchCall)]
    attached = [c.kwargs.get("lease") for b in uploads for c in b.calls]
    half = len(attached) // 2  # one upload on our lease, one on the winner's
    assert half > 1 and attached == [9] * half + [5] * half
    assert len(txns) == 3 and {op["lease"] for op in txns[-1].args[1]} == {5}


# -- the CLI's formatting ------------------------------------------------------------------


def test_thread_summaries_and_write_counts_from_keys() -> None:
    new, old = "1f0c5f1e-8d4a-6b2c-8001-0123456789ab", "1f0c5f1e-8d4a-6b2c-8000-0123456789ab"
    keys = sorted(
        [
            K.ckpt_key("a/b", "", new),
            K.ckpt_key("a/b", "", old),
            K.ckpt_key("a/b", "sub:1", old),
            K.ckpt_key("c", "sub:1", old),
        ]
    )
    found = inspect.thread_summaries(keys)
    assert found == {
        "a/b": (3, K.ckpt_key("a/b", "", new)),
        "c": (1, K.ckpt_key("c", "sub:1", old)),
    }
    wkeys = [
        K.writes_key("a/b", "", old, "task/1", 0),
        K.writes_key("a/b", "", old, "task/1", 1),
        K.writes_key("a/b", "", old, "task/1", 1) + "/c0",  # a chunk of the earlier format
        K.writes_key("a/b", "sub:1", new, "t", -1),
    ]
    assert inspect.write_counts(wkeys, "a/b") == {("", old): 2, ("sub:1", new): 1}


def test_history_row_and_table_and_show_json() -> None:
    cfg, cp, meta, versions = _put_args("t", 3)
    meta["source"] = "loop"
    planned = put_ops(CTX, cfg, cp, meta, versions)
    ops, stored = planned.ops, planned.config
    rec = next(op for op in ops if op["key"].startswith("ckpt/"))
    row = inspect.row_of(rec["key"], rec["value"], 2, SERDE)
    assert (row.checkpoint_id, row.step, row.source, row.writes, row.run) == (
        cp["id"],
        3,
        "loop",
        2,
        "r",
    )
    lines = cli.history_table([row]).splitlines()
    assert lines[0].split() == ["CHECKPOINT", "PARENT", "NS", "STEP", "SOURCE", "WRITES", "TS"]
    assert lines[1].split()[:6] == [cp["id"], "-", "-", "3", "loop", "2"]
    assert cli.history_table([row], "simple").split("\t")[:3] == [cp["id"], "-", "-"]  # no header
    tup = CheckpointTuple(
        stored,
        {**cp, "channel_values": {"x": b"\x00", "m": {1, 2}}},
        meta,
        None,
        [("task", "x", 5)],
    )
    doc = inspect.shown(tup)
    assert doc["channel_values"] == {"x": {"$bytes": "AA=="}, "m": [1, 2]}
    assert doc["pending_writes"] == [{"task_id": "task", "channel": "x", "value": 5}]
    assert doc["parent"] is None and doc["metadata"]["step"] == 3
