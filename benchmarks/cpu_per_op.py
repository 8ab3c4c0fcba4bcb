"""CPU per operation of each node and of the client: `python -m benchmarks.cpu_per_op --help`.

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

Output: a markdown table on stdout, and with --json the raw rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

CLIENT = "client"
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


# ------------------------------------------------------------------------------- running


def _op(system, args: argparse.Namespace, keys: Sequence[str], value: bytes):
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
    from benchmarks.harness import run_load

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
        _op(system, args, keys, value),
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
    from benchmarks.systems import StatekeeperSystem

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
        prog="python -m benchmarks.cpu_per_op",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workload", choices=("put", "batch"), default="put")
    p.add_argument("--batch", type=int, default=64, help="puts per batch request (default 64)")
    p.add_argument("--clients", type=int, default=64, help="concurrent workers (default 64)")
    p.add_argument("--value-size", type=int, default=256, help="bytes per value (default 256)")
    p.add_argument("--keys", type=int, default=10_000, help="distinct keys (default 10000)")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds per round")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    p.add_argument("--rounds", type=int, default=3, help="measured windows (default 3)")
    p.add_argument("--data-dir", type=Path, help="parent of the cluster's temp dir")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the rounds as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rounds = asyncio.run(run(args))
    print(markdown(summarize(rounds), rounds))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rounds], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
