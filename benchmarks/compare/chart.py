"""The PNG: per key-value row, the median ratio statekeeper/etcd with the spread of the
per-round ratios as an error bar, a line at 1.0x (parity) and one at the 1.5x target of
issue 17. Throughput rows only: for them higher is better, so one axis reads the same way
for every point (failover and cold start are times, lower is better). Agg backend: no
display needed. benchmarks.ab draws its B/A chart with ratio_points and ratio_chart.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from statekeeper.benchmarks.compare.rounds import ETCD, SK, Row, summarize_row

TARGET_RATIO = 1.5  # issue 17: puts and linearizable gets at 64 clients


RatioPoint = tuple[str, float, float, float]  # label, median ratio, below it, above it


def ratio_points(
    rows: Sequence[Row], pair: tuple[str, str] = (SK, ETCD), kinds: Sequence[str] = ("ops",)
) -> list[RatioPoint]:
    """One point per row of `kinds` that has a ratio: its median and the spread around it."""
    points = []
    for r in rows:
        s = summarize_row(r, pair)
        if r.kind in kinds and s.ratio is not None:
            assert s.ratio_min is not None and s.ratio_max is not None
            points.append((r.label, s.ratio, s.ratio - s.ratio_min, s.ratio_max - s.ratio))
    return points


def write_chart(rows: Sequence[Row], path: Path, title: str) -> bool:
    """Draw the chart to `path`; False when matplotlib is missing or no row has a ratio."""
    return ratio_chart(
        ratio_points(rows), path, title=title,
        xlabel="statekeeper / etcd throughput (higher is better)",
        parity="1.0x: same as etcd", target=TARGET_RATIO,
    )  # fmt: skip


def ratio_chart(
    points: Sequence[RatioPoint], path: Path, *, title: str, xlabel: str, parity: str,
    target: float | None = None,
) -> bool:  # fmt: skip
    """Median ratio per point with its spread as an error bar, a dashed line at 1.0 (labelled
    `parity`) and, when given, a dotted one at `target`. False when matplotlib is missing
    or there is no point."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    if not points:
        return False
    ys = range(len(points))
    fig, ax = plt.subplots(figsize=(9, 1.8 + 0.4 * len(points)))
    ax.errorbar(
        [p[1] for p in points],
        list(ys),
        xerr=[[p[2] for p in points], [p[3] for p in points]],
        fmt="o",
        color="#1f77b4",
        ecolor="#555555",
        capsize=4,
        label="median ratio (bar: min-max over rounds)",
    )
    ax.axvline(1.0, color="#888888", linestyle="--", label=parity)
    if target is not None:
        ax.axvline(target, color="#2ca02c", linestyle=":", label=f"{target}x target")
    ax.set_yticks(list(ys))
    ax.set_yticklabels([p[0] for p in points])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    highest = max(p[1] + p[3] for p in points)
    ax.set_xlim(0, max(highest, target or 1.0) * 1.08)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    # Below the axes: inside, it hides the points of whichever rows sit in its corner. Its
    # top sits 0.5 in under the axes (clear of the x label) whatever the number of rows.
    axes_in = ax.get_position().height * fig.get_figheight()
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.5 / axes_in),
              ncol=3, fontsize="small", frameon=False)  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True
