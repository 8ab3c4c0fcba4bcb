"""Percentiles: the one definition the chaos reports and the benchmarks share.

Standard library only, so benchmarks/ can import it without the rest of chaos/ (node/
imports neither). The method differs by what the figures summarise, so each caller names
its own:

- ``"linear"``: interpolates between the two closest ranks (numpy's default). The chaos
  reports, over thousands of operation latencies.
- ``"nearest_rank"``: the smallest value with at least q % of the values at or below it,
  always one of the values. ``benchmarks.compare``'s failover trials (a handful of them),
  and, through :func:`nearest_rank`, the load generator's latency histogram.
- ``"nearest_index"``: the value at index ``round(q / 100 * (n - 1))`` of the sorted
  values. ``benchmarks.rpo``'s recovery times.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

Method = Literal["linear", "nearest_rank", "nearest_index"]


def nearest_rank(n: int, q: float) -> int:
    """The 1-based rank of the q-th percentile (0 < q <= 100) of ``n`` sorted values:
    ceil(n * q / 100), at least 1. Exact for integer ``q``."""
    return max(1, math.ceil(n * q / 100))


def percentile(values: Iterable[float], q: float, method: Method = "linear") -> float | None:
    """The q-th percentile (0..100) of ``values``; None when there are none."""
    xs = sorted(values)
    if not xs:
        return None
    n = len(xs)
    if method == "nearest_rank":
        return float(xs[min(n, nearest_rank(n, q)) - 1])
    if method == "nearest_index":
        return float(xs[min(n - 1, round(q / 100 * (n - 1)))])
    if method != "linear":
        raise ValueError(f"unknown percentile method {method!r}")
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))
