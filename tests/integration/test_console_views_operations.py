"""The Operations page's data (console/views/operations.py) against a real 3-node cluster
(TLS and auth): members, the backup link (allowed for an admin of every namespace only),
retention policies with what they hold and free, archive segments."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from statekeeper.client import AsyncClient
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.console.views import operations as view
from tests.integration.cluster_fixture import mint_token

pytestmark = pytest.mark.integration


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(n) for n in lc.node_ids]


async def test_members_with_the_leader_and_paging(shared_cluster: LocalCluster) -> None:
    async with AsyncClient(_urls(shared_cluster)) as c:
        page = await view.members(c)
        st = await c.status()
        assert [m.id for m in page.members] == sorted(shared_cluster.node_ids)
        assert page.leader_id == st["leader"] and not page.change_pending
        assert [m.id for m in page.members if m.is_leader] == [st["leader"]]
        assert all(m.url.startswith("https://") and m.raft_address for m in page.members)
        first = await view.members(c, limit=2)
        rest = await view.members(c, cursor=first.next_cursor)
        assert [m.id for m in (*first.members, *rest.members)] == [m.id for m in page.members]


async def test_backup_link_is_allowed_for_an_admin_of_every_namespace_only(
    shared_cluster: LocalCluster,
) -> None:
    async with AsyncClient(_urls(shared_cluster)) as c:
        link = await view.backup(c)
        assert link.path == "/v1/admin/backup" and link.allowed
        assert link.store_bytes and link.store_bytes > 0 and link.revision is not None
    ns_admin = mint_token(shared_cluster, ns="ops-x", role="admin")
    async with AsyncClient(_urls(shared_cluster), token=ns_admin, ns="ops-x") as c:
        assert not (await view.backup(c)).allowed


async def test_retention_policies_hold_and_free(shared_cluster: LocalCluster) -> None:
    ns = f"ops-{uuid.uuid4().hex[:8]}"
    async with AsyncClient(_urls(shared_cluster), ns=ns) as c:
        for n in range(1, 6):
            await c.put(f"agent/a1/ckpt/{n:012d}", b"x" * 100)
        await c.retention_set("agent/", within="ckpt", keep_last=2)
        await c.retention_set("logs/", keep_last=10)
        page = await view.retention(c)
        assert [(p.prefix, p.keep_last, p.within) for p in page.policies] == [
            ("agent/", 2, "ckpt"),
            ("logs/", 10, None),
        ]
        agent = page.policies[0]
        assert agent.holds["keys"] == 5 and agent.holds["groups"] == 1
        assert agent.frees["keys"] == 3 and agent.frees["bytes"] >= 300
        assert page.compact_revision is not None
        first = await view.retention(c, limit=1, with_status=False)
        assert first.policies[0].holds is None and first.next_cursor
        rest = await view.retention(c, cursor=first.next_cursor)
        assert [p.prefix for p in rest.policies] == ["logs/"] and rest.next_cursor is None


async def test_archive_segments(shared_cluster: LocalCluster, tmp_path: Path) -> None:
    ns = f"ops-{uuid.uuid4().hex[:8]}"
    async with AsyncClient(_urls(shared_cluster), ns=ns, archive_roots=[str(tmp_path)]) as c:
        for n in range(1, 6):
            await c.put(f"agent/a1/ckpt/{n:012d}", b"v%d" % n)
        r = await c.archive_run("agent/", within="ckpt", keep_last=2, to=str(tmp_path))
        page = await view.archive_segments(c)
        (seg,) = page.segments
        assert seg.id == r["segments"][0]["segment"] and seg.keys == 3 and seg.ns == ns
        assert seg.bytes > 0 and len(seg.sha256) == 64 and page.next_cursor is None
