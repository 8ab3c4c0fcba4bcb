"""How fast the console's Agents page answers with real sizes (issue 31 point 4: "10,000
agents and 100,000-event streams page and search without loading everything; a page
answers in under 300 ms on a loaded 3-node cluster").

It starts a 3-node cluster with TLS, auth and [ui] on, writes 10,000 agents (a checkpoint
and an event each) and one agent with 100,000 events (a checkpoint every 1,000), starts a
write load in another process (``--load-rate`` puts/s of 256 B, so the measuring process's
CPU is its own), logs in to the console as a browser does (the login form, its CSRF
cookie, the session cookie) and GETs each page ``--gets`` times over one keep-alive HTTPS
connection to the leader:

- list, first page: ``/ui/agents?ns=bench`` (50 agents)
- list, page 101: the same with the cursor after agent 5,000
- prefix search: ``prefix=agent-071`` (100 match; the first 50)
- timeline, newest window and a window in the middle (``before=50000``) of the
  100,000-event agent

For each: the median time from sending the GET to the last byte of the answer (the node
renders the page: that is the page's answer time; min and max as the spread), the reads
the view made (from the page), and the client's CPU per GET (time.process_time around the
GETs: the measuring process does nothing else). Run:

    python -m statekeeper.benchmarks.console_agents [--agents 10000 --events 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import multiprocessing
import re
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

from statekeeper.benchmarks.console_cluster import ConsoleCluster, ConsoleSession, console_cluster
from statekeeper.benchmarks.load import append_section, markdown_table
from statekeeper.client import AsyncClient
from statekeeper.client.agent import AsyncAgent
from statekeeper.console.views.agents import list_agents

OUT = Path(__file__).resolve().parent / "out"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
NS = "bench"
BIG = "big"
COLUMNS = ("page", "GETs", "median ms", "min ms", "max ms", "reads", "client CPU ms/GET")


# -- the data -------------------------------------------------------------------------------


async def _seed_agents(client: AsyncClient, count: int, say) -> None:
    sem = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        async with sem:
            a = AsyncAgent(client, f"agent-{i:05d}", ns=NS)
            await a.log("task", {"i": i}, step=1)
            await a.checkpoint({"i": i, "status": "working"}, step=1)

    for start in range(0, count, 1000):
        await asyncio.gather(*(one(i) for i in range(start, min(count, start + 1000))))
        say(f"  {min(count, start + 1000)} agents")


async def _seed_big(client: AsyncClient, events: int, say) -> None:
    """``events`` events (500 per append) and a checkpoint after every 1,000th."""
    a = AsyncAgent(client, BIG, ns=NS)
    seq = 0
    while seq < events:
        block = min(1000, events - seq)
        for part in range(0, block, 500):
            n = min(500, block - part)
            batch = [a.ctx.codec.wire_event("step", {"seq": seq + part + k + 1}, None, None,
                                            (seq + part + k) // 10 + 1) for k in range(n)]  # fmt: skip
            await client.append(a.stream, batch, ns=NS)
        seq += block
        a = AsyncAgent(client, BIG, ns=NS)
        await a.hydrate()
        await a.checkpoint({"upto": seq}, step=(seq - 1) // 10 + 1)
        if seq % 20_000 == 0:
            say(f"  {seq} events of {BIG!r}")


def _write_load(urls: list[str], token: str, ca: str, rate: float, stop) -> None:
    """A put load at ``rate`` per second until ``stop`` is set (its own process)."""

    async def run() -> None:
        async with AsyncClient(urls, token=token, ca=ca) as c:
            value, i, start, pending = b"x" * 256, 0, time.monotonic(), set()
            while not stop.is_set():
                due = start + i / rate
                if (late := due - time.monotonic()) > 0:
                    await asyncio.sleep(late)
                put = asyncio.ensure_future(c.put(f"load/{i % 10_000:05d}", value, ns="load"))
                pending.add(put)
                put.add_done_callback(pending.discard)
                i += 1
            await asyncio.gather(*pending, return_exceptions=True)

    asyncio.run(run())


# -- the pages ------------------------------------------------------------------------------


def _measure(session: ConsoleSession, path: str, gets: int) -> tuple[list[float], float, str]:
    """(ms of each GET, client CPU ms per GET, the last page)."""
    status, page = session.get(path)  # warm (templates compiled, session hot)
    assert status == 200, (path, status, page[:300])
    times, cpu = [], time.process_time()
    for _ in range(gets):
        t = time.perf_counter()
        status, page = session.get(path)
        times.append((time.perf_counter() - t) * 1000)
        assert status == 200, (path, status)
    return times, (time.process_time() - cpu) * 1000 / gets, page.decode()


async def _later_cursor(client: AsyncClient, agents: int) -> str | None:
    """The list's cursor after the first ``agents`` agents (pages of 500); None for fewer
    than 500 (then there is no later page to time: --agents under 1,000)."""
    cursor = None
    for _ in range(agents // 500):
        cursor = (await list_agents(client, NS, limit=500, cursor=cursor)).cursor
    return cursor


def _pages(later: str | None, skipped: int, middle: int) -> list[tuple[str, str]]:
    q = {"ns": NS}
    later_page = [] if later is None else [
        (f"list, page {skipped // 50 + 1} (after {skipped:,})",
         "/ui/agents?" + urlencode({**q, "cursor": later})),
    ]  # fmt: skip
    return [
        ("list, first page", "/ui/agents?" + urlencode(q)),
        *later_page,
        ("prefix search agent-071", "/ui/agents?" + urlencode({**q, "prefix": "agent-071"})),
        ("timeline, newest 50", "/ui/agents/timeline?" + urlencode({**q, "agent": BIG})),
        (f"timeline, before {middle:,}",
         "/ui/agents/timeline?" + urlencode({**q, "agent": BIG, "before": middle})),
    ]  # fmt: skip


def _reads(page: str) -> str:
    found = re.search(r"· (\d+) reads", page)
    return found.group(1) if found else "–"


async def run(
    cc: ConsoleCluster, args: argparse.Namespace, say
) -> tuple[list[list[str]], dict[str, str]]:
    ca, token, urls = cc.ca, cc.token, cc.urls
    spawn = multiprocessing.get_context("spawn")  # no fork of a process with threads
    stop = spawn.Event()
    load = None
    try:
        async with AsyncClient(urls, token=token, ca=ca) as client:
            t = time.monotonic()
            say(f"seeding {args.agents} agents and {args.events} events of {BIG!r}")
            await _seed_agents(client, args.agents, say)
            await _seed_big(client, args.events, say)
            say(f"seeded in {time.monotonic() - t:.0f} s")
            skipped = min(5000, args.agents // 1000 * 500)  # the middle of the list
            later = await _later_cursor(client, skipped)
            leader = (await client.status())["leader"]
        load = spawn.Process(
            target=_write_load, args=(urls, token, ca, args.load_rate, stop), daemon=True
        )
        load.start()
        await asyncio.sleep(2)
        session = cc.session(token, node=leader)
        rows = []
        for name, page_path in _pages(later, skipped, args.events // 2):
            times, cpu, page = await asyncio.to_thread(_measure, session, page_path, args.gets)
            rows.append([
                name, str(len(times)), f"{statistics.median(times):.1f}",
                f"{min(times):.1f}", f"{max(times):.1f}", _reads(page), f"{cpu:.2f}",
            ])  # fmt: skip
            say(" | ".join(rows[-1]))
        return rows, {"leader": leader}
    finally:
        stop.set()
        if load is not None:
            load.join(10)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=10_000)
    p.add_argument("--events", type=int, default=100_000, help="events of the big agent")
    p.add_argument("--gets", type=int, default=20, help="GETs per page (median of them)")
    p.add_argument("--load-rate", type=float, default=200.0, help="puts/s during the GETs")
    p.add_argument("--fsync", default="never", choices=("always", "never", "batch"))
    p.add_argument("--no-results", action="store_true", help="do not append to RESULTS.md")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    OUT.mkdir(exist_ok=True)
    with console_cluster(args.fsync, parent=OUT) as cc:
        rows, info = asyncio.run(run(cc, args, say))
    table = markdown_table(rows, COLUMNS, numeric=COLUMNS[1:])
    print(table)
    if not args.no_results:
        notes = [
            f"3 nodes, TLS + auth + [ui], fsync {args.fsync}; {args.agents} agents (a "
            f"checkpoint and an event each) and one of {args.events} events (a checkpoint "
            f"every 1,000) in namespace {NS!r}",
            f"GETs to the leader ({info['leader']}) over one keep-alive HTTPS connection with "
            f"the session cookie, while another process puts {args.load_rate:.0f} x 256 B/s",
            "ms: from sending the GET to the answer's last byte (the node calls the API "
            "as the user and renders the page); reads: the view's API reads for the page",
        ]
        now = dt.datetime.now(dt.UTC)
        append_section(RESULTS, "Console: Agents page load times", "statekeeper.benchmarks"
                       ".console_pages", argv or sys.argv[1:], notes, [table], now)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
