"""What TLS costs: `python -m statekeeper.benchmarks.tls_cost [--rounds 3] [--duration 15]`.

Fresh local 3-node clusters (fsync=always, data on disk under benchmarks/out), one per arm
and round, the arms in a rotating order, each measured with the load generator's put
workload (256 B values, benchmarks/load.py) at 1 and 64 clients. Arms: `plain` (no TLS),
`https` (the client port over HTTPS with the cluster's CA; raft peers AES-GCM only),
`https+raft` (also `[tls] raft`: TLS 1.3, mutual, EC P-256, around the AES-GCM peer
messages); `--arms` picks some. Reported: the median
over the rounds of ops/s, p50 and p99 per arm and client count, each round's ops/s, and
the CPU the three node processes used per 1,000 puts (utime + stime from /proc, measured
window only): on a machine shared with other work the throughput numbers move with the
neighbours, the CPU per put much less.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

from statekeeper.benchmarks.cluster_control import free_port_block
from statekeeper.benchmarks.cpu_per_op import read_cpu_seconds
from statekeeper.benchmarks.harness import LoadResult
from statekeeper.benchmarks.load import (
    Spec,
    append_section,
    fs_type,
    make_keys,
    markdown_table,
    run_spec,
)
from statekeeper.benchmarks.systems import StatekeeperSystem
from statekeeper.cluster.certs import init_cluster_tls
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node import config as node_config
from statekeeper.node.config import TlsSettings

OUT = Path(__file__).resolve().parent / "out"
CLIENTS = (1, 64)


def _cpu_seconds(pids: list[int]) -> float:
    return sum(read_cpu_seconds(pid) for pid in pids)


@dataclasses.dataclass
class Run:
    result: LoadResult
    cpu_ms_per_1k: float  # node CPU per 1,000 puts


ARMS = {"plain": (False, False), "https": (True, False), "https+raft": (True, True)}


def _config(workdir: Path, arm: str, fsync: str) -> Path:
    client_tls, raft_tls = ARMS[arm]
    rng = random.Random()
    http_base = free_port_block(3, set(), rng)
    raft_base = free_port_block(3, set(range(http_base, http_base + 3)), rng)
    cfg = node_config.local_cluster(
        size=3, http_base_port=http_base, raft_base_port=raft_base, fsync=fsync
    )
    init_cluster_tls(workdir / "tls", [(n.id, n.host) for n in cfg.nodes])
    tls = TlsSettings(
        enabled=client_tls,
        ca_file="tls/ca.pem",
        cert_file="tls/{id}.pem",
        key_file="tls/{id}-key.pem",
        raft=raft_tls,
    )
    path = workdir / "cluster.toml"
    node_config.write(dataclasses.replace(cfg, tls=tls), path)
    return path


async def one_arm(arm: str, args: argparse.Namespace) -> dict[int, Run]:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tls-cost-", dir=OUT) as tmp:
        workdir = Path(tmp)
        path = _config(workdir, arm, args.fsync)
        cfg = node_config.load(path)
        os.environ["STATEKEEPER_CA_FILE"] = str(workdir / "tls" / "ca.pem")
        lc = LocalCluster(cfg, path)
        try:
            await asyncio.to_thread(lc.up, timeout=60.0)
            system = StatekeeperSystem(cfg.http_urls())
            await system.setup()
            try:
                keys = make_keys(10_000)
                pids = [p for n in lc.node_ids if (p := lc.pid(n)) is not None]
                out = {}
                for clients in CLIENTS:
                    cpu = [0.0, 0.0]

                    async def mark(into: list[float], i: int, delay: float) -> None:
                        await asyncio.sleep(delay)
                        into[i] = _cpu_seconds(pids)

                    # CPU over the measured window only (after the warm-up).
                    marks = [
                        asyncio.create_task(mark(cpu, 0, args.warmup)),
                        asyncio.create_task(mark(cpu, 1, args.warmup + args.duration)),
                    ]
                    result = await run_spec(
                        system,
                        Spec("put", 256, clients),
                        keys=keys,
                        duration=args.duration,
                        warmup=args.warmup,
                        populated=set(),
                        progress=False,
                    )
                    await asyncio.gather(*marks)
                    per_1k = (cpu[1] - cpu[0]) * 1e6 / max(result.ops, 1)
                    out[clients] = Run(result, per_1k)
                return out
            finally:
                await system.teardown()
        finally:
            await asyncio.to_thread(lc.down, timeout=15.0)
            lc.close()


def _row(label: str, clients: int, runs: list[Run]) -> list[str]:
    med = statistics.median
    results = [r.result for r in runs]
    return [
        label,
        str(clients),
        f"{med(r.ops_per_s for r in results):,.0f}",
        f"{med(r.latency_ms(50) for r in results):.2f}",
        f"{med(r.latency_ms(99) for r in results):.2f}",
        f"{med(r.cpu_ms_per_1k for r in runs):.0f}",
        str(sum(r.error_count for r in results)),
        " / ".join(f"{r.ops_per_s:,.0f}" for r in results),
    ]


async def amain(args: argparse.Namespace) -> list[list[str]]:
    names = args.arms.split(",")
    arms: dict[str, dict[int, list[Run]]] = {a: {c: [] for c in CLIENTS} for a in names}
    for rnd in range(args.rounds):
        order = names[rnd % len(names) :] + names[: rnd % len(names)]  # rotate the start
        for arm in order:
            print(f"round {rnd + 1}/{args.rounds}: {arm}", file=sys.stderr)
            res = await one_arm(arm, args)
            for c, run in res.items():
                arms[arm][c].append(run)
                r = run.result
                print(
                    f"  c{c}: {r.ops_per_s:,.0f} ops/s, p50 {r.latency_ms(50):.2f} ms, "
                    f"p99 {r.latency_ms(99):.2f} ms, node CPU {run.cpu_ms_per_1k:.0f} ms "
                    f"per 1k puts, errors {r.error_count}",
                    file=sys.stderr,
                )
    rows = []
    for c in CLIENTS:
        for arm in names:
            rows.append(_row(arm, c, arms[arm][c]))
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.tls_cost", description=__doc__
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds per arm (default 3)")
    p.add_argument("--duration", type=float, default=15.0, help="measured s per row (15)")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured s per row (2)")
    p.add_argument("--fsync", choices=("always", "never"), default="always")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    p.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    args = p.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    rows = asyncio.run(amain(args))
    header = (
        "TLS",
        "clients",
        "ops/s",
        "p50 ms",
        "p99 ms",
        "node CPU ms / 1k puts",
        "errors",
        "ops/s per round",
    )
    numeric = ("clients", "ops/s", "p50 ms", "p99 ms", "node CPU ms / 1k puts")
    table = markdown_table(rows, header, numeric=numeric)
    print(table)
    if not args.no_results:
        append_section(
            Path(__file__).resolve().parent / "RESULTS.md",
            "TLS: none vs HTTPS vs HTTPS + raft TLS, put 256 B",
            "statekeeper.benchmarks.tls_cost",
            argv,
            [
                f"started {started:%Y-%m-%d %H:%M:%S} UTC; fresh 3-node cluster per arm and "
                f"round (fsync={args.fsync}, data on {fs_type(OUT)}), arms in rotating order, "
                f"{args.rounds} rounds each, {args.duration:g} s measured after "
                f"{args.warmup:g} s warm-up per row; medians over the rounds",
                "plain: no TLS; https: the client port over HTTPS, raft peers AES-GCM only; "
                "https+raft: also mutual TLS 1.3 on the raft port",
            ],
            [table],
            dt.datetime.now(dt.UTC),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
