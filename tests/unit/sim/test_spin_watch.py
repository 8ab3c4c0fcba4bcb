"""A callback that never returns ends its world with a failure that says where it spun
(chaos/sim/spin_watch.py), instead of wedging the exploration (seed 200061 hung 40 min)."""

from __future__ import annotations

import time

import pytest

from statekeeper.chaos.sim import spin_watch
from statekeeper.chaos.sim.spin_watch import CallbackSpin, SpinWatch
from statekeeper.chaos.sim.world import World


def _wait_for_time_to_pass(seconds: float) -> None:
    """What pysyncobj's AppendEntries loop does: wait, in one callback, for time to pass.
    On virtual time it never does."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        pass


def test_a_callback_waiting_for_virtual_time_ends_the_world(tmp_path, monkeypatch):
    monkeypatch.setattr(spin_watch, "LIMIT_SECONDS", 0.5)

    async def main(w: World) -> None:
        w.loop.call_soon(_wait_for_time_to_pass, 1.0)
        await w.sleep(5.0)

    started = time.perf_counter()
    with pytest.raises(CallbackSpin) as spun:
        World(1, tmp_path).run(main)
    assert time.perf_counter() - started < 10
    assert "_wait_for_time_to_pass" in str(spun.value), spun.value
    assert "at virtual time 0.0" in str(spun.value), spun.value


def test_a_loop_that_keeps_passing_is_left_alone():
    passes = iter(range(10**9))
    with SpinWatch(lambda: next(passes), lambda: 0.0, lambda: None, limit=0.3) as watch:
        time.sleep(1.2)  # no signal: the counter moves at every look
    assert watch.spun is None


def test_a_world_that_takes_its_time_but_returns_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(spin_watch, "LIMIT_SECONDS", 0.5)

    async def main(w: World) -> str:
        for _ in range(20):
            time.sleep(0.05)  # wall time in a callback, but it returns: the loop passes
            await w.sleep(0.1)
        return "done"

    assert World(1, tmp_path).run(main) == "done"


def test_the_run_reports_a_spin_as_its_failure(monkeypatch):
    from statekeeper.chaos.sim import scenario

    def spin(self, main):
        raise CallbackSpin("one callback ran 60 s of wall time without returning, at ...")

    monkeypatch.setattr(World, "run", spin)
    v = scenario.run(1, 10, schedule=[], workload_factory=None, disk_mode="plain")
    assert not v.ok
    assert v.failures == ["spin: one callback ran 60 s of wall time without returning, at ..."]
