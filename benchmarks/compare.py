"""statekeeper and etcd side by side: `python -m benchmarks.compare --help`.

For each workload group (key-value rows, failover, cold start) a fresh 3-node etcd
cluster is started, measured and stopped, then a fresh 3-node statekeeper cluster: one
cluster at a time, same machine, same loopback, same disk, fsync on for both, driven by
the same closed-loop harness (benchmarks/harness.py) through each system's own Python
client. One table with both figures and the ratio statekeeper/etcd per row is printed
and appended, with the date, the machine and the exact command, to benchmarks/RESULTS.md;
a PNG chart goes to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from benchmarks.harness import LoadResult, Op, run_load
from benchmarks.load import (
    append_results,
    format_size,
    fs_type,
    key_op,
    machine_info,
    make_keys,
)
from benchmarks.systems import ClusterControl, System, get_system_class
from chaos.stats import percentile

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_RESULTS = BENCH_DIR / "RESULTS.md"
DEFAULT_CHART_DIR = BENCH_DIR / "results"
DEFAULT_DATA_DIR = BENCH_DIR / "out"  # git-ignored and on the same disk as the project

DEFAULT_SYSTEMS = ("etcd", "statekeeper")  # measured in this order, per group
GROUPS = ("put", "get", "mix", "cas", "txn", "batch", "failover", "cold-start")

HOT_KEYS = 10  # compare-and-set contention
TXN_OPS = 10
BATCH_OPS = 64
FAILOVER_LOAD_CLIENTS = 16
FAILOVER_PROBE_INTERVAL = 0.02  # a new probe put every 20 ms after the kill
FAILOVER_TIMEOUT = 60.0
FAILOVER_SETTLE = 1.0  # seconds of load on a healthy cluster before each kill
LOAD_BATCH = 1024  # keys per bulk-load request (capped by each system's own limit)


# ----------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class Workload:
    """One key-value row: what each of `clients` closed-loop workers does per request."""

    kind: str  # put | get | mix | cas | txn | batch
    clients: int
    value_size: int = 256
    consistency: str = "linearizable"
    quick: bool = False  # part of the --quick subset

    @property
    def ops_per_request(self) -> int:
        return BATCH_OPS if self.kind == "batch" else 1

    @property
    def key(self) -> str:
        extra = {"put": str(self.value_size), "get": self.consistency[:3]}.get(self.kind, "")
        return f"{self.kind}{'-' + extra if extra else ''}-x{self.clients}"

    @property
    def label(self) -> str:
        c = f"x{self.clients}"
        if self.kind == "put":
            return f"put {format_size(self.value_size)} {c}"
        if self.kind == "get":
            return f"get {self.consistency} {c}"
        if self.kind == "mix":
            return f"90/10 get/put {c}"
        if self.kind == "cas":
            return f"cas {HOT_KEYS} hot keys {c} (successful cas/s)"
        if self.kind == "txn":
            return f"txn {TXN_OPS} puts {c} (txn/s)"
        if self.kind == "batch":
            return f"batch {BATCH_OPS} puts {c} (puts/s)"
        raise ValueError(self.kind)


def kv_matrix() -> list[Workload]:
    """The issue's rows; `quick=True` marks the few-minute subset."""
    rows = []
    for size in (256, 4096):
        for clients in (1, 16, 64, 256):
            quick = (size, clients) in ((256, 1), (256, 64), (4096, 64))
            rows.append(Workload("put", clients, size, quick=quick))
    for consistency in ("linearizable", "serializable"):
        for clients in (1, 64):
            rows.append(Workload("get", clients, consistency=consistency, quick=clients == 64))
    rows += [
        Workload("mix", 64, quick=True),
        Workload("cas", 64, quick=True),
        Workload("txn", 16, quick=True),
        Workload("batch", 1),
        Workload("batch", 16, quick=True),
    ]
    return rows


# ------------------------------------------------------------------------------ results


@dataclass
class Measure:
    """One system's figure for one row. `value`: ops/s, seconds or MiB by the row's kind."""

    value: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    errors: int = 0
    error_detail: dict[str, int] = field(default_factory=dict)
    note: str = ""
    failed: str | None = None  # why there is no figure


@dataclass
class Row:
    key: str
    label: str
    kind: str  # "ops" (higher is better) | "time" (seconds) | "memory" (MiB)
    results: dict[str, Measure] = field(default_factory=dict)


def measure_from_load(result: LoadResult, ops_per_request: int = 1) -> Measure:
    errors = result.error_count + result.unfinished
    detail = dict(result.errors)
    if result.unfinished:
        detail["unfinished"] = result.unfinished
    return Measure(
        value=result.ops_per_s * ops_per_request,
        p50_ms=result.p50_ms,
        p99_ms=result.p99_ms,
        errors=errors,
        error_detail=detail,
    )


def ratio(sk: float | None, etcd: float | None) -> float | None:
    """statekeeper / etcd, or None when either figure is missing or etcd's is 0."""
    if sk is None or etcd is None or etcd == 0:
        return None
    return sk / etcd


def format_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def format_value(kind: str, m: Measure | None) -> str:
    if m is None:
        return "-"
    if m.failed is not None or m.value is None:
        return "failed" if m.failed else "-"
    if kind == "ops":
        return f"{m.value:.0f}"
    if kind == "time":
        return f"{m.value:.2f} s"
    if kind == "memory":
        return f"{m.value:.0f} MiB"
    raise ValueError(kind)


def format_ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 100 else f"{v:.0f}"


def format_errors(m: Measure | None) -> str:
    if m is None or m.failed is not None:
        return "-"
    return str(m.errors)


TABLE_COLUMNS = (
    "workload",
    "statekeeper ops/s",
    "etcd ops/s",
    "ratio sk/etcd",
    "sk p50 ms",
    "etcd p50 ms",
    "sk p99 ms",
    "etcd p99 ms",
    "errors sk / etcd",
)
_LEFT = {"workload"}


def table_cells(row: Row) -> list[str]:
    sk, etcd = row.results.get("statekeeper"), row.results.get("etcd")
    r = ratio(
        sk.value if sk and not sk.failed else None, etcd.value if etcd and not etcd.failed else None
    )
    return [
        row.label,
        format_value(row.kind, sk),
        format_value(row.kind, etcd),
        format_ratio(r),
        format_ms(sk.p50_ms if sk else None),
        format_ms(etcd.p50_ms if etcd else None),
        format_ms(sk.p99_ms if sk else None),
        format_ms(etcd.p99_ms if etcd else None),
        f"{format_errors(sk)} / {format_errors(etcd)}",
    ]


def markdown_table(rows: Sequence[Row]) -> str:
    body = [table_cells(r) for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(TABLE_COLUMNS)]

    def line(cells: Sequence[str]) -> str:
        out = [
            cell.ljust(w) if col in _LEFT else cell.rjust(w)
            for cell, w, col in zip(cells, widths, TABLE_COLUMNS, strict=True)
        ]
        return "| " + " | ".join(out) + " |"

    sep = (
        "|"
        + "|".join(
            "-" * (w + 2) if c in _LEFT else "-" * (w + 1) + ":"
            for w, c in zip(widths, TABLE_COLUMNS, strict=True)
        )
        + "|"
    )
    return "\n".join([line(TABLE_COLUMNS), sep, *(line(r) for r in body)])


def row_notes(rows: Sequence[Row]) -> list[str]:
    """Errors by type, failures and per-row notes, one line each, for under the table."""
    notes = []
    for row in rows:
        for system, m in row.results.items():
            parts = []
            if m.failed:
                parts.append(f"no figure: {m.failed}")
            if m.error_detail:
                parts.append("errors " + ", ".join(f"{k}: {v}" for k, v in m.error_detail.items()))
            if m.note:
                parts.append(m.note)
            if parts:
                notes.append(f"- {row.label}, {system}: " + "; ".join(parts))
    return notes


LEGEND = (
    "ratio = statekeeper / etcd. For ops/s rows above 1 means statekeeper is faster; for "
    "times (failover, cold start) and memory (RSS) below 1 means statekeeper is better. "
    "Failover rows: p50/p99 over the trials of the time from SIGKILL of the leader to the "
    "first acknowledged put issued after it; the value columns show the p50."
)


# ------------------------------------------------------------------------------ progress


class SimpleBar:
    """One-line progress bar for when tqdm is not installed."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total, self.n, self.desc, self.postfix = total, 0, "", ""
        self.stream = stream
        self.tty = stream.isatty()
        self._last = 0.0

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and not self.tty and now - self._last < 5.0:
            return  # a log file gets a line every 5 s, not one per tick
        self._last = now
        width = 24
        filled = int(width * self.n / max(self.total, 1))
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.n}/{self.total} {self.desc}"
        if self.postfix:
            line += f" | {self.postfix}"
        self.stream.write(f"\r\x1b[K{line}" if self.tty else line + "\n")
        self.stream.flush()

    def update(self, n: int = 1) -> None:
        self.n += n
        self._draw(force=True)

    def set_description(self, desc: str) -> None:
        self.desc = desc
        self._draw(force=True)

    def set_postfix_str(self, s: str) -> None:
        self.postfix = s
        self._draw()

    def write(self, msg: str) -> None:
        self.stream.write(("\r\x1b[K" if self.tty else "") + msg + "\n")
        self.stream.flush()
        if self.tty:
            self._draw(force=True)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


class QuietBar(SimpleBar):
    """--no-progress: messages only."""

    def _draw(self, force: bool = False) -> None:
        pass

    def write(self, msg: str) -> None:
        self.stream.write(msg + "\n")
        self.stream.flush()

    def close(self) -> None:
        pass


def make_bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return QuietBar(total)
    if not sys.stderr.isatty():
        return SimpleBar(total)  # tqdm's carriage returns make one endless line in a log
    try:
        from tqdm import tqdm
    except ImportError:
        return SimpleBar(total)
    return tqdm(total=total, unit="step", dynamic_ncols=True, file=sys.stderr)


class BarStream:
    """A text stream for run_load(progress=...): its per-second line becomes the bar's postfix."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar

    def isatty(self) -> bool:
        return False

    def write(self, s: str) -> int:
        text = s.replace("\r\x1b[K", "").strip()
        if text:
            self.bar.set_postfix_str(text)
        return len(s)

    def flush(self) -> None:
        pass


class LoadProgress:
    """progress(n) callback for bulk loads: keys written so far and the rate, on the bar."""

    def __init__(self, bar: Any, total: int, label: str) -> None:
        self.bar, self.total, self.label = bar, total, label
        self.done = 0
        self.start = time.monotonic()
        self._shown = 0.0

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._shown >= 0.5 or self.done >= self.total:
            self._shown = now
            rate = self.done / max(now - self.start, 1e-9)
            self.bar.set_postfix_str(
                f"{self.label}: {self.done:,}/{self.total:,} keys, {rate:,.0f} keys/s"
            )


# ------------------------------------------------------------------------------ running


@dataclass
class Settings:
    duration: float
    warmup: float
    keys: int
    keys_cold_start: int
    failover_trials: int
    max_clients: int


def make_op(system: System, w: Workload, keys: Sequence[str], stats: dict[str, int]) -> Op:
    """The per-request coroutine of one workload; random keys from `keys`."""
    n = len(keys)
    rand = random.random  # a C call; randrange() costs several times more per op
    value = os.urandom(w.value_size)  # incompressible, so storage compression can't cheat
    if w.kind in ("put", "get"):
        return key_op(system, w.kind, keys, value, w.consistency)
    if w.kind == "mix":
        get, put = system.get, system.put

        async def op() -> object:
            if rand() < 0.9:
                return await get(keys[int(rand() * n)], "linearizable")
            return await put(keys[int(rand() * n)], value)

    elif w.kind == "cas":
        hot = [f"hot{i}" for i in range(HOT_KEYS)]
        versions = dict.fromkeys(hot, 0)  # last version seen per key, shared by the workers
        cas = system.cas
        stats["attempts"] = 0

        async def op() -> object:
            # Optimistic concurrency: one op = one *successful* cas; a lost race learns the
            # current version from the answer and tries again at once.
            k = hot[int(rand() * HOT_KEYS)]
            while True:
                stats["attempts"] += 1
                ok, version = await cas(k, value, versions[k])
                if version > versions[k] or ok:
                    versions[k] = version
                if ok:
                    return None

    elif w.kind in ("txn", "batch"):
        size = TXN_OPS if w.kind == "txn" else BATCH_OPS
        call = system.txn_put if w.kind == "txn" else system.batch_put

        async def op() -> object:
            start = int(rand() * n)  # consecutive keys: distinct, as a txn requires
            return await call([(keys[(start + j) % n], value) for j in range(size)])

    else:
        raise ValueError(f"unknown workload {w.kind!r}")
    return op


_OPTIONAL_OPS = {"cas": "cas", "txn": "txn_put", "batch": "batch_put"}


def supports(system: System, kind: str) -> bool:
    """False when the workload needs an optional System method the system does not override.

    Checked up front: inside run_load a NotImplementedError would only count as errors.
    """
    method = _OPTIONAL_OPS.get(kind)
    return method is None or getattr(type(system), method) is not getattr(System, method)


async def run_kv_group(
    system: System, workloads: Sequence[Workload], s: Settings, bar: Any, name: str
) -> dict[str, Measure]:
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
    order = {"get": 0, "mix": 1, "put": 2, "cas": 3, "txn": 4, "batch": 5}
    for w in sorted(workloads, key=lambda w: order[w.kind]):
        bar.set_description(f"{name}: {w.label}")
        stats: dict[str, int] = {}
        if not supports(system, w.kind):
            out[w.key] = Measure(failed=f"{name}'s System has no {w.kind} operation")
        else:
            result = await run_load(
                make_op(system, w, keys, stats),
                clients=w.clients,
                duration=s.duration,
                warmup=s.warmup,
                progress=BarStream(bar),
                label=f"{name} {w.key}",
            )
            m = measure_from_load(result, w.ops_per_request)
            if w.kind == "cas" and result.ops:
                done = result.ops + result.warmup_ops
                m.note = (
                    f"{stats.get('attempts', 0) / max(done, 1):.1f} attempts per successful cas"
                )
            if w.kind == "batch" and name == "etcd":
                m.note = f"etcd has no non-atomic batch: one Txn of {BATCH_OPS} puts per request"
            out[w.key] = m
        bar.update(1)
    return out


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


async def wait_leader(control: ClusterControl, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        leader = await control.leader()
        if leader is not None:
            return leader
        if time.monotonic() > deadline:
            raise TimeoutError("no leader")
        await asyncio.sleep(0.1)


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
    rss = {m: control.rss_bytes(m) for m in control.members}
    leader = await wait_leader(control)
    member = next(m for m in control.members if m != leader)
    await control.stop(member)
    t0 = time.perf_counter()
    await control.start(member)
    await control.wait_ready([member], timeout=900.0)
    cold = time.perf_counter() - t0
    rss_after = control.rss_bytes(member)
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


def _fail_all(rows: dict[str, Row], keys: Sequence[str], system: str, why: str) -> None:
    for k in keys:
        rows[k].results.setdefault(system, Measure(failed=why))


async def run_compare(
    systems: Sequence[str],
    groups: Sequence[str],
    s: Settings,
    *,
    workloads: Sequence[Workload],
    data_dir: Path,
    bar: Any,
) -> list[Row]:
    rows: dict[str, Row] = {w.key: Row(w.key, w.label, "ops") for w in workloads}
    if "failover" in groups:
        rows["failover"] = Row(
            "failover",
            f"failover: leader SIGKILL -> first put ({s.failover_trials} trials)",
            "time",
        )
    if "cold-start" in groups:
        n = f"{s.keys_cold_start:,}"
        rows["cold-start"] = Row("cold-start", f"cold start, {n} keys -> ready", "time")
        rows["rss-loaded"] = Row("rss-loaded", f"RSS, {n} keys (largest member)", "memory")
        rows["rss-restarted"] = Row("rss-restarted", f"RSS, {n} keys (restarted member)", "memory")

    plan: list[tuple[str, list[str]]] = []
    if workloads:
        plan.append(("kv", [w.key for w in workloads]))
    if "failover" in groups:
        plan.append(("failover", ["failover"]))
    if "cold-start" in groups:
        plan.append(("cold-start", ["cold-start", "rss-loaded", "rss-restarted"]))

    for group, keys in plan:
        for name in systems:  # one cluster at a time: never both under load together
            cls = get_system_class(name)
            bar.set_description(f"{name}: starting a 3-node cluster ({group})")
            t_group = time.monotonic()
            start_n = getattr(bar, "n", 0)
            try:
                await _run_group_on(cls, name, group, s, workloads, data_dir, bar, rows)
            except Exception as e:  # noqa: BLE001 - one system failing must not lose the other
                why = f"{type(e).__name__}: {e}"
                bar.write(f"{name} ({group}) failed: {why}")
                _fail_all(rows, keys, name, why)
            # Keep the bar's total honest when a group ended early.
            left = group_steps(group, s, len(workloads)) - (getattr(bar, "n", 0) - start_n)
            if left > 0:
                bar.update(left)
            bar.write(f"{name}: {group} done in {time.monotonic() - t_group:.0f}s")
    return list(rows.values())


def group_steps(group: str, s: Settings, n_workloads: int) -> int:
    """Progress-bar steps one system takes for one group."""
    return {"kv": n_workloads, "failover": s.failover_trials, "cold-start": 2}[group]


async def _run_group_on(
    cls: type[System],
    name: str,
    group: str,
    s: Settings,
    workloads: Sequence[Workload],
    data_dir: Path,
    bar: Any,
    rows: dict[str, Row],
) -> None:
    with tempfile.TemporaryDirectory(prefix=f"compare-{name}-", dir=data_dir) as workdir:
        async with cls.managed_cluster(Path(workdir), fsync="always", quiet=True) as control:
            extra = {"max_connections": s.max_clients} if name == "statekeeper" else {}
            system = cls(control.endpoints, **extra)
            try:
                await system.setup()
                if group == "kv":
                    for key, m in (await run_kv_group(system, workloads, s, bar, name)).items():
                        rows[key].results[name] = m
                elif group == "failover":
                    rows["failover"].results[name] = await run_failover(
                        system, control, s, bar, name
                    )
                else:
                    for key, m in (await run_cold_start(system, control, s, bar, name)).items():
                        rows[key].results[name] = m
            finally:
                await system.teardown()


# ------------------------------------------------------------------------------- report


def versions() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        from benchmarks.etcd import etcd_version, find_etcd

        out["etcd"] = etcd_version(find_etcd(install=False))
    except Exception:  # noqa: BLE001 - not installed: the section says so
        out["etcd"] = "not installed"
    for pkg in ("aetcd", "grpcio", "protobuf", "httptools", "uvloop"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    out["statekeeper commit"] = _git_commit()
    return out


def _git_commit() -> str:
    """The checked-out commit, read-only (and whether the tree had local changes)."""

    def git(*args: str) -> str:
        run = subprocess.run(
            ["git", *args], cwd=BENCH_DIR, capture_output=True, text=True, timeout=10
        )
        return run.stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head} (with uncommitted changes)" if dirty and head else head or "unknown"


def results_section(
    rows: Sequence[Row],
    *,
    command: str,
    settings: str,
    target: str,
    chart: str | None,
    info: dict[str, str],
    now: dt.datetime,
    load: str,
) -> str:
    m = machine_info()
    lines = [
        f"## {now:%Y-%m-%d %H:%M} UTC: statekeeper vs etcd",
        "",
        f"- machine: nproc {m['nproc']}, {m['cpu']}, {m['memory']} RAM, {m['os']}, {m['python']}",
        f"- command: `{command}`",
        f"- target: {target}",
        f"- settings: {settings}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in info.items()),
        f"- load average at start: {load}",
        "",
        markdown_table(rows),
        "",
        LEGEND,
        "",
    ]
    notes = row_notes(rows)
    if notes:
        lines += ["Notes:", "", *notes, ""]
    if chart:
        lines += [f"![ops/s and p99 per workload]({chart})", ""]
    return "\n".join(lines)


def write_chart(rows: Sequence[Row], systems: Sequence[str], path: Path, title: str) -> bool:
    """Grouped horizontal bars: ops/s and p99 per key-value workload, one colour per system."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    kv = [r for r in rows if r.kind == "ops"]
    if not kv:
        return False
    colours = {"statekeeper": "#1f77b4", "etcd": "#ff7f0e"}
    height = 0.8 / max(len(systems), 1)
    fig, axes = plt.subplots(1, 2, figsize=(13, 1.0 + 0.42 * len(kv)), sharey=True)
    for ax, attr, xlabel in (
        (axes[0], "value", "ops/s (higher is better)"),
        (axes[1], "p99_ms", "p99 latency, ms (lower is better; log scale)"),
    ):
        for j, system in enumerate(systems):
            ys = [i + (j - (len(systems) - 1) / 2) * height for i in range(len(kv))]
            vals = []
            for r in kv:
                m = r.results.get(system)
                v = getattr(m, attr) if m and not m.failed else None
                vals.append(v or 0.0)
            ax.barh(ys, vals, height=height, label=system, color=colours.get(system))
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", alpha=0.3)
        if attr == "p99_ms":
            ax.set_xscale("log")
    axes[0].set_yticks(range(len(kv)))
    axes[0].set_yticklabels([r.label for r in kv])
    axes[0].invert_yaxis()
    axes[0].legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------------- main


def build_parser(prog: str = "python -m benchmarks.compare") -> argparse.ArgumentParser:
    """The options, also `statekeeper bench compare`'s (which passes its arguments here)."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Benchmark statekeeper and etcd side by side: start a 3-node etcd and a\n"
        "3-node statekeeper cluster (one at a time, fsync on), run the same workloads on\n"
        "both, print one table with the ratio statekeeper/etcd per row, append it to\n"
        "benchmarks/RESULTS.md and draw a chart. Needs the bench extra\n"
        "(pip install -e '.[bench]').",
        epilog=f"examples:\n  {prog} --quick\n  {prog} --only put,get --duration 5",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a few-minute subset: fewer rows, 3 s windows, 1 s warm-up, 100,000 keys for the cold start",
    )
    p.add_argument(
        "--only", metavar="GROUPS", help="comma-separated subset of: " + ",".join(GROUPS)
    )
    p.add_argument(
        "--systems",
        default=",".join(DEFAULT_SYSTEMS),
        metavar="NAMES",
        help="systems to run, in this order per group (default: etcd,statekeeper)",
    )
    p.add_argument(
        "--duration", type=float, help="measured seconds per row (default 10; --quick 3)"
    )
    p.add_argument(
        "--warmup", type=float, help="unmeasured seconds before each row (default 2; --quick 1)"
    )
    p.add_argument(
        "--keys", type=int, default=10_000, help="key space of the key-value rows (default 10000)"
    )
    p.add_argument(
        "--skip-cold-start", action="store_true", help="leave out the cold-start and memory rows"
    )
    p.add_argument(
        "--keys-cold-start",
        type=int,
        metavar="N",
        help="keys of 256 B a member holds for cold start and RSS (default 1000000; --quick 100000)",
    )
    p.add_argument(
        "--failover-trials", type=int, default=5, help="leader kills per system (default 5)"
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="parent of the clusters' temp dirs (default benchmarks/out; keep it on disk, not tmpfs)",
    )
    p.add_argument(
        "--results", type=Path, default=DEFAULT_RESULTS, help="markdown file to append to"
    )
    p.add_argument(
        "--no-results",
        action="store_true",
        help="do not append to the results file or write a chart",
    )
    p.add_argument(
        "--chart-dir", type=Path, default=DEFAULT_CHART_DIR, help="where the PNG chart goes"
    )
    p.add_argument("--json", type=Path, metavar="PATH", help="also write every figure as JSON")
    p.add_argument("--note", default="", help="free text for the results section")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def parse_groups(only: str | None, skip_cold_start: bool) -> list[str]:
    if only:
        wanted = [g.strip().replace("_", "-") for g in only.split(",") if g.strip()]
        wanted = ["cold-start" if g in ("cold", "coldstart") else g for g in wanted]
        unknown = [g for g in wanted if g not in GROUPS]
        if unknown:
            raise ValueError(f"unknown group(s) {', '.join(unknown)}; known: {', '.join(GROUPS)}")
    else:
        wanted = list(GROUPS)
    if skip_cold_start:
        wanted = [g for g in wanted if g != "cold-start"]
    return [g for g in GROUPS if g in wanted]


def select_workloads(groups: Sequence[str], quick: bool) -> list[Workload]:
    return [w for w in kv_matrix() if w.kind in groups and (w.quick or not quick)]


def settings_from_args(args: argparse.Namespace, workloads: Sequence[Workload]) -> Settings:
    return Settings(
        duration=args.duration if args.duration is not None else (3.0 if args.quick else 10.0),
        warmup=args.warmup if args.warmup is not None else (1.0 if args.quick else 2.0),
        keys=args.keys,
        keys_cold_start=(
            args.keys_cold_start
            if args.keys_cold_start is not None
            else (100_000 if args.quick else 1_000_000)
        ),
        failover_trials=args.failover_trials,
        max_clients=max([w.clients for w in workloads] + [FAILOVER_LOAD_CLIENTS, 32]),
    )


async def amain(args: argparse.Namespace, command: str) -> int:
    systems = [x.strip() for x in args.systems.split(",") if x.strip()]
    for name in systems:
        get_system_class(name)  # unknown names fail before anything starts
    groups = parse_groups(args.only, args.skip_cold_start)
    workloads = select_workloads(groups, args.quick)
    s = settings_from_args(args, workloads)
    if s.duration <= 0 or s.warmup < 0 or s.keys < BATCH_OPS or s.keys_cold_start < 1:
        raise ValueError("need --duration > 0, --warmup >= 0, --keys >= 64, --keys-cold-start >= 1")
    if s.failover_trials < 1:
        raise ValueError("--failover-trials must be >= 1")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())

    plan = [("kv", bool(workloads)), ("failover", "failover" in groups),
            ("cold-start", "cold-start" in groups)]  # fmt: skip
    total = sum(group_steps(g, s, len(workloads)) for g, on in plan if on) * len(systems)
    bar = make_bar(total, not args.no_progress)
    t0 = time.monotonic()
    try:
        rows = await run_compare(
            systems, groups, s, workloads=workloads, data_dir=args.data_dir, bar=bar
        )
    finally:
        bar.close()
    elapsed = time.monotonic() - t0

    print(markdown_table(rows))
    print()
    print(LEGEND)
    for line in row_notes(rows):
        print(line)
    print(f"\n(total {elapsed / 60:.1f} min)", file=sys.stderr)

    info = versions()
    settings = (
        f"fsync on for both (statekeeper fsync=always, etcd defaults); windows {s.duration:g} s "
        f"after {s.warmup:g} s warm-up; key space {s.keys:,}; closed loop, one client object "
        f"per system (statekeeper AsyncClient max_connections={s.max_clients}, etcd one gRPC "
        f"channel per member); failover: {FAILOVER_LOAD_CLIENTS} put clients, "
        f"{s.failover_trials} trials; run took {elapsed / 60:.1f} min"
    )
    if args.quick:
        settings += "; --quick subset"
    if args.note:
        settings += f"; note: {args.note}"
    target = (
        f"fresh local 3-node clusters, one at a time, order {' then '.join(systems)} per group; "
        f"data on {fs_type(args.data_dir)} ({args.data_dir})"
    )
    chart_rel = None
    if not args.no_results:
        chart = args.chart_dir / f"compare-{now:%Y-%m-%d-%H%M}.png"
        if write_chart(rows, systems, chart, f"statekeeper vs etcd, {now:%Y-%m-%d %H:%M} UTC"):
            try:
                chart_rel = os.path.relpath(chart, args.results.resolve().parent)
            except ValueError:
                chart_rel = str(chart)
            print(f"chart: {chart}", file=sys.stderr)
        section = results_section(
            rows, command=command, settings=settings, target=target, chart=chart_rel,
            info=info, now=now, load=load,
        )  # fmt: skip
        append_results(args.results, section)
        print(f"appended to {args.results}", file=sys.stderr)
    if args.json:
        payload = {
            "command": command,
            "date": now.isoformat(),
            "machine": machine_info(),
            "versions": info,
            "settings": asdict(s),
            "rows": [asdict(r) for r in rows],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    failed = any(m.failed for r in rows for m in r.results.values())
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None, prog: str = "python -m benchmarks.compare") -> int:
    """`python -m benchmarks.compare`, and `statekeeper bench compare` (with its own prog)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(argv)
    try:
        return asyncio.run(amain(args, shlex.join([*prog.split(), *argv])))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
