"""How long the console's LangGraph page takes to answer (issue 31: under 300 ms on a
loaded 3-node cluster), measured on the server's side of a browser: a session cookie and
plain GETs, no rendering in a browser.

A 3-node cluster with TLS, auth and [ui] is started in a temporary directory, and the
saver's namespace is filled with ``--threads`` threads of 2 checkpoints each and one long
thread of ``--long`` checkpoints (a time travel fork every 50, channel values of a
growing list of notes). Then, while one client keeps writing (a put loop: the "load"),
each page is asked ``--rounds`` times (20) on node-0 with the root token's session:

- the thread list (first page of 50, and a later page by its cursor),
- the long thread (its newest 50 checkpoints, and 500 at once),
- its newest checkpoint (every channel value decoded and shown).

For each: the median and the spread (min, max) of the wall time of a GET, and the CPU
time the serving node spent per GET (utime+stime from /proc/<pid>/stat over the rounds;
the write load's own CPU is in it, so it is an upper bound).

    .venv/bin/python -m statekeeper.benchmarks.console_langgraph --threads 1000 --long 500
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid

from statekeeper.benchmarks.console_cluster import ConsoleCluster, ConsoleSession, console_cluster
from statekeeper.benchmarks.harness import proc_cpu_seconds
from statekeeper.client import Client
from statekeeper.client.langgraph.saver import StatekeeperSaver

NS = "langgraph"


def checkpoint(step: int, notes: int) -> dict:
    return {
        "v": 1,
        "id": str(uuid.uuid1()),  # time-ordered, as LangGraph's uuid6
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": {"notes": [f"note {i}" for i in range(notes)], "count": step},
        "channel_versions": {"notes": step + 1, "count": step + 1},
        "versions_seen": {},
    }


def put(saver: StatekeeperSaver, thread: str, parent: dict | None, step: int, notes: int):
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if parent is not None:
        conf["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    versions = {"notes": step + 1, "count": step + 1}
    meta = {"source": "loop", "step": step}
    return saver.put({"configurable": conf}, checkpoint(step, notes), meta, versions)


def fill(saver: StatekeeperSaver, threads: int, long: int) -> None:
    for i in range(threads):
        first = put(saver, f"thread-{i:06d}", None, 0, 1)
        put(saver, f"thread-{i:06d}", first, 1, 2)
    chain = [put(saver, "long", None, 0, 0)]
    for step in range(1, long):
        # every 50th checkpoint travels back to the one 2 steps before: a fork
        parent = chain[-3] if step % 50 == 0 and len(chain) > 2 else chain[-1]
        chain.append(put(saver, "long", parent, step, min(step, 200)))


def write_load(client: Client, stop: threading.Event) -> None:
    i = 0
    while not stop.is_set():
        client.put(f"load/{i % 1000}", b"x" * 100, ns="load")
        i += 1


def measure(session: ConsoleSession, pid: int, path: str, rounds: int) -> dict:
    status, body = session.get(path)  # warm up (and check)
    assert status == 200, (path, status, body[:300])
    times = []
    cpu0 = proc_cpu_seconds(pid)
    for _ in range(rounds):
        t0 = time.perf_counter()
        status, body = session.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        assert status == 200
    cpu = (proc_cpu_seconds(pid) - cpu0) * 1000 / rounds
    return {
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "node_cpu_ms": cpu,
        "kb": len(body) / 1024,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1000)
    p.add_argument("--long", type=int, default=500)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    with console_cluster() as cc:
        run(cc, args)


def run(cc: ConsoleCluster, args: argparse.Namespace) -> None:
    lc, token, urls = cc.lc, cc.token, cc.urls
    t0 = time.monotonic()
    with StatekeeperSaver.from_endpoints(urls, ns=NS, token=token, tls=lc.tls) as saver:
        fill(saver, args.threads, args.long)
    print(f"filled {args.threads} threads + 1 of {args.long} in {time.monotonic() - t0:.0f} s")
    session = cc.session(token)
    pid = lc.pid("node-0")
    second = f"thread-{args.threads // 2:06d}"
    pages = [
        ("threads, first 50", "/ui/langgraph"),
        ("threads, a later page", f"/ui/langgraph?cursor={second}"),
        ("long thread, newest 50", "/ui/langgraph/thread?thread=long"),
        ("long thread, 500", "/ui/langgraph/thread?thread=long&limit=500"),
        ("newest checkpoint", "/ui/langgraph/checkpoint?thread=long"),
    ]
    stop = threading.Event()
    with Client(urls, token=token, tls=lc.tls) as loader:
        load = threading.Thread(target=write_load, args=(loader, stop), daemon=True)
        load.start()
        try:
            time.sleep(1)
            print("| page | median ms | min–max ms | node CPU ms/GET | KiB |")
            print("|---|---|---|---|---|")
            for name, path in pages:
                m = measure(session, pid, path, args.rounds)
                print(
                    f"| {name} | {m['median_ms']:.0f} | {m['min_ms']:.0f}–{m['max_ms']:.0f}"
                    f" | {m['node_cpu_ms']:.0f} | {m['kb']:.0f} |"
                )
        finally:
            stop.set()
            load.join(10)


if __name__ == "__main__":
    main()
