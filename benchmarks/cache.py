"""The client cache: a cached get against a linearizable get, and how stale the view runs
under a 64-client put load.

    python -m statekeeper.benchmarks.cache [--keys 1000] [--rounds 15] [--gets 2000] [--lin-gets 200]
                               [--load-seconds 10] [--load-clients 64]
                               [--start-cluster | --endpoints URL,...]

On a fresh 3-node cluster (fsync=always) `--keys` keys of 256 B are written under a prefix,
then:

1. Latency, alternating rounds: each round times `--gets` cached gets
   (``client.cache(prefix).get``), then `--lin-gets` linearizable gets (``client.get``) of
   random keys, on a Client and then on an AsyncClient. Per kind, p50 and p99 are the
   medians over the rounds of each round's p50 and p99.
2. Staleness: a child process runs `--load-clients` concurrent put loops (one AsyncClient)
   on random keys of the prefix for `--load-seconds`. Every 20 ms the bench process reads
   the store's revision R with a linearizable get and notes, at the moment the answer
   arrives, how many revisions the view is behind R and the cache's own ``lag.seconds``;
   then it times how long until the view reaches R (``cache.wait(R)``): the staleness of
   a read served at that moment, at most. Between probes it times 100 cached gets (the
   cached get under load: the watch thread applies thousands of frames a second).

Results: tables on stdout, a section in benchmarks/RESULTS.md, a JSON file and a PNG in
benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.benchmarks.compare.progress import make_bar
from statekeeper.benchmarks.harness import compact_samples
from statekeeper.benchmarks.load import append_section, markdown_table, statekeeper_target
from statekeeper.chaos.stats import percentile
from statekeeper.client import AsyncClient, Client

RESULTS = Path(__file__).with_name("RESULTS.md")
PLOTS = Path(__file__).with_name("results")
PREFIX = "bench/"
NS = "bench-cache"
VALUE = b"v" * 256


@dataclass
class Kind:
    """Latency samples (µs) of one kind of read, per round."""

    name: str
    rounds: list[list[float]] = field(default_factory=list)

    def p(self, q: float) -> float:
        return statistics.median(percentile(r, q) or 0.0 for r in self.rounds)


@dataclass
class Staleness:
    t: list[float] = field(default_factory=list)  # seconds since the load started
    behind: list[int] = field(default_factory=list)  # revisions behind R, when R arrived
    visible_ms: list[float] = field(default_factory=list)  # until the view reached R
    self_lag_ms: list[float] = field(default_factory=list)  # cache.lag.seconds then
    get_us: list[float] = field(default_factory=list)  # cached gets during the load
    load: dict[str, Any] = field(default_factory=dict)


def _keys(n: int) -> list[str]:
    return [f"{PREFIX}k{i:06d}" for i in range(n)]


def populate(client: Client, keys: list[str]) -> None:
    for i in range(0, len(keys), 500):
        with client.batch() as b:
            for k in keys[i : i + 500]:
                b.put(k, VALUE)


def latency_sync(endpoints: list[str], keys: list[str], args: Any, bar: Any) -> list[Kind]:
    cached, lin = Kind("cached get, Client"), Kind("linearizable get, Client")
    with Client(endpoints, ns=NS) as c, c.cache(PREFIX) as cache:
        for _ in range(args.rounds):  # alternating: cached, linearizable, cached, ...
            cached.rounds.append(_time_sync(cache.get, keys, args.gets))
            lin.rounds.append(_time_sync(c.get, keys, args.lin_gets))
            bar.update()
    return [cached, lin]


def _time_sync(get: Any, keys: list[str], n: int) -> list[float]:
    out, clock, pick = [], time.perf_counter, random.choice
    for _ in range(n):
        k = pick(keys)
        t0 = clock()
        get(k)
        out.append((clock() - t0) * 1e6)
    return out


async def latency_async(endpoints: list[str], keys: list[str], args: Any, bar: Any) -> list[Kind]:
    cached, lin = Kind("cached get, AsyncClient"), Kind("linearizable get, AsyncClient")
    async with AsyncClient(endpoints, ns=NS) as c, c.cache(PREFIX) as cache:
        for _ in range(args.rounds):
            cached.rounds.append(await _time_async(cache.get, keys, args.gets))
            lin.rounds.append(await _time_async(c.get, keys, args.lin_gets))
            bar.update()
    return [cached, lin]


async def _time_async(get: Any, keys: list[str], n: int) -> list[float]:
    out, clock, pick = [], time.perf_counter, random.choice
    for _ in range(n):
        k = pick(keys)
        t0 = clock()
        await get(k)
        out.append((clock() - t0) * 1e6)
    return out


def staleness(endpoints: list[str], keys: list[str], args: Any, bar: Any) -> Staleness:
    s = Staleness()
    child = subprocess.Popen(
        [sys.executable, "-m", "statekeeper.benchmarks.cache", "--load-child", "--endpoints",
         ",".join(endpoints), "--keys", str(len(keys)), "--load-clients",
         str(args.load_clients), "--load-seconds", str(args.load_seconds)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    with Client(endpoints, ns=NS) as c, c.cache(PREFIX) as cache:
        assert child.stdout is not None
        child.stdout.readline()  # "ready": the load starts now
        t_start = time.monotonic()
        ticks = 0
        while child.poll() is None and time.monotonic() - t_start < args.load_seconds:
            t0 = time.monotonic()
            rev = c.get(keys[0]).revision  # linearizable: R is committed, all below it too
            t1 = time.monotonic()
            s.t.append(t1 - t_start)
            s.behind.append(max(0, rev - cache.revision))
            s.self_lag_ms.append(cache.lag.seconds * 1000)
            cache.wait(rev, timeout=30)
            s.visible_ms.append((time.monotonic() - t1) * 1000)
            s.get_us += _time_sync(cache.get, keys, 100)
            if int(t1 - t_start) > ticks:
                ticks += 1
                bar.update()
            time.sleep(max(0.0, 0.02 - (time.monotonic() - t0)))
        out, _ = child.communicate(timeout=args.load_seconds + 60)
    s.load = json.loads(out.strip().splitlines()[-1])
    return s


async def load_child(args: Any) -> None:
    """The put load (a child process, so it does not share the bench process's GIL)."""
    keys = _keys(args.keys)
    endpoints = args.endpoints.split(",")
    async with AsyncClient(endpoints, ns=NS, max_connections=args.load_clients) as c:
        await c.put(keys[0], VALUE)
        stop = time.monotonic() + args.load_seconds
        puts = errors = 0

        async def loop() -> None:
            nonlocal puts, errors
            while time.monotonic() < stop:
                try:
                    await c.put(random.choice(keys), VALUE)
                    puts += 1
                except Exception:
                    errors += 1

        print("ready", flush=True)
        t0 = time.monotonic()
        await asyncio.gather(*(loop() for _ in range(args.load_clients)))
        took = time.monotonic() - t0
    print(json.dumps({"puts": puts, "errors": errors, "seconds": took, "puts_per_s": puts / took}))


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def latency_table(kinds: list[Kind]) -> str:
    rows = []
    for k in kinds:
        rows.append([k.name, str(sum(map(len, k.rounds))), _f(k.p(50)), _f(k.p(99))])
    for sync_or_async in ("Client", "AsyncClient"):
        c = next(k for k in kinds if k.name == f"cached get, {sync_or_async}")
        lin = next(k for k in kinds if k.name == f"linearizable get, {sync_or_async}")
        rows.append([f"ratio linearizable / cached, {sync_or_async}", "",
                     f"{lin.p(50) / c.p(50):.0f}x", f"{lin.p(99) / c.p(99):.0f}x"])  # fmt: skip
    return markdown_table(
        rows, ("read", "samples", "p50 µs", "p99 µs"), ("samples", "p50 µs", "p99 µs")
    )


def staleness_table(s: Staleness) -> str:
    def row(name: str, xs: Sequence[float], digits: int = 1) -> list[str]:
        return [name, *(_f(percentile(xs, q), digits) for q in (50, 90, 99)), _f(max(xs), digits)]

    rows = [
        row("revisions behind a linearizable read's R", s.behind, 0),
        row("ms until the view reached R", s.visible_ms, 2),
        row("cache.lag.seconds (self-reported), ms", s.self_lag_ms, 2),
        row("cached get during the load, µs", s.get_us, 1),
    ]
    return markdown_table(
        rows, ("staleness", "p50", "p90", "p99", "max"), ("p50", "p90", "p99", "max")
    )


def plot(kinds: list[Kind], s: Staleness, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = [k.name.replace(", ", "\n") for k in kinds]
    x = range(len(kinds))
    a.bar([i - 0.2 for i in x], [k.p(50) for k in kinds], 0.4, label="p50")
    a.bar([i + 0.2 for i in x], [k.p(99) for k in kinds], 0.4, label="p99")
    a.set_xticks(list(x), names, fontsize=7)
    a.set_yscale("log")
    a.set_ylabel("µs (median of rounds)")
    a.set_title("get latency: cache vs linearizable")
    a.legend(fontsize=8)
    a.grid(True, axis="y", which="both", alpha=0.3)
    b.plot(s.t, s.visible_ms, ".", ms=3, label="ms until the view reached R")
    b.plot(s.t, s.self_lag_ms, ".", ms=3, alpha=0.6, label="cache.lag.seconds (ms)")
    b2 = b.twinx()
    b2.plot(s.t, s.behind, "-", lw=0.6, color="grey", alpha=0.7, label="revisions behind R")
    b2.set_ylabel("revisions behind")
    b.set_xlabel(f"seconds into the load ({s.load.get('puts_per_s', 0):.0f} puts/s)")
    b.set_ylabel("ms")
    b.set_title("view staleness under the put load")
    b.legend(loc="upper left", fontsize=7)
    b2.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


async def run(args: argparse.Namespace) -> tuple[list[Kind], Staleness, str]:
    keys = _keys(args.keys)
    async with AsyncExitStack() as stack:
        endpoints, target = await statekeeper_target(stack, args.endpoints, "sk-cache-")
        bar = make_bar(2 * args.rounds + int(args.load_seconds) + 1, not args.no_progress)
        bar.set_description("populating")
        with Client(endpoints, ns=NS) as c:
            await asyncio.to_thread(populate, c, keys)
        bar.update()
        bar.set_description("latency, Client")
        kinds = await asyncio.to_thread(latency_sync, endpoints, keys, args, bar)
        bar.set_description("latency, AsyncClient")
        kinds += await latency_async(endpoints, keys, args, bar)
        bar.set_description(f"staleness under {args.load_clients} put clients")
        stale = await asyncio.to_thread(staleness, endpoints, keys, args, bar)
        bar.close()
    return kinds, stale, target


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.cache",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--keys", type=int, default=1000, help="keys under the prefix (default 1000)")
    p.add_argument("--rounds", type=int, default=15, help="alternating rounds (default 15)")
    p.add_argument("--gets", type=int, default=2000, help="cached gets per round (default 2000)")
    p.add_argument("--lin-gets", type=int, default=200, help="linearizable gets per round")
    p.add_argument("--load-seconds", type=float, default=10.0, help="the put load's length")
    p.add_argument("--load-clients", type=int, default=64, help="concurrent putters (default 64)")
    p.add_argument("--endpoints", help="comma-separated URLs of a running cluster")
    p.add_argument("--start-cluster", action="store_true", help="a fresh local cluster (default)")
    p.add_argument("--note", default="", help="a note for RESULTS.md (e.g. the machine's load)")
    p.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--load-child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def report(argv: list[str], args: Any, kinds: list[Kind], s: Staleness, target: str) -> None:
    lat, st = latency_table(kinds), staleness_table(s)
    print(lat, st, sep="\n\n")
    now = dt.datetime.now(dt.UTC)
    PLOTS.mkdir(exist_ok=True)
    stem = PLOTS / f"cache-{now:%Y-%m-%d-%H%M}"
    data = {"kinds": [asdict(k) for k in kinds], "staleness": asdict(s)}
    stem.with_suffix(".json").write_text(json.dumps(compact_samples(data), indent=1))
    png = plot(kinds, s, stem.with_suffix(".png"))
    if args.no_results:
        return
    load = s.load
    notes = [
        f"target: {target}; {args.keys} keys of 256 B under the cached prefix",
        f"latency: {args.rounds} alternating rounds of {args.gets} cached and {args.lin_gets} "
        "linearizable gets of random keys; p50/p99 = median over rounds of each round's",
        f"staleness: {args.load_clients} concurrent put loops in a child process for "
        f"{args.load_seconds:g} s ({load.get('puts_per_s', 0):.0f} puts/s, {load.get('errors', 0)} "
        f"errors); a probe every 20 ms: linearizable get -> R, then view revisions behind R, "
        f"time until the view reached R; {len(s.behind)} probes"
        + (f"; plot: results/{png.name}" if png else ""),
    ]
    if args.note:
        notes.append(f"note: {args.note}")
    append_section(
        RESULTS,
        "Client cache: cached get vs linearizable get, staleness under load",
        "statekeeper.benchmarks.cache",
        argv,
        notes,
        [lat, st],
        now,
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.load_child:
        asyncio.run(load_child(args))
        return 0
    kinds, stale, target = asyncio.run(run(args))
    report(argv, args, kinds, stale, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
