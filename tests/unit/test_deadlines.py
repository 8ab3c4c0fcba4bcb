"""Write timeouts from one shared timer (node/api/deadlines.py, issue 28): a write not done in
time gets TimeoutError and its future is cancelled (as asyncio.timeout did), a write done
in time gets its result, and cancelling the waiting task still cancels it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from types import SimpleNamespace

import pytest

from statekeeper.node.api.deadlines import Deadlines
from statekeeper.node.api.routes import Api
from statekeeper.node.api.server import Request
from statekeeper.node.config import local_cluster
from statekeeper.node.errors import status_for


async def _wait(deadlines: Deadlines, fut: asyncio.Future):
    """How node/api/routes.py waits for a write: TimeoutError for the deadline."""
    deadlines.watch(fut)
    try:
        return await fut
    except asyncio.CancelledError:
        if deadlines.timed_out(fut):
            raise TimeoutError from None
        raise


def test_each_write_times_out_at_its_own_deadline_and_answered_ones_do_not() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(0.2)
        stuck_early, answered, stuck_late = (loop.create_future() for _ in range(3))
        started = loop.time()
        waits = [asyncio.ensure_future(_wait(deadlines, stuck_early))]
        await asyncio.sleep(0.1)
        waits.append(asyncio.ensure_future(_wait(deadlines, answered)))
        waits.append(asyncio.ensure_future(_wait(deadlines, stuck_late)))
        await asyncio.sleep(0)
        answered.set_result({"revision": 7})
        with pytest.raises(TimeoutError):
            await waits[0]
        first = loop.time() - started
        assert await waits[1] == {"revision": 7}
        with pytest.raises(TimeoutError):
            await waits[2]
        second = loop.time() - started
        assert 0.2 <= first < 0.3 and second >= 0.3  # each at its own deadline
        assert stuck_early.cancelled() and stuck_late.cancelled()  # as asyncio.timeout did
        assert not deadlines._expired

    asyncio.run(scenario())


def test_a_gathered_batch_times_out_and_its_futures_are_cancelled() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        ops = [loop.create_future(), loop.create_future()]
        ops[0].set_result({"ok": 1})
        with pytest.raises(TimeoutError):
            await _wait(Deadlines(0.05), asyncio.gather(*ops, return_exceptions=True))
        assert ops[1].cancelled()

    asyncio.run(scenario())


def test_cancelling_the_waiting_task_is_a_cancellation_not_a_timeout() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(5.0)
        fut = loop.create_future()
        waiting = asyncio.ensure_future(_wait(deadlines, fut))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert fut.cancelled()
        # The one timer goes on serving later writes.
        later = loop.create_future()
        loop.call_later(0.01, later.set_result, "done")
        assert await _wait(deadlines, later) == "done"

    asyncio.run(scenario())


def test_a_new_event_loop_starts_with_an_empty_queue() -> None:
    deadlines = Deadlines(0.05)

    async def stuck() -> None:
        with pytest.raises(TimeoutError):
            await _wait(deadlines, asyncio.get_running_loop().create_future())

    asyncio.run(stuck())
    asyncio.run(stuck())


def test_the_api_answers_timeout_for_a_put_and_a_batch_that_never_commit() -> None:
    """node/api/routes.py waits for writes through Deadlines: past [raft] request_timeout the
    client gets the timeout error (outcome unknown), and the futures are given up."""
    cfg = local_cluster(secret="s" * 32)
    cfg = dataclasses.replace(cfg, raft=dataclasses.replace(cfg.raft, request_timeout=0.1))
    stuck: list[asyncio.Future] = []

    def write_many(ops: list[dict], size: int) -> list[asyncio.Future]:
        futures = [asyncio.get_running_loop().create_future() for _ in ops]
        stuck.extend(futures)
        return futures

    def write_runs(ops: list[dict], size: int) -> list[tuple[int, asyncio.Future]]:
        return [(len(ops), write_many(ops, size)[0])]

    sm = SimpleNamespace(tokens={}, lease_ns=lambda lease: None)
    raft = SimpleNamespace(leader_known=lambda: True)
    api = Api(
        cfg, "node-0", sm, raft, SimpleNamespace(write_many=write_many, write_runs=write_runs)
    )
    headers = {"host": "127.0.0.1:7000", "content-type": "application/json"}
    put = b'{"ns": "a", "key": "k", "value": "v"}'
    batch = b'{"ops": [{"op": "put", "ns": "a", "key": "k", "value": "v"}]}'
    for path, body in (("/v1/kv/put", put), ("/v1/batch", batch)):
        request = Request("POST", path, "", headers, body, "127.0.0.1:9")
        resp = asyncio.run(api.dispatch(request))
        assert resp.status == status_for("timeout"), resp.body
        assert json.loads(resp.body)["error"]["code"] == "timeout"
    assert len(stuck) == 2 and all(f.cancelled() for f in stuck)
