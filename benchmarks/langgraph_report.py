"""Summaries, tables, targets and the chart of `benchmarks.langgraph_savers` (pure functions
over the per-round summaries, except :func:`plot`).

Results shape: ``rounds[system][cell]`` is the list of per-round summaries
(``CellResult.summary()``) of one cell, a cell being ``"{kind}/{threads}"`` with kind
``put``, ``get`` (get_tuple) or ``graph``. Every figure shown is the median over rounds,
with the min-max over rounds in brackets: the rounds alternate the systems on a noisy
machine, so the spread is part of the result.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from statekeeper.benchmarks.load import markdown_table

Rounds = Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]
METRICS = ("units_per_s", "p50_ms", "p99_ms")
LABELS = {"statekeeper": "StatekeeperSaver", "postgres": "PostgresSaver", "sqlite": "SqliteSaver"}
COLORS = {"statekeeper": "C0", "postgres": "C1", "sqlite": "C2"}


def cell_id(kind: str, threads: int) -> str:
    return f"{kind}/{threads}"


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of per-round values (n = number of rounds)."""
    if not values:
        return {"median": 0.0, "min": 0.0, "max": 0.0, "n": 0}
    return {
        "median": round(float(statistics.median(values)), 4),
        "min": round(float(min(values)), 4),
        "max": round(float(max(values)), 4),
        "n": len(values),
    }


def aggregate(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One cell over its rounds: a spread per metric, total ops and errors."""
    errors: dict[str, int] = {}
    for s in summaries:
        for k, v in s.get("errors", {}).items():
            errors[k] = errors.get(k, 0) + v
    return {
        **{m: spread([float(s[m]) for s in summaries]) for m in METRICS},
        "ops": sum(int(s["ops"]) for s in summaries),
        "errors": dict(sorted(errors.items())),
    }


def aggregate_all(rounds: Rounds) -> dict[str, dict[str, Any]]:
    return {sys: {c: aggregate(v) for c, v in cells.items()} for sys, cells in rounds.items()}


def fmt_num(x: float) -> str:
    """3 significant figures-ish: 1234 -> '1234', 12.34 -> '12.3', 1.234 -> '1.23'."""
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def fmt_spread(s: Mapping[str, float]) -> str:
    """'median (min-max)'; just the median for a single round; '-' for no data."""
    if not s or not s.get("n"):
        return "-"
    if s["n"] == 1 or s["min"] == s["max"]:
        return fmt_num(s["median"])
    return f"{fmt_num(s['median'])} ({fmt_num(s['min'])}-{fmt_num(s['max'])})"


def fmt_errors(*aggs: Mapping[str, Any] | None) -> str:
    errs: dict[str, int] = {}
    for a in aggs:
        for k, v in (a or {}).get("errors", {}).items():
            errs[k] = errs.get(k, 0) + v
    if not errs:
        return "0"
    return f"{sum(errs.values())} (" + ", ".join(f"{k}: {v}" for k, v in errs.items()) + ")"


OPS_COLUMNS = (
    "saver", "threads", "put/s", "put p50 ms", "put p99 ms",
    "get_tuple/s", "get_tuple p50 ms", "get_tuple p99 ms", "errors",
)  # fmt: skip
GRAPH_COLUMNS = (
    "saver",
    "threads",
    "steps/s",
    "invoke p50 ms",
    "invoke p99 ms",
    "invokes",
    "errors",
)


def ops_table(agg: Mapping[str, Mapping[str, Any]], threads: Sequence[int]) -> str:
    rows = []
    for t in threads:
        for system, cells in agg.items():
            put, get = cells.get(cell_id("put", t)), cells.get(cell_id("get", t))
            if put is None and get is None:
                continue
            row = [LABELS.get(system, system), str(t)]
            for c in (put, get):
                row += [fmt_spread(c[m]) if c else "-" for m in METRICS]
            rows.append([*row, fmt_errors(put, get)])
    return markdown_table(rows, OPS_COLUMNS, numeric=OPS_COLUMNS[1:-1])


def graph_table(agg: Mapping[str, Mapping[str, Any]], threads: Sequence[int]) -> str:
    rows = []
    for t in threads:
        for system, cells in agg.items():
            g = cells.get(cell_id("graph", t))
            if g is None:
                continue
            rows.append(
                [LABELS.get(system, system), str(t), *(fmt_spread(g[m]) for m in METRICS),
                 str(g["ops"]), fmt_errors(g)]
            )  # fmt: skip
    return markdown_table(rows, GRAPH_COLUMNS, numeric=GRAPH_COLUMNS[1:-1])


def _per_round(rounds: Rounds, a: str, b: str, cell: str, metric: str) -> list[float]:
    xs, ys = rounds[a][cell], rounds[b][cell]
    return [x[metric] / y[metric] for x, y in zip(xs, ys, strict=False) if y[metric]]


def targets(rounds: Rounds, *, high: int = 16, low: int = 1) -> list[dict[str, Any]]:
    """The issue's two targets, judged on the medians over rounds; the per-round ratios
    (statekeeper / PostgresSaver, rounds paired as they ran) show how robust that is."""
    if "statekeeper" not in rounds or "postgres" not in rounds:
        return []
    agg = aggregate_all(rounds)
    out = []
    put_hi, put_lo = cell_id("put", high), cell_id("put", low)
    if put_hi in agg["statekeeper"] and put_hi in agg["postgres"]:
        sk = agg["statekeeper"][put_hi]["units_per_s"]["median"]
        pg = agg["postgres"][put_hi]["units_per_s"]["median"]
        out.append({
            "target": f"put throughput at {high} threads >= PostgresSaver's",
            "statekeeper": sk, "postgres": pg, "unit": "put/s",
            "ratio": sk / pg if pg else float("inf"),
            "round_ratios": _per_round(rounds, "statekeeper", "postgres", put_hi, "units_per_s"),
            "met": sk >= pg,
        })  # fmt: skip
    if put_lo in agg["statekeeper"] and put_lo in agg["postgres"]:
        sk = agg["statekeeper"][put_lo]["p50_ms"]["median"]
        pg = agg["postgres"][put_lo]["p50_ms"]["median"]
        out.append({
            "target": f"put p50 at {low} thread within 2x of PostgresSaver's",
            "statekeeper": sk, "postgres": pg, "unit": "ms",
            "ratio": sk / pg if pg else float("inf"),
            "round_ratios": _per_round(rounds, "statekeeper", "postgres", put_lo, "p50_ms"),
            "met": sk <= 2 * pg,
        })  # fmt: skip
    return out


TARGET_COLUMNS = (
    "target", "StatekeeperSaver", "PostgresSaver", "ratio sk/pg", "per-round ratios", "met",
)  # fmt: skip


def targets_table(ts: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        [t["target"], f"{fmt_num(t['statekeeper'])} {t['unit']}",
         f"{fmt_num(t['postgres'])} {t['unit']}", f"{t['ratio']:.2f}",
         ", ".join(f"{r:.2f}" for r in t["round_ratios"]), "yes" if t["met"] else "**no**"]
        for t in ts
    ]  # fmt: skip
    return markdown_table(rows, TARGET_COLUMNS, numeric=("ratio sk/pg",))


def plot(agg: Mapping[str, Mapping[str, Any]], threads: Sequence[int],
         graph_threads: Sequence[int], path: Path) -> Path | None:  # fmt: skip
    """Bars per system and thread count: latency p50 (solid) over p99 (light) on top,
    throughput below, for put, get_tuple and the graph; whiskers = min-max over rounds."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    systems = list(agg)
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
    panels = [
        ("put", threads, "put"),
        ("get", threads, "get_tuple"),
        ("graph", graph_threads, "graph invoke"),
    ]
    width = 0.8 / max(1, len(systems))
    for col, (kind, ts, title) in enumerate(panels):
        lat, thr = axes[0][col], axes[1][col]
        for i, system in enumerate(systems):
            xs, cells = [], []
            for j, t in enumerate(ts):
                c = agg[system].get(cell_id(kind, t))
                if c:
                    xs.append(j + (i - (len(systems) - 1) / 2) * width)
                    cells.append(c)
            if not cells:
                continue
            color, label = COLORS.get(system), LABELS.get(system, system)
            for metric, alpha, lab in (
                ("p99_ms", 0.35, f"{label} p99"),
                ("p50_ms", 1.0, f"{label} p50"),
            ):
                lat.bar(xs, [c[metric]["median"] for c in cells], width, color=color, alpha=alpha,
                        label=lab, yerr=_whiskers(cells, metric), capsize=2)  # fmt: skip
            thr.bar(xs, [c["units_per_s"]["median"] for c in cells], width, color=color,
                    label=label, yerr=_whiskers(cells, "units_per_s"), capsize=2)  # fmt: skip
        for ax in (lat, thr):
            ax.set_xticks(range(len(ts)), [f"{t} thread{'s' if t > 1 else ''}" for t in ts])
            ax.grid(True, axis="y", which="both", alpha=0.3)
        lat.set_yscale("log")
        lat.set_title(f"{title} latency (p50 solid, p99 light)")
        lat.set_ylabel("ms (median of rounds)")
        thr.set_title("graph node steps/s" if kind == "graph" else f"{title} throughput")
        thr.set_ylabel("node steps/s" if kind == "graph" else "ops/s")
    axes[0][0].legend(fontsize=7)
    axes[1][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _whiskers(cells: Sequence[Mapping[str, Any]], metric: str) -> list[list[float]]:
    med = [c[metric]["median"] for c in cells]
    return [
        [m - c[metric]["min"] for m, c in zip(med, cells, strict=True)],
        [c[metric]["max"] - m for m, c in zip(med, cells, strict=True)],
    ]
