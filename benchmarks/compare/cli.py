"""`python -m statekeeper.benchmarks.compare` (and `statekeeper bench compare`): options, settings, main.

main() parses, runs benchmarks.compare.runner.run_compare under one progress bar, prints
the table, and unless --no-results appends the section to --results (default
benchmarks/RESULTS.md) and writes the chart; --json writes every round's figures.
Exit code 1 when some system failed some round, 2 on bad options, 130 on ^C.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from statekeeper.benchmarks.compare.chart import write_chart
from statekeeper.benchmarks.compare.measure import FAILOVER_LOAD_CLIENTS, Settings
from statekeeper.benchmarks.compare.progress import make_bar
from statekeeper.benchmarks.compare.report import results_section, rounds_line, versions
from statekeeper.benchmarks.compare.rounds import Row, summarize_row
from statekeeper.benchmarks.compare.runner import run_compare, total_steps
from statekeeper.benchmarks.compare.table import result_blocks, row_notes
from statekeeper.benchmarks.compare.workloads import BATCH_OPS, GROUPS, Workload, select_workloads
from statekeeper.benchmarks.load import append_results, fs_type, machine_info
from statekeeper.benchmarks.redis_streams import REDIS_SETUP
from statekeeper.benchmarks.systems import get_system_class

BENCH_DIR = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS = BENCH_DIR / "RESULTS.md"
DEFAULT_CHART_DIR = BENCH_DIR / "results"
DEFAULT_DATA_DIR = BENCH_DIR / "out"  # git-ignored and on the same disk as the project
# Round 1's order; later rounds rotate it. Redis takes part in the append rows only.
DEFAULT_SYSTEMS = ("etcd", "statekeeper", "redis")
DEFAULT_ROUNDS = 3


def build_parser(prog: str = "python -m statekeeper.benchmarks.compare") -> argparse.ArgumentParser:
    """The options, also `statekeeper bench compare`'s (which passes its arguments here)."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Benchmark statekeeper and etcd side by side: start a 3-node etcd and a\n"
        "3-node statekeeper cluster (one at a time, fsync on), run the same workloads on\n"
        "both in alternating rounds (a fresh cluster each), print one table with the\n"
        "median ratio statekeeper/etcd per row and its spread, append it to\n"
        "benchmarks/RESULTS.md and draw a chart. The append rows add Redis Streams\n"
        "(one redis-server, appendfsync always) as a third system. Needs the bench\n"
        "extra (pip install -e '.[bench]').",
        epilog=f"examples:\n  {prog} --quick\n  {prog} --only put,get --duration 5\n"
        f"  {prog} --only append --duration 5   # stream appends vs etcd puts vs Redis XADD\n"
        f"  {prog} --quick --rounds 2 --only put --duration 2 --warmup 1 "
        "--results /tmp/r.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a few-minute subset: fewer rows, 3 s windows, 1 s warm-up, 100,000 keys for the cold start",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help="rounds per group and system, alternating the order, each on a fresh cluster "
        f"(default {DEFAULT_ROUNDS}); the table gives medians and the spread of the ratios",
    )
    p.add_argument(
        "--only", metavar="GROUPS", help="comma-separated subset of: " + ",".join(GROUPS)
    )
    p.add_argument(
        "--systems",
        default=",".join(DEFAULT_SYSTEMS),
        metavar="NAMES",
        help="systems to run, in this order in round 1, rotated by one each later round "
        "(default: etcd,statekeeper,redis; redis runs the append rows only)",
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
        rounds=args.rounds,
    )


def _checked_settings(
    args: argparse.Namespace,
) -> tuple[list[str], list[str], list[Workload], Settings]:
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
    if s.rounds < 1:
        raise ValueError("--rounds must be >= 1")
    return systems, groups, workloads, s


def settings_text(
    args: argparse.Namespace, s: Settings, elapsed: float, workloads: Sequence[Workload] = ()
) -> str:
    text = (
        f"fsync on for both (statekeeper fsync=always, etcd defaults); windows {s.duration:g} s "
        f"after {s.warmup:g} s warm-up; key space {s.keys:,}; closed loop, one client object "
        f"per system (statekeeper AsyncClient max_connections={s.max_clients}, etcd one gRPC "
        f"channel per member); failover: {FAILOVER_LOAD_CLIENTS} put clients, "
        f"{s.failover_trials} trials per round; run took {elapsed / 60:.1f} min"
    )
    if any(w.kind == "append" for w in workloads):
        text += f"; append rows: {REDIS_SETUP}"
    if args.quick:
        text += "; --quick subset"
    if args.note:
        text += f"; note: {args.note}"
    return text


def print_results(rows: Sequence[Row], systems: Sequence[str], s: Settings) -> None:
    print(rounds_line(systems, s.rounds)[2:])
    for block in result_blocks(rows, REDIS_SETUP):
        print()
        print(block)
    for line in row_notes(rows):
        print(line)


def write_outputs(
    args: argparse.Namespace, rows: Sequence[Row], systems: Sequence[str], s: Settings,
    *, command: str, now: dt.datetime, load: str, elapsed: float,
    workloads: Sequence[Workload] = (),
) -> None:  # fmt: skip
    """The results section and chart (unless --no-results) and the JSON (with --json)."""
    info = versions()
    chart_rel = None
    if not args.no_results:
        chart = args.chart_dir / f"compare-{now:%Y-%m-%d-%H%M}.png"
        if write_chart(rows, chart, f"statekeeper vs etcd, {now:%Y-%m-%d %H:%M} UTC"):
            try:
                chart_rel = os.path.relpath(chart, args.results.resolve().parent)
            except ValueError:
                chart_rel = str(chart)
            print(f"chart: {chart}", file=sys.stderr)
        target = (
            f"fresh local 3-node clusters, one at a time; "
            f"data on {fs_type(args.data_dir)} ({args.data_dir})"
        )
        section = results_section(
            rows, command=command, settings=settings_text(args, s, elapsed, workloads), target=target,
            chart=chart_rel, info=info, now=now, load=load, rounds=rounds_line(systems, s.rounds),
            redis_setup=REDIS_SETUP,
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
            "order": systems,
            "rows": [{**asdict(r), "summary": asdict(summarize_row(r))} for r in rows],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")


async def amain(args: argparse.Namespace, command: str) -> int:
    systems, groups, workloads, s = _checked_settings(args)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    bar = make_bar(total_steps(groups, s, workloads, systems), not args.no_progress)
    t0 = time.monotonic()
    try:
        rows = await run_compare(
            systems, groups, s, workloads=workloads, data_dir=args.data_dir, bar=bar
        )
    finally:
        bar.close()
    elapsed = time.monotonic() - t0
    print_results(rows, systems, s)
    print(f"\n(total {elapsed / 60:.1f} min)", file=sys.stderr)
    write_outputs(args, rows, systems, s, command=command, now=now, load=load, elapsed=elapsed,
                  workloads=workloads)  # fmt: skip
    failed = any(m is None or m.failed for r in rows for ms in r.results.values() for m in ms)
    return 1 if failed else 0


def main(
    argv: Sequence[str] | None = None, prog: str = "python -m statekeeper.benchmarks.compare"
) -> int:
    """`python -m statekeeper.benchmarks.compare`, and `statekeeper bench compare` (with its own prog)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(argv)
    return exit_status(lambda: asyncio.run(amain(args, shlex.join([*prog.split(), *argv]))))


def exit_status(run: Callable[[], int]) -> int:
    """run()'s status; 2 with the message for a ValueError (bad arguments found late), 130
    on Ctrl-C. Shared by the benchmark commands."""
    try:
        return run()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
