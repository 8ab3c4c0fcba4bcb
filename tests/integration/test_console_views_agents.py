"""The console's Agents page data (console/views/agents.py) against a real 3-node cluster
with TLS and auth: the list paged over agents with keys, with a stream only and both, prefix
search; timeline windows that together are history(); state at a step; checkpoint diffs;
the rollback preview equal to what the rollback then does; a reader cannot roll back."""

from __future__ import annotations

import asyncio

import pytest

from statekeeper.client import AsyncClient
from statekeeper.client.agent import AsyncAgent
from statekeeper.client.agent.listing import key_of
from statekeeper.client.errors import PermissionDenied
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.console.views import agents as av
from tests.integration import agent_helpers
from tests.integration.cluster_fixture import mint_token

pytestmark = pytest.mark.integration

# The fixtures of the agent tests: an AsyncClient in a namespace of the test's own.
async_client, ns = agent_helpers.async_client, agent_helpers.ns


async def _make(c: AsyncClient, aid: str, kind: int) -> None:
    a = AsyncAgent(c, aid)
    if kind != 1:
        await a.log("e", {"id": aid})
    if kind != 2:
        for step in range(1, 4):  # several checkpoint keys each: the list skips them
            await a.checkpoint({"id": aid, "step": step}, step=step)


async def test_list_pages_every_agent_once(async_client: AsyncClient, ns: str) -> None:
    client = async_client
    ids = [f"ag-{i:03d}" for i in range(60)] + ["ag", "ag-1-x", "ag.z", "other"]
    sem = asyncio.Semaphore(16)

    async def one(i: int, aid: str) -> None:
        async with sem:
            await _make(client, aid, i % 3)

    await asyncio.gather(*(one(i, a) for i, a in enumerate(ids)))
    got, cursor = [], None
    while True:
        page = await av.list_agents(client, ns, prefix="ag", limit=25, cursor=cursor)
        assert len(page.agents) <= 25
        got += page.agents
        if page.cursor is None:
            break
        cursor = page.cursor
    names = [r.agent for r in got]
    assert names == sorted((a for a in ids if a.startswith("ag")), key=key_of)
    rows = {r.agent: r for r in got}
    assert rows["ag-000"].ckpt == 3 and rows["ag-000"].events == 1
    assert rows["ag-001"].ckpt == 3 and rows["ag-001"].events == 0  # no stream
    assert rows["ag-002"].ckpt is None and rows["ag-002"].events == 1  # a stream only
    assert all(r.last_activity_ms for r in got)


async def test_timeline_windows_state_diff_and_rollback(
    async_client: AsyncClient, ns: str, shared_cluster: LocalCluster
) -> None:
    client = async_client
    a = AsyncAgent(client, "busy")
    for step in range(1, 41):
        await a.log("add", step, step=step)
        if step % 5 == 0:
            await a.checkpoint({"upto": step, "tags": ["x"] * (step // 10)}, step=step)
    full = await a.history()
    rows, before = [], None
    while True:
        w = await av.agent_timeline(client, ns, "busy", before=before, limit=9)
        rows = list(w.rows) + rows
        if w.older is None:
            break
        before = w.older
    assert rows == full

    s = await av.state_at(client, ns, "busy", 12)
    assert s.checkpoint.n == 2 and s.state.data == {"upto": 10, "tags": ["x"]}
    assert [r.step for r in s.events] == [11, 12]

    d = await av.checkpoint_diff(client, ns, "busy", 2, 6)
    assert [(c.op, c.path, c.old, c.new) for c in d.diff.changes] == [
        ("replace", "/upto", 10, 30),
        ("add", "/tags/1", None, "x"),
        ("add", "/tags/2", None, "x"),
    ]

    p = await av.rollback_preview(client, ns, "busy", to=20)
    assert p.possible and p.target.n == 4 and p.current.n == 8
    urls = [shared_cluster.url(n) for n in shared_cluster.node_ids]
    reader = mint_token(shared_cluster, ns=ns, role="reader")
    async with AsyncClient(urls, ns=ns, token=reader) as rc:
        with pytest.raises(PermissionDenied):
            await av.rollback_agent(rc, ns, "busy", to=20, expect_head=p.current.n)
    new = await av.rollback_agent(client, ns, "busy", to=20, expect_head=p.current.n)
    assert new.sha256 == p.target.sha256 and new.step == 20
    after = await av.checkpoint_diff(client, ns, "busy", p.current.n, new.n)
    assert after.diff.changes == p.diff.changes  # the preview named exactly what changed
    assert (await AsyncAgent(client, "busy").latest()).state == p.diff.right.data
