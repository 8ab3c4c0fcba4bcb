"""Fencing of the agent layer against a real 3-node cluster (issue 30 item 5): an agent
instance SIGSTOPped past its lock's TTL (Kleppmann's scenario, as test_locks.py plays it
for put) resumes and can neither log nor checkpoint: with ``Agent(..., fence=lock)`` each
write fails FenceMismatch, and its successor's state is what everyone hydrates. The same
for AsyncAgent, with the lock lost by revoking its lease."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from statekeeper.client import AsyncClient, Client, FenceMismatch
from statekeeper.client.agent import Agent, AsyncAgent
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.agent_helpers import reducer
from tests.integration.line_child import LineChild

pytestmark = pytest.mark.integration

CHILD = Path(__file__).with_name("agent_fence_child.py")
ROOT = Path(__file__).resolve().parents[2]


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(i) for i in lc.node_ids]


def _child(urls: list[str], ns: str, agent: str, ttl: float) -> LineChild:
    return LineChild([sys.executable, str(CHILD), ",".join(urls), ns, agent, str(ttl)], ROOT)


def test_a_paused_agent_instance_can_neither_log_nor_checkpoint(
    shared_cluster: LocalCluster,
) -> None:
    """A holds agent a1's lock, logs and checkpoints, and is SIGSTOPped past its TTL; B
    takes the lock, hydrates, logs and checkpoints; A resumes and tries to log and to
    checkpoint with its old fence: both are refused, and a fresh hydrate sees B's state
    and none of A's late events."""
    ns, urls, ttl = f"agfence-{uuid.uuid4().hex[:8]}", _urls(shared_cluster), 2.0
    a = _child(urls, ns, "a1", ttl)
    try:
        fence_a = int(a.expect("ACQUIRED", 30))
        a.send("log")
        assert a.expect("OK", 10) == "1"
        a.send("checkpoint")
        assert a.expect("OK", 10) == "1"
        with Client(urls, ns=ns) as c:
            os.kill(a.proc.pid, signal.SIGSTOP)  # A, keepalive thread included, freezes
            t0 = time.monotonic()
            with c.lock("agent/a1", ttl=10) as lock_b:
                print(f"B took the lock {time.monotonic() - t0:.2f} s after A froze")
                assert lock_b.fence > fence_a
                b = Agent(c, "a1", reducer=reducer, initial={}, fence=lock_b)
                assert b.hydrate().state == {"total": 1}
                b.log("add", 10)
                assert b.checkpoint({"total": 11}).n == 2  # ends the step B logged in
                os.kill(a.proc.pid, signal.SIGCONT)
                a.send("log")  # A still believes it holds the lock
                assert int(a.expect("FENCE_MISMATCH", 10)) == lock_b.fence
                a.send("checkpoint")
                assert int(a.expect("FENCE_MISMATCH", 10)) == lock_b.fence
            h = Agent(c, "a1", reducer=reducer, initial={}).hydrate()
            # A's event 1, B's event 2; none of A's late ones
            assert (h.state, h.checkpoint.n, h.last_seq) == ({"total": 11}, 2, 2)
        a.send("exit")
        a.proc.wait(10)
    finally:
        a.stop()


async def test_an_async_agent_that_lost_its_lock_writes_nothing(
    shared_cluster: LocalCluster,
) -> None:
    ns = f"agfence-{uuid.uuid4().hex[:8]}"
    async with AsyncClient(_urls(shared_cluster), ns=ns) as c:
        lock_a = await c.lock("agent/a2", ttl=10)
        a = AsyncAgent(c, "a2", reducer=reducer, initial={}, fence=lock_a)
        await a.log("add", 1)
        await a.checkpoint({"total": 1}, step=1)
        await lock_a.lease.revoke()  # A's lease is gone (as if it expired): lock lost
        async with c.lock("agent/a2", ttl=10) as lock_b:
            with pytest.raises(FenceMismatch) as e:
                await a.log("add", 5)
            assert e.value.holder_fence == lock_b.fence
            with pytest.raises(FenceMismatch):
                await a.checkpoint({"total": 6}, step=2)
            with pytest.raises(FenceMismatch):
                await a.rollback(ckpt=1)
            b = AsyncAgent(c, "a2", reducer=reducer, initial={}, fence=lock_b)
            assert (await b.hydrate()).state == {"total": 1}
            await b.log("add", 2)
            assert (await b.checkpoint({"total": 3}, step=2)).n == 2
        assert (await c.stream_info("agent/a2")).last_seq == 2
