"""Closed-loop asyncio load generator.

`run_load(op, clients=N, duration=D, warmup=W)` starts N workers; each calls `await op()`
in a loop, issuing the next request as soon as the previous one returns. Operations that
complete during the first W seconds warm things up (connections, caches, leader lease)
and are not measured; operations that complete during the next D seconds are. Workers stop
issuing at the end of the window by themselves; whatever is still in flight then gets
`drain_timeout` seconds to finish and is cancelled after that.

The generator shares two cores with the three nodes it measures, so the per-op work here
is kept to two clock reads, a few integer operations and one list increment.

CPU over the window (`LoadResult.cpu`, a `CpuWindow`): one sampler task reads this
process's CPU time (user+sys of every thread, so a client library's own threads, e.g.
gRPC's, count) and, if given `cpu_pids`, each of those processes' utime+stime from
/proc/<pid>/stat, once when the measured window opens and once when it closes, together
with the number of operations completed so far. Per-op figures divide the CPU delta by the
operations completed between the same two samples, so a sampler woken late by a busy loop
shifts both ends alike instead of skewing the quotient.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TextIO

from statekeeper.chaos.stats import nearest_rank

Op = Callable[[], Awaitable[object]]

NS_PER_MS = 1_000_000


class LatencyHistogram:
    """Log-linear histogram of non-negative integer latencies (nanoseconds).

    Each power of two is split into 128 linear sub-buckets, so a reported percentile is
    within 1/128 (< 0.8 %) of the true value, and the memory use is a fixed list of
    ~4.4k counters however long the run. Values above 2**40 ns (~18 min) are clamped.
    """

    SUB_BITS = 7
    SUB = 1 << SUB_BITS  # linear sub-buckets per power of two
    MAX_BITS = 40
    MAX_VALUE = (1 << MAX_BITS) - 1
    # Values below 2*SUB get one bucket each; then SUB buckets per power of two.
    N_BUCKETS = (MAX_BITS - SUB_BITS + 1) * SUB

    __slots__ = ("counts", "count", "total", "min", "max")

    def __init__(self) -> None:
        self.counts = [0] * self.N_BUCKETS
        self.count = 0
        self.total = 0
        self.min = 0
        self.max = 0

    def record(self, value: int) -> None:
        if value < 256:  # 2 * SUB: exact buckets
            idx = value if value > 0 else 0
        else:
            if value > self.MAX_VALUE:
                value = self.MAX_VALUE
            shift = value.bit_length() - 8  # keep the top 8 bits: 1 + SUB_BITS
            idx = ((shift + 1) << 7) + (value >> shift) - 128
        self.counts[idx] += 1
        if self.count == 0 or value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        self.count += 1
        self.total += value

    @classmethod
    def bucket_bounds(cls, idx: int) -> tuple[int, int]:
        """[low, high) of the values that land in bucket `idx`."""
        if idx < 2 * cls.SUB:
            return idx, idx + 1
        shift = idx // cls.SUB - 1
        mantissa = idx % cls.SUB + cls.SUB
        return mantissa << shift, (mantissa + 1) << shift

    def percentile(self, q: float) -> float:
        """The q-th percentile (0 < q <= 100) in the recorded unit; 0.0 when empty."""
        if self.count == 0:
            return 0.0
        rank = nearest_rank(self.count, q)
        seen = 0
        for idx, c in enumerate(self.counts):
            if not c:
                continue
            seen += c
            if seen >= rank:
                low, high = self.bucket_bounds(idx)
                mid = (low + high - 1) / 2
                # The bucket midpoint can lie outside what was actually seen.
                return float(min(max(mid, self.min), self.max))
        return float(self.max)  # pragma: no cover - counts always sum to count

    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


CLK_TCK = os.sysconf("SC_CLK_TCK")  # /proc/<pid>/stat counts CPU time in these ticks


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of process `pid` in seconds (all its threads), or None if it is gone.

    Fields 14 and 15 of /proc/<pid>/stat; the command name (field 2) may hold spaces and
    parentheses, so the fields are counted from the last ')'.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    # fields[0] is field 3 (state): utime is field 14, stime field 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class CpuWindow:
    """CPU used between the two samples that bracket the measured window.

    `client_s`: this process (the load generator); `procs`: name -> seconds of each
    process in `cpu_pids` (missing when it vanished during the window); `ops`: operations
    completed between the samples (successful or not: each cost client CPU).
    """

    wall_s: float
    ops: int
    client_s: float
    procs: dict[str, float] = field(default_factory=dict)

    @property
    def client_us_per_op(self) -> float | None:
        return self.client_s * 1e6 / self.ops if self.ops else None

    @property
    def client_cores(self) -> float | None:
        """Fraction of one core the load generator used (1.0 = one core busy)."""
        return self.client_s / self.wall_s if self.wall_s > 0 else None

    def proc_us_per_op(self, name: str) -> float | None:
        cpu = self.procs.get(name)
        return None if cpu is None or not self.ops else cpu * 1e6 / self.ops


@dataclass
class LoadResult:
    clients: int
    warmup_s: float
    duration_s: float
    latency: LatencyHistogram
    errors: dict[str, int] = field(default_factory=dict)
    warmup_ops: int = 0
    warmup_errors: int = 0
    # Ops still in flight when the drain timeout ran out; cancelled, counted nowhere else.
    unfinished: int = 0
    cpu: CpuWindow | None = None  # None only if the run ended before the window closed

    @property
    def ops(self) -> int:
        """Successful operations completed inside the measured window."""
        return self.latency.count

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.duration_s if self.duration_s > 0 else 0.0

    def latency_ms(self, q: float) -> float:
        return self.latency.percentile(q) / NS_PER_MS

    @property
    def p50_ms(self) -> float:
        return self.latency_ms(50)

    @property
    def p90_ms(self) -> float:
        return self.latency_ms(90)

    @property
    def p99_ms(self) -> float:
        return self.latency_ms(99)

    @property
    def max_ms(self) -> float:
        return self.latency.max / NS_PER_MS

    @property
    def mean_ms(self) -> float:
        return self.latency.mean() / NS_PER_MS

    def summary(self) -> dict[str, object]:
        return {
            "clients": self.clients,
            "warmup_s": self.warmup_s,
            "duration_s": self.duration_s,
            "ops": self.ops,
            "ops_per_s": round(self.ops_per_s, 1),
            "p50_ms": round(self.p50_ms, 3),
            "p90_ms": round(self.p90_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "max_ms": round(self.max_ms, 3),
            "mean_ms": round(self.mean_ms, 3),
            "errors": dict(self.errors),
            "warmup_ops": self.warmup_ops,
            "warmup_errors": self.warmup_errors,
            "unfinished": self.unfinished,
            "cpu": None
            if self.cpu is None
            else {
                "wall_s": round(self.cpu.wall_s, 3),
                "ops": self.cpu.ops,
                "client_s": round(self.cpu.client_s, 4),
                "procs": {k: round(v, 4) for k, v in self.cpu.procs.items()},
            },
        }


def error_key(exc: BaseException) -> str:
    """Group errors by exception type, plus the server's error code when there is one."""
    name = type(exc).__name__
    code = getattr(exc, "code", None)
    if code is not None and str(code) != name:
        return f"{name}({code})"
    return name


class _Run:
    """Shared state of one run; attributes instead of closures keep the hot loop simple."""

    def __init__(self, warmup_ns: int, duration_ns: int, error_backoff: float) -> None:
        self.t0 = time.perf_counter_ns()
        self.measure_start = self.t0 + warmup_ns
        self.stop_at = self.measure_start + duration_ns
        self.error_backoff = error_backoff
        self.hist = LatencyHistogram()
        self.errors: dict[str, int] = {}
        self.warmup_ops = 0
        self.warmup_errors = 0
        self.late_ops = 0  # finished after the window: not measured, only shown in progress

    async def worker(self, op: Op) -> None:
        clock = time.perf_counter_ns
        record = self.hist.record
        measure_start = self.measure_start
        stop_at = self.stop_at
        while True:
            start = clock()
            if start >= stop_at:
                return
            try:
                await op()
            except Exception as exc:  # noqa: BLE001 - every failure is a data point
                end = clock()
                if end < measure_start:
                    self.warmup_errors += 1
                elif end <= stop_at:
                    key = error_key(exc)
                    self.errors[key] = self.errors.get(key, 0) + 1
                if self.error_backoff > 0:
                    # A dead endpoint fails in microseconds; without a pause the loop
                    # would spin and steal the CPU the surviving nodes need.
                    await asyncio.sleep(self.error_backoff)
                continue
            end = clock()
            if end < measure_start:
                self.warmup_ops += 1
            elif end <= stop_at:
                record(end - start)
            else:
                self.late_ops += 1

    def completed(self) -> int:
        return self.warmup_ops + self.hist.count + self.late_ops

    def error_total(self) -> int:
        return self.warmup_errors + sum(self.errors.values())

    def _cpu_sample(self, pids: Mapping[str, int]) -> tuple[int, int, float, dict[str, float]]:
        procs = {name: proc_cpu_seconds(pid) for name, pid in pids.items()}
        return (
            time.perf_counter_ns(),
            self.completed() + self.error_total(),
            time.process_time(),
            {k: v for k, v in procs.items() if v is not None},
        )

    async def sample_cpu(self, pids: Mapping[str, int]) -> CpuWindow:
        """Sample CPU at the window's start and end (see the module docstring)."""
        await asyncio.sleep(max(self.measure_start - time.perf_counter_ns(), 0) / 1e9)
        t0, n0, c0, p0 = self._cpu_sample(pids)
        await asyncio.sleep(max(self.stop_at - time.perf_counter_ns(), 0) / 1e9)
        t1, n1, c1, p1 = self._cpu_sample(pids)
        return CpuWindow(
            wall_s=(t1 - t0) / 1e9,
            ops=n1 - n0,
            client_s=c1 - c0,
            procs={k: p1[k] - p0[k] for k in p0.keys() & p1.keys()},
        )


async def _report_progress(
    run: _Run, stream: TextIO, interval: float, label: str, warmup: float, duration: float
) -> None:
    tty = stream.isatty()
    last_done, last_t = 0, time.perf_counter_ns()
    prefix = f"[{label}] " if label else ""
    while True:
        await asyncio.sleep(interval)
        now = time.perf_counter_ns()
        done = run.completed()
        rate = (done - last_done) * 1e9 / max(now - last_t, 1)
        last_done, last_t = done, now
        if now < run.measure_start:
            phase = f"warm-up {(now - run.t0) / 1e9:4.1f}/{warmup:g}s"
        elif now <= run.stop_at:
            phase = f"measure {(now - run.measure_start) / 1e9:4.1f}/{duration:g}s"
        else:
            phase = "draining"
        line = (
            f"{prefix}{phase}  {rate:8.0f} ops/s  measured {run.hist.count}"
            f"  p99 {run.hist.percentile(99) / NS_PER_MS:.2f} ms  errors {run.error_total()}"
        )
        # On a terminal, overwrite one line; in a log, one line per tick.
        stream.write(f"\r\x1b[K{line}" if tty else f"{line}\n")
        stream.flush()


async def run_load(
    op: Op,
    *,
    clients: int,
    duration: float,
    warmup: float = 0.0,
    progress: TextIO | None = sys.stderr,
    progress_interval: float = 1.0,
    label: str = "",
    drain_timeout: float = 10.0,
    error_backoff: float = 0.001,
    cpu_pids: Mapping[str, int] | None = None,
) -> LoadResult:
    """Run `clients` closed-loop workers calling `op` and measure the window after warm-up.

    `cpu_pids` (name -> pid): server processes whose CPU over the window goes into
    `LoadResult.cpu.procs` next to the generator's own.
    """
    if clients < 1:
        raise ValueError("clients must be >= 1")
    if duration <= 0 or warmup < 0:
        raise ValueError("need duration > 0 and warmup >= 0")
    run = _Run(int(warmup * 1e9), int(duration * 1e9), error_backoff)
    workers = [asyncio.create_task(run.worker(op)) for _ in range(clients)]
    sampler = asyncio.create_task(run.sample_cpu(dict(cpu_pids or {})))
    reporter = (
        asyncio.create_task(
            _report_progress(run, progress, progress_interval, label, warmup, duration)
        )
        if progress is not None
        else None
    )
    unfinished = 0
    try:
        remaining = (run.stop_at - time.perf_counter_ns()) / 1e9 + drain_timeout
        _, pending = await asyncio.wait(workers, timeout=max(remaining, 0.0))
        unfinished = len(pending)
    finally:
        for t in workers:
            t.cancel()
        if time.perf_counter_ns() < run.stop_at:  # ended early: the window never closed
            sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)  # else it is about to finish
        if reporter is not None:
            reporter.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if reporter is not None:
            await asyncio.gather(reporter, return_exceptions=True)
            if progress is not None and progress.isatty():
                progress.write("\n")
                progress.flush()
    for t in workers:
        # A worker only dies on a BaseException that is not cancellation (e.g. SystemExit).
        exc = None if t.cancelled() else t.exception()
        if exc is not None:
            raise exc
    return LoadResult(
        clients=clients,
        warmup_s=warmup,
        duration_s=duration,
        latency=run.hist,
        errors=dict(sorted(run.errors.items())),
        warmup_ops=run.warmup_ops,
        warmup_errors=run.warmup_errors,
        unfinished=unfinished,
        cpu=None if sampler.cancelled() or sampler.exception() else sampler.result(),
    )


def compact_samples(obj: object, keep: int = 1000) -> object:
    """`obj` with every list of more than `keep` numbers replaced by its summary (n, min,
    p50, p90, p99, max), for results files kept in the repository: the raw samples of one
    watch fan-out run were 16 MB of JSON."""
    if isinstance(obj, dict):
        return {k: compact_samples(v, keep) for k, v in obj.items()}
    if isinstance(obj, list):
        if len(obj) > keep and all(isinstance(x, int | float) for x in obj):
            xs = sorted(obj)
            return {
                "n": len(xs),
                "min": xs[0],
                **{f"p{q}": xs[nearest_rank(len(xs), q) - 1] for q in (50, 90, 99)},
                "max": xs[-1],
            }
        return [compact_samples(x, keep) for x in obj]
    return obj
