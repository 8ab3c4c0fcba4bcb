"""PNG plots of a scaling sweep (matplotlib, Agg backend, log x axis): p50 latency and
throughput per metric against the sweep's axis, and for the store-size sweep a third panel
with restart-to-ready time and the largest member's RSS."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from statekeeper.benchmarks.scaling.points import METRICS, Point, metric_value

# Extras plotted in the third panel when a sweep has them: (extra column, axis label).
PANEL_EXTRAS = (
    ("restart to ready s", "restart to ready, s"),
    ("RSS MiB (largest)", "RSS, MiB (largest member)"),
    ("data dir MiB (largest)", "data dir, MiB (largest member)"),
)


def write_plot(points: Sequence[Point], axis: str, title: str, path: Path) -> bool:
    """Draw the sweep into `path`; False when matplotlib is missing or nothing was measured."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    metrics = [(k, lbl) for k, lbl in METRICS if any(k in p.stats for p in points)]
    if not metrics or not points:
        return False
    extras = [(k, lbl) for k, lbl in PANEL_EXTRAS if any(_num(p.extra.get(k)) for p in points)]
    n_panels = 3 if extras else 2
    fig, axes = plt.subplots(1, n_panels, figsize=(5.5 * n_panels, 4.5))
    xs = [p.x for p in points]
    for ax, attr, ylabel in (
        (axes[0], "p50_ms", "p50 latency, ms (log)"),
        (axes[1], "ops_s", "ops/s (log)"),
    ):
        for key, label in metrics:
            ys = [metric_value(p, key, attr) for p in points]
            ax.plot(xs, [float("nan") if y is None else y for y in ys], marker="o", label=label)
        ax.set_ylabel(ylabel)
        ax.set_yscale("log")
    if extras:
        for key, label in extras:
            ys = [_num(p.extra.get(key)) for p in points]
            axes[2].plot(
                xs, [float("nan") if y is None else y for y in ys], marker="s", label=label
            )
        axes[2].set_yscale("log")
        axes[2].set_ylabel("seconds / MiB (log)")
        axes[2].legend(fontsize=8)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel(axis + " (log)")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and v > 0 else None
