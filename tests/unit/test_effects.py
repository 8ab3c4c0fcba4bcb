"""The effect ledger's sans-IO plan without a server, driven by hand through every branch:
done, free, held + wait, held + raise, died mid-call -> maybe_happened, fn raising, a lost
claim before and after fn, a result that cannot be stored; list and forget. The drivers are
tested in test_effects_drivers.py."""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

import msgpack
import pytest

from statekeeper.client import (
    EffectClaimLost,
    EffectInProgress,
    EffectResultLost,
    FenceMismatch,
    InvalidRequest,
    LeaseNotFound,
    LockHeld,
    LockNotHeld,
    LockTimeout,
    StatekeeperError,
)
from statekeeper.client.effects.plan import (
    Acquire,
    Call,
    EffectContext,
    Invoke,
    Release,
    check_effect_key,
    forget_plan,
    list_plan,
    run_plan,
)
from statekeeper.client.leases.results import LeaseInfo
from statekeeper.client.locks.results import LockInfo, LockList, LockWaiter
from statekeeper.client.results import DeleteResult, KeyValue, RangeResult, TxnResult, WriteResult

NS = "agents"
RKEY = "__effects/pay/1"


class FakeLock:
    def __init__(self, client: Any, name: str, fence: int, ns: str) -> None:
        self.client, self.name, self.fence, self.ns = client, name, fence, ns
        self.key = f"__lock/{name}/{fence:020d}"
        self.held = True
        self.released = 0

    def release(self) -> bool:
        self.released += 1
        was = self.held
        self.held = False
        self.client.kv.pop((self.ns, self.key), None)
        return was


def kv(value: bytes, rev: int = 5, key: str = RKEY) -> KeyValue:
    return KeyValue(key, value, 1, rev, rev, NS, rev)


def rec(state: str = "claimed", attempt: int = 1, fence: int = 7, **more: Any) -> bytes:
    d = {
        "state": state,
        "attempt": attempt,
        "fence": fence,
        "idempotency_key": f"pay/1#{more.pop('first', fence)}",
        "started_ms": 1000,
    }
    return msgpack.packb(d | more, use_bin_type=True)


def start(**kw: Any) -> Generator[Any, Any, Any]:
    args = {"ns": NS, "ttl": 5.0, "wait": True, "timeout": None, "now_ms": lambda: 2000} | kw
    return run_plan("pay/1", **args)


def finish(plan: Generator[Any, Any, Any], value: Any) -> Any:
    with pytest.raises(StopIteration) as stop:
        plan.send(value)
    return stop.value.value


def unpack_put(step: Call) -> dict[str, Any]:
    assert step.method == "put" and step.args[0] == RKEY
    return msgpack.unpackb(step.args[1])


# -- the plan, by hand -----------------------------------------------------------------------


def test_done_returns_the_stored_result_without_claiming():
    plan = start()
    read = next(plan)
    assert read == Call("get", (RKEY,), {"ns": NS, "default": None, "consistency": "linearizable"})
    assert finish(plan, kv(rec("done", result={"receipt": "r-1"}))) == {"receipt": "r-1"}


def test_free_claims_calls_fn_and_records_done_with_the_release_in_one_fenced_txn():
    plan = start()
    next(plan)
    acquire = plan.send(None)
    assert acquire == Acquire("effect:pay/1", 5.0, False, None, NS)  # free: taken at once
    lock = FakeLock(None, "effect:pay/1", 7, NS)
    assert plan.send(lock) == Call(
        "get", (RKEY,), {"ns": NS, "default": None, "consistency": "linearizable"}
    )
    claim = plan.send(None)
    assert claim.kwargs == {"ns": NS, "fence": lock}
    assert unpack_put(claim) == {
        "state": "claimed",
        "attempt": 1,
        "fence": 7,
        "idempotency_key": "pay/1#7",
        "started_ms": 2000,
    }
    invoke = plan.send(WriteResult(8))
    assert invoke == Invoke(EffectContext("pay/1", NS, 1, False, "pay/1#7", 7, None))
    txn = plan.send(("r-1", 40))
    compares, success = txn.args
    assert txn.method == "txn" and compares == () and txn.kwargs == {"ns": NS, "fence": lock}
    assert success[1] == {"op": "delete", "key": lock.key}
    done = msgpack.unpackb(success[0]["value"])
    assert success[0]["key"] == RKEY
    assert done == {
        "state": "done",
        "attempt": 1,
        "fence": 7,
        "idempotency_key": "pay/1#7",
        "started_ms": 2000,
        "done_ms": 2000,
        "result": ["r-1", 40],
    }
    assert plan.send(TxnResult(True, 9)) == Release()
    assert finish(plan, True) == ["r-1", 40]  # as stored: the same on every run


HELD = LockHeld("held", code="lock_held", details={"holder_fence": 7, "name": "effect:pay/1"})


def queue(*waiters: tuple[int, int | None, str | None]) -> LockList:
    """lock_list's answer for effect:pay/1 with (fence, lease, owner) waiters, holder first."""
    ws = [LockWaiter(f"__lock/effect:pay/1/{f:020d}", f, lease, o) for f, lease, o in waiters]
    return LockList([LockInfo("effect:pay/1", ws[0].fence, ws[0].lease, len(ws), ws)], 20, False)


LIST = Call("lock_list", ("effect:pay/1",), {"ns": NS, "limit": 1, "consistency": "linearizable"})


def test_held_and_wait_logs_the_holder_waits_in_line_then_returns_the_holders_result(caplog):
    plan = start(wait=True, timeout=3.0)
    next(plan)
    assert plan.send(kv(rec("claimed"))) == Acquire("effect:pay/1", 5.0, False, None, NS)
    assert plan.throw(HELD) == LIST
    assert plan.send(queue((7, 3, "pod-b#1a2b"))) == Call("lease_info", (3,), {})
    with caplog.at_level(logging.WARNING, logger="statekeeper.client.effects"):
        step = plan.send(LeaseInfo(3, NS, 30_000, 0, remaining_ms=27_400))
    assert step == Acquire("effect:pay/1", 5.0, True, 3.0, NS)
    assert caplog.messages == [
        "effect 'pay/1' is claimed by runner 'pod-b' (fence 7; its lease ends in 27.4 s unless "
        "renewed): waiting for it (at most 3 s)"
    ]
    plan.send(FakeLock(None, "effect:pay/1", 9, NS))  # our turn came: the holder finished
    assert plan.send(kv(rec("done", result=42))) == Release()
    assert finish(plan, True) == 42


def test_a_holder_without_a_runner_id_is_named_with_the_cure(caplog):
    """A restarted process that never set a runner id waits for its own dead claim: the
    log line says how a runner id would have ended the wait at once."""
    plan = start(wait=True, timeout=3.0)
    next(plan)
    plan.send(kv(rec("claimed")))
    plan.throw(HELD)
    plan.send(queue((7, 3, None)))
    with caplog.at_level(logging.WARNING, logger="statekeeper.client.effects"):
        plan.send(LeaseInfo(3, NS, 30_000, 0, remaining_ms=27_400))
    assert "without a runner id (with one, run(..., runner=ID)" in caplog.messages[0]


def test_held_and_no_wait_raises_in_progress_without_calling_fn():
    plan = start(wait=False)
    next(plan)
    assert plan.send(kv(rec("claimed"))).wait is False
    held = LockHeld("held", code="lock_held", details={"holder_fence": 7, "name": "x"})
    with pytest.raises(EffectInProgress) as e:
        plan.throw(held)
    assert e.value.holder_fence == 7 and e.value.key == "pay/1"
    assert e.value.code == "effect_in_progress" and e.value.__cause__ is held


def test_a_wait_timeout_is_in_progress_too():
    plan = start(timeout=0.5)
    next(plan)
    plan.send(None)
    assert plan.throw(HELD) == LIST
    assert plan.send(queue((7, 3, None))) == Call("lease_info", (3,), {})
    assert plan.throw(LeaseNotFound("gone", code="lease_not_found")).wait is True
    with pytest.raises(EffectInProgress):
        plan.throw(LockTimeout("t", code="lock_timeout", details={"holder_fence": 3}))


def test_died_mid_call_the_next_claimant_is_told_maybe_happened():
    plan = start()
    next(plan)
    plan.send(kv(rec("claimed", attempt=1, fence=7)))  # a claim whose holder died
    plan.send(FakeLock(None, "effect:pay/1", 12, NS))
    claim = plan.send(kv(rec("claimed", attempt=1, fence=7)))
    body = unpack_put(claim)
    assert body["attempt"] == 2 and body["fence"] == 12
    assert body["idempotency_key"] == "pay/1#7"  # stable for the effect: the first claim's
    ctx = plan.send(WriteResult(13)).ctx
    assert (ctx.attempt, ctx.maybe_happened, ctx.idempotency_key, ctx.fence) == (
        2,
        True,
        "pay/1#7",
        12,
    )
    assert ctx.previous is not None and ctx.previous.fence == 7


def test_a_runner_takes_over_the_claim_its_earlier_process_left_at_once(caplog):
    plan = start(owner="pod-a#new")
    next(plan)
    assert plan.send(kv(rec("claimed", runner="pod-a"))).owner == "pod-a#new"
    assert plan.throw(HELD) == LIST
    with caplog.at_level(logging.WARNING, logger="statekeeper.client.effects"):
        release = plan.send(queue((7, 3, "pod-a#old"), (8, 4, "pod-ab#x")))
    assert release == Call("lock_release", ("effect:pay/1", 7), {"ns": NS})
    assert "earlier process of runner 'pod-a'" in caplog.text
    assert plan.throw(LockNotHeld("gone", code="lock_not_held")) == Call("lease_info", (4,), {})
    assert plan.send(LeaseInfo(4, NS, 5000, 0, remaining_ms=5000)).owner == "pod-a#new"
    plan.send(FakeLock(None, "effect:pay/1", 12, NS))
    claim = unpack_put(plan.send(kv(rec("claimed", runner="pod-a"))))
    assert claim["runner"] == "pod-a" and claim["attempt"] == 2
    assert plan.send(WriteResult(13)).ctx.maybe_happened


def test_with_only_its_own_earlier_claim_a_runner_does_not_wait_even_with_wait_false():
    plan = start(owner="pod-a#new", wait=False)
    next(plan)
    plan.send(None)
    assert plan.throw(HELD) == LIST
    assert plan.send(queue((7, 3, "pod-a#old"))).method == "lock_release"
    assert plan.send(None) == Acquire("effect:pay/1", 5.0, False, None, NS, "pod-a#new")


def test_wait_false_with_a_runner_id_and_another_runners_claim_is_in_progress():
    plan = start(owner="pod-a#new", wait=False)
    next(plan)
    plan.send(None)
    assert plan.throw(HELD) == LIST
    with pytest.raises(EffectInProgress):
        plan.send(queue((7, 3, "pod-b#1"), (9, 4, "pod-a")))  # no incarnation: not ours


def _claimed(plan: Generator[Any, Any, Any], lock: FakeLock) -> Invoke:
    next(plan)
    plan.send(None)  # free: the first Acquire takes it
    plan.send(lock)
    plan.send(None)
    return plan.send(WriteResult(8))


def test_fn_raising_records_the_error_releases_and_reraises():
    plan, lock = start(), FakeLock(None, "effect:pay/1", 7, NS)
    assert isinstance(_claimed(plan, lock), Invoke)
    boom = RuntimeError("card declined?")
    txn = plan.throw(boom)
    failed = msgpack.unpackb(txn.args[1][0]["value"])
    assert failed["state"] == "claimed" and failed["error"] == "RuntimeError: card declined?"
    assert txn.args[1][1] == {"op": "delete", "key": lock.key}
    assert plan.send(TxnResult(True, 9)) == Release()
    with pytest.raises(RuntimeError) as e:
        plan.send(True)
    assert e.value is boom


def test_fn_raising_and_the_record_failing_still_releases_and_reraises_fns_error():
    plan = start()
    _claimed(plan, FakeLock(None, "effect:pay/1", 7, NS))
    plan.throw(ValueError("x"))
    assert plan.throw(FenceMismatch("gone", code="fence_mismatch")) == Release()
    with pytest.raises(ValueError):
        plan.send(False)


def test_a_claim_refused_by_the_fence_raises_claim_lost_before_fn():
    plan = start()
    next(plan)
    plan.send(None)
    plan.send(FakeLock(None, "effect:pay/1", 7, NS))
    plan.send(None)
    refused = FenceMismatch("no", code="fence_mismatch", details={"holder_fence": 11})
    with pytest.raises(EffectClaimLost) as e:
        plan.throw(refused)
    assert not e.value.fn_called and e.value.fence == 7


def test_a_lease_seen_dead_before_fn_is_a_lost_claim():
    plan, lock = start(), FakeLock(None, "effect:pay/1", 7, NS)
    next(plan)
    plan.send(None)
    plan.send(lock)
    plan.send(None)
    lock.held = False
    with pytest.raises(EffectClaimLost) as e:
        plan.send(WriteResult(8))
    assert not e.value.fn_called


def test_done_refused_by_the_fence_says_fn_ran():
    plan = start()
    _claimed(plan, FakeLock(None, "effect:pay/1", 7, NS))
    plan.send("receipt")
    with pytest.raises(EffectClaimLost) as e:
        plan.throw(FenceMismatch("no", code="fence_mismatch", details={"holder_fence": 12}))
    assert e.value.fn_called and e.value.details["holder_fence"] == 12


def test_a_result_that_is_not_msgpack_able_is_recorded_done_without_it():
    plan = start()
    _claimed(plan, FakeLock(None, "effect:pay/1", 7, NS))
    txn = plan.send(object())
    done = msgpack.unpackb(txn.args[1][0]["value"])
    assert done["state"] == "done" and "result" not in done
    assert "not msgpack-able" in done["result_lost"]
    plan.send(TxnResult(True, 9))
    with pytest.raises(EffectResultLost):
        plan.send(True)
    later = start()  # every later run: done, fn not called, the loss reported
    next(later)
    with pytest.raises(EffectResultLost) as e:
        later.send(kv(rec("done", result_lost=done["result_lost"])))
    assert "not msgpack-able" in e.value.reason


def test_a_result_too_large_for_the_server_is_recorded_done_without_it():
    plan = start()
    _claimed(plan, FakeLock(None, "effect:pay/1", 7, NS))
    plan.send(b"x" * 100)
    retry = plan.throw(InvalidRequest("big", code="value_too_large"))
    done = msgpack.unpackb(retry.args[1][0]["value"])
    assert done["state"] == "done" and "too large" in done["result_lost"]
    assert plan.send(TxnResult(True, 9)) == Release()
    with pytest.raises(EffectResultLost):
        plan.send(True)


def test_other_errors_of_the_done_txn_propagate():
    plan = start()
    _claimed(plan, FakeLock(None, "effect:pay/1", 7, NS))
    plan.send("r")
    with pytest.raises(StatekeeperError, match="lost"):
        plan.throw(StatekeeperError("lost", code="client_timeout"))


def test_a_record_not_written_by_the_ledger_is_refused():
    plan = start()
    next(plan)
    with pytest.raises(StatekeeperError) as e:
        plan.send(kv(b"plain text"))
    assert e.value.code == "effect_record_invalid"


def test_effect_keys_are_checked():
    assert check_effect_key("a/b") == "a/b"
    for bad in ("", "a\x00b", "x" * 4001):
        with pytest.raises(InvalidRequest):
            check_effect_key(bad)
    with pytest.raises(TypeError):
        check_effect_key(b"bytes")


def test_list_pages_at_one_revision_and_strips_the_prefix():
    plan = list_plan("pay/", ns=NS, limit=None)
    first = next(plan)
    assert first == Call(
        "range", ("__effects/pay/",), {"ns": NS, "consistency": None, "limit": 1000}
    )
    page1 = RangeResult([kv(rec("done", result=1), key="__effects/pay/1")], 40, True, "c1")
    second = plan.send(page1)
    assert second.kwargs["revision"] == 40 and second.kwargs["continuation"] == "c1"
    out = finish(plan, RangeResult([kv(rec(), key="__effects/pay/2")], 40))
    assert [(r.key, r.state, r.result) for r in out] == [
        ("pay/1", "done", 1),
        ("pay/2", "claimed", None),
    ]


def test_list_after_a_key_reads_from_its_successor_within_the_prefix():
    plan = list_plan("pay/", ns=NS, limit=2, after="pay/1")
    first = next(plan)
    assert first == Call(
        "range",
        (),
        {
            "ns": NS,
            "consistency": None,
            "start": "__effects/pay/1\x01",
            "end": "__effects/pay0",
            "limit": 2,
        },
    )
    out = finish(plan, RangeResult([kv(rec(), key="__effects/pay/2")], 40))
    assert [r.key for r in out] == ["pay/2"]
    before = next(list_plan("pay/", ns=NS, limit=2, after="a"))  # before the prefix: all of it
    assert before.kwargs["start"] == "__effects/pay/"


def test_forget_deletes_the_record_under_the_lock():
    plan = forget_plan("pay/1", ns=NS, ttl=5.0)
    assert next(plan) == Acquire("effect:pay/1", 5.0, False, None, NS)
    lock = FakeLock(None, "effect:pay/1", 7, NS)
    txn = plan.send(lock)
    assert txn.args[1] == ({"op": "delete", "key": RKEY}, {"op": "delete", "key": lock.key})
    assert plan.send(TxnResult(True, 8, [DeleteResult(8, 1), DeleteResult(8, 1)])) == Release()
    assert finish(plan, True) is True
