"""Keepalive cost: N leases of TTL 10 s kept alive for 30 s, as clients keep them.

    python -m statekeeper.benchmarks.lease_keepalive [--leases 100,1000,5000] [--ttl 10] [--duration 30]
                                         [--mode sessions,batched] [--clients 8]
                                         [--endpoints URL,... | --data-dir DIR] [--no-results]

For each mode and lease count N (one fresh 3-node cluster, fsync=always, for all of them;
a namespace of its own per step):

1. N leases are granted, each with one key attached (``put(key, ttl=TTL)``: one op grants
   the lease and puts the key, as a session would announce itself);
2. for ``--duration`` seconds they are kept alive:

   - ``sessions``: one lease per session, every session renewing its own lease: one
     ``lease_keepalive`` op with one id every TTL/3 (what the client library's keeper
     sends for a client with one lease), the N sessions' phases spread evenly over TTL/3.
     The sessions are coroutines sharing ``--clients`` AsyncClients (pooled
     connections; a real deployment has one client and connection per session, so its
     nodes hold more sockets than here);
   - ``batched``: ONE AsyncClient holds all N leases (``AsyncLease``) and its own keeper
     renews them, one op per 1000 leases every TTL/3 (client/leases/keeper.py): the best
     case for an agent runtime that hosts many sessions in one process;

3. then every lease is checked: a keepalive that reported it missing, or its key gone,
   means it expired.

Per step: keepalive ops/s and leases renewed/s (client side), keepalive latency
p50/p99/max (send to answer), raft entries/s (the leader's commit index over the window)
and ops per entry (group commit), the store revisions taken during the window (0 since
keepalives take none), the CPU of each node and of the leader (utime + stime from
/proc/<pid>/stat, % of one core), of this (the clients') process and of the whole machine,
and how many leases expired. Results: a table, a section in benchmarks/RESULTS.md, a JSON
file and a PNG in benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import sys
import time
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.benchmarks.harness import compact_samples
from statekeeper.benchmarks.load import append_section, markdown_table, monitored_target
from statekeeper.benchmarks.watch_fanout import CpuMeter, raise_fd_limit
from statekeeper.chaos.stats import percentile
from statekeeper.client import AsyncClient, LeaseNotFound, RetryPolicy
from statekeeper.client.leases.keeper import AsyncLease

RESULTS = Path(__file__).with_name("RESULTS.md")
PLOTS = Path(__file__).with_name("results")
PATIENT = RetryPolicy(max_attempts=100, deadline=60.0, backoff_max=0.5)
SETUP_CONCURRENCY = 64


@dataclass
class Step:
    """One (mode, lease count)'s results."""

    mode: str
    leases: int
    ttl: float
    duration: float = 0.0
    setup_s: float = 0.0
    keepalive_ops: int = 0
    renewed: int = 0  # lease renewals answered ok
    failed_ops: int = 0  # keepalive calls that raised (after the client's retries)
    missing: int = 0  # leases a keepalive reported gone
    keys_gone: int = 0  # keys found gone at the end
    latency_ms: list[float] = field(default_factory=list, repr=False)
    leader: str = ""
    leader_changed: bool = False
    entries: int = 0  # leader commit index over the window
    ops_proposed: int = 0  # ops the nodes' proposers sent to raft over the window (all nodes)
    revisions: int = 0  # store revision over the window
    node_cpu: dict[str, float] = field(default_factory=dict)  # % of one core
    bench_cpu: float = 0.0
    machine_cpu: float = 0.0

    @property
    def expired(self) -> int:
        return max(self.missing, self.keys_gone)


def _p(xs: list[float], q: float) -> float:
    v = percentile(xs, q)
    return float("nan") if v is None else v


# ------------------------------------------------------------------ the cluster's side


def _status_sync(url: str) -> dict[str, Any]:
    from statekeeper.cluster.supervisor import http_get_json

    code, doc = http_get_json(url + "/v1/status", timeout=5.0)  # GET /v1/status
    return doc if code == 200 and isinstance(doc, dict) else {}


async def _snapshot(endpoints: list[str]) -> dict[str, dict[str, Any]]:
    docs = await asyncio.gather(*(asyncio.to_thread(_status_sync, u) for u in endpoints))
    return {d.get("node_id", u): d for u, d in zip(endpoints, docs, strict=True)}


def _leader(snap: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    for nid, d in snap.items():
        if d.get("role") == "leader":
            return nid, d
    return "", {}


# ------------------------------------------------------------------ the clients' side


async def _grant_all(clients: list[AsyncClient], ns: str, n: int, ttl: float) -> list[int]:
    """N leases, each with its key ``s{i}``, one op each (put with ttl)."""
    ids: list[int] = [0] * n
    sem = asyncio.Semaphore(SETUP_CONCURRENCY)

    async def one(i: int) -> None:
        async with sem:
            r = await clients[i % len(clients)].put(f"s{i}", b"alive", ttl=ttl, ns=ns)
            ids[i] = r.lease

    await asyncio.gather(*(one(i) for i in range(n)))
    return ids


async def _sessions(
    step: Step, clients: list[AsyncClient], ids: list[int], ttl: float, duration: float
) -> None:
    """Every lease renewed by its own op every ttl/3, phases spread over ttl/3."""
    period = ttl / 3
    end = time.monotonic() + duration
    n = len(ids)

    async def session(i: int, lease: int) -> None:
        c = clients[i % len(clients)]
        nxt = time.monotonic() + period * i / n
        while True:
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))
            if time.monotonic() >= end:
                return
            sent = time.monotonic()
            try:
                r = await c.lease_keepalive(lease)
            except Exception:  # the client's retries are exhausted: the keeper retries
                step.failed_ops += 1
                nxt = time.monotonic() + 0.5
                continue
            step.latency_ms.append((time.monotonic() - sent) * 1000)
            step.keepalive_ops += 1
            step.renewed += len(r.leases)
            if r.missing:
                step.missing += len(r.missing)
                return  # gone: a session would start over with a new lease
            nxt += period

    await asyncio.gather(*(session(i, lease) for i, lease in enumerate(ids)))


async def _batched(
    step: Step, endpoints: list[str], ns: str, n: int, ttl: float
) -> tuple[float, AsyncClient, list[AsyncLease]]:
    """One AsyncClient with all N leases (and their keys); its own keeper renews them
    from now on. Returns (setup seconds, the client, the leases)."""
    c = AsyncClient(endpoints, ns=ns, timeout=10.0, retry=PATIENT)
    inner = c.lease_keepalive

    async def timed(*leases: Any) -> Any:
        sent = time.monotonic()
        try:
            r = await inner(*leases)
        except Exception:
            step.failed_ops += 1
            raise
        step.latency_ms.append((time.monotonic() - sent) * 1000)
        step.keepalive_ops += 1
        step.renewed += len(r.leases)
        step.missing += len(r.missing)
        return r

    c.lease_keepalive = timed  # type: ignore[method-assign]
    try:
        t0 = time.monotonic()
        sem = asyncio.Semaphore(SETUP_CONCURRENCY)
        leases: list[AsyncLease] = []

        async def one(i: int) -> None:
            async with sem:
                lease = await AsyncLease(c, ttl, ns)
                leases.append(lease)
                await c.put(f"s{i}", b"alive", lease=lease)

        await asyncio.gather(*(one(i) for i in range(n)))
        setup = time.monotonic() - t0
        step.keepalive_ops = step.renewed = 0  # only the window counts
        step.latency_ms.clear()
        return setup, c, leases
    except BaseException:
        await c.close()
        raise


async def _revoke_all(clients: list[AsyncClient], ids: list[int]) -> None:
    sem = asyncio.Semaphore(SETUP_CONCURRENCY)

    async def one(i: int, lease: int) -> None:
        async with sem:
            with contextlib.suppress(LeaseNotFound):
                await clients[i % len(clients)].lease_revoke(lease)

    await asyncio.gather(*(one(i, lease) for i, lease in enumerate(ids)))


async def _keys_gone(c: AsyncClient, ns: str, n: int) -> int:
    live = 0
    async for _ in c.scan("s", ns=ns, keys_only=True):
        live += 1
    return n - live


async def run_step(
    endpoints: list[str], pids: dict[str, int], mode: str, n: int, args: argparse.Namespace
) -> Step:
    def say(msg: str) -> None:
        if not args.no_progress:
            print(f"[{mode} {n}] {msg}", file=sys.stderr, flush=True)

    step = Step(mode, n, args.ttl)
    ns = f"bench-lease-{uuid.uuid4().hex[:6]}"
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                AsyncClient(endpoints, ns=ns, timeout=10.0, retry=PATIENT, max_connections=64)
            )
            for _ in range(args.clients)
        ]
        t0 = time.monotonic()
        say("granting")
        batched = None
        if mode == "sessions":
            ids = await _grant_all(clients, ns, n, args.ttl)
            step.setup_s = time.monotonic() - t0
        else:
            step.setup_s, bc, held = await _batched(step, endpoints, ns, n, args.ttl)
            batched = (bc, held)
        say(f"{n} leases granted in {step.setup_s:.1f} s; keeping them alive {args.duration:g} s")
        before = await _snapshot(endpoints)
        leader, lst = _leader(before)
        meter = CpuMeter(pids)
        w0 = time.monotonic()
        if batched is None:
            await _sessions(step, clients, ids, args.ttl, args.duration)
        else:
            step.keepalive_ops = step.renewed = 0
            step.latency_ms.clear()
            await asyncio.sleep(args.duration)
        step.duration = time.monotonic() - w0
        step.node_cpu, step.bench_cpu, step.machine_cpu = meter.read()
        after = await _snapshot(endpoints)
        leader2, lst2 = _leader(after)
        step.leader, step.leader_changed = leader, leader != leader2
        step.entries = int(lst2.get("commit_index", 0)) - int(lst.get("commit_index", 0))
        step.ops_proposed = sum(
            int(after[k].get("ops_proposed", 0)) - int(before.get(k, {}).get("ops_proposed", 0))
            for k in after
        )
        step.revisions = int(lst2.get("revision", 0)) - int(lst.get("revision", 0))
        if batched is not None:
            bc, held = batched
            step.missing += sum(1 for x in held if not x.alive)
            ids = [x.id for x in held if x.id is not None]
            await bc.close()
        step.keys_gone = await _keys_gone(clients[0], ns, n)
        say(_line(step))
        # Revoke them all, so that their expiry does not land in the next step's window.
        await _revoke_all(clients, ids)
    return step


# ------------------------------------------------------------------ results


def _line(s: Step) -> str:
    return (
        f"{s.keepalive_ops / s.duration:.0f} keepalive ops/s ({s.renewed / s.duration:.0f} "
        f"renewals/s), p50 {_p(s.latency_ms, 50):.1f} p99 {_p(s.latency_ms, 99):.1f} ms; "
        f"{s.entries / s.duration:.0f} raft entries/s; {s.revisions} revisions; leader "
        f"{s.leader} CPU {s.node_cpu.get(s.leader, float('nan')):.0f}%; expired {s.expired}"
    )


COLUMNS = tuple(
    "mode|leases|keepalive ops/s|renewals/s|latency p50 ms|latency p99 ms|latency max ms|"
    "failed calls|raft entries/s|ops per entry|revisions taken|leader CPU %|"
    "nodes CPU % (3 nodes)|clients' process CPU %|machine CPU %|expired".split("|")
)


def table(steps: list[Step]) -> str:
    rows = []
    for s in steps:
        d = max(s.duration, 1e-6)
        rows.append(
            [
                s.mode,
                str(s.leases),
                f"{s.keepalive_ops / d:.1f}",
                f"{s.renewed / d:.0f}",
                f"{_p(s.latency_ms, 50):.1f}",
                f"{_p(s.latency_ms, 99):.1f}",
                f"{max(s.latency_ms, default=float('nan')):.1f}",
                str(s.failed_ops),
                f"{s.entries / d:.1f}",
                f"{s.ops_proposed / max(s.entries, 1):.1f}",
                str(s.revisions),
                f"{s.node_cpu.get(s.leader, float('nan')):.0f}"
                + (" (leader changed)" if s.leader_changed else ""),
                " + ".join(f"{v:.0f}" for v in s.node_cpu.values())
                + f" = {sum(s.node_cpu.values()):.0f}",
                f"{s.bench_cpu:.0f}",
                f"{s.machine_cpu:.0f}",
                str(s.expired),
            ]
        )
    return markdown_table(rows, COLUMNS, numeric=COLUMNS[1:11] + COLUMNS[13:])


def plot(steps: list[Step], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11.5, 4.4))
    for mode in sorted({s.mode for s in steps}):
        ms = sorted((s for s in steps if s.mode == mode), key=lambda s: s.leases)
        ns = [s.leases for s in ms]
        ax1.plot(ns, [_p(s.latency_ms, 50) for s in ms], "o-", label=f"{mode}: p50")
        ax1.plot(ns, [_p(s.latency_ms, 99) for s in ms], "o--", label=f"{mode}: p99")
        ax2.plot(ns, [s.node_cpu.get(s.leader, 0.0) for s in ms], "o-", label=f"{mode}: leader")
        ax2.plot(ns, [sum(s.node_cpu.values()) for s in ms], "s:", label=f"{mode}: 3 nodes")
    for ax, ylabel, title in (
        (ax1, "keepalive latency, ms", "keepalive latency (TTL 10 s, renew every TTL/3)"),
        (ax2, "CPU, % of one core", "node CPU (machine: 2 shared cores)"),
    ):
        ax.set_xscale("log")
        ax.set_xlabel("leases kept alive")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    ax1.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


async def run(args: argparse.Namespace) -> tuple[list[Step], str]:
    steps: list[Step] = []
    async with AsyncExitStack() as stack:
        endpoints, pids, target = await monitored_target(
            stack, args.endpoints, "sk-leases-", args.data_dir, args.no_progress
        )
        for mode in args.mode:
            for n in args.leases:
                steps.append(await run_step(endpoints, pids, mode, n, args))
    return steps, target


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.lease_keepalive",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--leases", default="100,1000,5000", help="lease counts (default 100,1000,5000)")
    p.add_argument("--ttl", type=float, default=10.0, help="lease TTL in s (default 10)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds kept alive (default 30)")
    p.add_argument("--mode", default="sessions,batched", help="sessions, batched or both")
    p.add_argument("--clients", type=int, default=8, help="AsyncClients the sessions share")
    p.add_argument("--endpoints", help="comma-separated URLs of a running cluster")
    p.add_argument("--data-dir", type=Path, help="parent of the fresh cluster's directory")
    p.add_argument("--note", default="", help="a sentence for the RESULTS.md section")
    p.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    args.leases = [int(n) for n in args.leases.split(",")]
    args.mode = [m.strip() for m in args.mode.split(",") if m.strip()]
    bad = set(args.mode) - {"sessions", "batched"}
    if bad:
        p.error(f"unknown mode(s): {', '.join(sorted(bad))}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    limits = raise_fd_limit(args.clients * 64 + 512)
    steps, target = asyncio.run(run(args))
    rows = table(steps)
    print(rows)
    now = dt.datetime.now(dt.UTC)
    PLOTS.mkdir(exist_ok=True)
    stem = PLOTS / f"lease-keepalive-{now:%Y-%m-%d-%H%M}"
    stem.with_suffix(".json").write_text(
        json.dumps(compact_samples([asdict(s) for s in steps]), indent=1)
    )
    png = plot(steps, stem.with_suffix(".png"))
    if not args.no_results:
        append_section(
            RESULTS,
            "Lease keepalive cost",
            "statekeeper.benchmarks.lease_keepalive",
            argv,
            [
                f"target: {target}",
                f"N leases of TTL {args.ttl:g} s, each with one key, kept alive for "
                f"{args.duration:g} s; renewals every TTL/3. sessions: one lease per session, "
                f"one keepalive op per renewal (N coroutines sharing {args.clients} "
                "AsyncClients); batched: one AsyncClient's own keeper renews all N, one op "
                "per 1000 leases. Latency: send to answer; raft entries/s: the leader's "
                "commit index over the window; ops per entry: all proposers' ops / entries "
                "(group commit); CPU in % of one core; RLIMIT_NOFILE soft/hard "
                f"{limits[0]}/{limits[1]}" + (f"; plot: results/{png.name}" if png else ""),
                "the nodes and the clients' process share the machine's 2 cores, and other "
                "sessions' tests and benchmarks were running on it at the same time: CPU and "
                "latency are upper bounds" + (f"; {args.note}" if args.note else ""),
            ],
            [rows],
            now,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
