"""Lost leases and locks against a real cluster, through both clients (issue 30 item 9,
etcd's Session.Done()): ``lease.on_lost(fn)`` fires once and ``lock.lost`` is set when
another client revokes the lease (the keepalive answers "not found"), and when keepalives
fail for longer than the TTL; a lease or lock released by its owner never fires."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from statekeeper.client import AsyncClient, Client, Unavailable
from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration

TTL = 2.0


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(i) for i in lc.node_ids]


def _ns() -> str:
    return f"lost-{uuid.uuid4().hex[:8]}"


def _until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _down(*a: Any, **kw: Any) -> Any:
    raise Unavailable("keepalives cut off by the test", code="unavailable")


async def _adown(*a: Any, **kw: Any) -> Any:
    raise Unavailable("keepalives cut off by the test", code="unavailable")


def test_a_lease_revoked_by_another_client_fires_on_lost_once_and_its_lock_is_lost(
    shared_cluster: LocalCluster,
) -> None:
    ns = _ns()
    fired: list[Any] = []
    with Client(_urls(shared_cluster), ns=ns) as c, Client(_urls(shared_cluster), ns=ns) as other:
        lease = c.lease(TTL)
        lease.on_lost(fired.append)
        lock = c.lock("job", TTL)
        kept = c.lease(TTL)  # released by its owner: never lost
        kept.on_lost(fired.append)
        assert not lock.lost.is_set()
        other.lease_revoke(lease.id)
        other.lease_revoke(lock.lease.id)
        assert lock.lost.wait(TTL + 3), "lock.lost not set after its lease was revoked"
        _until(lambda: fired == [lease], TTL + 3, "lease.on_lost")
        assert not lock.held and not lease.alive
        kept.revoke()
        time.sleep(TTL)  # more keepalive ticks: nothing fires again
        assert fired == [lease]
        late: list[Any] = []
        lease.on_lost(late.append)  # registered after the loss: called at once
        assert late == [lease]
        assert lock.release() is False


def test_keepalives_failing_past_the_ttl_fire_on_lost_once(shared_cluster: LocalCluster) -> None:
    fired: list[Any] = []
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        lease = c.lease(TTL)
        lost = threading.Event()
        lease.on_lost(lambda x: (fired.append(x), lost.set()))
        lock = c.lock("job", TTL)
        time.sleep(TTL / 2)
        assert not lost.is_set() and lock.held
        c.lease_keepalive = _down  # type: ignore[method-assign]
        started = time.monotonic()
        assert lost.wait(TTL + 3), "on_lost not called after keepalives failed past the TTL"
        assert time.monotonic() - started <= TTL + 1.5
        assert lock.lost.wait(1.0) and not lock.held
        time.sleep(1.0)
        assert fired == [lease]


async def test_async_lease_and_lock_lost_by_revoke_and_by_failing_keepalives(
    shared_cluster: LocalCluster,
) -> None:
    ns = _ns()
    fired: list[Any] = []
    async with AsyncClient(_urls(shared_cluster), ns=ns) as c:
        async with AsyncClient(_urls(shared_cluster), ns=ns) as other:
            lease = await c.lease(TTL)
            lease.on_lost(fired.append)
            lock = await c.lock("job", TTL)
            await other.lease_revoke(lease.id)
            await other.lease_revoke(lock.lease.id)
            await asyncio.wait_for(lock.lost.wait(), TTL + 3)
            for _ in range(100):
                if fired:
                    break
                await asyncio.sleep(0.05)
            assert fired == [lease] and not lock.held

            second = await c.lease(TTL)
            second.on_lost(fired.append)
            lock2 = await c.lock("job2", TTL)
            c.lease_keepalive = _adown  # type: ignore[method-assign]
            await asyncio.wait_for(lock2.lost.wait(), TTL + 3)
            await asyncio.sleep(1.0)
            assert fired == [lease, second]
