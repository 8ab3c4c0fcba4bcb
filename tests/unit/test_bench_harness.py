"""The load-generator harness against an in-process fake store (no server needed)."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Sequence

import pytest

from statekeeper.benchmarks.harness import LatencyHistogram, error_key, run_load
from statekeeper.benchmarks.load import (
    Spec,
    make_keys,
    markdown_table,
    parse_size,
    run_spec,
    table_row,
)
from statekeeper.benchmarks.systems import System


class FakeSystem(System):
    """A dict behind asyncio.sleep: enough to drive the harness like a real store."""

    name = "fake"

    def __init__(
        self, endpoints: Sequence[str] = ("mem://",), *, pool: int = 1, delay: float = 0.001
    ):
        super().__init__(endpoints, pool=pool)
        self.delay = delay
        self.data: dict[str, bytes] = {}
        self.puts = 0
        self.gets = 0
        self.open = False

    async def setup(self) -> None:
        self.open = True

    async def teardown(self) -> None:
        self.open = False

    async def put(self, key: str, value: bytes) -> None:
        await asyncio.sleep(self.delay)
        self.puts += 1
        self.data[key] = value

    async def get(self, key: str, consistency: str = "linearizable") -> object:
        await asyncio.sleep(self.delay)
        self.gets += 1
        return self.data[key]  # KeyError if the workload forgot to populate


def test_histogram_percentiles_within_bucket_error() -> None:
    h = LatencyHistogram()
    for ms in range(1, 1001):  # 1..1000 ms, in ns
        h.record(ms * 1_000_000)
    assert h.count == 1000
    assert h.min == 1_000_000 and h.max == 1_000_000_000
    for q, expect_ms in ((50, 500), (90, 900), (99, 990), (100, 1000)):
        got = h.percentile(q) / 1_000_000
        assert abs(got - expect_ms) / expect_ms < 0.01, (q, got)
    assert abs(h.mean() / 1_000_000 - 500.5) < 0.01


def test_histogram_small_values_exact_and_bounded_memory() -> None:
    h = LatencyHistogram()
    for v in (0, 1, 5, 255, 256, 257, 2**50):
        h.record(v)
    assert h.percentile(1) == 0.0
    assert h.max == LatencyHistogram.MAX_VALUE  # clamped, not an IndexError
    assert len(h.counts) == LatencyHistogram.N_BUCKETS < 5000
    # Every bucket's bounds contain the values mapped to it.
    for v in (300, 4095, 123_456_789, LatencyHistogram.MAX_VALUE):
        one = LatencyHistogram()
        one.record(v)
        idx = one.counts.index(1)
        low, high = LatencyHistogram.bucket_bounds(idx)
        assert low <= v < high
        assert (high - low) / low <= 1 / 128
    assert LatencyHistogram().percentile(50) == 0.0


async def test_ops_counted_and_stops_by_itself() -> None:
    fake = FakeSystem(delay=0.002)
    clients, duration = 4, 0.5
    t0 = time.monotonic()
    result = await asyncio.wait_for(
        run_load(
            lambda: fake.put("k", b"v"),
            clients=clients,
            duration=duration,
            warmup=0.1,
            progress=None,
        ),
        timeout=5,
    )
    elapsed = time.monotonic() - t0
    assert elapsed < 3  # stopped on its own, soon after warm-up + duration
    ceiling = clients * (duration / 0.002) + clients  # sleep(0.002) never takes less
    assert 50 < result.ops <= ceiling
    assert result.ops_per_s == pytest.approx(result.ops / duration)
    assert result.error_count == 0 and result.unfinished == 0
    # Every completed call was counted exactly once: warm-up, measured, or after the window.
    assert result.ops + result.warmup_ops <= fake.puts <= result.ops + result.warmup_ops + clients
    assert 0.5 < result.p50_ms <= result.p90_ms <= result.p99_ms <= result.max_ms < 2000


async def test_warmup_excluded() -> None:
    # Slow (30 ms) during the warm-up, fast (1 ms) afterwards: if warm-up leaked into
    # the measurement the median would be slow.
    start = time.monotonic()
    warmup = 0.3
    calls = {"slow": 0, "fast": 0}

    async def op() -> None:
        if time.monotonic() - start < warmup:
            calls["slow"] += 1
            await asyncio.sleep(0.03)
        else:
            calls["fast"] += 1
            await asyncio.sleep(0.001)

    result = await run_load(op, clients=2, duration=0.4, warmup=warmup, progress=None)
    assert calls["slow"] >= 4
    assert result.warmup_ops >= calls["slow"] - 2  # at most one straddler per worker
    assert result.p50_ms < 15
    assert result.ops < calls["slow"] + calls["fast"]


async def test_errors_counted_by_type() -> None:
    class Unavailable(Exception):
        code = "unavailable"

    n = 0

    async def op() -> None:
        nonlocal n
        n += 1
        await asyncio.sleep(0.001)
        if n % 3 == 0:
            raise Unavailable("no leader")
        if n % 3 == 1:
            raise ValueError("boom")

    result = await run_load(op, clients=2, duration=0.3, progress=None, error_backoff=0)
    assert set(result.errors) == {"Unavailable(unavailable)", "ValueError"}
    assert result.ops > 0 and all(v > 0 for v in result.errors.values())
    # Roughly one third each; failed ops are not in the latency histogram.
    assert result.error_count > result.ops


async def test_hung_op_is_cancelled_after_drain_timeout() -> None:
    cancelled = 0

    async def op() -> None:
        nonlocal cancelled
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled += 1
            raise

    t0 = time.monotonic()
    result = await run_load(op, clients=3, duration=0.2, drain_timeout=0.2, progress=None)
    assert time.monotonic() - t0 < 3
    assert result.ops == 0 and result.unfinished == 3 and cancelled == 3


async def test_progress_lines_written() -> None:
    out = io.StringIO()

    async def op() -> None:
        await asyncio.sleep(0.001)

    await run_load(
        op,
        clients=1,
        duration=0.3,
        warmup=0.25,
        progress=out,
        progress_interval=0.1,
        label="put x1",
    )
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3
    assert all(line.startswith("[put x1] ") and "ops/s" in line for line in lines)
    assert any("warm-up" in line for line in lines) and any("measure" in line for line in lines)


async def test_get_workload_populates_keys_first() -> None:
    fake = FakeSystem(delay=0.0005)
    keys = make_keys(50)
    populated: set[int] = set()
    spec = Spec("get", 64, 4)
    result = await run_spec(
        fake, spec, keys=keys, duration=0.2, warmup=0.05, populated=populated, progress=False
    )
    assert fake.puts == 50 and set(fake.data) == set(keys)
    assert all(len(v) == 64 for v in fake.data.values())
    assert result.ops > 0 and result.error_count == 0  # no KeyError: every key existed
    # The same size is not populated twice; a put workload invalidates it.
    await run_spec(
        fake, spec, keys=keys, duration=0.05, warmup=0, populated=populated, progress=False
    )
    assert fake.puts == 50
    await run_spec(
        fake,
        Spec("put", 64, 2),
        keys=keys,
        duration=0.05,
        warmup=0,
        populated=populated,
        progress=False,
    )
    assert populated == set()
    row = table_row(spec, result)
    table = markdown_table([row])
    assert "get (linearizable)" in table and "64 B" in table


def test_misc_helpers() -> None:
    assert parse_size("256") == 256
    assert parse_size("4k") == parse_size("4KiB") == 4096
    assert error_key(KeyError("x")) == "KeyError"


def test_compact_samples_summarizes_only_long_number_lists() -> None:
    from statekeeper.benchmarks.harness import compact_samples

    data = {"lat": list(range(1, 2001)), "short": [3, 1], "names": ["a"] * 2000, "n": 5}
    out = compact_samples(data)
    assert out["lat"] == {"n": 2000, "min": 1, "p50": 1000, "p90": 1800, "p99": 1980, "max": 2000}
    assert out["short"] == [3, 1] and out["names"] == ["a"] * 2000 and out["n"] == 5


def test_proc_cpu_seconds_reads_this_process() -> None:
    import os

    from statekeeper.benchmarks.harness import proc_cpu_seconds

    before, t0 = proc_cpu_seconds(os.getpid()), time.process_time()
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass  # burn CPU: /proc must see it as process_time() does
    after, t1 = proc_cpu_seconds(os.getpid()), time.process_time()
    assert before is not None and after is not None
    # /proc counts in clock ticks (1/100 s here): agree to a few ticks.
    assert abs((after - before) - (t1 - t0)) < 0.05
    assert proc_cpu_seconds(2**22 + 12345) is None  # no such process


async def test_cpu_window_brackets_the_measured_window() -> None:
    import os

    async def op() -> None:
        sum(range(500))  # some CPU per op, so the client's share is not zero
        await asyncio.sleep(0.001)

    r = await run_load(
        op, clients=4, duration=0.4, warmup=0.1, progress=None, cpu_pids={"me": os.getpid()}
    )
    cpu = r.cpu
    assert cpu is not None
    assert 0.35 <= cpu.wall_s < 1.0  # from the window's start to its end, not from t0
    # The ops between the two samples are the window's, give or take those in flight.
    assert abs(cpu.ops - r.ops) <= 4 + r.ops // 20
    assert cpu.client_s > 0 and cpu.client_us_per_op is not None and cpu.client_cores is not None
    assert "me" in cpu.procs and cpu.proc_us_per_op("me") is not None
    assert r.summary()["cpu"]["ops"] == cpu.ops  # type: ignore[index]
