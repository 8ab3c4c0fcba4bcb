"""Helpers for tests that run a simulated world in-process."""

from __future__ import annotations

from statekeeper.chaos.sim.world import World


async def elect(w: World) -> None:
    """Start n0, n1 and n2 and wait (virtual time) until one of them leads."""
    for i in ("n0", "n1", "n2"):
        w.start(i)
    for _ in range(100):
        await w.sleep(0.1)
        if w.leaders():
            return
    raise AssertionError("no leader")
