"""How long does a healthy raft loop go without progress under load? `python -m
statekeeper.benchmarks.raft_loop_gaps --help`.

GET /v1/health/live answers 503 not_live once a node's raft loop has neither ticked nor
applied an entry for [raft] live_stall_seconds (node/api/liveness.py); a supervisor then
restarts the node. The threshold must sit well above the longest gap a healthy node shows
under load, or a busy node gets restarted. This starts a local 3-node cluster, runs
`--writers` threads of `--value-size` puts for `--seconds` (with a 1 MiB snapshot trigger
by default, so snapshots run all the time), polls every node's /v1/health/live, and prints
the longest gap each node reported (raft_loop_max_gap_seconds) and the largest age seen.

It also times the start-up RocksDB verification (node/recovery.py reads the whole DB
with checksums before opening it) on the leader's DB after the load.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from statekeeper.client import Client
from statekeeper.cluster.ports import free_ports
from statekeeper.cluster.supervisor import LocalCluster, http_get_json
from statekeeper.node import config as node_config
from statekeeper.node.config import NodeConfig
from statekeeper.node.recovery import BackgroundVerify
from statekeeper.node.store import StateMachine


def start_cluster(directory: Path, journal_bytes: int, fsync: str) -> LocalCluster:
    ports = free_ports(6, "127.0.0.1")
    base = node_config.local_cluster(size=3, fsync=fsync, secret="bench-secret")
    nodes = tuple(
        NodeConfig(
            id=f"node-{i}", host="127.0.0.1", http_port=ports[2 * i], raft_port=ports[2 * i + 1]
        )
        for i in range(3)
    )
    raft = dataclasses.replace(base.raft, snapshot_max_journal_bytes=journal_bytes)
    cfg = dataclasses.replace(base, nodes=nodes, raft=raft)
    path = directory / "cluster.toml"
    node_config.write(cfg, path)
    lc = LocalCluster(node_config.load(path), path)
    lc.up()
    return lc


def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="sk-gaps-") as tmp:
        lc = start_cluster(Path(tmp), args.journal_bytes, args.fsync)
        try:
            measure(lc, args)
        finally:
            lc.kill_all()


def measure(lc: LocalCluster, args: argparse.Namespace) -> None:
    stop = threading.Event()
    puts = [0]
    value = os.urandom(args.value_size)

    def writer(w: int) -> None:
        with Client([lc.url(n) for n in lc.node_ids]) as c:
            i = 0
            while not stop.is_set():
                c.put(f"w{w}/{i % 5000}", value)
                puts[0] += 1
                i += 1

    threads = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(args.writers)]
    for t in threads:
        t.start()
    worst_age = dict.fromkeys(lc.node_ids, 0.0)
    gaps = dict.fromkeys(lc.node_ids, 0.0)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for nid in lc.node_ids:
            code, doc = http_get_json(lc.url(nid) + "/v1/health/live", timeout=5.0)
            if doc is None:
                print(f"{nid}: no answer (HTTP {code})")
                continue
            if code != 200:
                print(f"{nid}: HTTP {code} {doc.get('error')}")
            worst_age[nid] = max(worst_age[nid], doc["raft_loop_age_seconds"])
            gaps[nid] = doc["raft_loop_max_gap_seconds"]
        time.sleep(0.25)
    stop.set()
    for t in threads:
        t.join(10)
    print(
        f"{args.writers} writers x {args.value_size} B puts for {args.seconds:g} s "
        f"({puts[0] / args.seconds:.0f} puts/s), snapshot every {args.journal_bytes} B of "
        f"journal, fsync={args.fsync}"
    )
    print(f"{'node':8} {'snapshots':>9} {'max gap s':>10} {'max age seen s':>15}")
    for nid in lc.node_ids:
        snaps = snapshots_taken(lc.url(nid))
        print(f"{nid:8} {snaps!s:>9} {gaps[nid]:>10.3f} {worst_age[nid]:>15.3f}")
    leader = lc.leader_id() or lc.node_ids[0]
    lc.stop_node(leader)
    sm = StateMachine(lc.data_dir(leader) / "db")
    try:
        # The checksum scan a node runs once ready (node/recovery.py), here in one pass.
        scan = BackgroundVerify(sm.verify_chunk, lambda e: None, pause=0.0)
        t0 = time.monotonic()
        scan.run()
        took = time.monotonic() - t0
    finally:
        sm.close()
    size = sum(f.stat().st_size for f in (lc.data_dir(leader) / "db").iterdir() if f.is_file())
    print(
        f"checksum scan of {leader}'s DB: {scan.records} records, {size / 2**20:.1f} MiB in {took:.2f} s"
    )


def snapshots_taken(url: str) -> str:
    """statekeeper_snapshots_total from the node's /metrics (text exposition)."""
    req = urllib.request.Request(url + "/metrics")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("statekeeper_snapshots_total "):
                return str(int(float(line.split()[1])))
    return "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.raft_loop_gaps", description=__doc__
    )
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--value-size", type=int, default=4096)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--journal-bytes", type=int, default=1024 * 1024)
    p.add_argument("--fsync", choices=("always", "never"), default="always")
    run(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
