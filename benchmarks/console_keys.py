"""How long the console's Keys page takes to answer (issue 31: under 300 ms on a loaded
3-node cluster), measured from a client on loopback.

Starts a 3-node cluster with TLS, auth and [ui] (the tests' cluster fixture), writes
10,000 keys with ~200-byte JSON values under ``k/`` and one key written 20 times, runs a
write load in another process (2 threads of puts), logs in as a writer of the namespace,
and times 20 GETs (with the session cookie, one keep-alive connection) of each view:
a page of 50 keys, a page of 500, a key with 20 revisions, a diff, a live-tail poll.
Prints the median, min and max per view in ms.

    .venv/bin/python -m statekeeper.benchmarks.console_keys [--rounds 20]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

from statekeeper.client import Client
from tests.integration.cluster_fixture import mint_token, running_cluster

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


def _login(conn: http.client.HTTPSConnection, token: str) -> str:
    conn.request("GET", "/ui/login")
    resp = conn.getresponse()
    body = resp.read().decode()
    nonce = re.search(r'name="csrf" value="([^"]+)"', body).group(1)
    conn.request(
        "POST",
        "/ui/login",
        urlencode({"csrf": nonce, "token": token}),
        {
            "content-type": "application/x-www-form-urlencoded",
            "cookie": f"sk_console_login={nonce}",
        },
    )
    resp = conn.getresponse()
    resp.read()
    cookie = next(
        v for k, v in resp.getheaders() if k.lower() == "set-cookie" and "sk_console=" in v
    )
    return cookie.split(";", 1)[0]


def _time(conn: http.client.HTTPSConnection, cookie: str, path: str, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        conn.request("GET", path, headers={"cookie": cookie})
        resp = conn.getresponse()
        resp.read()
        out.append((time.perf_counter() - t0) * 1000)
        assert resp.status == 200, (path, resp.status)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_cluster(Path(tmp), tls=True, auth=True, ui=True) as lc,
    ):
        token = mint_token(lc, ns=NS, role="writer")
        urls = lc.config.http_urls()
        ca = str(Path(lc.config.base_dir) / lc.config.tls.ca_file)
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
            node = lc.config.nodes[0]
            conn = http.client.HTTPSConnection(node.host, node.http_port, context=lc.tls)
            cookie = _login(conn, token)
            _time(conn, cookie, f"/ui/keys/watch?ns={NS}&prefix=load/", 1)  # the tail starts
            views = {
                "browse 50 of 10,000": f"/ui/keys?ns={NS}&prefix=k/&cursor=k/05000",
                "browse 500": f"/ui/keys?ns={NS}&prefix=k/&limit=500",
                "key, 10 revisions": f"/ui/keys/key?ns={NS}&key=k/agent",
                "diff": f"/ui/keys/diff?ns={NS}&key=k/agent&left={revs[0]}&right={revs[-1]}",
                "tail poll (under load)": f"/ui/keys/tail?ns={NS}&prefix=load/",
            }
            for name, path in views.items():
                ms = _time(conn, cookie, path, args.rounds)
                print(
                    f"{name:24s} median {statistics.median(ms):6.1f} ms"
                    f"  min {min(ms):6.1f}  max {max(ms):6.1f}  (n={len(ms)})"
                )
        finally:
            stop.set()
            load.join(30)


if __name__ == "__main__":
    main()
