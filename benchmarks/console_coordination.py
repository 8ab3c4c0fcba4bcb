"""How fast console pages answer (issue 31: "a page answers in under 300 ms on a loaded
3-node cluster"): a real 3-node cluster with TLS, auth and [ui], filled with a page's
worth of coordination and operations state, a process of 8 threads putting throughout; each path is
fetched with a logged-in session's cookie and the time to the whole answer is reported
(median and spread of --rounds GETs per path, wall time on loopback: the page's API calls
are the cost being measured, so CPU time of one process would miss most of it).

    python -m statekeeper.benchmarks.console_coordination                        # the default paths
    python -m statekeeper.benchmarks.console_coordination --rounds 20 --path /ui/operations?ns=bench

What it holds (ns "bench"): 50 locks (each on its own lease, kept alive), 50 more leases
with 2 keys each, 50 effect records (25 done, 25 that maybe happened), 50 pncounters of 2
replicas, 2 retention policies over 2,000 checkpoint keys, 10 archive segments.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from statekeeper.benchmarks.console_cluster import ConsoleSession, console_cluster
from statekeeper.client import Client

NS = "bench"
PATHS = (
    f"/ui/coordination?ns={NS}",
    f"/ui/coordination/locks?ns={NS}",
    f"/ui/coordination/leases?ns={NS}",
    f"/ui/operations?ns={NS}",
)


def fill(c: Client, archive_dir: Path) -> list:
    """The state the pages show; returns the held locks (release them at the end)."""
    held = [c.lock(f"job/{i:03d}", ttl=60, owner=f"pod-{i}") for i in range(50)]
    for i in range(50):
        lease = c.lease_grant(120)
        c.put(f"session/{i:03d}/a", b"1", lease=lease)
        c.put(f"session/{i:03d}/b", b"2", lease=lease)

    def fail(ctx):
        raise RuntimeError("timed out")

    for i in range(50):
        if i % 2:
            try:
                c.effects.run(f"pay/{i:03d}", fail)
            except RuntimeError:
                pass
        else:
            c.effects.run(f"pay/{i:03d}", lambda ctx: {"receipt": 1})
    for i in range(50):
        for replica in ("r-a", "r-b"):
            counter = c.crdt.counter(f"visits/{i:03d}", replica_id=replica, autosave=False)
            counter.increment(3)
            counter.sync()
    with c.batch() as b:
        for n in range(1000):
            b.put(f"agent/a{n % 20}/ckpt/{n:012d}", b"x" * 100)
    with c.batch() as b:
        for n in range(1000):
            b.put(f"runs/r{n % 10}/ckpt/{n:012d}", b"y" * 100)
    c.retention_set("agent/", within="ckpt", keep_last=5)
    c.retention_set("logs/", keep_last=10)
    for r in range(10):
        c.archive_run(f"runs/r{r}/", within="ckpt", keep_last=10, to=str(archive_dir))
    return held


def writer(c: Client, stop: threading.Event, counts: list[int], w: int) -> None:
    i = 0
    while not stop.is_set():
        c.put(f"load/{w}/{i % 1000:04d}", b"z" * 256)
        i += 1
    counts.append(i)


def load(urls: list[str], token: str, ca: str, writers: int, seconds: float) -> None:
    """The write load, in a process of its own (so its client does not share the GIL
    with the measuring one): `writers` threads putting 256-byte values."""
    stop, counts = threading.Event(), []
    with Client(urls, token=token, ca=ca, ns=NS, max_connections=writers) as c:
        threads = [
            threading.Thread(target=writer, args=(c, stop, counts, w)) for w in range(writers)
        ]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
    print(f"background load: {sum(counts) / seconds:.0f} puts/s", flush=True)


def measure(session: ConsoleSession, path: str, rounds: int) -> list:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        status, body = session.get(path)
        times.append((time.perf_counter() - started) * 1000)
        if status != 200:
            raise SystemExit(f"{path}: {status} {body[:300]!r}")
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--path", action="append", help="a console path (repeatable)")
    p.add_argument("--writers", type=int, default=8, help="threads putting (default 8)")
    args = p.parse_args(argv)
    with console_cluster() as cc, tempfile.TemporaryDirectory() as archive:
        lc, token, urls, ca = cc.lc, cc.token, cc.urls, cc.ca
        paths = args.path or PATHS
        with Client(urls, token=token, tls=lc.tls, ns=NS) as c:
            held = fill(c, Path(archive))
            seconds = 3 + len(paths) * (args.rounds + 2) * 0.3  # outlasts the measuring
            writers = multiprocessing.get_context("spawn").Process(
                target=load, args=(urls, token, ca, args.writers, seconds)
            )
            writers.start()
            time.sleep(2)
            session = cc.session()
            for path in paths:
                measure(session, path, 2)  # warm-up
                t = sorted(measure(session, path, args.rounds))
                print(
                    f"{path:40s} median {statistics.median(t):6.1f} ms  "
                    f"min {t[0]:6.1f}  p90 {t[int(len(t) * 0.9) - 1]:6.1f}  max {t[-1]:6.1f}",
                    flush=True,
                )
            writers.join()
            for lock in held:
                lock.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
