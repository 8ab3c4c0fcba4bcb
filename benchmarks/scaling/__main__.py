"""`python -m statekeeper.benchmarks.scaling`: how statekeeper's cost grows with store size, value size
and kept history (issue 17, item 5). See benchmarks/README.md, "Scaling sweeps".

Each sweep runs on a fresh local 3-node cluster (fsync=always) under --data-dir and yields
one table: put p50/p99 and ops/s, linearizable get p50 and ops/s, at 1 and 16 clients per
point, plus the sweep's extras, and "where it bends" lines computed from the data. All
sweeps of one run go into one Markdown section appended to --results, with the machine
and the exact command, and one PNG per sweep into --chart-dir.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from statekeeper.benchmarks.compare.cli import DEFAULT_CHART_DIR, DEFAULT_DATA_DIR, DEFAULT_RESULTS
from statekeeper.benchmarks.compare.progress import make_bar
from statekeeper.benchmarks.load import append_section, fs_type
from statekeeper.benchmarks.scaling import sweeps
from statekeeper.benchmarks.scaling.measure import Settings
from statekeeper.benchmarks.scaling.plot import write_plot
from statekeeper.benchmarks.scaling.points import (
    BEND_FACTOR,
    Point,
    bend_lines,
    history_points,
    markdown_table,
    size_points,
    value_points,
)
from statekeeper.benchmarks.systems import StatekeeperSystem

SWEEPS = ("size", "value", "history")
AXES = {
    "size": "keys in the store",
    "value": "value size, bytes",
    "history": "versions written per key (H overwrites + 1)",
}
TITLES = {
    "size": "Store size (256 B values, one cluster grown in place)",
    "value": "Value size (fresh cluster, a key set per size, history compacted between sizes)",
    "history": f"Kept history ({sweeps.HISTORY_KEYS:,} keys of 256 B overwritten, none compacted)",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.scaling",
        description="statekeeper's put/get latency and throughput as the store grows (keys),\n"
        "as values grow, and as kept history grows; restart-to-ready and RSS against store\n"
        "size. Appends a section to the results file and writes PNG plots.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", choices=SWEEPS, action="append", help="run this sweep (repeatable)")
    p.add_argument(
        "--quick", action="store_true", help="few points: 10k,100k keys; 64 B-16 KiB; H 0,10"
    )
    p.add_argument(
        "--max-keys", type=int, default=10_000_000, help="largest store size (default 10M)"
    )
    p.add_argument("--window", type=float, default=5.0, help="measured seconds per run (default 5)")
    p.add_argument(
        "--warmup", type=float, default=1.0, help="unmeasured seconds per run (default 1)"
    )
    p.add_argument(
        "--load-concurrency",
        type=int,
        default=StatekeeperSystem.bulk_concurrency,
        help="concurrent bulk-load requests (default %(default)s)",
    )
    p.add_argument(
        "--results", type=Path, default=DEFAULT_RESULTS, help="results file to append to"
    )
    p.add_argument("--no-results", action="store_true", help="print the section, append nothing")
    p.add_argument("--chart-dir", type=Path, default=DEFAULT_CHART_DIR, help="where the PNGs go")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="where the clusters keep their data (on disk, not tmpfs; default benchmarks/out)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def plan(args: argparse.Namespace) -> dict[str, list[int]]:
    """Sweep name -> its points, in run order."""
    chosen = args.only or list(SWEEPS)
    every = {
        "size": size_points(args.max_keys, args.quick),
        "value": value_points(args.quick),
        "history": history_points(args.quick),
    }
    return {name: every[name] for name in SWEEPS if name in chosen}


async def run_sweeps(
    todo: dict[str, list[int]], s: Settings, data_dir: Path, bar: object
) -> dict[str, list[Point]]:
    run = {"size": sweeps.size_sweep, "value": sweeps.value_sweep, "history": sweeps.history_sweep}
    out: dict[str, list[Point]] = {}
    for name, points in todo.items():
        t0 = time.monotonic()
        out[name] = await run[name](points, s, data_dir, bar)
        bar.write(f"{name} sweep done in {time.monotonic() - t0:.0f} s")  # type: ignore[attr-defined]
    return out


def sweep_table(name: str, points: Sequence[Point], chart: str | None) -> str:
    lines = [
        f"### {TITLES[name]}",
        "",
        markdown_table(points, AXES[name]),
        "",
        f"Where it bends (first point whose p50 is above {BEND_FACTOR}x the previous point's, "
        f"or whose ops/s is below 1/{BEND_FACTOR} of it):",
        "",
        *(f"- {line}" for line in bend_lines(points)),
    ]
    if chart:
        lines += ["", f"![{name} sweep]({chart})"]
    return "\n".join(lines)


def report(
    results: dict[str, list[Point]],
    args: argparse.Namespace,
    argv: Sequence[str],
    now: dt.datetime,
    notes: list[str],
) -> None:
    tables = []
    for name, points in results.items():
        png = args.chart_dir / f"scaling-{now:%Y-%m-%d-%H%M}-{name}.png"
        chart = None
        if write_plot(points, AXES[name], TITLES[name], png):
            print(f"plot: {png}", file=sys.stderr)
            chart = os.path.relpath(png, args.results.resolve().parent)
        tables.append(sweep_table(name, points, chart))
    if args.no_results:
        print("\n\n".join(tables))
        return
    append_section(
        args.results,
        "statekeeper scaling sweeps",
        "statekeeper.benchmarks.scaling",
        argv,
        notes,
        tables,
        now,
    )


async def amain(args: argparse.Namespace, argv: Sequence[str]) -> int:
    todo = plan(args)
    s = Settings(window=args.window, warmup=args.warmup, load_concurrency=args.load_concurrency)
    now = dt.datetime.now(dt.UTC)
    notes = [
        f"target: fresh local 3-node statekeeper clusters, fsync=always, data on {fs_type(args.data_dir)}",
        f"settings: {args.window:g} s measured after {args.warmup:g} s warm-up per run; "
        f"clients {', '.join(map(str, s.clients))}; linearizable gets; bulk load "
        f"{s.load_concurrency} concurrent requests of up to {s.load_batch} keys",
        "load average at start: " + " ".join(f"{x:.2f}" for x in os.getloadavg()),
    ]
    bar = make_bar(sum(len(p) for p in todo.values()), not args.no_progress)
    t0 = time.monotonic()
    try:
        results = await run_sweeps(todo, s, args.data_dir, bar)
    finally:
        bar.close()
    notes.append(f"run took {time.monotonic() - t0:.0f} s")
    report(results, args, argv, now, notes)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.window <= 0 or args.warmup < 0 or args.load_concurrency < 1:
        build_parser().error("need --window > 0, --warmup >= 0, --load-concurrency >= 1")
    try:
        return asyncio.run(amain(args, argv))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
