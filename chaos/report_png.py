"""The timeline PNG of a chaos run's report (``chaos.report.write_run_report``):
throughput by outcome per second and latency p50 / p99, the fault window shaded.
matplotlib is imported only when a PNG is drawn (Agg backend: no display needed)."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statekeeper.chaos.report import RunResult

__all__ = ["write_png"]


def write_png(result: RunResult, path: str | os.PathLike[str]) -> None:
    """Throughput by outcome per second (stacked) and latency p50/p99, fault shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = result.metrics
    if m is None:
        raise ValueError("no metrics to plot")
    ts = [row["t"] for row in m.timeline]
    widths = [max(row.get("width", 1.0), 0.05) for row in m.timeline]
    ok = [row["ok"] / w for row, w in zip(m.timeline, widths, strict=True)]
    fail = [row["fail"] / w for row, w in zip(m.timeline, widths, strict=True)]
    info = [row["info"] / w for row, w in zip(m.timeline, widths, strict=True)]
    fig, (ax1, ax2) = plt.subplots(
        2, 1, figsize=(11.5, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    ax1.bar(ts, ok, width=widths, align="edge", color="#4c9f50", label="ok", zorder=2)
    ax1.bar(
        ts, fail, width=widths, align="edge", bottom=ok, color="#d9534f", label="fail", zorder=2
    )
    ax1.bar(
        ts,
        info,
        width=widths,
        align="edge",
        zorder=2,
        bottom=[a + b for a, b in zip(ok, fail, strict=True)],
        color="#f0ad4e",
        label="unknown (info)",
    )
    ax1.set_ylabel("ops completed / s (by outcome)")
    status = result.status.upper()
    ax1.set_title(f"chaos: {result.fault} - {status}")
    p50 = [row["p50_ms"] if row["p50_ms"] is not None else float("nan") for row in m.timeline]
    p99 = [row["p99_ms"] if row["p99_ms"] is not None else float("nan") for row in m.timeline]
    mid = [t + 0.5 for t in ts]
    ax2.plot(mid, p50, marker=".", color="#337ab7", label="p50")
    ax2.plot(mid, p99, marker=".", color="#8e44ad", label="p99")
    ax2.set_ylabel("latency of ok ops (ms)")
    ax2.set_xlabel("seconds since the workload started")
    if any(not math.isnan(x) and x > 0 for x in p99):
        ax2.set_yscale("log")
    for ax in (ax1, ax2):
        if result.fault_window:
            a, b = result.fault_window
            ax.axvspan(a, b, color="#999999", alpha=0.25, label="fault window", zorder=0)
        ax.grid(True, alpha=0.3, zorder=1)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
