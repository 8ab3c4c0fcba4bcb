"""Restart-to-ready and memory of a running cluster, shared by benchmarks.compare (its
cold-start group) and benchmarks.scaling (restart time and RSS against store size).

restart_follower() stops one follower gracefully (SIGTERM, ClusterControl.stop), starts it
again and polls until it reports ready (ClusterControl.wait_ready, a 50 ms step): the
seconds from the start call to ready are what a node holding this store costs to bring
back. A follower, not the leader, so no election is part of the figure.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from statekeeper.benchmarks.cluster_control import ClusterControl


async def wait_leader(control: ClusterControl, timeout: float = 60.0) -> str:
    """The current leader's member id, polled every 100 ms until one is elected."""
    deadline = time.monotonic() + timeout
    while True:
        leader = await control.leader()
        if leader is not None:
            return leader
        if time.monotonic() > deadline:
            raise TimeoutError("no leader")
        await asyncio.sleep(0.1)


def members_rss(control: ClusterControl) -> dict[str, int | None]:
    """VmRSS in bytes of every member (None: not running)."""
    return {m: control.rss_bytes(m) for m in control.members}


@dataclass(frozen=True)
class Restart:
    member: str
    seconds: float  # start() called -> member ready
    rss_after: int | None  # the restarted member's VmRSS once ready, bytes


async def restart_follower(control: ClusterControl, timeout: float = 900.0) -> Restart:
    """Stop one follower, start it again, and time it until it is ready."""
    leader = await wait_leader(control)
    member = next(m for m in control.members if m != leader)
    await control.stop(member)
    t0 = time.perf_counter()
    await control.start(member)
    await control.wait_ready([member], timeout=timeout)
    seconds = time.perf_counter() - t0
    return Restart(member, seconds, control.rss_bytes(member))
