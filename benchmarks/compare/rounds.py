"""Rounds: which system goes when, and what a row's rounds add up to. No I/O.

Why rounds: one measurement per system per row is noise on a shared 2-core machine (issue
17: put x64 swung 1.0-1.5x between two runs of the same code). So every group is measured
`rounds` times per system, each time on a fresh cluster, alternating the systems, and the
table reports medians with the spread of the per-round ratios.

Invariants and formats:
- Round r (0-based) runs the systems rotated left by r (etcd, sk | sk, etcd | etcd, sk
  ...; with three: etcd, sk, redis | sk, redis, etcd | redis, etcd, sk), so none always
  goes first; for two systems that is the given order and its reverse, alternately.
- `Row.results[system][r]` is that system's `Measure` of round r, or None when the round
  did not get to it. Round r of one system is paired with round r of the other.
- A system's figure for a row is the median over its measured rounds of value, p50 and
  p99 (each its own median), CPU per op likewise. Failover rows (`Measure.samples`, the
  trial times in seconds) instead pool the trials of all rounds: p50/p99 (nearest rank)
  over the pooled trials, and the value is the pooled p50.
- The ratio is statekeeper / etcd of the paired round values (summarize_row's `pair`;
  benchmarks.ab passes (B, A)); the row reports their median and the spread min-max. A
  round where either side failed has no ratio.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from statekeeper.chaos.stats import percentile

SK, ETCD, REDIS = "statekeeper", "etcd", "redis"


@dataclass
class Measure:
    """One system's figure for one row in one round. `value`: ops/s, seconds or MiB."""

    value: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    errors: int = 0
    error_detail: dict[str, int] = field(default_factory=dict)
    note: str = ""
    failed: str | None = None  # why there is no figure
    samples: list[float] = field(default_factory=list)  # failover: seconds per trial
    # CPU per op (us; op as counted in `value`) over the measured window, and the fraction
    # of one core the load generator used. Servers: the leader, the mean of the followers.
    client_us_per_op: float | None = None
    client_cores: float | None = None
    leader_us_per_op: float | None = None
    follower_us_per_op: float | None = None


@dataclass
class Row:
    key: str
    label: str
    kind: str  # "ops" (higher is better) | "time" (seconds) | "memory" (MiB)
    results: dict[str, list[Measure | None]] = field(default_factory=dict)

    def put(self, system: str, round_no: int, rounds: int, m: Measure) -> None:
        """Record `system`'s measure of round `round_no` (0-based) out of `rounds`."""
        slots = self.results.setdefault(system, [None] * rounds)
        slots[round_no] = m


@dataclass
class SystemSummary:
    """One system's figures for one row over all its rounds (see the module docstring)."""

    rounds: int = 0  # rounds with a figure
    value: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    errors: int = 0
    failed: str | None = None  # set when no round has a figure
    client_us_per_op: float | None = None
    client_cores: float | None = None
    client_cores_max: float | None = None
    leader_us_per_op: float | None = None
    follower_us_per_op: float | None = None


@dataclass
class RowSummary:
    systems: dict[str, SystemSummary]
    ratios: list[float | None]  # per round, pair[0] / pair[1] of the paired values
    ratio: float | None = None  # median of the per-round ratios
    ratio_min: float | None = None
    ratio_max: float | None = None


def round_order(systems: Sequence[str], round_no: int) -> list[str]:
    """The order the systems run in, in round `round_no` (0-based): rotated left by it."""
    k = round_no % len(systems) if systems else 0
    return list(systems[k:]) + list(systems[:k])


def order_text(systems: Sequence[str], rounds: int) -> str:
    """'etcd, statekeeper | statekeeper, etcd | ...' for the results section."""
    return " | ".join(", ".join(round_order(systems, r)) for r in range(rounds))


def ratio(sk: float | None, etcd: float | None) -> float | None:
    """statekeeper / etcd, or None when either figure is missing or etcd's is 0."""
    if sk is None or etcd is None or etcd == 0:
        return None
    return sk / etcd


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not None; None when there are none."""
    have = [v for v in values if v is not None]
    return statistics.median(have) if have else None


def _ok(m: Measure | None) -> bool:
    return m is not None and m.failed is None and m.value is not None


def summarize_system(measures: Sequence[Measure | None]) -> SystemSummary:
    ok = [m for m in measures if m is not None and _ok(m)]
    errors = sum(m.errors for m in measures if m is not None and m.failed is None)
    if not ok:
        why = next((m.failed for m in measures if m is not None and m.failed), None)
        return SystemSummary(errors=errors, failed=why or "no round measured")
    cores = [m.client_cores for m in ok if m.client_cores is not None]
    s = SystemSummary(
        rounds=len(ok),
        value=median(m.value for m in ok),
        p50_ms=median(m.p50_ms for m in ok),
        p99_ms=median(m.p99_ms for m in ok),
        errors=errors,
        client_us_per_op=median(m.client_us_per_op for m in ok),
        client_cores=median(cores),
        client_cores_max=max(cores) if cores else None,
        leader_us_per_op=median(m.leader_us_per_op for m in ok),
        follower_us_per_op=median(m.follower_us_per_op for m in ok),
    )
    pooled = [t for m in ok for t in m.samples]
    if pooled:  # failover: percentiles over every trial of every round
        p50, p99 = (percentile(pooled, q, "nearest_rank") for q in (50, 99))
        assert p50 is not None and p99 is not None  # pooled is not empty
        s.value, s.p50_ms, s.p99_ms = p50, p50 * 1000, p99 * 1000
    return s


def paired_ratios(
    sk: Sequence[Measure | None], etcd: Sequence[Measure | None]
) -> list[float | None]:
    """statekeeper / etcd per round (round i with round i), None where either failed."""
    return [
        ratio(a.value, b.value) if a is not None and b is not None and _ok(a) and _ok(b) else None
        for a, b in zip(sk, etcd, strict=False)
    ]


def summarize_row(row: Row, pair: tuple[str, str] = (SK, ETCD)) -> RowSummary:
    """Each system's figures, and the per-round ratios pair[0] / pair[1] with their median."""
    systems = {name: summarize_system(ms) for name, ms in row.results.items()}
    top, bottom = pair
    ratios = paired_ratios(row.results.get(top, []), row.results.get(bottom, []))
    have = [r for r in ratios if r is not None]
    return RowSummary(
        systems=systems,
        ratios=ratios,
        ratio=median(have),
        ratio_min=min(have) if have else None,
        ratio_max=max(have) if have else None,
    )
