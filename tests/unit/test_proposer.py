"""Proposer (group commit) and the batch endpoint's answers when raft loses or refuses
entries: an answer that says "nothing was applied" must be true (issue 9, defects 5, 6)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from statekeeper.node import entry
from statekeeper.node.api.routes import Api
from statekeeper.node.api.server import Request
from statekeeper.node.config import ClusterConfig, NodeConfig
from statekeeper.node.errors import OpError
from statekeeper.node.proposer import Proposer
from statekeeper.node.raft import SubmitError

PUT = {"op": "put", "ns": "a", "key": "k", "value": b"v", "idempotency_key": None}


def test_a_lost_callback_does_not_wedge_the_proposer() -> None:
    """Defect 5: with one entry in flight and its callback lost (pysyncobj can lose it),
    nothing was ever proposed again until a leader change."""
    calls: list[bytes] = []

    def submit(payload, cb):
        calls.append(payload)
        if len(calls) > 1:
            cb([{"revision": len(calls)}] * len(entry.decode(payload)[1]), None)

    async def main():
        p = Proposer(submit, inflight_timeout=0.2)
        with pytest.raises(OpError) as lost:
            await asyncio.wait_for(p.write(dict(PUT)), 2.0)
        assert lost.value.code == "timeout"  # outcome unknown, not "not applied"
        assert await asyncio.wait_for(p.write(dict(PUT)), 2.0) == {"revision": 2}
        await asyncio.wait_for(p.barrier(), 2.0)

    asyncio.run(main())


def test_a_late_callback_after_expiry_is_ignored() -> None:
    held = []

    def submit(payload, cb):
        held.append(cb)

    async def main():
        p = Proposer(submit, inflight_timeout=0.05)
        with pytest.raises(OpError):
            await p.write(dict(PUT))
        held[0]([{"revision": 1}], None)  # arrives late: nothing to resolve, nothing raised
        await asyncio.sleep(0.01)

    asyncio.run(main())


def test_submit_raising_means_outcome_unknown() -> None:
    """Defect 6: pysyncobj queues the command, then may raise (a full wake-up pipe); the
    proposer answered "unavailable: nothing was applied" for a command that was applied."""

    def submit(payload, cb):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    async def main():
        p = Proposer(submit)
        with pytest.raises(OpError) as e:
            await p.write(dict(PUT))
        assert e.value.code == "timeout"
        assert "may or may not" in e.value.message

    asyncio.run(main())


def test_an_explicit_no_leader_still_says_not_applied() -> None:
    def submit(payload, cb):
        cb(None, SubmitError.NO_LEADER)

    async def main():
        p = Proposer(submit)
        with pytest.raises(OpError) as e:
            await p.write(dict(PUT))
        assert e.value.code == "unavailable"

    asyncio.run(main())


def test_write_many_queues_a_batch_into_one_entry_with_one_future_per_op() -> None:
    """A client batch's writes go in without a coroutine per op; each op still gets its
    own result, in order, and the entry size bound still splits them."""
    entries: list[list[dict]] = []

    def submit(payload, cb):
        ops = entry.decode(payload)[1]
        entries.append(ops)
        cb([{"revision": i, "key": op["key"]} for i, op in enumerate(ops)], None)

    async def main(max_entry_bytes: int) -> list:
        p = Proposer(submit, max_entry_bytes=max_entry_bytes)
        ops = [dict(PUT, key=f"k{i}") for i in range(5)]
        futures = p.write_many(ops, size_hint=10)
        assert len(futures) == 5 and not any(f.done() for f in futures)
        return await asyncio.gather(*futures)

    results = asyncio.run(main(1 << 20))
    assert len(entries) == 1 and [r["key"] for r in results] == [f"k{i}" for i in range(5)]
    entries.clear()
    results = asyncio.run(main(25))  # 10 bytes an op: two ops an entry
    assert [len(e) for e in entries] == [2, 2, 1]
    assert [r["key"] for r in results] == [f"k{i}" for i in range(5)]


def test_write_runs_gives_one_future_per_entry_with_its_ops_results_in_order() -> None:
    """A batch's ops get one future per raft entry they share (not one per op): the
    future of a run holds the results of exactly its ops, in order, also when the entry
    size bound splits the batch, and when the run starts behind ops queued before it."""
    entries: list[list[dict]] = []

    def submit(payload, cb):
        ops = entry.decode(payload)[1]
        entries.append(ops)
        cb([{"key": op["key"]} for op in ops], None)

    async def main(max_entry_bytes: int) -> tuple[list, list]:
        p = Proposer(submit, max_entry_bytes=max_entry_bytes)
        single = p.write_many([dict(PUT, key="before")], size_hint=10)
        runs = p.write_runs([dict(PUT, key=f"k{i}") for i in range(5)], size_hint=10)
        assert not any(f.done() for _, f in runs)
        return [n for n, _ in runs], [await f for _, f in runs] + [await single[0]]

    sizes, got = asyncio.run(main(1 << 20))
    assert sizes == [5] and len(entries) == 1
    assert got == [[{"key": f"k{i}"} for i in range(5)], {"key": "before"}]
    entries.clear()
    sizes, got = asyncio.run(main(25))  # 10 bytes an op: two ops an entry
    assert [len(e) for e in entries] == [2, 2, 2] and sizes == [1, 2, 2]
    assert got[:3] == [
        [{"key": "k0"}],
        [{"key": "k1"}, {"key": "k2"}],
        [{"key": "k3"}, {"key": "k4"}],
    ]


def test_write_runs_fail_with_their_entry() -> None:
    """A run of an entry that fails (no leader) raises the entry's error, like write()."""

    def submit(payload, cb):
        cb(None, SubmitError.NO_LEADER)

    async def main():
        p = Proposer(submit)
        [(n, fut)] = p.write_runs([dict(PUT, key="a"), dict(PUT, key="b")])
        assert n == 2
        with pytest.raises(OpError) as e:
            await fut
        return e.value.code

    assert asyncio.run(main()) == "unavailable"


def _api(submit) -> Api:
    cfg = ClusterConfig(
        nodes=(NodeConfig(id="n0", host="127.0.0.1", raft_port=1, http_port=2),), secret="s"
    )
    raft = SimpleNamespace(leader_known=lambda: True, is_leader=lambda: True)
    # One op per entry, so a two-put batch becomes two raft entries.
    proposer = Proposer(submit, max_entry_bytes=1)
    return Api(cfg, "n0", sm=None, raft=raft, proposer=proposer)


def _batch(api: Api, n: int) -> tuple[int, dict]:
    body = {"ops": [{"op": "put", "key": f"k{i}", "value": "v"} for i in range(n)]}
    req = Request(
        "POST", "/v1/batch", "", {"content-type": "application/json"}, json.dumps(body).encode()
    )
    resp = asyncio.run(api.dispatch(req))
    return resp.status, json.loads(resp.body)


def test_batch_split_over_entries_reports_each_outcome() -> None:
    """Defect 6: a batch split over two entries answered 503 "nothing was applied" when
    only the second entry failed; the first op WAS applied."""
    entries = []

    def submit(payload, cb):
        entries.append(payload)
        if len(entries) == 1:
            cb([{"revision": 1}], None)
        else:
            cb(None, SubmitError.NO_LEADER)

    status, body = _batch(_api(submit), 2)
    assert len(entries) == 2
    assert status == 200, body
    assert body["results"][0] == {"revision": 1}
    assert body["results"][1]["error"]["code"] == "unavailable"


def test_batch_whose_entries_all_failed_says_the_weakest_claim() -> None:
    outcomes = iter([SubmitError.NO_LEADER, SubmitError.OUTCOME_UNKNOWN])

    def submit(payload, cb):
        cb(None, next(outcomes))

    status, body = _batch(_api(submit), 2)
    assert status == 504 and body["error"]["code"] == "timeout"

    status, body = _batch(_api(lambda payload, cb: cb(None, SubmitError.NO_LEADER)), 2)
    assert status == 503 and body["error"]["code"] == "unavailable"


def test_results_from_the_loop_thread_do_not_wake_the_loop_through_its_descriptor() -> None:
    """Issue 28: raft runs on the node's own loop, so an applied entry's results are handed
    over with call_soon; call_soon_threadsafe cost a write and a read of the loop's wake-up
    descriptor per entry. From another thread (raft on a thread of its own) it stays
    call_soon_threadsafe, or the loop would not wake."""
    import threading

    def on_loop(payload, cb):
        cb([{"revision": 1}] * len(entry.decode(payload)[1]), None)

    def on_thread(payload, cb):
        threading.Thread(target=on_loop, args=(payload, cb)).start()

    async def main(submit):
        loop = asyncio.get_running_loop()
        woken = []
        real = loop.call_soon_threadsafe

        def counting(*args, **kwargs):
            woken.append(args[0])
            return real(*args, **kwargs)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        p = Proposer(submit)
        assert await asyncio.wait_for(p.write(dict(PUT)), 2.0) == {"revision": 1}
        return woken

    assert asyncio.run(main(on_loop)) == []
    assert len(asyncio.run(main(on_thread))) == 1


def test_an_entry_over_the_raft_bound_is_413_and_nothing_was_applied() -> None:
    """raft refuses an entry over RAFT_ENTRY_LIMIT_BYTES before queueing it (RaftNode.submit):
    the client gets 413 request_too_large, saying nothing was applied."""
    status, body = _batch(_api(lambda payload, cb: cb(None, SubmitError.ENTRY_TOO_LARGE)), 1)
    assert status == 413 and body["error"]["code"] == "request_too_large", body
    assert "nothing was applied" in body["error"]["message"]
