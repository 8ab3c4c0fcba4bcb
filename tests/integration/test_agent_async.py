"""AsyncAgent and AsyncProjection against a real 3-node cluster, for the operations the
other async test does not reach: maybe_checkpoint, checkpoints, get_checkpoint, gc, the
guards on positions, and a projection's live run (long polls) while events arrive."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from statekeeper.client import AsyncClient
from statekeeper.client.agent import (
    AsyncAgent,
    AsyncProjection,
    CheckpointConflict,
    CheckpointNotFound,
    EveryNSteps,
    OnEvent,
)
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.agent_helpers import reducer

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


@pytest.fixture
async def client(shared_cluster: LocalCluster):
    urls = [shared_cluster.url(n) for n in shared_cluster.node_ids]
    async with AsyncClient(urls, ns=f"async-{uuid.uuid4().hex[:8]}") as c:
        yield c


def make(c: AsyncClient, **kw) -> AsyncAgent:
    kw.setdefault("reducer", reducer)
    kw.setdefault("initial", {})
    return AsyncAgent(c, kw.pop("agent_id", "agent-a"), **kw)


async def test_maybe_checkpoint_follows_the_policy(client: AsyncClient) -> None:
    a = make(client, policy=EveryNSteps(3) | OnEvent(lambda e: e == "tool.ok"))
    written = []
    for s in range(1, 8):
        await a.log("add", s, step=s)
        event = "tool.ok" if s == 5 else None
        if await a.maybe_checkpoint({"total": s * (s + 1) // 2}, step=s, event=event):
            written.append(s)
    assert written == [3, 5]  # step 3 by count, 5 by the event; 6 is not 3 after 5
    h = await make(client).hydrate()
    assert (h.state, h.checkpoint.step, h.events_folded) == ({"total": 28}, 5, 2)


async def test_checkpoints_get_checkpoint_and_gc(client: AsyncClient) -> None:
    a = make(client)
    for s in range(1, 6):
        await a.log("add", 1, step=s)
        await a.checkpoint({"total": s}, step=s, metadata={"run": "even" if s % 2 == 0 else "odd"})
    assert [c.n for c in await a.checkpoints(limit=2)] == [5, 4]
    assert [c.step for c in await a.checkpoints(run="odd")] == [5, 3, 1]
    assert [c.n for c in await a.checkpoints(limit=None, before=3)] == [2, 1]
    ck = await make(client).get_checkpoint(2)
    assert (ck.n, ck.step, ck.position, ck.state) == (2, 2, 2, {"total": 2})
    with pytest.raises(CheckpointNotFound):
        await a.get_checkpoint(99)

    real_txn = client.txn

    async def crash(*args, **kw):
        raise SystemExit("crashed before the manifest txn")

    client.txn = crash  # the chunks are written, then the process "dies"
    try:
        with pytest.raises(SystemExit):
            await a.checkpoint({"blob": os.urandom(MIB)}, step=6)
    finally:
        client.txn = real_txn
    assert len((await client.range("agent/agent-a/chunk/", keys_only=True)).kvs) == 3
    assert await make(client).gc() == 3
    assert await make(client).gc() == 0
    assert (await make(client).latest()).state == {"total": 5}


async def test_a_blind_async_checkpoint_is_refused(client: AsyncClient) -> None:
    await make(client).log("add", 1)
    with pytest.raises(CheckpointConflict, match="hydrate"):
        await make(client).checkpoint({})


async def test_projection_runs_live_over_long_polls(client: AsyncClient) -> None:
    a = make(client)
    for i in range(5):
        await a.log("add", i, step=i)
    p = AsyncProjection(client, "sums", "agent/agent-a", reducer, {}, wait=0.5, checkpoint_every=2)
    assert await p.catch_up() == {"total": 10}
    runner = asyncio.create_task(p.run(stop=lambda: p.position >= 8))
    for i in range(3):
        await asyncio.sleep(0.2)
        await a.log("add", 100, step=10 + i)
    assert await asyncio.wait_for(runner, timeout=15) == 3
    assert p.model == {"total": 310} and p.saved_position == 8
    q = AsyncProjection(client, "sums", "agent/agent-a", reducer, {}, wait=0.5)
    assert await q.load() == {"total": 310} and q.position == 8
