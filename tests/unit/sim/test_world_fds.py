"""A world leaves no descriptor open behind it (chaos/sim/world.py, _close_leftover_fds):
a killed incarnation never closes its raw descriptors, and an exploration runs hundreds
of worlds in one process (45 more per world before the fix). Nor does a dead node's
unstarted request print "never awaited" (chaos/sim/loop.py, _close_unstarted)."""

from __future__ import annotations

import os
import warnings

from statekeeper.chaos.sim.world import World
from tests.unit.sim.worlds import elect


def _fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def test_a_world_with_a_kill_and_a_restart_leaves_no_descriptor_open(tmp_path):
    async def main(w: World) -> None:
        await elect(w)
        w.kill(w.leaders()[0])
        await w.sleep(2.0)
        for i in ("n0", "n1", "n2"):
            if i not in w.nodes:
                w.start(i)
        await w.sleep(1.0)

    before = _fds()
    World(3, tmp_path / "a").run(main)
    assert _fds() == before


def test_a_request_a_node_never_ran_before_it_died_ends_the_world_without_a_warning(tmp_path):
    async def main(w: World) -> None:
        await elect(w)
        leader = w.leaders()[0]
        w.nodes[leader].start_request({"op": "put", "key": "k", "value": "v"})
        w.kill(leader)  # the request's task never takes its first step
        await w.sleep(1.0)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        World(3, tmp_path / "a").run(main)
    assert not [(w.filename, w.lineno) for w in seen if "never awaited" in str(w.message)]


def test_a_new_world_finalizes_what_earlier_worlds_left_before_it_opens_anything(tmp_path):
    """An explorer's seed 1000008 failed "pread ... .sst: Bad file descriptor" after eight
    earlier seeds in one process (it passes alone, and the same sequence passes once
    World() collects first): an earlier world's object, left to the cyclic GC and
    finalized in the middle of a later world, closed a descriptor number that world had
    reused (which object, not pinned down: RocksDB's files are the ones that failed)."""
    import gc

    finalized: list[str] = []

    class Left:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the cyclic GC frees it

        def __del__(self) -> None:
            finalized.append("earlier world's object")

    gc.disable()  # no collection by the allocation thresholds in between
    try:
        Left()
        assert finalized == []
        w = World(3, tmp_path / "a")
        assert finalized == ["earlier world's object"]
    finally:
        gc.enable()
    w.run(lambda w: w.sleep(0.1))
