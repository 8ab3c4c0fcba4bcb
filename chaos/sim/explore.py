"""Exploring seeds until one fails, and shrinking what failed.

explore(): runs seed after seed (a fresh world each: its own schedule, workload and
delays) until one fails or the time is up. shrink(): makes a failing run smaller while it
still fails the same way (same `kind` of its first failure): first whole faults are
dropped, one at a time, over and over until none can go; then the run is cut short (the
fewest steps that still fail, by bisection). What is left replays with
`statekeeper sim run --seed S --steps N --fault "..." ...` (cli.py prints it).

Shrinking keeps the seed: the delays, the clients and the election timeouts are still
drawn from it, so a smaller schedule is another interleaving, and a failure may need the
faults it had; the shrinker keeps whatever it cannot drop without losing the failure.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from statekeeper.chaos.sim import scenario
from statekeeper.chaos.sim.faults import Fault
from statekeeper.chaos.sim.scenario import Verdict


def kind(failure: str) -> str:
    """A failure's kind: its words before the first colon, numbers and node names out."""
    head = failure.split(":", 1)[0]
    head = re.sub(r"\bstep -?\d+\b", "", head)
    head = re.sub(r"\bn\d+(#\d+)?\b", "N", head)
    return re.sub(r"\d+", "#", head).strip()


@dataclass
class Exploration:
    seeds: int = 0
    sim_seconds: float = 0.0
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    faults: int = 0
    failing: Verdict | None = None
    failing_seeds: list[int] = field(default_factory=list)
    stopped: bool = False  # by ^C or SIGTERM: the seed under way is not counted

    def rates(self) -> dict[str, float]:
        hours = max(self.wall_seconds, 1e-9) / 3600.0
        return {
            "seeds_per_hour": self.seeds / hours,
            "sim_seconds_per_hour": self.sim_seconds / hours,
            "faults_per_hour": self.faults / hours,
        }


def explore(
    minutes: float,
    first_seed: int,
    steps: int,
    progress: Callable[[Exploration, Verdict], None] = lambda e, v: None,
    run: Callable[..., Verdict] | None = None,
    stop_at_failure: bool = True,
) -> Exploration:
    """Seeds from `first_seed` until one fails (or, not `stop_at_failure`, until the time is
    up). A ^C or SIGTERM (SystemExit: cli.py) ends it with the seeds finished so far; the
    world under way has taken its disks down on the way out."""
    run = run or scenario.run
    e = Exploration()
    started = time.monotonic()
    seed = first_seed
    while time.monotonic() - started < minutes * 60.0:
        try:
            v = run(seed, steps)
        except (KeyboardInterrupt, SystemExit):
            e.stopped = True
            break
        e.seeds += 1
        e.sim_seconds += v.sim_seconds
        e.cpu_seconds += v.cpu_seconds
        e.faults += len(v.faults)
        e.wall_seconds = time.monotonic() - started
        progress(e, v)
        if not v.ok:
            e.failing_seeds.append(seed)
            if e.failing is None:
                e.failing = v
            if stop_at_failure:
                break
        seed += 1
    e.wall_seconds = time.monotonic() - started
    return e


def shrink(
    failing: Verdict,
    run: Callable[..., Verdict] = scenario.run,
    progress: Callable[[str], None] = lambda line: None,
    budget: int = 30,
) -> Verdict:
    """The smallest run found (at most `budget` more runs) failing as `failing` does."""
    want = kind(failing.failures[0])
    best = failing
    runs = 0

    def still_fails(faults: list[Fault], steps: int) -> Verdict | None:
        nonlocal runs
        runs += 1
        v = run(failing.seed, steps, faults)
        return v if (not v.ok and kind(v.failures[0]) == want) else None

    changed = True
    while changed and runs < budget:
        changed = False
        for i in range(len(best.faults) - 1, -1, -1):
            if runs >= budget:
                break
            trial = best.faults[:i] + best.faults[i + 1 :]
            v = still_fails(trial, best.steps)
            if v is not None:
                progress(f"dropped {best.faults[i].describe()} ({len(trial)} faults left)")
                best, changed = v, True
    lo = max((f.step for f in best.faults), default=0) + 1
    hi = best.steps
    while lo < hi and runs < budget:
        mid = (lo + hi) // 2
        v = still_fails([f for f in best.faults if f.step < mid], mid)
        if v is not None:
            best, hi = v, mid
            progress(f"still fails in {mid} steps")
        else:
            lo = mid + 1
    return best
