"""RPO and RTO under faults, per durability setting.

    python -m statekeeper.benchmarks.rpo [--trials 3] [--faults leader-kill,...] [--fsync always,never]

Each trial starts a fresh 3-node cluster, drives acknowledged writes of unique keys at a
steady rate, injects one fault, lets the cluster recover, and then reads every key back
linearizably. RPO = acknowledged writes missing afterwards (and the span of ack times they
cover); RTO = fault start -> first successful write, and -> first successful linearizable
read, measured by probes every 20 ms. Results are printed and appended to RESULTS.md.

The `writer-kill` fault measures the client cache's write-back RPO instead: the WRITER
process (writing through ``client.cache(..., mode=...)``, each of `--cache-modes`) is
SIGKILLed at a random point of a flush interval; lost = writes the cache acknowledged that
the cluster does not hold (benchmarks/rpo_cache.py). It is not in the default `--faults`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from statekeeper.benchmarks import rpo_cache
from statekeeper.chaos import lazyfs, partition
from statekeeper.chaos.stats import percentile
from statekeeper.client import Client, RetryPolicy, StatekeeperError
from statekeeper.cluster.ports import free_ports
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node import config as node_config

FAULTS = ("leader-kill", "follower-kill", "minority-partition", "cluster-kill", "power-loss")
CACHE_FAULTS = ("writer-kill",)  # the client cache's write-back RPO (benchmarks/rpo_cache.py)
RESULTS = Path(__file__).with_name("RESULTS.md")


@dataclass
class Trial:
    fault: str
    fsync: str
    acked: int = 0
    lost: int = 0
    lost_span_s: float = 0.0
    rto_write_s: float | None = None
    rto_read_s: float | None = None
    skipped: str = ""


@dataclass
class _Writer:
    """Unique-key writers at a steady total rate; remembers what was acknowledged, when."""

    urls: list[str]
    rate: float
    threads: int = 4
    acked: dict[str, tuple[bytes, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, t: int) -> None:
        period = self.threads / self.rate
        with Client(self.urls, ns="rpo", timeout=3, retry=RetryPolicy(deadline=8)) as c:
            i, next_at = 0, time.monotonic()
            while not self._stop.is_set():
                key, value = f"w{t}-{i}", uuid.uuid4().bytes
                with contextlib.suppress(StatekeeperError):
                    c.put(key, value)
                    with self._lock:
                        self.acked[key] = (value, time.monotonic())
                i += 1
                next_at += period
                self._stop.wait(max(0.0, next_at - time.monotonic()))

    @contextlib.contextmanager
    def running(self) -> Iterator[_Writer]:
        ths = [threading.Thread(target=self.run, args=(t,), daemon=True) for t in range(self.threads)]
        for th in ths:
            th.start()
        try:
            yield self
        finally:
            self._stop.set()
            for th in ths:
                th.join(30)


def _probe(urls: list[str], since: float, until: float) -> tuple[float | None, float | None]:
    """First successful write and linearizable read after `since` (seconds from it)."""
    write_at = read_at = None
    clients = [Client(u, timeout=1, retry=RetryPolicy.disabled()) for u in urls]
    try:
        while time.monotonic() < until and (write_at is None or read_at is None):
            for c in clients:
                if write_at is None:
                    with contextlib.suppress(StatekeeperError):
                        c.put("probe", b"p")
                        write_at = time.monotonic() - since
                if read_at is None:
                    with contextlib.suppress(StatekeeperError):
                        c.get("probe", default=None)
                        read_at = time.monotonic() - since
            time.sleep(0.02)
    finally:
        for c in clients:
            c.close()
    return write_at, read_at


def _config(workdir: Path, fsync: str, data_dir: Path, links: bool) -> tuple[Path, node_config.ClusterConfig]:
    ports = free_ports(6)
    cfg = node_config.local_cluster(fsync=fsync, data_dir=str(data_dir))
    nodes = tuple(
        dataclasses.replace(n, http_port=ports[2 * i], raft_port=ports[2 * i + 1]) for i, n in enumerate(cfg.nodes)
    )
    cfg = dataclasses.replace(cfg, nodes=nodes, raft=dataclasses.replace(cfg.raft, request_timeout=2.0))
    if links:
        cfg = partition.with_link_addresses(cfg)
    path = workdir / "cluster.toml"
    node_config.write(cfg, path)
    return path, node_config.load(path)


def run_trial(fault: str, fsync: str, rate: float, before: float, after: float) -> Trial:
    trial = Trial(fault, fsync)
    if fault == "minority-partition":
        ok, why = partition.available()
    elif fault == "power-loss":
        ok, why = lazyfs.available()
    else:
        ok, why = True, ""
    if not ok:
        trial.skipped = why
        return trial
    with tempfile.TemporaryDirectory(prefix=f"sk-rpo-{fault}-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        fs = None
        if fault == "power-loss":
            (work / "disk").mkdir()
            fs = stack.enter_context(lazyfs.LazyFS(work / "disk", data, backing_sync=False))
        path, cfg = _config(work, fsync, data, links=fault == "minority-partition")
        lc = LocalCluster(cfg, path)
        stack.callback(lc.close)
        stack.callback(lc.kill_all)
        lc.up()
        urls = [lc.url(n) for n in lc.node_ids]
        writer = _Writer(urls, rate)
        with writer.running():
            time.sleep(before)
            leader = lc.leader_id() or lc.node_ids[0]
            t0 = time.monotonic()
            restart: list[str] = []
            net = None
            if fault == "leader-kill":
                lc.kill_node(leader)
                restart = [leader]
            elif fault == "follower-kill":
                victim = next(n for n in lc.node_ids if n != leader)
                lc.kill_node(victim)
                restart = [victim]
            elif fault == "minority-partition":
                net = stack.enter_context(partition.Partitioner(cfg))
                net.isolate(leader)
            elif fault in ("cluster-kill", "power-loss"):
                lc.kill_all()
                if fs is not None:
                    fs.crash()
                lc.up()
            trial.rto_write_s, trial.rto_read_s = _probe(urls, t0, t0 + after + 10)
            time.sleep(max(0.0, after - (time.monotonic() - t0)))
        if net is not None:
            net.heal()
        for n in restart:
            lc.start_and_wait(n)
        lc.wait_ready(None, timeout=60)
        with Client(urls, ns="rpo") as c:
            found = {kv.key: kv.value for kv in c.scan()}
        lost = [(k, t) for k, (v, t) in writer.acked.items() if found.get(k) != v]
        trial.acked = len(writer.acked)
        trial.lost = len(lost)
        if lost:
            times = [t for _, t in lost]
            trial.lost_span_s = max(times) - min(times)
    return trial


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _p50_p99(xs: list[float]) -> str:
    return " / ".join(_fmt(percentile(xs, q, "nearest_index")) for q in (50, 99))


def summarize(trials: list[Trial]) -> str:
    rows = [
        "| fault | fsync | trials | acked (median) | lost (max) | lost span s (max) | RTO write p50 / p99 s | RTO read p50 / p99 s |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    groups: dict[tuple[str, str], list[Trial]] = {}
    for t in trials:
        groups.setdefault((t.fault, t.fsync), []).append(t)
    for (fault, fsync), ts in groups.items():
        if all(t.skipped for t in ts):
            rows.append(f"| {fault} | {fsync} | skipped: {ts[0].skipped} | | | | | |")
            continue
        ts = [t for t in ts if not t.skipped]
        w = [t.rto_write_s for t in ts if t.rto_write_s is not None]
        r = [t.rto_read_s for t in ts if t.rto_read_s is not None]
        rows.append(
            f"| {fault} | {fsync} | {len(ts)} | {statistics.median(t.acked for t in ts):.0f} "
            f"| {max(t.lost for t in ts)} | {max(t.lost_span_s for t in ts):.2f} "
            f"| {_p50_p99(w)} | {_p50_p99(r)} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument(
        "--faults", default=",".join(FAULTS), help=f"comma-separated, from {', '.join(FAULTS + CACHE_FAULTS)}"
    )
    ap.add_argument("--fsync", default="always,never", help="comma-separated durability settings")
    ap.add_argument("--rate", type=float, default=200.0, help="acknowledged writes per second to aim for")
    ap.add_argument("--before", type=float, default=3.0, help="seconds of writes before the fault")
    ap.add_argument("--after", type=float, default=6.0, help="seconds of writes after the fault starts")
    ap.add_argument("--cache-modes", default="write-back,write-through", help="writer-kill: the cache modes")
    ap.add_argument("--flush-ms", type=float, default=100.0, help="writer-kill: the write-back flush interval")
    ap.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = ap.parse_args(argv)
    faults = [f for f in args.faults.split(",") if f]
    unknown = set(faults) - set(FAULTS + CACHE_FAULTS)
    if unknown:
        ap.error(f"unknown fault(s): {', '.join(sorted(unknown))}")
    modes = [m for m in args.cache_modes.split(",") if m] if "writer-kill" in faults else []
    plan = [(f, s) for f in faults if f != "writer-kill" for s in args.fsync.split(",") for _ in range(args.trials)]
    kill_plan = [(m, s) for m in modes for s in args.fsync.split(",") for _ in range(args.trials)]
    trials, kills = [], []
    total = len(plan) + len(kill_plan)
    for i, (fault, fsync) in enumerate(plan, 1):
        print(f"[{i}/{total}] {fault} fsync={fsync} ...", file=sys.stderr, flush=True)
        t = run_trial(fault, fsync, args.rate, args.before, args.after)
        trials.append(t)
        print(
            f"[{i}/{total}] {fault} fsync={fsync}: "
            + (f"skipped ({t.skipped})" if t.skipped else f"acked {t.acked} lost {t.lost} RTO write {_fmt(t.rto_write_s)} s read {_fmt(t.rto_read_s)} s"),
            file=sys.stderr,
            flush=True,
        )
    for i, (mode, fsync) in enumerate(kill_plan, len(plan) + 1):
        print(f"[{i}/{total}] writer-kill {mode} fsync={fsync} ...", file=sys.stderr, flush=True)
        k = rpo_cache.run_trial(mode, fsync, args.rate, args.before, args.flush_ms, _config)
        kills.append(k)
        print(
            f"[{i}/{total}] writer-kill {mode}: acked {k.acked} lost {k.lost} "
            f"(oldest lost {k.lost_age_max_s:.3f} s before the kill)",
            file=sys.stderr,
            flush=True,
        )
    tables = ([summarize(trials)] if trials else []) + ([rpo_cache.summarize(kills)] if kills else [])
    table = "\n\n".join(tables)
    print(table)
    if not args.no_results:
        cmd = "python -m statekeeper.benchmarks.rpo " + " ".join(argv if argv is not None else sys.argv[1:])
        what = f"Writes at {args.rate:g}/s of unique keys"
        if trials:
            what += f"; fault after {args.before:g} s; RTO probes every 20 ms"
        if kills:
            what += (
                f"; writer-kill: the writer process (client.cache, flush_ms={args.flush_ms:g} in "
                f"write-back) SIGKILLed {args.before:g} s + a random part of one flush interval "
                "after its start; lost = writes the cache acknowledged that the cluster lacks"
            )
        with RESULTS.open("a") as f:
            f.write(
                f"\n## RPO / RTO under faults ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n\n"
                f"Command: `{cmd.strip()}`  \nMachine: {os.cpu_count()} cores, {platform.platform()}, "
                f"Python {platform.python_version()}  \n{what}.\n\n{table}\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
