"""Archived checkpoints through the agent layer against a real 3-node cluster (issue 30
item 2): after ``archive run --within ckpt``, get_checkpoint, rollback and state_at raise
CheckpointArchived naming the segment the cluster recorded (they answered
checkpoint_not_found before), and read the checkpoint from the archive with
archived="fetch"; both clients."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from statekeeper.client import Archived, AsyncClient, Client
from statekeeper.client.agent import Agent, AsyncAgent, CheckpointArchived
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.agent_helpers import reducer

pytestmark = pytest.mark.integration

SMALL = {"inline_limit": 1024, "chunk_size": 1024, "batch_bytes": 4096}  # pad: chunked


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(n) for n in lc.node_ids]


def _state(s: int) -> dict:
    return {"total": s, "pad": "x" * (3000 if s % 2 else 10)}  # odd steps chunked


def test_archived_checkpoints_are_named_and_fetched(
    shared_cluster: LocalCluster, tmp_path: Path
) -> None:
    ns, url = f"agarch-{uuid.uuid4().hex[:8]}", f"file://{tmp_path}/archive"
    with Client(_urls(shared_cluster), ns=ns, archive_roots=[url]) as c:
        a = Agent(c, "a1", reducer=reducer, initial={}, **SMALL)
        for s in range(1, 7):
            a.log("add", 1, step=s)
            a.checkpoint(_state(s), step=s)
        r = c.archive_run("agent/", within="ckpt", keep_last=3, to=url)
        assert r["sealed_keys"] == 3, r
        seg = r["segments"][0]["segment"]
        with pytest.raises(CheckpointArchived) as e:
            a.get_checkpoint(3)
        assert isinstance(e.value, Archived) and e.value.segment == seg and e.value.ckpt == 3
        assert seg in str(e.value)
        got = a.get_checkpoint(3, archived="fetch")
        assert (got.n, got.step, got.state) == (3, 3, _state(3))
        with pytest.raises(CheckpointArchived) as e:
            a.rollback(to=2)  # looks at the archived #3 first: batched gets say Archived
        assert (e.value.ckpt, e.value.segment) == (3, seg)
        with pytest.raises(CheckpointArchived):
            a.rollback(ckpt=1)
        assert a.state_at(step=2, archived="fetch") == _state(2)
        ck = a.rollback(to=2, archived="fetch")
        assert (ck.n, ck.parent, ck.state) == (7, 2, _state(2))
        ck = a.rollback(ckpt=1, archived="fetch")  # chunked: its chunks stayed live
        assert (ck.n, ck.parent, ck.state) == (8, 1, _state(1))
        assert Agent(c, "a1", reducer=reducer, initial={}).hydrate().state == _state(1)


async def test_the_async_agent_names_and_fetches_them_too(
    shared_cluster: LocalCluster, tmp_path: Path
) -> None:
    ns, url = f"agarch-{uuid.uuid4().hex[:8]}", f"file://{tmp_path}/archive"
    async with AsyncClient(_urls(shared_cluster), ns=ns, archive_roots=[url]) as c:
        a = AsyncAgent(c, "a1", reducer=reducer, initial={}, **SMALL)
        for s in range(1, 5):
            await a.log("add", 1, step=s)
            await a.checkpoint(_state(s), step=s)
        r = await c.archive_run("agent/", within="ckpt", keep_last=2, to=url)
        seg = r["segments"][0]["segment"]
        with pytest.raises(CheckpointArchived) as e:
            await a.get_checkpoint(1)
        assert e.value.segment == seg
        assert (await a.get_checkpoint(1, archived="fetch")).state == _state(1)
        with pytest.raises(CheckpointArchived):
            await a.rollback(to=2)
        ck = await a.rollback(to=2, archived="fetch")
        assert (ck.n, ck.state) == (5, _state(2))
