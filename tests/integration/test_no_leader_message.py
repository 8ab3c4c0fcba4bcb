"""With two of three nodes stopped a call says "no leader: 1 of 3 nodes reachable" and
names every node it tried (issue 30 item 16), on both clients. Before, it named only the
node its last attempt went to ("cannot connect to :8001", or node-0's "knows no raft
leader"), while the question was why no node could serve. The decision is sans-IO
(client/retry.py; tests/unit/test_retry_reachability.py covers its cases)."""

from __future__ import annotations

import asyncio
import time

import pytest

from statekeeper.client import AsyncClient, Client, RetryPolicy
from statekeeper.client.errors import Unavailable
from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration

# Short backoff: the give-up message is under test, not the default policy's 8 s.
FAST = RetryPolicy(max_attempts=6, backoff_base=0.02, backoff_max=0.2)


def _one_node_left(lc: LocalCluster) -> str:
    """Stop all nodes but the first; return its URL once it knows no leader."""
    survivor, *others = lc.node_ids
    for nid in others:
        lc.stop_node(nid)
    deadline = time.monotonic() + 30
    while _knows_a_leader(lc.status(survivor) or {}):
        assert time.monotonic() < deadline, lc.status(survivor)
        time.sleep(0.2)
    return lc.url(survivor)


def _knows_a_leader(status: dict) -> bool:
    return status.get("role") == "leader" or bool(status.get("leader_url"))


def _check(err: Unavailable, lc: LocalCluster, survivor: str) -> None:
    message = err.message
    assert message.startswith("no leader: 1 of 3 nodes reachable"), message
    assert f'{survivor} answered "' in message
    down = [lc.url(n) for n in lc.node_ids if lc.url(n) != survivor]
    assert f"cannot connect to {', '.join(down)}" in message or (
        f"cannot connect to {', '.join(reversed(down))}" in message
    ), message
    assert set(err.details["nodes"]) == {lc.url(n) for n in lc.node_ids}


def test_both_clients_say_how_many_nodes_answered(cluster: LocalCluster) -> None:
    urls = [cluster.url(n) for n in cluster.node_ids]
    with Client(urls, retry=FAST) as c:
        c.put("k", "v")
    survivor = _one_node_left(cluster)
    with Client(urls, retry=FAST) as c:
        with pytest.raises(Unavailable) as ei:
            c.put("k", "w")
        _check(ei.value, cluster, survivor)
        with pytest.raises(Unavailable) as ei:
            c.get("k")
        _check(ei.value, cluster, survivor)

    async def async_get() -> Unavailable:
        async with AsyncClient(urls, retry=FAST) as c:
            with pytest.raises(Unavailable) as ei:
                await c.get("k")
            return ei.value

    _check(asyncio.run(async_get()), cluster, survivor)
