"""Cold-start cost of an agent: hydrate() (latest checkpoint + the events after it) against
replaying the agent's whole stream.

    python -m statekeeper.benchmarks.hydrate [--sizes 10k,1m,8m] [--tails 0,100,10000] [--age 10000]
                                 [--rounds 30] [--start-cluster | --endpoints URL,...]

For each state size S and tail length T one agent is prepared on a fresh 3-node cluster
(fsync=always): `--age` events (256 B each) are appended first, then a checkpoint of an S-byte
state (random bytes: incompressible, so zstd does not flatter the numbers), then T more
events. Each round then times, alternating, on one AsyncClient:

- hydrate: `AsyncAgent(...).hydrate()` from a new agent object (a cold start: nothing
  cached), the reducer counting events;
- replay: hydrate() of an agent that never checkpointed, with the same age + T events:
  the whole stream read from seq 1 and folded through the same reducer and event decoding
  (shown for S = the first size only: the state size does not change the replay).

A last row repeats the 1 MiB / 100-event case with age 0, to show that hydrate's cost
follows the tail and not the stream's age. Results: a table on stdout, a section in
benchmarks/RESULTS.md, a JSON file and a PNG plot in benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from statekeeper.benchmarks.compare.progress import make_bar
from statekeeper.benchmarks.load import (
    append_section,
    markdown_table,
    parse_size,
    statekeeper_target,
)
from statekeeper.chaos.stats import percentile
from statekeeper.client import AsyncClient
from statekeeper.client.agent import AsyncAgent

RESULTS = Path(__file__).with_name("RESULTS.md")
PLOTS = Path(__file__).with_name("results")
EVENT = b"e" * 256
APPEND_BATCH = 500  # events per append (the server's limit is 1,000)


@dataclass
class Case:
    size: int
    tail: int
    age: int
    hydrate_ms: list[float] = field(default_factory=list)
    replay_ms: list[float] = field(default_factory=list)
    requests: int = 0

    def label(self) -> str:
        return f"{_size(self.size)} + {self.tail} events (age {self.age})"


def _size(n: int) -> str:
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def count_events(state: dict, event: object) -> dict:
    state["n"] = state.get("n", 0) + 1
    return state


async def _append(client: AsyncClient, stream: str, n: int) -> None:
    while n > 0:
        k = min(n, APPEND_BATCH)
        await client.append(stream, [EVENT] * k)
        n -= k


async def prepare(client: AsyncClient, case: Case) -> str:
    """A fresh agent holding the case's history; returns its id."""
    agent_id = f"bench-{uuid.uuid4().hex[:8]}"
    agent = AsyncAgent(client, agent_id, reducer=count_events, initial=dict)
    await agent.hydrate()
    await _append(client, agent.stream, case.age)
    await agent.hydrate()  # the writer must see the stream's last seq
    await agent.checkpoint({"blob": os.urandom(case.size), "n": case.age}, step=1)
    await _append(client, agent.stream, case.tail)
    return agent_id


async def prepare_replay(client: AsyncClient, case: Case) -> str:
    """An agent with the case's events and no checkpoint; returns its id."""
    agent_id = f"replay-{uuid.uuid4().hex[:8]}"
    await _append(client, f"agent/{agent_id}", case.age + case.tail)
    return agent_id


async def time_hydrate(client: AsyncClient, agent_id: str, case: Case) -> None:
    agent = AsyncAgent(client, agent_id, reducer=count_events, initial=dict)
    t0 = time.perf_counter()
    h = await agent.hydrate()
    case.hydrate_ms.append((time.perf_counter() - t0) * 1000)
    case.requests = h.requests
    if h.state["n"] != case.age + case.tail:
        raise SystemExit(f"hydrate folded {h.state['n']} events, expected {case.age + case.tail}")


async def time_replay(client: AsyncClient, agent_id: str, case: Case) -> None:
    agent = AsyncAgent(client, agent_id, reducer=count_events, initial=dict)
    t0 = time.perf_counter()
    h = await agent.hydrate()
    case.replay_ms.append((time.perf_counter() - t0) * 1000)
    if h.state.get("n", 0) != case.age + case.tail:
        raise SystemExit(
            f"replay folded {h.state.get('n', 0)} events, expected {case.age + case.tail}"
        )


def _stats(xs: list[float]) -> tuple[str, str]:
    if not xs:
        return "", ""
    return f"{percentile(xs, 50):.1f}", f"{percentile(xs, 99):.1f}"


COLUMNS = (
    "state",
    "tail events",
    "stream age",
    "requests",
    "hydrate p50 ms",
    "hydrate p99 ms",
    "replay p50 ms",
    "replay p99 ms",
)


def table(cases: list[Case]) -> str:
    rows = []
    for c in cases:
        rows.append(
            [
                _size(c.size),
                str(c.tail),
                str(c.age),
                str(c.requests),
                *_stats(c.hydrate_ms),
                *_stats(c.replay_ms),
            ]
        )
    return markdown_table(rows, COLUMNS, numeric=COLUMNS[1:])


def plot(cases: list[Case], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for size in sorted({c.size for c in cases}):
        pts = sorted(
            (c.tail, statistics.median(c.hydrate_ms))
            for c in cases
            if c.size == size and c.age == cases[0].age
        )
        ax.plot(
            [max(t, 1) for t, _ in pts],
            [m for _, m in pts],
            "o-",
            label=f"hydrate, {_size(size)} state",
        )
    pts = sorted((c.tail, statistics.median(c.replay_ms)) for c in cases if c.replay_ms)
    ax.plot(
        [max(t, 1) for t, _ in pts],
        [m for _, m in pts],
        "s--",
        color="grey",
        label=f"replay whole stream (age {cases[0].age} + tail)",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("events after the checkpoint (0 shown at 1)")
    ax.set_ylabel("p50 latency, ms")
    ax.set_title("agent cold start: hydrate() vs replay")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


async def run(args: argparse.Namespace) -> tuple[list[Case], str]:
    cases = [Case(s, t, args.age) for s in args.sizes for t in args.tails]
    if (1 << 20) in args.sizes and 100 in args.tails and args.age:
        cases.append(Case(1 << 20, 100, 0))
    async with AsyncExitStack() as stack:
        endpoints, target = await statekeeper_target(
            stack, args.endpoints, "sk-hydrate-", args.data_dir
        )
        client = await stack.enter_async_context(AsyncClient(endpoints, ns="bench-hydrate"))
        bar = make_bar(len(cases) * (args.rounds + 1), not args.no_progress)
        for case in cases:
            bar.set_description(case.label())
            agent_id = await prepare(client, case)
            bar.update()
            replay_id = await prepare_replay(client, case) if case.size == args.sizes[0] else None
            for _ in range(args.rounds):  # alternating: hydrate, replay, hydrate, ...
                await time_hydrate(client, agent_id, case)
                if replay_id:
                    await time_replay(client, replay_id, case)
                bar.update()
        bar.close()
    return cases, target


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.hydrate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--sizes", default="10k,1m,8m", help="state sizes (default 10k,1m,8m)")
    p.add_argument(
        "--tails", default="0,100,10000", help="events after the checkpoint (default 0,100,10000)"
    )
    p.add_argument(
        "--age", type=int, default=10_000, help="events before the checkpoint (default 10000)"
    )
    p.add_argument("--rounds", type=int, default=30, help="timed hydrates per case (default 30)")
    p.add_argument(
        "--endpoints",
        help="comma-separated URLs of a running cluster (default: start a fresh local one)",
    )
    p.add_argument("--data-dir", type=Path, help="parent of the fresh cluster's directory")
    p.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    args.tails = [int(t) for t in args.tails.split(",")]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    cases, target = asyncio.run(run(args))
    rows = table(cases)
    print(rows)
    now = dt.datetime.now(dt.UTC)
    PLOTS.mkdir(exist_ok=True)
    stem = PLOTS / f"hydrate-{now:%Y-%m-%d-%H%M}"
    stem.with_suffix(".json").write_text(
        json.dumps(
            [
                {
                    "size": c.size,
                    "tail": c.tail,
                    "age": c.age,
                    "requests": c.requests,
                    "hydrate_ms": c.hydrate_ms,
                    "replay_ms": c.replay_ms,
                }
                for c in cases
            ],
            indent=1,
        )
    )
    png = plot(cases, stem.with_suffix(".png"))
    if not args.no_results:
        append_section(
            RESULTS,
            "Agent hydrate vs replay",
            "statekeeper.benchmarks.hydrate",
            argv,
            [
                f"target: {target}",
                f"{args.rounds} rounds per row, hydrate and replay alternating; state = random "
                "bytes (incompressible); events 256 B; replay = hydrate() of an agent with the "
                "same events and no checkpoint" + (f"; plot: results/{png.name}" if png else ""),
            ],
            [rows],
            now,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
