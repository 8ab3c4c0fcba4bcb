"""The Coordination page's data (console/views/coordination.py) against a real 3-node
cluster (TLS and auth): a lock changing holder seen with the new fence, a lease's TTL
counting down with its keys, an effect that maybe happened, a CRDT's value and replicas."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from statekeeper.client import AsyncClient
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.console.views import coordination as view
from tests.integration.cluster_fixture import mint_token

pytestmark = pytest.mark.integration


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(n) for n in lc.node_ids]


def _ns() -> str:
    return f"coord-{uuid.uuid4().hex[:8]}"


async def test_a_lock_changing_holder_shows_the_new_fence(shared_cluster: LocalCluster) -> None:
    async with AsyncClient(_urls(shared_cluster), ns=_ns()) as c:
        first = await c.lock("job", ttl=10, owner="pod-a")
        waiting = asyncio.ensure_future(c.lock("job", ttl=10, owner="pod-b"))
        await asyncio.sleep(0.3)
        page = await view.locks(c)
        (row,) = page.locks
        assert (row.holder_fence, row.holder_owner, row.count) == (first.fence, "pod-a", 2)
        await first.release()
        second = await asyncio.wait_for(waiting, 10)
        (row,) = (await view.locks(c)).locks
        assert (row.holder_fence, row.holder_owner, row.count) == (second.fence, "pod-b", 1)
        assert second.fence > first.fence
        await second.release()
        assert (await view.locks(c)).locks == ()


async def test_a_lease_counts_down_with_its_keys(shared_cluster: LocalCluster) -> None:
    ns = _ns()
    async with AsyncClient(_urls(shared_cluster), ns=ns) as c:
        lease = await c.lease_grant(30)
        await c.put("session/a", b"1", lease=lease)
        await c.put("session/b", b"2", lease=lease)
        (before,) = (await view.leases(c)).leases
        await asyncio.sleep(1.2)
        # lease_info's remaining_ms is against the replicated clock, which moves with raft
        # entries: on an idle cluster it stands still (a loaded one writes all the time)
        await c.put("elsewhere", b"tick")
        page = await view.leases(c)
        (after,) = page.leases
        assert page.complete and after.lease_id == lease.id
        assert after.keys == ("session/a", "session/b") and after.ttl_ms == 30_000
        assert 0 < after.remaining_ms <= before.remaining_ms - 1000

    reader = mint_token(shared_cluster, ns=ns, role="writer")
    async with AsyncClient(_urls(shared_cluster), ns=ns, token=reader) as c:
        held = await c.lock("job", ttl=10)
        page = await view.leases(c)  # no lease_list for this token: the locks' leases
        assert not page.complete and page.note
        assert [r.lease_id for r in page.leases] == [held.lease.id]
        await held.release()


async def test_an_effect_that_maybe_happened(shared_cluster: LocalCluster) -> None:
    async with AsyncClient(_urls(shared_cluster), ns=_ns()) as c:
        assert await c.effects.run("pay/1", lambda ctx: {"receipt": 1}) == {"receipt": 1}

        def boom(ctx):
            raise RuntimeError("bank timed out")

        with pytest.raises(RuntimeError):
            await c.effects.run("pay/2", boom)
        page = await view.effects(c, prefix="pay/", limit=1)
        assert [(r.key, r.state, r.maybe_happened) for r in page.effects] == [
            ("pay/1", "done", False)
        ]
        assert page.effects[0].result == {"receipt": 1}
        page = await view.effects(c, prefix="pay/", cursor=page.next_cursor)
        (row,) = page.effects
        assert (row.key, row.state, row.attempt, row.maybe_happened, row.in_progress) == (
            "pay/2", "claimed", 1, True, False,
        )  # fmt: skip
        assert "bank timed out" in row.error and page.next_cursor is None


async def test_a_crdt_with_its_value_and_replicas(shared_cluster: LocalCluster) -> None:
    async with AsyncClient(_urls(shared_cluster), ns=_ns()) as c:
        a = c.crdt.counter("visits", replica_id="r-a", autosave=False)
        b = c.crdt.counter("visits", replica_id="r-b", autosave=False)
        a.increment(5)
        b.decrement(2)
        await a.sync()
        await b.sync()
        await c.put("visits-plain", b"not a crdt")
        page = await view.crdts(c, prefix="visits")
        assert [(r.key, r.type, r.value, r.replicas, r.per_replica) for r in page.crdts] == [
            ("visits", "pncounter", 3, ("r-a", "r-b"), {"r-a": 5, "r-b": -2})
        ]
        assert page.scanned == 2 and (await c.crdt_get("visits")).value == 3
