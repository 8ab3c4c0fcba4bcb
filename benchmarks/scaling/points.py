"""The pure parts of the scaling sweeps: which points each sweep measures, what one point
holds, where a curve bends, and the Markdown table (no I/O; tests/unit/test_bench_scaling.py).

A sweep is a list of Points along one axis (store size in keys, value size in bytes, kept
versions per key). Each point holds the closed-loop measurements keyed by METRICS names
("put@1" = puts at 1 client, "get@16" = linearizable gets at 16 clients, ...) and the
sweep's extra columns (restart time, RSS, disk). "Where it bends" is stated from the data:
the first point whose p50 grows more than BEND_FACTOR over the previous point's, or whose
throughput falls below 1/BEND_FACTOR of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

KIB, MIB = 1024, 1024 * 1024

SIZE_POINTS = (10_000, 100_000, 1_000_000, 10_000_000)
QUICK_SIZE_POINTS = (10_000, 100_000)
VALUE_SIZES = (64, KIB, 16 * KIB, 256 * KIB, MIB)
QUICK_VALUE_SIZES = (64, KIB, 16 * KIB)
HISTORY_POINTS = (0, 10, 100, 1000)  # overwrites per key on top of the first write
QUICK_HISTORY_POINTS = (0, 10)

BEND_FACTOR = 1.5

# (metric key, column label) in table order; a sweep shows those its points measured.
METRICS = (
    ("put@1", "put 1 client"),
    ("put@16", "put 16 clients"),
    ("get@1", "get 1 client"),
    ("get@16", "get 16 clients"),
    ("get_rev@1", "get at a past revision, 1 client"),
    ("range100@1", "range of 100 keys, 1 client"),
)


@dataclass(frozen=True)
class Stat:
    """One closed-loop measurement: latency percentiles and successful ops per second."""

    p50_ms: float
    p99_ms: float
    ops_s: float
    errors: int = 0


@dataclass
class Point:
    label: str  # what the table's first column shows ("100,000 keys", "16 KiB")
    x: float  # position on the sweep's axis (log scale in the plots)
    stats: dict[str, Stat] = field(default_factory=dict)
    # Extra columns: label -> number (formatted by the table) or text (shown as is).
    extra: dict[str, float | str | None] = field(default_factory=dict)


def size_points(max_keys: int, quick: bool) -> list[int]:
    """Store sizes to grow through: the standard points up to `max_keys`, and `max_keys`
    itself when it falls between two of them (or below the first)."""
    if max_keys < 1:
        raise ValueError("max_keys must be >= 1")
    base = QUICK_SIZE_POINTS if quick else SIZE_POINTS
    points = [n for n in base if n <= max_keys]
    if max_keys not in points and max_keys < base[-1]:
        points.append(max_keys)
    return points


def value_points(quick: bool) -> list[int]:
    return list(QUICK_VALUE_SIZES if quick else VALUE_SIZES)


def value_keys(value_size: int, keys: int, budget_bytes: int) -> int:
    """Keys written at one value size: `keys`, fewer when keys * size would pass the byte
    budget (1 MiB values stay a few hundred MiB per node), never fewer than 16."""
    return max(16, min(keys, budget_bytes // value_size))


def history_points(quick: bool) -> list[int]:
    return list(QUICK_HISTORY_POINTS if quick else HISTORY_POINTS)


def format_bytes(n: int) -> str:
    for unit, mult in (("MiB", MIB), ("KiB", KIB)):
        if n >= mult and n % mult == 0:
            return f"{n // mult} {unit}"
    return f"{n} B"


# ---------------------------------------------------------------------------- bends


def first_bend(values: Sequence[float | None], rising: bool = True) -> int | None:
    """Index of the first value more than BEND_FACTOR times the previous one (rising:
    latency) or below 1/BEND_FACTOR of it (falling: throughput); None if no such point.
    A missing value (None, or 0 for a rising series) neither bends nor serves as the base."""
    prev: float | None = None
    for i, v in enumerate(values):
        if v is None or (rising and v <= 0):
            continue
        if prev is not None and prev > 0:
            if rising and v > BEND_FACTOR * prev:
                return i
            if not rising and v * BEND_FACTOR < prev:
                return i
        prev = v
    return None


def metric_value(p: Point, key: str, attr: str) -> float | None:
    """`attr` ("p50_ms" or "ops_s") of the point's `key` measurement, None if not measured."""
    s = p.stats.get(key)
    return None if s is None else getattr(s, attr)


def bend_line(points: Sequence[Point], key: str, label: str, attr: str) -> str:
    """Where one series bends, as data: the point, its value, the previous value, the ratio."""
    rising = attr != "ops_s"
    what, unit = ("p50", "ms") if rising else ("ops/s", "ops/s")
    values = [metric_value(p, key, attr) for p in points]
    i = first_bend(values, rising=rising)
    if i is None:
        if rising:
            return f"{label}, {what}: no point above {BEND_FACTOR}x the previous one"
        return f"{label}, {what}: no point below 1/{BEND_FACTOR} of the previous one"
    j = next(j for j in range(i - 1, -1, -1) if values[j] is not None)
    now, before = values[i], values[j]
    assert now is not None and before is not None
    return (
        f"{label}, {what}: bends at {points[i].label} ({_num(now)} {unit} after "
        f"{_num(before)} {unit} at {points[j].label}: {now / before:.2f}x)"
    )


def bend_lines(points: Sequence[Point]) -> list[str]:
    """For every measured metric, where its p50 and where its throughput bend."""
    return [
        bend_line(points, key, label, attr)
        for key, label in METRICS
        if any(key in p.stats for p in points)
        for attr in ("p50_ms", "ops_s")
    ]


# ---------------------------------------------------------------------------- table


def _num(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _stat_cells(s: Stat | None, with_p99: bool) -> list[str]:
    if s is None:
        return ["-", "-"]
    lat = f"{_num(s.p50_ms)} / {_num(s.p99_ms)}" if with_p99 else _num(s.p50_ms)
    ops = _num(s.ops_s) + (f" ({s.errors} err)" if s.errors else "")
    return [lat, ops]


def markdown_table(points: Sequence[Point], axis: str) -> str:
    """One row per point: p50 (p99 for puts) in ms and ops/s per metric, then the extras."""
    metrics = [(k, lbl) for k, lbl in METRICS if any(k in p.stats for p in points)]
    extras: list[str] = []
    for p in points:
        extras += [k for k in p.extra if k not in extras]
    header = [axis]
    for key, label in metrics:
        header += [f"{label} p50{' / p99' if key.startswith('put') else ''} ms", f"{label} ops/s"]
    header += extras
    rows = []
    for p in points:
        cells = [p.label]
        for key, _ in metrics:
            cells += _stat_cells(p.stats.get(key), key.startswith("put"))
        cells += [_extra_cell(p.extra.get(k)) for k in extras]
        rows.append(cells)
    sep = "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"
    return "\n".join(
        ["| " + " | ".join(header) + " |", sep, *("| " + " | ".join(r) + " |" for r in rows)]
    )


def _extra_cell(v: float | str | None) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return _num(float(v))
