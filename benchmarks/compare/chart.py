"""The PNG: per key-value row, the median ratio statekeeper/etcd with the spread of the
per-round ratios as an error bar, a line at 1.0x (parity) and one at the 1.5x target of
issue 17. Throughput rows only: for them higher is better, so one axis reads the same way
for every point (failover and cold start are times, lower is better). Agg backend: no
display needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from benchmarks.compare.rounds import Row, summarize_row

TARGET_RATIO = 1.5  # issue 17: puts and linearizable gets at 64 clients


def write_chart(rows: Sequence[Row], path: Path, title: str) -> bool:
    """Draw the chart to `path`; False when matplotlib is missing or no row has a ratio."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    points = []
    for r in rows:
        s = summarize_row(r)
        if r.kind == "ops" and s.ratio is not None:
            assert s.ratio_min is not None and s.ratio_max is not None
            points.append((r.label, s.ratio, s.ratio - s.ratio_min, s.ratio_max - s.ratio))
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
    ax.axvline(1.0, color="#888888", linestyle="--", label="1.0x: same as etcd")
    ax.axvline(TARGET_RATIO, color="#2ca02c", linestyle=":", label=f"{TARGET_RATIO}x target")
    ax.set_yticks(list(ys))
    ax.set_yticklabels([p[0] for p in points])
    ax.invert_yaxis()
    ax.set_xlabel("statekeeper / etcd throughput (higher is better)")
    highest = max(p[1] + p[3] for p in points)
    ax.set_xlim(0, max(highest, TARGET_RATIO) * 1.08)
    ax.grid(axis="x", alpha=0.3)
    # Below the axes: inside, it hides the points of whichever rows sit in its corner.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.5 / (1 + 0.1 * len(points))),
              ncol=3, fontsize="small", frameon=False)  # fmt: skip
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True
