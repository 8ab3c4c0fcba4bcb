"""benchmarks.compare's rounds: the order systems run in, and what a row's rounds add up
to (medians, the median of the paired ratios and its spread, pooled failover trials,
client and server CPU per op). Pure functions: no cluster, no clock."""

from __future__ import annotations

import asyncio
import statistics

from hypothesis import given
from hypothesis import strategies as st

from statekeeper.benchmarks.compare.measure import Settings, measure_from_load
from statekeeper.benchmarks.compare.rounds import (
    Measure,
    Row,
    order_text,
    paired_ratios,
    round_order,
    summarize_row,
    summarize_system,
)
from statekeeper.benchmarks.compare.runner import total_steps
from statekeeper.benchmarks.compare.workloads import Workload
from statekeeper.benchmarks.harness import CpuWindow, LatencyHistogram, LoadResult

SK, ETCD = "statekeeper", "etcd"


def row(sk: list[Measure | None], etcd: list[Measure | None], kind: str = "ops") -> Row:
    return Row("k", "label", kind, {SK: sk, ETCD: etcd})


def test_order_alternates_so_neither_system_always_goes_first() -> None:
    systems = ["etcd", "statekeeper"]
    assert [round_order(systems, r) for r in range(4)] == [
        ["etcd", "statekeeper"],
        ["statekeeper", "etcd"],
        ["etcd", "statekeeper"],
        ["statekeeper", "etcd"],
    ]
    assert order_text(systems, 3) == "etcd, statekeeper | statekeeper, etcd | etcd, statekeeper"
    assert round_order(["a"], 1) == ["a"]


@given(st.integers(min_value=1, max_value=12))
def test_over_an_even_number_of_rounds_each_system_is_first_half_the_time(n: int) -> None:
    firsts = [round_order(["etcd", "statekeeper"], r)[0] for r in range(2 * n)]
    assert firsts.count("etcd") == firsts.count("statekeeper") == n


def test_median_ratio_is_of_the_paired_rounds_not_of_the_medians() -> None:
    # Per round 1.2, 0.8, 1.5: median 1.2, spread 0.8-1.5.
    r = row(
        [Measure(value=1200), Measure(value=800), Measure(value=3000)],
        [Measure(value=1000), Measure(value=1000), Measure(value=2000)],
    )
    s = summarize_row(r)
    assert s.ratios == [1.2, 0.8, 1.5]
    assert (s.ratio, s.ratio_min, s.ratio_max) == (1.2, 0.8, 1.5)
    assert s.systems[SK].value == 1200 and s.systems[ETCD].value == 1000  # medians
    assert s.systems[SK].rounds == 3


def test_a_failed_round_has_no_ratio_and_no_say_in_the_medians() -> None:
    r = row(
        [Measure(value=100), Measure(failed="boom"), Measure(value=300), None],
        [Measure(value=100), Measure(value=100), Measure(value=100), Measure(value=100)],
    )
    s = summarize_row(r)
    assert s.ratios == [1.0, None, 3.0, None]
    assert (s.ratio, s.ratio_min, s.ratio_max) == (2.0, 1.0, 3.0)
    assert s.systems[SK].value == 200 and s.systems[SK].rounds == 2
    every_round_failed = summarize_row(row([Measure(failed="x")], [Measure(value=1)]))
    assert every_round_failed.ratio is None and every_round_failed.systems[SK].failed == "x"
    assert every_round_failed.systems[SK].value is None


def test_errors_add_up_over_rounds() -> None:
    s = summarize_system([Measure(value=1, errors=2), Measure(value=1, errors=3)])
    assert s.errors == 5


@given(
    st.lists(
        st.tuples(st.floats(1, 1e6), st.floats(1, 1e6)),
        min_size=1,
        max_size=9,
    )
)
def test_median_ratio_lies_within_its_spread(pairs: list[tuple[float, float]]) -> None:
    r = row([Measure(value=a) for a, _ in pairs], [Measure(value=b) for _, b in pairs])
    s = summarize_row(r)
    per_round = [a / b for a, b in pairs]
    assert s.ratio == statistics.median(per_round)
    assert s.ratio_min == min(per_round) and s.ratio_max == max(per_round)
    assert s.ratio_min <= s.ratio <= s.ratio_max


def test_failover_pools_the_trials_of_every_round() -> None:
    sk = [
        Measure(value=0.5, p50_ms=500, p99_ms=600, samples=[0.4, 0.5, 0.6]),
        Measure(value=0.8, p50_ms=800, p99_ms=3000, samples=[0.7, 0.8, 3.0]),
    ]
    etcd = [
        Measure(value=1.0, p50_ms=1000, p99_ms=1000, samples=[1.0, 1.0, 1.0]),
        Measure(value=2.0, p50_ms=2000, p99_ms=2000, samples=[2.0, 2.0, 2.0]),
    ]
    s = summarize_row(row(sk, etcd, "time"))
    # Pooled 0.4 0.5 0.6 0.7 0.8 3.0: nearest-rank p50 is the 3rd (0.6), p99 the 6th (3.0);
    # the median of the rounds' own p99s (1.8 s) would hide the 3 s trial.
    assert s.systems[SK].value == 0.6
    assert s.systems[SK].p50_ms == 600 and s.systems[SK].p99_ms == 3000
    # The ratio is per round, of each round's p50: 0.5 and 0.4.
    assert s.ratios == [0.5, 0.4] and s.ratio == statistics.median([0.5, 0.4])


def test_cold_start_rows_take_the_median_of_the_rounds() -> None:
    s = summarize_row(row([Measure(value=v) for v in (3.0, 1.0, 2.0)], [Measure(value=1.0)] * 3))
    assert s.systems[SK].value == 2.0 and s.ratio == 2.0


def test_paired_ratios_pair_round_i_with_round_i() -> None:
    assert paired_ratios(
        [Measure(value=2), Measure(value=6)], [Measure(value=1), Measure(value=3)]
    ) == [2.0, 2.0]
    assert paired_ratios([Measure(value=2)], [Measure(value=0)]) == [None]  # no division by 0


def load_result(ops: int, cpu: CpuWindow | None, duration: float = 2.0) -> LoadResult:
    hist = LatencyHistogram()
    for _ in range(ops):
        hist.record(1_000_000)
    return LoadResult(clients=4, warmup_s=0, duration_s=duration, latency=hist, cpu=cpu)


def test_cpu_per_op_for_the_client_the_leader_and_the_followers() -> None:
    cpu = CpuWindow(
        wall_s=2.0,
        ops=1000,
        client_s=0.5,
        procs={"n0": 0.2, "n1": 0.05, "n2": 0.07},
    )
    m = measure_from_load(load_result(1000, cpu), leader="n0")
    assert m.client_us_per_op == 500.0  # 0.5 s / 1000 ops
    assert m.client_cores == 0.25  # 0.5 s of CPU in 2 s of wall time
    assert m.leader_us_per_op == 200.0
    assert m.follower_us_per_op is not None and abs(m.follower_us_per_op - 60.0) < 1e-9
    # A batch row counts puts: 64 per request, so CPU per put is 64 times less.
    b = measure_from_load(load_result(1000, cpu), ops_per_request=64, leader="n0")
    assert b.value == m.value * 64  # type: ignore[operator]
    assert b.client_us_per_op == 500.0 / 64 and b.leader_us_per_op == 200.0 / 64
    # No leader known: no split into leader and followers.
    nl = measure_from_load(load_result(1000, cpu))
    assert nl.leader_us_per_op is None and nl.follower_us_per_op is None
    assert measure_from_load(load_result(10, None)).client_us_per_op is None


def test_cpu_figures_are_medians_over_rounds_and_the_busiest_round_is_kept() -> None:
    s = summarize_system(
        [
            Measure(value=1, client_us_per_op=100, client_cores=0.5, leader_us_per_op=300),
            Measure(value=1, client_us_per_op=140, client_cores=0.9, leader_us_per_op=200),
            Measure(value=1, client_us_per_op=120, client_cores=0.6),
        ]
    )
    assert s.client_us_per_op == 120 and s.client_cores == 0.6 and s.client_cores_max == 0.9
    assert s.leader_us_per_op == 250  # median of the rounds that have one


def test_the_bar_counts_every_round() -> None:
    s = Settings(duration=1, warmup=0, keys=100, keys_cold_start=10, failover_trials=5,
                 max_clients=8, rounds=3)  # fmt: skip
    workloads = [Workload("put", 1), Workload("put", 64)]
    # (2 kv rows + 5 failover trials + 2 cold-start steps) x 2 systems x 3 rounds
    assert (
        total_steps(["put", "failover", "cold-start"], s, workloads, ["etcd", "statekeeper"])
        == 9 * 2 * 3
    )


# ---------------------------------------------------------------- the runner, on fakes


def fake_system(name: str, started: list[str], fail_round: int | None = None) -> type:
    """A System class whose managed cluster logs each start; `fail_round` (1-based) makes
    that cluster fail to start."""
    import contextlib
    import os
    from collections.abc import AsyncIterator, Sequence
    from typing import Any

    from statekeeper.benchmarks.cluster_control import ClusterControl
    from statekeeper.benchmarks.systems import System

    class Control(ClusterControl):
        async def leader(self) -> str | None:
            return "a"

        async def kill(self, member: str) -> None: ...
        async def stop(self, member: str) -> None: ...
        async def start(self, member: str) -> None: ...

        def is_ready(self, member: str) -> bool:
            return True

        def pid(self, member: str) -> int | None:
            return os.getpid()

    class Fake(System):
        async def setup(self) -> None: ...
        async def teardown(self) -> None: ...

        async def put(self, key: str, value: bytes) -> None:
            await asyncio.sleep(0.001)

        async def get(self, key: str, consistency: str = "linearizable") -> object:
            await asyncio.sleep(0.001)
            return None

        @classmethod
        @contextlib.asynccontextmanager
        async def managed_cluster(cls, workdir: Any, **_: Any) -> AsyncIterator[ClusterControl]:
            started.append(name)
            if fail_round is not None and started.count(name) == fail_round:
                raise RuntimeError("no quorum")
            yield Control(["mem://"], ["a", "b", "c"])

        def __init__(self, endpoints: Sequence[str], **_: object) -> None:
            super().__init__(endpoints)

    Fake.name = name
    return Fake


async def test_runner_alternates_fresh_clusters_and_keeps_every_round(
    tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from statekeeper.benchmarks.compare import runner
    from statekeeper.benchmarks.compare.progress import QuietBar

    started: list[str] = []
    classes = {
        "etcd": fake_system("etcd", started),
        "statekeeper": fake_system("statekeeper", started, fail_round=2),
    }
    monkeypatch.setattr(runner, "get_system_class", classes.__getitem__)
    s = Settings(duration=0.1, warmup=0.0, keys=100, keys_cold_start=10, failover_trials=1,
                 max_clients=4, rounds=3)  # fmt: skip
    workloads = [Workload("put", 2), Workload("put", 4)]
    bar = QuietBar(total_steps(["put"], s, workloads, ["etcd", "statekeeper"]))
    rows = await runner.run_compare(
        ["etcd", "statekeeper"], ["put"], s, workloads=workloads, data_dir=tmp_path, bar=bar
    )
    # One fresh cluster per system per round, the order flipping every round.
    assert started == ["etcd", "statekeeper", "statekeeper", "etcd", "etcd", "statekeeper"]
    assert bar.n == bar.total  # the bar counted every round, the failed one too
    for r in rows:
        assert len(r.results["etcd"]) == len(r.results["statekeeper"]) == 3
        sk = r.results["statekeeper"]
        assert sk[1] is not None and sk[1].failed and "no quorum" in sk[1].failed
        assert all(m is not None and m.value and m.client_us_per_op for m in (sk[0], sk[2]))
        summary = summarize_row(r)
        assert summary.ratios[1] is None and summary.ratio is not None


def test_the_ratio_can_be_of_any_pair_of_sides() -> None:
    # benchmarks.ab: B / A of the same round, whatever the sides are called.
    r = Row("k", "label", "ops", {"A": [Measure(value=100), Measure(value=200)],
                                  "B": [Measure(value=150), Measure(value=100)]})  # fmt: skip
    s = summarize_row(r, ("B", "A"))
    assert s.ratios == [1.5, 0.5]
    assert (s.ratio, s.ratio_min, s.ratio_max) == (1.0, 0.5, 1.5)
    assert s.systems["A"].value == 150 and s.systems["B"].value == 125
