"""chaos/stats.py: the percentile every report and benchmark uses, per caller's method."""

from __future__ import annotations

import random

import pytest

from statekeeper.benchmarks.harness import LatencyHistogram
from statekeeper.chaos.stats import nearest_rank, percentile

TRIALS = [1.5, 1.1, 1.3, 1.2, 1.4]  # unsorted, as failover trials come in


@pytest.mark.parametrize("method", ["linear", "nearest_rank", "nearest_index"])
def test_no_values_is_none_and_one_value_is_itself(method) -> None:
    assert percentile([], 50, method) is None
    assert percentile(iter([]), 99, method) is None
    assert percentile([5], 99, method) == 5.0
    assert percentile(TRIALS, 100, method) == 1.5


def test_linear_interpolates_between_ranks() -> None:
    """The chaos reports' latency percentiles (linear is the default)."""
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(101)), 99) == pytest.approx(99)
    assert percentile([10, 20], 25) == 12.5
    assert percentile(TRIALS, 0) == 1.1


def test_nearest_rank_is_always_a_value() -> None:
    """benchmarks.compare's failover trials."""
    assert percentile(TRIALS, 50, "nearest_rank") == 1.3
    assert percentile(TRIALS, 99, "nearest_rank") == 1.5
    assert percentile(TRIALS, 20, "nearest_rank") == 1.1  # rank ceil(5 * 0.2) = 1
    assert percentile(TRIALS, 21, "nearest_rank") == 1.2
    assert percentile([1, 2, 3, 4], 50, "nearest_rank") == 2.0


def test_nearest_index_rounds_the_index() -> None:
    """benchmarks.rpo's recovery times: index round(q/100 * (n-1)), ties to even."""
    assert percentile([1, 2, 3, 4], 50, "nearest_index") == 3.0  # round(1.5) = 2
    assert percentile([1, 2, 3, 4, 5, 6], 50, "nearest_index") == 3.0  # round(2.5) = 2
    assert percentile(TRIALS, 50, "nearest_index") == 1.3
    assert percentile(TRIALS, 99, "nearest_index") == 1.5


def test_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown percentile method"):
        percentile([1.0], 50, "median")  # type: ignore[arg-type]


def test_nearest_rank_is_exact_for_integer_q() -> None:
    # Floating point would make 0.07 * 100 = 7.000000000000001 and round it up to 8.
    assert nearest_rank(100, 7) == 7
    assert nearest_rank(100, 99) == 99
    assert nearest_rank(1000, 99) == 990
    assert nearest_rank(3, 1) == 1 and nearest_rank(1, 50) == 1
    for n in range(1, 2000):
        for q in (50, 90, 99):
            assert nearest_rank(n, q) == -(-n * q // 100), (n, q)


def test_histogram_agrees_with_nearest_rank_on_exact_buckets() -> None:
    """benchmarks.harness: values below 256 have a bucket each, so the histogram's
    percentile is exactly the nearest-rank percentile of what it recorded."""
    rng = random.Random(7)
    values = [rng.randrange(256) for _ in range(997)]
    h = LatencyHistogram()
    for v in values:
        h.record(v)
    for q in (1, 25, 50, 90, 99, 100):
        assert h.percentile(q) == percentile(values, q, "nearest_rank"), q
