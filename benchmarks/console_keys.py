"""How long the console's Keys page takes to answer (issue 31: under 300 ms on a loaded
3-node cluster), measured from a client on loopback.

Starts a 3-node cluster with TLS, auth and [ui] (benchmarks/console_cluster.py), writes
10,000 keys with ~200-byte JSON values under ``k/`` and one key written 20 times, runs a
write load in another process (2 threads of puts), logs in as a writer of the namespace,
and times 20 GETs (with the session cookie, one keep-alive connection) of each view:
a page of 50 keys, a page of 500, a key with 20 revisions, a diff, a live-tail poll.
Prints the median, min and max per view in ms.

    .venv/bin/python -m statekeeper.benchmarks.console_keys [--rounds 20]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import threading
import time

from statekeeper.benchmarks.console_cluster import ConsoleSession, console_cluster
from statekeeper.client import Client

NS = "bench-keys"
KEYS = 10_000


def _load(urls: list[str], token: str, ca: str, stop: multiprocessing.Event) -> None:
    """Puts until ``stop`` (2 threads), in its own process: the load does not share the
    measuring process's GIL."""

    def run(t: int) -> None:
        with Client(urls, token=token, ca=ca, ns=NS) as c:
            i = 0
            while not stop.is_set():
                c.put(f"load/{t}/{i % 1000}", json.dumps({"i": i}).encode())
                i += 1

    threads = [threading.Thread(target=run, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def _time(session: ConsoleSession, path: str, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        status, _ = session.get(path)
        out.append((time.perf_counter() - t0) * 1000)
        assert status == 200, (path, status)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    with console_cluster() as cc:
        token, urls, ca = cc.mint(ns=NS, role="writer"), cc.urls, cc.ca
        with Client(urls, token=token, ca=ca, ns=NS) as c:
            for start in range(0, KEYS, 500):
                b = c.batch()
                for i in range(start, start + 500):
                    b.put(f"k/{i:05d}", json.dumps({"i": i, "pad": "x" * 180}).encode())
                b.execute()
            revs = [c.put("k/agent", json.dumps({"step": i}).encode()).revision for i in range(20)]
        stop = multiprocessing.Event()
        load = multiprocessing.Process(target=_load, args=(urls, token, ca, stop))
        load.start()
        try:
            time.sleep(2)
            session = cc.session(token)
            _time(session, f"/ui/keys/watch?ns={NS}&prefix=load/", 1)  # the tail starts
            views = {
                "browse 50 of 10,000": f"/ui/keys?ns={NS}&prefix=k/&cursor=k/05000",
                "browse 500": f"/ui/keys?ns={NS}&prefix=k/&limit=500",
                "key, 10 revisions": f"/ui/keys/key?ns={NS}&key=k/agent",
                "diff": f"/ui/keys/diff?ns={NS}&key=k/agent&left={revs[0]}&right={revs[-1]}",
                "tail poll (under load)": f"/ui/keys/tail?ns={NS}&prefix=load/",
            }
            for name, path in views.items():
                ms = _time(session, path, args.rounds)
                print(
                    f"{name:24s} median {statistics.median(ms):6.1f} ms"
                    f"  min {min(ms):6.1f}  max {max(ms):6.1f}  (n={len(ms)})"
                )
        finally:
            stop.set()
            load.join(30)


if __name__ == "__main__":
    main()
