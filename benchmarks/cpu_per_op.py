"""CPU per operation of each node and of the client: `python -m statekeeper.benchmarks.cpu_per_op --help`.

Starts a fresh local 3-node cluster (fsync=always), runs a closed-loop load (puts, or
client-side batches of puts) and reads the CPU each process used over the measured window
(utime + stime from /proc/<pid>/stat, after the warm-up): the leader's, each follower's
and this process's (the client). Each figure is divided by the puts completed in the
window: microseconds of CPU per put. A batch row also gives the CPU per request.

Rounds (--rounds) repeat the window on the same cluster; the table gives the median of
each column and the spread. CPU per op is what a change to the per-op work moves even on a
busy machine (it does not count time spent waiting for a core), but a loaded machine still
inflates it (cache misses, more wake-ups per op at lower throughput): compare only runs
taken alternately on the same machine.

Output: a markdown table on stdout, a PNG bar chart of the same figures in --chart-dir
(benchmarks/results/ by default, like the other benchmarks' charts; --no-chart skips it),
and with --json the raw rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

CLIENT = "client"
DEFAULT_CHART_DIR = Path(__file__).resolve().parent / "results"
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_split(stat_text: str) -> tuple[int, int]:
    """(utime, stime) in clock ticks from the text of /proc/<pid>/stat. The command name
    (field 2) may hold spaces and parentheses: fields are counted after its last ')'."""
    fields = stat_text.rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def cpu_ticks(stat_text: str) -> int:
    """utime + stime (clock ticks) from the text of /proc/<pid>/stat."""
    return sum(cpu_split(stat_text))


def read_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        return cpu_ticks(f.read()) / _TICK


def read_sys_seconds(pid: int) -> float:
    """Kernel time alone (on loopback a sender's stime includes delivering the packet)."""
    with open(f"/proc/{pid}/stat") as f:
        return cpu_split(f.read())[1] / _TICK


def role_names(members: Sequence[str], leader: str | None) -> dict[str, str]:
    """member -> 'leader' or 'follower-N' (numbered in member order)."""
    out, n = {}, 0
    for m in members:
        if m == leader:
            out[m] = "leader"
        else:
            n += 1
            out[m] = f"follower-{n}"
    return out


def per_op_us(
    before: Mapping[str, float], after: Mapping[str, float], ops: int
) -> dict[str, float]:
    """CPU microseconds per op of each process between two readings (seconds)."""
    if ops <= 0:
        return {k: float("nan") for k in before}
    return {k: (after[k] - before[k]) * 1e6 / ops for k in before if k in after}


@dataclass
class Round:
    puts: int
    requests: int
    seconds: float
    us_per_put: dict[str, float]  # role -> CPU us per put
    sys_per_put: dict[str, float]  # role -> of which kernel time

    @property
    def puts_per_s(self) -> float:
        return self.puts / self.seconds


def summarize(rounds: Sequence[Round]) -> list[list[str]]:
    """Rows (role, median us/put, min-max, median kernel us/put, median us/request)."""
    roles = list(rounds[0].us_per_put)
    per_request = [r.puts / max(r.requests, 1) for r in rounds]
    rows = []
    for role in roles:
        xs = [r.us_per_put[role] for r in rounds]
        req = [x * k for x, k in zip(xs, per_request, strict=True)]
        sys_us = [r.sys_per_put[role] for r in rounds]
        rows.append(
            [
                role,
                f"{statistics.median(xs):.1f}",
                f"{min(xs):.1f}-{max(xs):.1f}",
                f"{statistics.median(sys_us):.1f}",
                f"{statistics.median(req):.1f}",
            ]
        )
    return rows


def markdown(rows: Sequence[Sequence[str]], rounds: Sequence[Round]) -> str:
    head = ["process", "CPU us/put (median)", "range", "of which kernel", "CPU us/request"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    rates = ", ".join(f"{r.puts_per_s:,.0f}" for r in rounds)
    lines.append(f"\nputs/s per round: {rates}")
    return "\n".join(lines)


def write_chart(rounds: Sequence[Round], path: Path, title: str) -> bool:
    """Draw to `path` one bar per process: the median CPU us/put over the rounds, its
    kernel share darker inside it, each round as a dot and the min-max as an error bar.
    False when matplotlib is missing or there is no round. Agg backend: no display needed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    if not rounds:
        return False
    roles = list(rounds[0].us_per_put)
    per_round = [[r.us_per_put[role] for r in rounds] for role in roles]
    medians = [statistics.median(xs) for xs in per_round]
    kernel = [statistics.median(r.sys_per_put[role] for r in rounds) for role in roles]
    xs = range(len(roles))
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(roles), 4.2))
    ax.bar(xs, medians, width=0.6, color="#9ecae1", label="CPU us/put, median of rounds")
    ax.bar(xs, kernel, width=0.6, color="#3182bd", label="of which kernel (median)")
    ax.errorbar(
        xs,
        medians,
        yerr=[
            [m - min(v) for m, v in zip(medians, per_round, strict=True)],
            [max(v) - m for m, v in zip(medians, per_round, strict=True)],
        ],
        fmt="none",
        ecolor="#333333",
        capsize=5,
        label=f"min-max over {len(rounds)} rounds",
    )
    for x, values in zip(xs, per_round, strict=True):
        ax.plot([x] * len(values), values, ".", color="#333333", ms=4)
    for x, m in zip(xs, medians, strict=True):
        ax.annotate(f"{m:.0f}", (x, m), xytext=(9, 2), textcoords="offset points", fontsize="small")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(roles)
    ax.set_ylabel("CPU microseconds per put (lower is better)")
    ax.set_ylim(0, max(max(v) for v in per_round) * 1.15)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize="small",
              frameon=False)  # fmt: skip
    rates = ", ".join(f"{r.puts_per_s:,.0f}" for r in rounds)
    ax.set_title(f"{title}\nputs/s per round: {rates}", fontsize="medium")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


# ------------------------------------------------------------------------------- running


def load_op(system, args: argparse.Namespace, keys: Sequence[str], value: bytes):
    n = len(keys)
    state = {"i": 0}
    if args.workload == "put":

        async def put() -> object:
            state["i"] = (state["i"] + 1) % n
            return await system.put(keys[state["i"]], value)

        return put

    async def batch() -> object:
        start = state["i"] = (state["i"] + args.batch) % n
        return await system.batch_put([(keys[(start + j) % n], value) for j in range(args.batch)])

    return batch


async def _one_round(system, pids: Mapping[str, int], args, keys, value) -> Round:
    from statekeeper.benchmarks.harness import run_load

    readings: list[dict[str, float]] = []
    kernel: list[dict[str, float]] = []

    async def mark(delay: float) -> None:
        await asyncio.sleep(delay)
        readings.append({k: read_cpu_seconds(p) for k, p in pids.items()})
        kernel.append({k: read_sys_seconds(p) for k, p in pids.items()})

    marks = [
        asyncio.create_task(mark(args.warmup)),
        asyncio.create_task(mark(args.warmup + args.duration)),
    ]
    result = await run_load(
        load_op(system, args, keys, value),
        clients=args.clients,
        duration=args.duration,
        warmup=args.warmup,
        progress=None if args.no_progress else sys.stderr,
        label=f"{args.workload} x{args.clients}",
    )
    await asyncio.gather(*marks)
    per_request = args.batch if args.workload == "batch" else 1
    puts = result.ops * per_request
    return Round(
        puts,
        result.ops,
        args.duration,
        per_op_us(readings[0], readings[1], puts),
        per_op_us(kernel[0], kernel[1], puts),
    )


async def run(args: argparse.Namespace) -> list[Round]:
    from statekeeper.benchmarks.systems import StatekeeperSystem

    with tempfile.TemporaryDirectory(prefix="cpu-per-op-", dir=args.data_dir) as tmp:
        async with StatekeeperSystem.managed_cluster(Path(tmp), quiet=args.no_progress) as control:
            system = StatekeeperSystem(control.endpoints, max_connections=max(args.clients, 10))
            await system.setup()
            try:
                keys = [f"k{i:07d}" for i in range(args.keys)]
                value = os.urandom(args.value_size)
                rounds = []
                for _ in range(args.rounds):
                    # The leader may move between rounds (it should not): ask each time.
                    roles = role_names(control.members, await control.leader())
                    pids = {roles[m]: p for m in control.members if (p := control.pid(m))}
                    pids[CLIENT] = os.getpid()
                    rounds.append(await _one_round(system, pids, args, keys, value))
                return rounds
            finally:
                await system.teardown()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.cpu_per_op",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workload", choices=("put", "batch"), default="put")
    p.add_argument("--batch", type=int, default=64, help="puts per batch request (default 64)")
    p.add_argument("--clients", type=int, default=64, help="concurrent workers (default 64)")
    p.add_argument("--value-size", type=int, default=256, help="bytes per value (default 256)")
    p.add_argument("--keys", type=int, default=10_000, help="distinct keys (default 10000)")
    p.add_argument(
        "--duration", type=float, help="measured seconds per round (default 10; --quick 4)"
    )
    p.add_argument("--warmup", type=float, help="unmeasured seconds first (default 2; --quick 1)")
    p.add_argument("--rounds", type=int, default=3, help="measured windows (default 3)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="the write path's before/after check (benchmarks/cpu_per_put_quick.py): puts at "
        "1 and 64 clients, a fresh cluster each, leader and follower CPU us/put with "
        "fsyncs, raft entries, ticks and syscalls per put; a minute or two",
    )
    p.add_argument(
        "--strace-seconds",
        type=float,
        default=3.0,
        help="--quick: the separate strace window per client count (0: no syscall counts)",
    )
    p.add_argument("--data-dir", type=Path, help="parent of the cluster's temp dir")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the rounds as JSON")
    p.add_argument(
        "--chart-dir", type=Path, default=DEFAULT_CHART_DIR, help="where the PNG chart goes"
    )
    p.add_argument("--no-chart", action="store_true", help="do not write the PNG chart")
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    return p


def chart_title(args: argparse.Namespace) -> str:
    load = f"batches of {args.batch} puts" if args.workload == "batch" else "puts"
    return (
        f"CPU per put, 3 nodes (fsync=always): {load}, {args.clients} clients, "
        f"{args.value_size} B values, {args.duration:g} s x {args.rounds} rounds"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.duration is None:
        args.duration = 4.0 if args.quick else 10.0
    if args.warmup is None:
        args.warmup = 1.0 if args.quick else 2.0
    if args.quick:
        from statekeeper.benchmarks.cpu_per_put_quick import report, run_quick

        if args.workload != "put":
            raise SystemExit("--quick measures puts only")
        results = asyncio.run(run_quick(args))
        print(report(results, args))
        if args.json:
            args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
        return 0
    rounds = asyncio.run(run(args))
    print(markdown(summarize(rounds), rounds))
    if not args.no_chart:
        now = dt.datetime.now()
        png = args.chart_dir / f"cpu-per-op-{args.workload}-{now:%Y-%m-%d-%H%M}.png"
        if write_chart(rounds, png, chart_title(args)):
            print(f"chart: {png}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rounds], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
