"""benchmarks.ab's sans-IO core: the rows, which run comes when, and the table. No I/O.

`python -m statekeeper.benchmarks.ab REV_A REV_B` (benchmarks/ab.py) measures two git revisions of
statekeeper with each revision's own `benchmarks.load`; this module decides everything that
does not touch a process, a clock or a disk, so it is tested without a cluster.

Invariants and formats:
- A run is one (round, row, side): one `python -m statekeeper.benchmarks.load --start-cluster` of that
  side's revision, so one fresh 3-node cluster. Round r (0-based) runs every row in the
  given order, each row A then B when r is even and B then A when r is odd
  (rounds.round_order), so neither revision always goes first and the two runs of a row
  in a round are back to back. Rounds are the outer loop: a disturbance of a few minutes
  lands in one round of several rows, not in every round of one row.
- Each row's figure is either ops/s (higher is better) or p50 in ms (lower is better):
  one client is a latency row, the x64 rows are throughput rows. `Measure.value` holds
  that figure; p50 and p99 are kept for every row.
- `Row.results["A"][r]` is side A's Measure of round r. The ratio is B / A of the same
  round's figures (rounds.summarize_row with pair (B, A)), median and min-max over rounds.
- The load generator's JSON (both revisions write the same fields): {"runs": [{"ops_per_s",
  "p50_ms", "p99_ms", "errors": {type: n}, "unfinished", "cpu": {"wall_s", "client_s",
  ...} | null, ...}]}, one entry per workload; ab asks for one workload per run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.benchmarks.compare.rounds import (
    Measure,
    Row,
    SystemSummary,
    order_text,
    round_order,
    summarize_row,
)
from statekeeper.benchmarks.compare.table import format_ms, format_ratio, format_spread, render
from statekeeper.benchmarks.load import Spec

A, B = "A", "B"
SIDES = (A, B)
OPS, P50 = "ops", "p50"  # the figure of a row, also its Row.kind


@dataclass(frozen=True)
class AbRow:
    key: str
    spec: Spec
    figure: str  # OPS | P50

    @property
    def label(self) -> str:
        return f"{self.spec.label} ({'ops/s' if self.figure == OPS else 'p50 ms'})"


ROWS = {
    r.key: r
    for r in (
        AbRow("put1", Spec("put", 256, 1), P50),
        AbRow("put64", Spec("put", 256, 64), OPS),
        AbRow("get64", Spec("get", 256, 64), OPS),
        AbRow("put4k64", Spec("put", 4096, 64), OPS),
    )
}
DEFAULT_ROWS = tuple(ROWS)


def parse_rows(text: str | None) -> list[AbRow]:
    """'put1,get64' -> those rows in that order; None or '' -> the default rows."""
    keys = [k.strip() for k in (text or "").split(",") if k.strip()] or list(DEFAULT_ROWS)
    unknown = [k for k in keys if k not in ROWS]
    if unknown:
        raise ValueError(f"unknown row(s) {', '.join(unknown)}; known: {', '.join(ROWS)}")
    return [ROWS[k] for k in dict.fromkeys(keys)]


@dataclass(frozen=True)
class Run:
    round_no: int  # 0-based
    row: AbRow
    side: str  # A | B


def plan(rows: Sequence[AbRow], rounds: int) -> list[Run]:
    """Every run in the order it happens (see the module docstring)."""
    return [
        Run(r, row, side) for r in range(rounds) for row in rows for side in round_order(SIDES, r)
    ]


def load_argv(row: AbRow, *, duration: float, warmup: float, json_path: Path,
              data_dir: Path) -> list[str]:  # fmt: skip
    """The arguments of one run's `python -m statekeeper.benchmarks.load`."""
    s = row.spec
    return [
        "--system", "statekeeper", "--start-cluster", "--fsync", "always",
        "--workload", s.workload, "--clients", str(s.clients), "--value-size", str(s.value_size),
        "--consistency", s.consistency, "--duration", f"{duration:g}", "--warmup", f"{warmup:g}",
        "--data-dir", str(data_dir), "--json", str(json_path), "--no-results", "--no-progress",
    ]  # fmt: skip


def measure_from_run(run: dict[str, Any], figure: str) -> Measure:
    """A round's Measure from one entry of the load generator's JSON "runs"."""
    detail = {str(k): int(v) for k, v in (run.get("errors") or {}).items()}
    if run.get("unfinished"):
        detail["unfinished"] = int(run["unfinished"])
    m = Measure(
        value=float(run["ops_per_s"] if figure == OPS else run["p50_ms"]),
        p50_ms=float(run["p50_ms"]),
        p99_ms=float(run["p99_ms"]),
        errors=sum(detail.values()),
        error_detail=detail,
    )
    cpu = run.get("cpu")
    if cpu and cpu.get("wall_s") and cpu.get("ops"):
        m.client_cores = cpu["client_s"] / cpu["wall_s"]
        m.client_us_per_op = cpu["client_s"] * 1e6 / cpu["ops"]
    return m


def make_rows(rows: Sequence[AbRow]) -> list[Row]:
    return [Row(r.key, r.label, r.figure) for r in rows]


# ---------------------------------------------------------------------------------- table

COLUMNS = (
    "workload",
    "A median (min-max)",
    "B median (min-max)",
    "median ratio B/A",
    "ratio spread",
    "A p50 / p99 ms",
    "B p50 / p99 ms",
    "errors A / B",
)

LEGEND = (
    "Each run is one `benchmarks.load --start-cluster` of that revision's own code on a fresh "
    "3-node cluster (fsync=always); rounds alternate which revision goes first (A B, B A, "
    "...). A and B: the median over the rounds of each revision's figure, with the lowest "
    "and highest round in brackets. Ratio = B / A of the two figures of the same round, "
    "median over the rounds; spread = the lowest and highest per-round ratio. For ops/s "
    "rows above 1 means B is faster; for p50 rows below 1 means B is faster. A spread that "
    "straddles 1.0 does not show a difference."
)


def format_figure(figure: str, v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if figure == OPS else format_ms(v)


def value_range(measures: Iterable[Measure | None]) -> tuple[float, float] | None:
    """The lowest and highest figure over the rounds that have one."""
    have = [m.value for m in measures if m is not None and m.failed is None and m.value is not None]
    return (min(have), max(have)) if have else None


def side_cell(row: Row, side: str, summary: SystemSummary | None) -> str:
    """'median (min-max)' of one side's figure over the rounds."""
    span = value_range(row.results.get(side, []))
    if summary is None or summary.value is None or span is None:
        return "failed" if summary is not None and summary.failed else "-"
    lo, hi = (format_figure(row.kind, v) for v in span)
    return f"{format_figure(row.kind, summary.value)} ({lo}-{hi})"


def table_cells(row: Row) -> list[str]:
    s = summarize_row(row, (B, A))

    def latency(side: str) -> str:
        x = s.systems.get(side)
        return (
            "-"
            if x is None or x.value is None
            else f"{format_ms(x.p50_ms)} / {format_ms(x.p99_ms)}"
        )

    def errors(side: str) -> str:
        x = s.systems.get(side)
        return "-" if x is None or x.value is None else str(x.errors)

    return [
        row.label,
        side_cell(row, A, s.systems.get(A)),
        side_cell(row, B, s.systems.get(B)),
        format_ratio(s.ratio),
        format_spread(s.ratio_min, s.ratio_max),
        latency(A),
        latency(B),
        f"{errors(A)} / {errors(B)}",
    ]


def markdown_table(rows: Sequence[Row]) -> str:
    return render(COLUMNS, [table_cells(r) for r in rows])


def failure_notes(rows: Sequence[Row]) -> list[str]:
    """One line per round of a side that has no figure, with why."""
    return [
        f"- {row.label}, {side} round {i + 1}: {m.failed if m else 'not run'}"
        for row in rows
        for side in SIDES
        for i, m in enumerate(row.results.get(side, []))
        if m is None or m.failed
    ]


def header_lines(
    *, command: str, revisions: dict[str, dict[str, str]], settings: str, machine: str, load: str,
    rounds: int,
) -> list[str]:  # fmt: skip
    """What was compared, how and where: above the table. `revisions[side]` has the
    revision as given ("rev"), its short hash ("hash") and subject line ("subject")."""
    return [
        *(f"- {side}: {v['hash']} {v['subject']} (given as `{v['rev']}`)"
          for side, v in sorted(revisions.items())),
        f"- command: `{command}`",
        f"- settings: {settings}",
        f"- rounds: {rounds}, order per row: {order_text(SIDES, rounds)}",
        f"- machine: {machine}; load average at start: {load}",
    ]  # fmt: skip
