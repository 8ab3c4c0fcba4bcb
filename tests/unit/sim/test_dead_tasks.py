"""A dead process runs no code, not even its `finally` blocks when the GC finds its
suspended tasks (chaos/sim/loop.py, bury and close_buried): the explorer segfaulted at
seed 1000000 when CPython 3.11's GC closed such coroutines in a garbage cycle. Its
unfinished tasks are kept while the world runs and closed, outermost coroutine first,
when it ends."""

from __future__ import annotations

import asyncio
import gc

from statekeeper.chaos.sim.loop import context_of
from statekeeper.chaos.sim.world import World
from tests.unit.sim.worlds import elect


def test_a_killed_nodes_suspended_task_runs_nothing_until_the_world_ends(tmp_path):
    ran: list[str] = []

    async def inner(never: asyncio.Future) -> None:
        try:
            await never
        finally:
            ran.append("inner finally")

    async def outer(never: asyncio.Future) -> None:
        try:
            await inner(never)
        finally:
            ran.append("outer finally")

    async def main(w: World) -> None:
        await elect(w)
        node = w.nodes["n1"]
        never = w.loop.create_future()
        w.loop.create_task(outer(never), context=context_of(node.process))
        await w.sleep(0.1)  # the task is suspended in inner()
        w.kill("n1")
        del never  # nothing but the dead process's task refers to it now
        for _ in range(3):
            gc.collect()
            await w.sleep(0.5)
        ran.append("world ends")

    World(3, tmp_path / "a").run(main)
    # Before: the GC closed the dropped task during the run, its finally blocks first.
    assert ran == ["world ends", "inner finally", "outer finally"]
