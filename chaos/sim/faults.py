"""Fault schedules: drawn from a seed up front, so a failing run can be shrunk by
running the same seed with fewer of its faults (explore.py).

A schedule is a list of Faults, each at a step of the run (a step is STEP seconds of
virtual time). What each kind does (World methods, scenario.py):
    kill N          the node's process dies (its connections see a FIN); back after `hold` s
    power N         the machine loses power: connections go silent, unsynced writes are
                    lost (disk.py); back after `hold` s
    disk N          the node loses its data dir (a new disk); back after `hold` s, empty
    partition A B   A and B cannot reach each other for `hold` s (both ways)
    isolate N       N reaches nobody for `hold` s
    pause N         the process stops (SIGSTOP) for `hold` s, then runs what it held
    clock N         N's wall clock jumps by `amount` s (monotonic time keeps its rate)
    reset N         every connection of N is reset at once
    snapshot N      N (if it leads) compacts its journal now: a lagging follower then
                    needs a snapshot install
    replace N       N is removed through the log, killed, its disk replaced, and added back
    crashpoint P    every node exits at failpoint P with probability `amount` % (for `hold`
                    s): a crash at one exact instruction (node/failpoints.py names them)
"""

from __future__ import annotations

import random
from dataclasses import dataclass

STEP = 0.01  # seconds of virtual time per step

KINDS = (
    "kill",
    "power",
    "disk",
    "partition",
    "isolate",
    "pause",
    "clock",
    "reset",
    "snapshot",
    "replace",
    "crashpoint",
)
CRASHPOINTS = (
    "snapshot-after-rename",
    "journal-prefix-drop",
    "journal-prefix-dropped",
    "snapshot-install",
    "follower-after-fsync",
)


@dataclass(frozen=True)
class Fault:
    step: int
    kind: str
    node: str = ""
    other: str = ""
    hold: float = 0.0  # seconds until it is undone (restart, heal, resume)
    amount: float = 0.0

    def describe(self) -> str:
        parts = [f"@{self.step}", self.kind]
        if self.node:
            parts.append(self.node)
        if self.other:
            parts.append(self.other)
        if self.hold:
            parts.append(f"hold={self.hold:.2f}s")
        if self.amount:
            parts.append(f"amount={self.amount:g}")
        return " ".join(parts)


# How often each kind is drawn (weights), tuned so a run of a few hundred steps meets
# several faults and the cluster still makes progress between them.
WEIGHTS = {
    "kill": 4,
    "power": 3,
    "disk": 2,
    "partition": 3,
    "isolate": 2,
    "pause": 2,
    "clock": 1,
    "reset": 2,
    "snapshot": 2,
    "replace": 1,
    "crashpoint": 2,
}


def schedule(
    rng: random.Random, steps: int, nodes: list[str], mean_gap: float = 1.5
) -> list[Fault]:
    """Faults for a run of `steps` steps: one every `mean_gap` s of virtual time on average
    (exponential gaps), none in the first second (the cluster elects its first leader)."""
    out: list[Fault] = []
    kinds = list(WEIGHTS)
    weights = [WEIGHTS[k] for k in kinds]
    t = 1.0 + rng.expovariate(1.0 / mean_gap)
    while t < steps * STEP:
        kind = rng.choices(kinds, weights)[0]
        node = rng.choice(nodes)
        other = rng.choice([n for n in nodes if n != node])
        hold = round(rng.uniform(0.2, 4.0), 2)
        amount = 0.0
        if kind == "clock":
            amount = rng.choice((-30.0, 30.0, 3600.0, 25 * 3600.0))
        elif kind == "crashpoint":
            node = rng.choice(CRASHPOINTS)
            amount = rng.choice((10.0, 30.0, 60.0))
            other = ""
        if kind not in ("partition",):
            other = "" if kind != "crashpoint" else other
        out.append(Fault(int(t / STEP), kind, node, other, hold, amount))
        t += rng.expovariate(1.0 / mean_gap)
    return out


def parse(text: str) -> Fault:
    """The inverse of Fault.describe (for traces pasted back in)."""
    parts = text.split()
    step = int(parts[0].lstrip("@"))
    kind = parts[1]
    rest = [p for p in parts[2:] if "=" not in p]
    opts = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
    return Fault(
        step,
        kind,
        rest[0] if rest else "",
        rest[1] if len(rest) > 1 else "",
        float(opts.get("hold", "0s").rstrip("s")),
        float(opts.get("amount", "0")),
    )
