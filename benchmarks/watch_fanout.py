"""Watch fan-out: many watchers on one prefix, one writer at a steady rate.

    python -m statekeeper.benchmarks.watch_fanout [--watchers 10,100,1000] [--rate 20,5] [--duration 20]
                                      [--endpoints URL,... | --data-dir DIR] [--no-results]

For each rate and watcher count N (one fresh 3-node cluster, fsync=always, for all of them;
a prefix of its own per step):

1. N watches of the prefix are opened from the current revision + 1 (AsyncClient, one per
   node, ``prefer_leader=False``; watcher i on node i % 3; every watch is its own HTTP
   connection; default 1 s progress interval), in batches of 100 50 ms apart; "open" is
   the time until every one had its first frame (a progress frame, so it includes ~1 s);
2. the nodes' CPU is sampled for ``--idle`` seconds with the watches open and no writes;
3. a writer in a separate process (its timings do not queue behind the watchers' event
   loop; both processes read the system-wide CLOCK_MONOTONIC) puts one key of the prefix
   every 1 / ``--rate`` s for ``--duration`` s (open loop: a slow put does not delay the
   next one), recording when each put was sent and acknowledged and its revision;
4. every watcher records when each event arrived; after the writer ends, the run waits
   until every watcher has every revision (at most 30 s).

Per count: delivery latency from the write's acknowledgement to the event at each watcher
(negative when the event beats the writer's answer) and from the write's send (an upper
bound on commit -> delivery: the commit happened in between), joined by revision; whether
every watcher got every write exactly once; the put latency; the CPU of each node (utime +
stime of its process from /proc/<pid>/stat, as a share of one core) while idle and under
the writes, and of this (the watchers') process. Results: a table, a section in
benchmarks/RESULTS.md, a JSON file and a PNG in benchmarks/results/.

Limits: every watch holds a socket in this process and one in a node; the soft
RLIMIT_NOFILE of this process (which the nodes it starts inherit) is raised to what N
needs (up to the hard limit) before anything starts, and each node's open fds are sampled.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import multiprocessing as mp
import os
import resource
import sys
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.benchmarks.harness import compact_samples
from statekeeper.benchmarks.load import append_section, markdown_table, monitored_target
from statekeeper.chaos.stats import percentile
from statekeeper.client import AsyncClient, RetryPolicy
from statekeeper.client.watch.core import WatchEvent

RESULTS = Path(__file__).with_name("RESULTS.md")
PLOTS = Path(__file__).with_name("results")
BATCH = 100  # watches opened at once
TICK = os.sysconf("SC_CLK_TCK")
PATIENT = RetryPolicy(max_attempts=100, deadline=60.0, backoff_max=0.5)


@dataclass
class Step:
    """One watcher count's results."""

    watchers: int
    rate: float  # puts per second
    open_s: float = 0.0
    writes: int = 0
    expected: int = 0  # writes x watchers
    delivered: int = 0  # distinct (watcher, revision) of the writes, received
    duplicates: int = 0
    from_ack_ms: list[float] = field(default_factory=list, repr=False)
    from_send_ms: list[float] = field(default_factory=list, repr=False)
    put_ms: list[float] = field(default_factory=list, repr=False)
    node_cpu_idle: dict[str, float] = field(default_factory=dict)  # % of one core
    node_cpu_load: dict[str, float] = field(default_factory=dict)
    bench_cpu_load: float = 0.0
    machine_cpu_idle: float = 0.0  # every process on the machine, % of one core
    machine_cpu_load: float = 0.0
    node_fds: dict[str, int] = field(default_factory=dict)
    drain_s: float = 0.0


# ------------------------------------------------------------------ CPU and fds


def cpu_seconds(pid: int | None = None) -> float:
    """utime + stime of ``pid`` (None: this process) in seconds, from /proc/<pid>/stat."""
    with open(f"/proc/{pid or 'self'}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, all cores, from /proc/stat."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / TICK, sum(ticks) / TICK  # minus idle, iowait


class CpuMeter:
    """CPU share (% of one core) of each node process, of this one, and of the whole
    machine (every process: other users' too; 100% x cores = saturated) over a window."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids, self.t0, self.m0 = pids, time.monotonic(), machine_busy()
        self.c0 = {n: cpu_seconds(p) for n, p in self.pids.items()}
        self.self0 = cpu_seconds()

    def read(self) -> tuple[dict[str, float], float, float]:
        dt_ = max(time.monotonic() - self.t0, 1e-6)
        nodes = {n: 100 * (cpu_seconds(p) - self.c0[n]) / dt_ for n, p in self.pids.items()}
        (b1, t1), (b0, t0) = machine_busy(), self.m0
        machine = 100 * (os.cpu_count() or 1) * (b1 - b0) / max(t1 - t0, 1e-6)
        return nodes, 100 * (cpu_seconds() - self.self0) / dt_, machine


def raise_fd_limit(needed: int) -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to ``needed`` (up to the hard limit); the
    nodes started afterwards inherit it. Returns the (soft, hard) limits now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, needed) if hard == resource.RLIM_INFINITY else min(max(soft, needed), hard)
    if want != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


# ------------------------------------------------------------------ the writer (its own process)


def _writer_main(endpoints: list[str], prefix: str, rate: float, duration: float, out: Any) -> None:
    out.send(asyncio.run(_write(endpoints, prefix, rate, duration)))
    out.close()


async def _write(
    endpoints: list[str], prefix: str, rate: float, duration: float
) -> list[tuple[int, int, int]]:
    """(revision, sent ns, acknowledged ns) of every put, one every 1/rate s (open loop)."""
    done: list[tuple[int, int, int]] = []
    async with AsyncClient(endpoints, ns="bench-watch", timeout=5.0, retry=PATIENT) as c:

        async def put(i: int) -> None:
            sent = time.monotonic_ns()
            res = await c.put(f"{prefix}{i % 100}", b"v" * 64)
            done.append((res.revision, sent, time.monotonic_ns()))

        t0, tasks = time.monotonic(), []
        for i in range(int(duration * rate)):
            await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            tasks.append(asyncio.create_task(put(i)))
        await asyncio.gather(*tasks)
    return done


# ------------------------------------------------------------------ the watchers (this process)


class Fanout:
    """N watches and what they received: watcher -> [(revision, received ns)]."""

    def __init__(self, clients: list[AsyncClient], prefix: str, n: int, start: int) -> None:
        self.clients, self.prefix, self.n, self.start = clients, prefix, n, start
        self.got: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.ready = [asyncio.Event() for _ in range(n)]
        self.tasks: list[asyncio.Task[None]] = []

    async def open(self, say: Any) -> float:
        """Open every watch, BATCH at a time 50 ms apart (a node's listen backlog is 100);
        returns the seconds until every one had its first frame (a progress frame, sent
        after the 1 s progress interval: that second is in the figure)."""
        t0 = time.monotonic()
        for lo in range(0, self.n, BATCH):
            self.tasks += [
                asyncio.create_task(self._watch(i)) for i in range(lo, min(self.n, lo + BATCH))
            ]
            await asyncio.sleep(0.05)
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self.ready)), 120)
        took = time.monotonic() - t0
        say(f"{self.n} watches open, each had its first frame after {took:.1f} s")
        return took

    async def _watch(self, i: int) -> None:
        c = self.clients[i % len(self.clients)]
        got, ready = self.got[i], self.ready[i]
        async for item in c.watch(
            self.prefix, start_revision=self.start, progress=1.0, progress_events=True
        ):
            if isinstance(item, WatchEvent):
                got.append((item.revision, time.monotonic_ns()))
            ready.set()

    def received(self) -> int:
        return sum(len(g) for g in self.got)

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def _tally(step: Step, fan: Fanout, writes: list[tuple[int, int, int]]) -> None:
    """Join the deliveries with the writes by revision."""
    by_rev = {rev: (sent, acked) for rev, sent, acked in writes}
    step.writes, step.expected = len(writes), len(writes) * fan.n
    step.put_ms = [(a - s) / 1e6 for _, s, a in writes]
    for got in fan.got:
        revs = [r for r, _ in got]
        step.duplicates += len(revs) - len(set(revs))
        for rev, t in dict(got).items():
            if rev in by_rev:
                sent, acked = by_rev[rev]
                step.delivered += 1
                step.from_ack_ms.append((t - acked) / 1e6)
                step.from_send_ms.append((t - sent) / 1e6)


async def run_step(
    endpoints: list[str], pids: dict[str, int], n: int, rate: float, args: Any
) -> Step:
    step, prefix = Step(n, rate), f"fan{n}-{rate:g}/"

    def say(msg: str) -> None:
        if not args.no_progress:
            print(f"[{n} watchers, {rate:g} puts/s] {msg}", file=sys.stderr, flush=True)

    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                AsyncClient([u], ns="bench-watch", timeout=5.0, retry=PATIENT, prefer_leader=False)
            )
            for u in endpoints
        ]
        start = (await clients[0].range(prefix, limit=1)).revision + 1
        fan = Fanout(clients, prefix, n, start)
        try:
            step.open_s = await fan.open(say)
            meter = CpuMeter(pids)
            await asyncio.sleep(args.idle)
            step.node_cpu_idle, _, step.machine_cpu_idle = meter.read()
            say(
                f"idle with {n} watches: nodes {_cpu(step.node_cpu_idle)}, machine "
                f"{step.machine_cpu_idle:.0f}%"
            )
            writes = await _write_while_watching(endpoints, prefix, fan, pids, step, args, say)
            t0 = time.monotonic()
            want = {r for r, _, _ in writes}
            while time.monotonic() - t0 < 30 and not all(
                want <= {r for r, _ in g} for g in fan.got
            ):
                await asyncio.sleep(0.2)
            step.drain_s = time.monotonic() - t0
            _tally(step, fan, writes)
        finally:
            await fan.close()
    say(_line(step))
    return step


async def _write_while_watching(
    endpoints: list[str], prefix: str, fan: Fanout, pids: dict[str, int], step: Step, args: Any,
    say: Any,
) -> list[tuple[int, int, int]]:  # fmt: skip
    """Run the writer process; print progress each second; sample CPU and fds."""
    recv, send = mp.get_context("spawn").Pipe(duplex=False)
    proc = mp.get_context("spawn").Process(
        target=_writer_main, args=(endpoints, prefix, step.rate, args.duration, send), daemon=True
    )
    meter = CpuMeter(pids)
    proc.start()
    send.close()
    t0, last = time.monotonic(), fan.received()
    while not recv.poll():
        await asyncio.sleep(1.0)
        now = fan.received()
        nodes, me, machine = meter.read()
        step.node_fds = {k: max(step.node_fds.get(k, 0), open_fds(p)) for k, p in pids.items()}
        say(
            f"t={time.monotonic() - t0:4.1f}s events received {now} (+{now - last}/s); CPU "
            f"nodes {_cpu(nodes)}, watchers' process {me:.0f}%, machine {machine:.0f}%"
        )
        last = now
    writes = await asyncio.to_thread(recv.recv)
    step.node_cpu_load, step.bench_cpu_load, step.machine_cpu_load = meter.read()
    await asyncio.to_thread(proc.join, 10)
    return writes


def _cpu(cpu: dict[str, float]) -> str:
    return " ".join(f"{v:.0f}%" for v in cpu.values()) + f" (sum {sum(cpu.values()):.0f}%)"


def _p(xs: list[float], q: float) -> float:
    v = percentile(xs, q)
    return float("nan") if v is None else v


def _line(s: Step) -> str:
    return (
        f"{s.writes} writes, delivered {s.delivered}/{s.expected} ({s.duplicates} twice); "
        f"ack->event p50 {_p(s.from_ack_ms, 50):.1f} p99 {_p(s.from_ack_ms, 99):.1f} ms; "
        f"send->event p50 {_p(s.from_send_ms, 50):.1f} p99 {_p(s.from_send_ms, 99):.1f} ms; "
        f"nodes {_cpu(s.node_cpu_load)}"
    )


# ------------------------------------------------------------------ results

COLUMNS = tuple(
    "puts/s|watchers|open s|writes|delivered|ack->event p50 ms|ack->event p99 ms|"
    "send->event p50 ms|send->event p99 ms|put p50 ms|put p99 ms|nodes CPU idle %|"
    "nodes CPU load %|watchers' process CPU %|machine CPU idle / load %".split("|")
)


def table(steps: list[Step]) -> str:
    rows = [
        [
            f"{s.rate:g}",
            str(s.watchers),
            f"{s.open_s:.1f}",
            str(s.writes),
            f"{s.delivered}/{s.expected}" + (f" ({s.duplicates} twice)" if s.duplicates else ""),
            *(
                f"{_p(xs, q):.1f}"
                for xs in (s.from_ack_ms, s.from_send_ms, s.put_ms)
                for q in (50, 99)
            ),
            f"{sum(s.node_cpu_idle.values()):.0f}",
            " + ".join(f"{v:.0f}" for v in s.node_cpu_load.values())
            + f" = {sum(s.node_cpu_load.values()):.0f}",
            f"{s.bench_cpu_load:.0f}",
            f"{s.machine_cpu_idle:.0f} / {s.machine_cpu_load:.0f}",
        ]
        for s in steps
    ]
    return markdown_table(rows, COLUMNS, numeric=COLUMNS[:4] + COLUMNS[5:12] + COLUMNS[13:14])


def plot(steps: list[Step], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11.5, 4.4))
    for rate in sorted({s.rate for s in steps}, reverse=True):
        rs = [s for s in steps if s.rate == rate]
        ns = [s.watchers for s in rs]
        for xs, q, style in (("from_send_ms", 50, "o-"), ("from_send_ms", 99, "o--")):
            ax1.plot(ns, [_p(getattr(s, xs), q) for s in rs], style,
                     label=f"{rate:g} puts/s: send -> event p{q}")  # fmt: skip
        ax1.plot(
            ns,
            [_p(s.from_ack_ms, 50) for s in rs],
            "s:",
            label=f"{rate:g} puts/s: ack -> event p50",
        )
        ax2.plot(
            ns, [sum(s.node_cpu_load.values()) for s in rs], "o-", label=f"3 nodes, {rate:g} puts/s"
        )
        ax2.plot(
            ns, [s.bench_cpu_load for s in rs], "s:", label=f"watchers' process, {rate:g} puts/s"
        )
    idle = sorted({s.watchers: sum(s.node_cpu_idle.values()) for s in steps}.items())
    ax2.plot([n for n, _ in idle], [c for _, c in idle], "o--", color="grey", label="3 nodes, idle")
    for ax, ylabel, title in (
        (ax1, "delivery latency, ms", "watch fan-out: one writer, N watchers"),
        (ax2, "CPU, % of one core", "CPU (machine: 2 shared cores)"),
    ):
        ax.set_xscale("log")
        ax.set_xlabel("watchers on the prefix")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    ax1.set_yscale("symlog", linthresh=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


async def run(args: argparse.Namespace) -> tuple[list[Step], str]:
    steps: list[Step] = []
    async with AsyncExitStack() as stack:
        endpoints, pids, target = await monitored_target(
            stack, args.endpoints, "sk-fanout-", args.data_dir, args.no_progress
        )
        for rate in args.rate:
            for n in args.watchers:
                steps.append(await run_step(endpoints, pids, n, rate, args))
    return steps, target


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.watch_fanout",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--watchers", default="10,100,1000", help="watcher counts (default 10,100,1000)")
    p.add_argument("--rate", default="20,5", help="puts per second, one or more (default 20,5)")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of writes (default 20)")
    p.add_argument(
        "--idle", type=float, default=3.0, help="seconds of idle CPU sampling (default 3)"
    )
    p.add_argument("--endpoints", help="comma-separated URLs of a running cluster")
    p.add_argument("--data-dir", type=Path, help="parent of the fresh cluster's directory")
    p.add_argument("--note", default="", help="a sentence for the RESULTS.md section")
    p.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    args.watchers = [int(n) for n in args.watchers.split(",")]
    args.rate = [float(r) for r in args.rate.split(",")]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    limits = raise_fd_limit(max(args.watchers) * 2 + 256)
    steps, target = asyncio.run(run(args))
    rows = table(steps)
    print(rows)
    now = dt.datetime.now(dt.UTC)
    PLOTS.mkdir(exist_ok=True)
    stem = PLOTS / f"watch-fanout-{now:%Y-%m-%d-%H%M}"
    stem.with_suffix(".json").write_text(
        json.dumps(compact_samples([asdict(s) for s in steps]), indent=1)
    )
    png = plot(steps, stem.with_suffix(".png"))
    if not args.no_results:
        fds = "; ".join(
            f"{s.watchers} watchers at {s.rate:g}/s: "
            + ", ".join(f"{k} {v}" for k, v in s.node_fds.items())
            for s in steps
        )
        append_section(
            RESULTS,
            "Watch fan-out",
            "statekeeper.benchmarks.watch_fanout",
            argv,
            [
                f"target: {target}",
                f"one writer ({'/'.join(f'{r:g}' for r in args.rate)} puts/s of 64 B for "
                f"{args.duration:g} s, its own "
                "process) and N watchers on one prefix (one AsyncClient per node, watcher i on "
                "node i % 3, one connection per watch) in this process; latency joined by "
                f"revision; CPU in % of one core; RLIMIT_NOFILE soft/hard {limits[0]}/{limits[1]}; "
                f"most open fds per node: {fds}" + (f"; plot: results/{png.name}" if png else ""),
                "the nodes, the writer and the watchers share the machine's cores"
                + (f"; {args.note}" if args.note else ""),
            ],
            [rows],
            now,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
