"""With two of three nodes down a call says "no leader: 1 of 3 nodes reachable" and names
every node (issue 30 item 16), on both clients. Before, it named only the node its last
attempt went to: "cannot connect to :8001", or node-0's "knows no raft leader"; and right
after the leader was killed every retry went back to it (the survivor still named it the
leader), so the message named the dead leader while node-0 answered. The decisions are
sans-IO (client/retry.py, client/base.py; tests/unit/test_retry_reachability.py and
tests/loopback/test_client_transport.py cover their cases)."""

from __future__ import annotations

import asyncio
import time

import pytest

from statekeeper.client import AsyncClient, Client, RetryPolicy
from statekeeper.client.errors import Timeout, Unavailable
from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration

# Short backoff: the give-up message is under test, not the default policy's 8 s.
FAST = RetryPolicy(max_attempts=6, backoff_base=0.02, backoff_max=0.2)


def _knows_a_leader(status: dict) -> bool:
    return status.get("role") == "leader" or bool(status.get("leader_url"))


def _stopped_and_forgotten(lc: LocalCluster) -> str:
    """Stop all nodes but the first; return its URL once it knows no leader."""
    survivor, *others = lc.node_ids
    for nid in others:
        lc.stop_node(nid)
    deadline = time.monotonic() + 30
    while _knows_a_leader(lc.status(survivor) or {}):
        assert time.monotonic() < deadline, lc.status(survivor)
        time.sleep(0.2)
    return lc.url(survivor)


def _leader_killed(lc: LocalCluster) -> str:
    """Kill the leader and one follower; return the other follower's URL at once, while
    it still names the dead leader."""
    leader = lc.leader_id()
    assert leader is not None
    survivor, other = (n for n in lc.node_ids if n != leader)
    lc.kill_node(leader)
    lc.kill_node(other)
    assert (lc.status(survivor) or {}).get("leader_url") == lc.url(leader)
    return lc.url(survivor)


def _check(err: Unavailable, lc: LocalCluster, survivor: str) -> None:
    message = err.message
    assert message.startswith("no leader: 1 of 3 nodes reachable"), message
    assert f'{survivor} answered "' in message
    down = sorted(lc.url(n) for n in lc.node_ids if lc.url(n) != survivor)
    assert "cannot connect to " in message and all(u in message for u in down), message
    assert set(err.details["nodes"]) == {lc.url(n) for n in lc.node_ids}


@pytest.mark.parametrize("fault", [_stopped_and_forgotten, _leader_killed])
def test_both_clients_say_how_many_nodes_answered(cluster: LocalCluster, fault) -> None:
    urls = [cluster.url(n) for n in cluster.node_ids]
    with Client(urls, retry=FAST) as c:
        c.put("k", "v")
    survivor = fault(cluster)
    with Client(urls, retry=FAST) as c:
        with pytest.raises((Unavailable, Timeout)) as put_error:
            c.put("k", "w")
        # A put whose attempt timed out (the survivor took it, then answered 504) ends in
        # outcome_unknown: the summary is its cause, the last attempt's error.
        err = put_error.value
        _check(err if isinstance(err, Unavailable) else err.__cause__, cluster, survivor)
        with pytest.raises(Unavailable) as ei:
            c.get("k")
        _check(ei.value, cluster, survivor)

    async def async_get() -> Unavailable:
        async with AsyncClient(urls, retry=FAST) as c:
            with pytest.raises(Unavailable) as ei:
                await c.get("k")
            return ei.value

    _check(asyncio.run(async_get()), cluster, survivor)
