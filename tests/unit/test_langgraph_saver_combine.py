"""The saver's client-side group commit (client/langgraph/saver_combine.py), over a fake
blocking client whose first txn is held in flight until the test lets it go: a lone txn is
sent as itself; txns issued meanwhile go out as one batch and each caller gets its own
result or error; a batch the server refuses as invalid is resent txn by txn; a
request-level failure reaches every caller of that batch; groups respect the limits."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from statekeeper.client.errors import InvalidRequest, Unavailable
from statekeeper.client.langgraph.saver_codec import Limits
from statekeeper.client.langgraph.saver_combine import CombinedClient, TxnCombiner
from statekeeper.client.ops import ops
from statekeeper.client.plan import Call, run


class FakeBatch:
    def __init__(self, client: FakeClient, ns: str | None) -> None:
        self.client, self.ns, self.txns = client, ns, []

    def txn(self, compare: Any, success: Any, failure: Any = (), **kw: Any) -> FakeBatch:
        self.txns.append(success[0]["key"])
        return self

    def execute(self) -> list[Any]:
        self.client.sent.append(("batch", tuple(self.txns)))
        if self.client.batch_error is not None:
            raise self.client.batch_error
        return [self.client.answer(k) for k in self.txns]


class FakeClient:
    """txn/batch answers: ``("ok", key)``, or the error in ``errors[key]``."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.errors: dict[str, Exception] = {}
        self.batch_error: Exception | None = None
        self.hold = threading.Event()  # the first txn waits for it
        self.in_flight = threading.Event()

    def answer(self, key: str) -> Any:
        return self.errors.get(key, ("ok", key))

    def txn(self, compare: Any, success: Any, failure: Any = (), **kw: Any) -> Any:
        key = success[0]["key"]
        self.sent.append(("txn", key))
        if len(self.sent) == 1:
            self.in_flight.set()
            assert self.hold.wait(5)
        r = self.answer(key)
        if isinstance(r, Exception):
            raise r
        return r

    def batch(self, *, ns: str | None = None, consistency: str | None = None) -> FakeBatch:
        return FakeBatch(self, ns)


def txn_call(key: str, value: bytes = b"v") -> Call:
    return Call("txn", ([], [ops.put(key, value)], []), {"ns": "lg"})


def run_concurrently(
    comb: TxnCombiner, client: FakeClient, keys: list[str], waiting: int | None = None
) -> dict[str, Any]:
    """``first`` goes alone and is held in flight while ``keys`` are issued (``waiting``
    of them queue: all of them with one sender)."""
    out: dict[str, Any] = {}

    def call(key: str) -> None:
        try:
            out[key] = comb.txn(txn_call(key))
        except BaseException as e:  # noqa: BLE001 - the test reads what each caller got
            out[key] = e

    first = threading.Thread(target=call, args=("first",))
    first.start()
    assert client.in_flight.wait(5)
    rest = [threading.Thread(target=call, args=(k,)) for k in keys]
    for t in rest:
        t.start()
    deadline = time.monotonic() + 5
    while len(comb._queue) < (len(keys) if waiting is None else waiting) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.005)
    client.hold.set()
    for t in [first, *rest]:
        t.join(5)
    return out


def test_a_lone_txn_is_sent_as_a_txn() -> None:
    client = FakeClient()
    client.hold.set()
    comb = TxnCombiner(client, Limits(), senders=1)
    assert comb.txn(txn_call("a")) == ("ok", "a")
    assert comb.txn(txn_call("b")) == ("ok", "b")
    assert client.sent == [("txn", "a"), ("txn", "b")]


def test_txns_issued_while_one_is_in_flight_go_as_one_batch() -> None:
    client = FakeClient()
    client.errors["c"] = Unavailable("c failed alone")
    comb = TxnCombiner(client, Limits(), senders=1)
    out = run_concurrently(comb, client, ["a", "b", "c"])
    assert client.sent[0] == ("txn", "first")
    assert client.sent[1][0] == "batch" and sorted(client.sent[1][1]) == ["a", "b", "c"]
    assert len(client.sent) == 2
    assert out["first"] == ("ok", "first")
    assert out["a"] == ("ok", "a") and out["b"] == ("ok", "b")
    assert isinstance(out["c"], Unavailable)  # its own error, to it only
    assert not comb._in_flight and not comb._queue


def test_a_batch_refused_as_invalid_is_resent_txn_by_txn() -> None:
    client = FakeClient()
    client.batch_error = InvalidRequest("one op is bad", code="too_large")
    client.errors["b"] = InvalidRequest("b is too large", code="too_large")
    comb = TxnCombiner(client, Limits(), senders=1)
    out = run_concurrently(comb, client, ["a", "b"])
    assert client.sent[1][0] == "batch"
    assert sorted(client.sent[2:]) == [("txn", "a"), ("txn", "b")]
    assert out["a"] == ("ok", "a")
    assert isinstance(out["b"], InvalidRequest) and "b is too large" in str(out["b"])


def test_a_request_level_failure_reaches_every_caller_of_the_batch() -> None:
    client = FakeClient()
    client.batch_error = Unavailable("no leader")
    comb = TxnCombiner(client, Limits(), senders=1)
    out = run_concurrently(comb, client, ["a", "b"])
    assert out["first"] == ("ok", "first")
    assert all(isinstance(out[k], Unavailable) for k in ("a", "b"))
    assert not comb._in_flight


def test_callers_of_a_batch_whose_sender_is_interrupted_get_an_unknown_outcome() -> None:
    client = FakeClient()
    client.batch_error = KeyboardInterrupt()  # not an Exception: escapes the sender
    comb = TxnCombiner(client, Limits(), senders=1)
    out = run_concurrently(comb, client, ["a", "b"])
    sender = [k for k in ("a", "b") if isinstance(out[k], KeyboardInterrupt)]
    others = [k for k in ("a", "b") if k not in sender]
    assert len(sender) == 1 and len(others) == 1
    assert isinstance(out[others[0]], Unavailable)  # not a silent None
    assert comb._in_flight == 0 and not comb._queue


def test_groups_stay_within_the_op_limit() -> None:
    client = FakeClient()
    comb = TxnCombiner(client, Limits(ops=5), senders=1)  # each txn here counts 2 ops
    out = run_concurrently(comb, client, ["a", "b", "c", "d", "e"])
    batches = [s for s in client.sent[1:]]
    assert all(len(b[1]) <= 2 for b in batches if b[0] == "batch")
    assert sorted(k for b in batches for k in (b[1] if b[0] == "batch" else (b[1],))) == list(
        "abcde"
    )
    assert all(out[k] == ("ok", k) for k in "abcde")


def test_a_plan_run_over_the_combined_client_sends_its_txns_through_the_combiner() -> None:
    client = FakeClient()
    client.hold.set()
    client.get = lambda key, **kw: ("got", key)  # type: ignore[attr-defined]

    def plan():
        got = yield Call("get", ("k",), {})
        r = yield txn_call("t")
        try:
            yield txn_call("bad")
        except Unavailable:
            return got, r, "caught"

    client.errors["bad"] = Unavailable("down")
    assert run(CombinedClient(client, TxnCombiner(client, Limits(), senders=1)), plan()) == (
        ("got", "k"),
        ("ok", "t"),
        "caught",
    )
    assert client.sent == [("txn", "t"), ("txn", "bad")]


def test_with_two_senders_a_second_txn_is_not_held_behind_the_first() -> None:
    """A graph step's checkpoint put must not wait behind that step's put_writes."""
    client = FakeClient()
    comb = TxnCombiner(client, Limits(), senders=2)
    out: dict[str, Any] = {}
    first = threading.Thread(target=lambda: out.update(first=comb.txn(txn_call("first"))))
    first.start()
    assert client.in_flight.wait(5)
    assert comb.txn(txn_call("second")) == ("ok", "second")  # while "first" is held
    client.hold.set()
    first.join(5)
    assert client.sent == [("txn", "first"), ("txn", "second")] and out["first"]
    assert comb._in_flight == 0


@pytest.mark.parametrize("threads", [8])
def test_many_threads_each_get_their_own_result(threads: int) -> None:
    client = FakeClient()
    client.hold.set()
    comb = TxnCombiner(client, Limits())
    out: dict[str, Any] = {}

    def worker(i: int) -> None:
        for j in range(50):
            key = f"{i}-{j}"
            out[key] = comb.txn(txn_call(key))

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert len(out) == threads * 50 and all(v == ("ok", k) for k, v in out.items())
    assert not comb._in_flight and not comb._queue
