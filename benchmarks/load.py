"""Command-line load generator: `python -m statekeeper.benchmarks.load --help`.

Runs one workload (or the default matrix with --matrix) against a System, prints a table
and appends it, with the machine description and the command line, to
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import re
import shlex
import sys
import tempfile
from collections.abc import Collection, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

from statekeeper.benchmarks.harness import LoadResult, Op, run_load
from statekeeper.benchmarks.systems import (
    CONSISTENCY_LEVELS,
    System,
    get_system_class,
    system_names,
)

WORKLOADS = ("put", "get")
DEFAULT_RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


@dataclass(frozen=True)
class Spec:
    workload: str
    value_size: int
    clients: int
    consistency: str = "linearizable"

    @property
    def label(self) -> str:
        extra = f" {self.consistency}" if self.workload == "get" else ""
        return f"{self.workload}{extra} {format_size(self.value_size)} x{self.clients}"


# The default matrix: writes at two value sizes, linearizable reads, each at one
# client (latency) and 64 clients (throughput).
MATRIX = (
    Spec("put", 256, 1),
    Spec("put", 256, 64),
    Spec("put", 4096, 1),
    Spec("put", 4096, 64),
    Spec("get", 256, 1),
    Spec("get", 256, 64),
)


def parse_size(text: str) -> int:
    """'256', '4k', '4KiB', '1M' -> bytes (binary multiples)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)(i?[bB])?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    n = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]
    if n < 1:
        raise argparse.ArgumentTypeError("size must be >= 1 byte")
    return n


def format_size(n: int) -> str:
    for unit, mult in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if n >= mult and n % mult == 0:
            return f"{n // mult} {unit}"
    return f"{n} B"


def make_keys(count: int) -> list[str]:
    return [f"k{i:07d}" for i in range(count)]


def key_op(
    system: System, workload: str, keys: Sequence[str], value: bytes, consistency: str
) -> Op:
    """The per-request coroutine of a "put" or "get" workload: one random key of `keys`
    per call (`value` for puts, `consistency` for gets)."""
    n = len(keys)
    rand = random.random  # a C call; randrange() costs several times more per op
    if workload == "put":
        put = system.put

        async def op() -> object:
            return await put(keys[int(rand() * n)], value)

    elif workload == "get":
        get = system.get

        async def op() -> object:
            return await get(keys[int(rand() * n)], consistency)

    else:
        raise ValueError(f"unknown workload {workload!r}")
    return op


async def run_spec(
    system: System,
    spec: Spec,
    *,
    keys: Sequence[str],
    duration: float,
    warmup: float,
    populated: set[int],
    progress: bool = True,
) -> LoadResult:
    value = os.urandom(spec.value_size)  # incompressible, so storage compression can't cheat
    if spec.workload == "get" and spec.value_size not in populated:
        print(
            f"populating {len(keys)} keys with {format_size(spec.value_size)} values",
            file=sys.stderr,
        )
        await system.populate(keys, value)
        populated.add(spec.value_size)
    elif spec.workload == "put":
        # Puts leave a mix of value sizes behind: the next read workload repopulates.
        populated.clear()
    return await run_load(
        key_op(system, spec.workload, keys, value, spec.consistency),
        clients=spec.clients,
        duration=duration,
        warmup=warmup,
        progress=sys.stderr if progress else None,
        label=spec.label,
    )


# ------------------------------------------------------------------------------- report

COLUMNS = (
    "workload",
    "value size",
    "clients",
    "ops/s",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "max ms",
    "errors",
)


def format_errors(result: LoadResult) -> str:
    total = result.error_count
    parts = [f"{k}: {v}" for k, v in result.errors.items()]
    if result.unfinished:
        parts.append(f"unfinished: {result.unfinished}")
        total += result.unfinished
    return f"{total} ({', '.join(parts)})" if parts else "0"


def table_row(spec: Spec, result: LoadResult) -> list[str]:
    workload = spec.workload if spec.workload == "put" else f"get ({spec.consistency})"
    return [
        workload,
        format_size(spec.value_size),
        str(spec.clients),
        f"{result.ops_per_s:.0f}",
        f"{result.p50_ms:.2f}",
        f"{result.p90_ms:.2f}",
        f"{result.p99_ms:.2f}",
        f"{result.max_ms:.2f}",
        format_errors(result),
    ]


def markdown_table(
    rows: Sequence[Sequence[str]],
    columns: Sequence[str] = COLUMNS,
    numeric: Collection[str] = ("clients", "ops/s", "p50 ms", "p90 ms", "p99 ms", "max ms"),
) -> str:
    """A markdown table of `rows` under `columns`; the `numeric` columns right-aligned."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for cell, w, col in zip(cells, widths, columns, strict=True):
            out.append(cell.rjust(w) if col in numeric else cell.ljust(w))
        return "| " + " | ".join(out) + " |"

    sep = (
        "|"
        + "|".join(
            "-" * (w + 1) + ":" if c in numeric else "-" * (w + 2)
            for w, c in zip(widths, columns, strict=True)
        )
        + "|"
    )
    return "\n".join([line(columns), sep, *(line(r) for r in rows)])


def _read_first(path: str, prefix: str) -> str | None:
    try:
        with open(path) as f:
            for raw in f:
                if raw.startswith(prefix):
                    return raw.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def machine_info() -> dict[str, str]:
    try:
        nproc = len(os.sched_getaffinity(0))  # what `nproc` prints
    except AttributeError:  # pragma: no cover - not Linux
        nproc = os.cpu_count() or 0
    mem_kb = _read_first("/proc/meminfo", "MemTotal")
    mem = f"{int(mem_kb.split()[0]) / 1024 / 1024:.1f} GiB" if mem_kb else "unknown"
    return {
        "nproc": str(nproc),
        "cpu": _read_first("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        "memory": mem,
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
    }


def fs_type(path: str | os.PathLike[str]) -> str:
    """Filesystem type holding `path` (from /proc/mounts): fsync on tmpfs costs nothing."""
    target = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                inside = target == mnt or target.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) > len(best):
                    best, kind = mnt, parts[2]
    except OSError:
        pass
    return kind


async def statekeeper_target(
    stack: AsyncExitStack, endpoints: str | None, prefix: str, data_dir: str | None = None
) -> tuple[list[str], str]:
    """The cluster a small benchmark measures, and how its report names it: the comma-
    separated ``endpoints`` of a running one, or (None) a fresh local 3-node cluster with
    fsync=always in a temporary directory under ``data_dir``, stopped and removed when
    ``stack`` closes."""
    if endpoints:
        urls = [e.strip() for e in endpoints.split(",") if e.strip()]
        return urls, "running cluster at " + ", ".join(urls)
    workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix, dir=data_dir))
    cls = get_system_class("statekeeper")
    urls = await stack.enter_async_context(cls.local_cluster(Path(workdir), fsync="always"))
    return urls, f"fresh local 3-node cluster (fsync=always, data on {fs_type(workdir)})"


async def monitored_target(
    stack: AsyncExitStack,
    endpoints: str | None,
    prefix: str,
    data_dir: str | None = None,
    quiet: bool = False,
) -> tuple[list[str], dict[str, int], str]:
    """Like statekeeper_target, plus the member pids of the fresh cluster (member -> pid)
    so a benchmark can sample node CPU; a running cluster's nodes are not measured."""
    if endpoints:
        urls = [e.strip() for e in endpoints.split(",") if e.strip()]
        return urls, {}, "running cluster at " + ", ".join(urls) + " (node CPU not measured)"
    workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix, dir=data_dir))
    cls = get_system_class("statekeeper")
    control = await stack.enter_async_context(
        cls.managed_cluster(Path(workdir), fsync="always", quiet=quiet)
    )
    pids = {m: p for m in control.members if (p := control.pid(m)) is not None}
    target = f"fresh local 3-node cluster (fsync=always, data on {fs_type(workdir)})"
    return control.endpoints, pids, target


def command_line(argv: Sequence[str]) -> str:
    return (
        "python -m statekeeper.benchmarks.load " + shlex.join(argv)
        if argv
        else "python -m statekeeper.benchmarks.load"
    )


def results_section(
    *,
    system: str,
    argv: Sequence[str],
    target: str,
    settings: str,
    rows: Sequence[Sequence[str]],
    now: dt.datetime | None = None,
) -> str:
    now = now or dt.datetime.now(dt.UTC)
    m = machine_info()
    return "\n".join(
        [
            f"## {now:%Y-%m-%d %H:%M} UTC: {system}",
            "",
            f"- machine: nproc {m['nproc']}, {m['cpu']}, {m['memory']} RAM, {m['os']}, {m['python']}",
            f"- command: `{command_line(argv)}`",
            f"- target: {target}",
            f"- settings: {settings}",
            "",
            markdown_table(rows),
            "",
        ]
    )


RESULTS_HEADER = """# Benchmark results

Sections are appended by `python -m statekeeper.benchmarks.load` (see README.md for the columns and
the caveats). Numbers from different sections come from different runs, often on
different machines: compare rows within one section.

"""


def append_section(
    path: Path,
    title: str,
    module: str,
    argv: Sequence[str],
    notes: Sequence[str],
    tables: Sequence[str],
    now: dt.datetime,
) -> None:
    """Append a results section: `## title (time)`, the machine, the command that made it
    (`python -m module argv`), one `- note` line per note, then the tables."""
    m = machine_info()
    lines = [
        f"## {title} ({now:%Y-%m-%d %H:%M} UTC)",
        "",
        f"- machine: nproc {m['nproc']}, {m['cpu']}, {m['memory']} RAM, {m['os']}, {m['python']}",
        f"- command: `{' '.join(['python -m', module, shlex.join(argv)]).strip()}`",
        *(f"- {n}" for n in notes),
    ]
    for t in tables:
        lines += ["", t]
    append_results(path, "\n".join(lines) + "\n")
    print(f"appended to {path}", file=sys.stderr)


def append_results(path: Path, section: str) -> None:
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a") as f:
        if new:
            f.write(RESULTS_HEADER)
        f.write("\n" + section)


# --------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.load",
        description="Closed-loop load generator for statekeeper (and other registered systems).",
    )
    p.add_argument("--system", default="statekeeper", choices=system_names())
    p.add_argument("--workload", choices=WORKLOADS, default="put")
    p.add_argument(
        "--value-size",
        type=parse_size,
        default=256,
        metavar="SIZE",
        help="value bytes: 256, 4k, 4KiB (default 256)",
    )
    p.add_argument("--clients", type=int, default=64, help="concurrent workers (default 64)")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds (default 10)")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first (default 2)")
    p.add_argument(
        "--consistency",
        choices=CONSISTENCY_LEVELS,
        default="linearizable",
        help="read consistency for --workload get",
    )
    p.add_argument(
        "--keys",
        type=int,
        default=10_000,
        help="key space size; each request picks a random key (default 10000)",
    )
    p.add_argument(
        "--pool",
        type=int,
        default=1,
        help="client objects shared round-robin by the workers (default 1)",
    )
    p.add_argument(
        "--matrix",
        action="store_true",
        help="run the default matrix (put 256 B/4 KiB and linearizable get, "
        "each at 1 and 64 clients); ignores --workload/--value-size/--clients",
    )
    target = p.add_mutually_exclusive_group()
    target.add_argument("--endpoints", help="comma-separated base URLs of a running cluster")
    target.add_argument(
        "--start-cluster",
        action="store_true",
        help="start a fresh local 3-node cluster in a temp dir, stop it at the end",
    )
    p.add_argument(
        "--fsync",
        choices=("always", "never"),
        default="always",
        help="fsync mode of the cluster started by --start-cluster",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        help="parent of the --start-cluster temp dir (default: the system temp dir; "
        "pick a disk-backed one if /tmp is tmpfs)",
    )
    p.add_argument(
        "--results",
        type=Path,
        default=DEFAULT_RESULTS,
        help=f"markdown file to append to (default {DEFAULT_RESULTS.name})",
    )
    p.add_argument("--no-results", action="store_true", help="do not append to the results file")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write raw results as JSON")
    p.add_argument("--note", default="", help="free text added to the results section")
    p.add_argument("--no-progress", action="store_true", help="no per-second progress on stderr")
    return p


def validate(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    if args.clients < 1 or args.keys < 1 or args.pool < 1:
        p.error("--clients, --keys and --pool must be >= 1")
    if args.duration <= 0 or args.warmup < 0:
        p.error("need --duration > 0 and --warmup >= 0")


async def amain(args: argparse.Namespace, argv: Sequence[str]) -> int:
    cls = get_system_class(args.system)
    if args.matrix:
        specs = [Spec(s.workload, s.value_size, s.clients, args.consistency) for s in MATRIX]
    else:
        specs = [Spec(args.workload, args.value_size, args.clients, args.consistency)]
    keys = make_keys(args.keys)
    results: list[tuple[Spec, LoadResult]] = []

    async with AsyncExitStack() as stack:
        if args.start_cluster:
            if args.data_dir:
                args.data_dir.mkdir(parents=True, exist_ok=True)
            workdir = stack.enter_context(
                tempfile.TemporaryDirectory(prefix=f"{cls.name}-bench-", dir=args.data_dir)
            )
            endpoints = await stack.enter_async_context(
                cls.local_cluster(Path(workdir), fsync=args.fsync)
            )
            target = (
                f"fresh local {len(endpoints)}-node cluster (fsync={args.fsync}, "
                f"data on {fs_type(workdir)})"
            )
        else:
            endpoints = (
                [e.strip() for e in args.endpoints.split(",") if e.strip()]
                if args.endpoints
                else list(cls.default_endpoints)
            )
            target = "running cluster at " + ", ".join(endpoints)
        system = cls(endpoints, pool=args.pool)
        stack.push_async_callback(system.teardown)  # pushed after the cluster: runs first
        await system.setup()
        populated: set[int] = set()
        for spec in specs:
            result = await run_spec(
                system,
                spec,
                keys=keys,
                duration=args.duration,
                warmup=args.warmup,
                populated=populated,
                progress=not args.no_progress,
            )
            results.append((spec, result))

    rows = [table_row(s, r) for s, r in results]
    print(markdown_table(rows))
    settings = (
        f"duration {args.duration:g} s, warm-up {args.warmup:g} s, key space {args.keys}, "
        f"client pool {args.pool}"
    )
    if args.note:
        settings += f"; note: {args.note}"
    if not args.no_results:
        section = results_section(
            system=cls.name, argv=argv, target=target, settings=settings, rows=rows
        )
        append_results(args.results, section)
        print(f"appended to {args.results}", file=sys.stderr)
    if args.json:
        payload = {
            "system": cls.name,
            "command": command_line(argv),
            "target": target,
            "machine": machine_info(),
            "runs": [
                {
                    "workload": s.workload,
                    "value_size": s.value_size,
                    "consistency": s.consistency if s.workload == "get" else None,
                    **r.summary(),
                }
                for s, r in results
            ],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    validate(args, parser)
    try:
        return asyncio.run(amain(args, argv))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
