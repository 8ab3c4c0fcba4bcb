"""Measuring one group (key-value rows, failover, cold start) on one running cluster.

Each function takes a set-up `System` (the client) and, where it needs to break or
inspect the cluster, its `ClusterControl`, and returns `Measure`s for one round. Nothing
here knows about rounds or the other system: benchmarks/compare/runner.py decides which
cluster runs when.

CPU per op: the key-value rows pass the members' pids to run_load, which samples this
process's CPU and theirs at the start and end of the measured window (harness.CpuWindow);
the leader is asked for just before each row (a leader change mid-row would put the
new leader's CPU among the followers').
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from statekeeper.benchmarks.cluster_control import ClusterControl
from statekeeper.benchmarks.compare.progress import BarStream, LoadProgress
from statekeeper.benchmarks.compare.rounds import Measure
from statekeeper.benchmarks.compare.workloads import BATCH_OPS, Workload, make_op, supports
from statekeeper.benchmarks.harness import LoadResult, run_load
from statekeeper.benchmarks.load import make_keys
from statekeeper.benchmarks.restart import members_rss, restart_follower, wait_leader
from statekeeper.benchmarks.systems import System
from statekeeper.chaos.stats import percentile

FAILOVER_LOAD_CLIENTS = 16
FAILOVER_PROBE_INTERVAL = 0.02  # a new probe put every 20 ms after the kill
FAILOVER_TIMEOUT = 60.0
FAILOVER_SETTLE = 1.0  # seconds of load on a healthy cluster before each kill
LOAD_BATCH = 1024  # keys per bulk-load request (capped by each system's own limit)


@dataclass
class Settings:
    duration: float
    warmup: float
    keys: int
    keys_cold_start: int
    failover_trials: int
    max_clients: int
    rounds: int = 3


def measure_from_load(
    result: LoadResult, ops_per_request: int = 1, leader: str | None = None
) -> Measure:
    """A round's Measure from run_load; CPU per op counts ops as the value does (puts for
    a batch row), servers split into `leader` and the mean of the others."""
    errors = result.error_count + result.unfinished
    detail = dict(result.errors)
    if result.unfinished:
        detail["unfinished"] = result.unfinished
    m = Measure(
        value=result.ops_per_s * ops_per_request,
        p50_ms=result.p50_ms,
        p99_ms=result.p99_ms,
        errors=errors,
        error_detail=detail,
    )
    cpu = result.cpu
    if cpu is not None and cpu.ops:
        per = ops_per_request
        m.client_cores = cpu.client_cores
        m.client_us_per_op = cpu.client_s * 1e6 / cpu.ops / per
        lead = cpu.proc_us_per_op(leader) if leader is not None else None
        m.leader_us_per_op = None if lead is None else lead / per
        others = [cpu.proc_us_per_op(name) for name in cpu.procs if name != leader]
        if others and leader is not None:
            m.follower_us_per_op = sum(o for o in others if o is not None) / len(others) / per
    return m


async def member_pids(control: ClusterControl | None) -> tuple[str | None, dict[str, int]]:
    """(the leader, pid per running member); (None, {}) without a control."""
    if control is None:
        return None, {}
    leader = await control.leader()
    pids = {m: pid for m in control.members if (pid := control.pid(m)) is not None}
    return leader, pids


async def run_kv_group(
    system: System,
    workloads: list[Workload] | tuple[Workload, ...],
    s: Settings,
    bar: Any,
    name: str,
    control: ClusterControl | None = None,
) -> dict[str, Measure]:
    """Every key-value row on one cluster; `name` labels the bar (e.g. 'etcd r2/3')."""
    keys = make_keys(s.keys)
    out: dict[str, Measure] = {}
    if any(w.kind in ("get", "mix") for w in workloads):
        bar.set_description(f"{name}: loading {s.keys:,} keys")
        await system.bulk_populate(
            keys,
            os.urandom(256),
            batch=LOAD_BATCH,
            concurrency=system.bulk_concurrency,
            progress=LoadProgress(bar, s.keys, "loading"),
        )
    # Reads first, while every key holds a 256 B value; the put rows change that.
    order = {"get": 0, "mix": 1, "put": 2, "cas": 3, "txn": 4, "batch": 5, "append": 6}
    for w in sorted(workloads, key=lambda w: order[w.kind]):
        bar.set_description(f"{name}: {w.label}")
        if not supports(system, w.kind):
            out[w.key] = Measure(failed=f"{system.name}'s System has no {w.kind} operation")
        else:
            out[w.key] = await _run_row(system, w, keys, s, bar, name, control)
        bar.update(1)
    return out


async def _run_row(
    system: System,
    w: Workload,
    keys: list[str],
    s: Settings,
    bar: Any,
    name: str,
    control: ClusterControl | None,
) -> Measure:
    stats: dict[str, int] = {}
    leader, pids = await member_pids(control)
    result = await run_load(
        make_op(system, w, keys, stats),
        clients=w.clients,
        duration=s.duration,
        warmup=s.warmup,
        progress=BarStream(bar),
        label=f"{name} {w.key}",
        cpu_pids=pids,
    )
    m = measure_from_load(result, w.ops_per_request, leader)
    if w.kind == "cas" and result.ops:
        done = result.ops + result.warmup_ops
        m.note = f"{stats.get('attempts', 0) / max(done, 1):.1f} attempts per successful cas"
    if w.kind == "batch" and system.name == "etcd":
        m.note = f"etcd has no non-atomic batch: one Txn of {BATCH_OPS} puts per request"
    return m


async def first_put_after(put: Callable[[], Any], t_kill: float, timeout: float) -> float | None:
    """Seconds from `t_kill` to the first acknowledged put among probes issued after it.

    A new probe starts every FAILOVER_PROBE_INTERVAL until one succeeds, so one request
    stuck on the dead leader does not hide that the cluster accepts writes again.
    """
    first: float | None = None
    done = asyncio.Event()
    tasks: set[asyncio.Task[None]] = set()

    async def probe() -> None:
        nonlocal first
        try:
            await put()
        except Exception:  # noqa: BLE001 - a failed probe is simply not the first success
            return
        if first is None:
            first = time.perf_counter() - t_kill
            done.set()

    try:
        while not done.is_set() and time.perf_counter() - t_kill < timeout:
            tasks.add(asyncio.create_task(probe()))
            try:
                await asyncio.wait_for(done.wait(), FAILOVER_PROBE_INTERVAL)
            except TimeoutError:
                pass
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return first


async def run_failover(
    system: System, control: ClusterControl, s: Settings, bar: Any, name: str
) -> Measure:
    keys = make_keys(1000)
    value = os.urandom(256)
    stop = asyncio.Event()
    bg = {"ok": 0, "errors": 0, "max_s": 0.0}
    kill_at = [0.0]

    async def background() -> None:
        # The put load the leader dies under; it also records the longest put that was in
        # flight across a kill (what one unlucky client waits).
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                await system.put(keys[int(random.random() * len(keys))], value)
            except Exception:  # noqa: BLE001
                bg["errors"] += 1
                await asyncio.sleep(0.01)
                continue
            bg["ok"] += 1
            if t0 < kill_at[0]:
                bg["max_s"] = max(bg["max_s"], time.perf_counter() - t0)

    times: list[float] = []
    lost = 0
    workers = [asyncio.create_task(background()) for _ in range(FAILOVER_LOAD_CLIENTS)]
    try:
        for trial in range(s.failover_trials):
            bar.set_description(f"{name}: failover trial {trial + 1}/{s.failover_trials}")
            await control.wait_ready(timeout=120.0)
            leader = await wait_leader(control)
            await asyncio.sleep(FAILOVER_SETTLE)
            t_kill = time.perf_counter()
            kill_at[0] = t_kill
            await control.kill(leader)
            took = await first_put_after(
                lambda: system.put(keys[int(random.random() * len(keys))], value),
                t_kill,
                FAILOVER_TIMEOUT,
            )
            if took is None:
                lost += 1
                bar.write(f"{name}: no put succeeded within {FAILOVER_TIMEOUT:.0f}s of the kill")
            else:
                times.append(took)
                bar.set_postfix_str(f"leader {leader} killed; first put after {took:.2f}s")
            await control.start(leader)
            await control.wait_ready([leader], timeout=120.0)
            bar.update(1)
    finally:
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
    if not times:
        return Measure(failed=f"no put succeeded after any of {s.failover_trials} kills")
    detail = {"background put errors": bg["errors"]} if bg["errors"] else {}
    if lost:
        detail["trials without a put in 60 s"] = lost
    # Nearest rank: a handful of trials, so report one that happened, not a blend of two.
    p50, p99 = (percentile(times, q, "nearest_rank") for q in (50, 99))
    assert p50 is not None and p99 is not None  # times is not empty
    return Measure(
        value=p50,
        p50_ms=p50 * 1000,
        p99_ms=p99 * 1000,
        errors=lost,
        error_detail=detail,
        samples=times,  # pooled over rounds by rounds.summarize_system
        note=(
            f"{len(times)} trials: " + ", ".join(f"{t:.2f}" for t in times) + " s; "
            f"slowest put in flight across a kill {bg['max_s']:.2f} s"
        ),
    )


async def run_cold_start(
    system: System, control: ClusterControl, s: Settings, bar: Any, name: str
) -> dict[str, Measure]:
    n = s.keys_cold_start
    bar.set_description(f"{name}: loading {n:,} keys of 256 B")
    keys = [f"c{i:08d}" for i in range(n)]
    progress = LoadProgress(bar, n, "loading")
    t0 = time.perf_counter()
    await system.bulk_populate(
        keys,
        os.urandom(256),
        batch=LOAD_BATCH,
        concurrency=system.bulk_concurrency,
        progress=progress,
    )
    load_s = time.perf_counter() - t0
    del keys
    bar.update(1)
    bar.set_description(f"{name}: restarting a follower holding {n:,} keys")
    await control.wait_ready(timeout=600.0)  # every member has caught up
    rss = members_rss(control)
    restart = await restart_follower(control)
    member, cold, rss_after = restart.member, restart.seconds, restart.rss_after
    bar.update(1)
    loaded = [v for v in rss.values() if v is not None]
    mib = 1024 * 1024
    return {
        "cold-start": Measure(
            value=cold,
            note=f"restarted {member} (a follower); bulk load took {load_s:.1f} s "
            f"({n / load_s:,.0f} keys/s)",
        ),
        "rss-loaded": Measure(
            value=max(loaded) / mib if loaded else None,
            note="per member: "
            + ", ".join(f"{m} {v / mib:.0f}" for m, v in rss.items() if v is not None)
            + " MiB",
        ),
        "rss-restarted": Measure(value=rss_after / mib if rss_after else None),
    }
