"""How long a new member takes to catch up, and how long the leader's removal takes, on a
local 3-node cluster holding N MiB (the log compacted: the new member gets a snapshot).

    python benchmarks/membership_catchup.py [--mib 20] [--fsync never|always] [--dir /tmp/sk-members-bench]

Prints one line per step. pysyncobj counts the new member towards the quorum from the
moment its add entry is appended (no non-voting stage), so "added -> caught up" is how long
the cluster runs with a member that cannot acknowledge yet."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from statekeeper.client import Client  # noqa: E402
from statekeeper.cluster.members import MemberChangeError, Membership  # noqa: E402
from statekeeper.cluster.ports import free_ports  # noqa: E402
from statekeeper.cluster.supervisor import LocalCluster  # noqa: E402
from statekeeper.node import config as node_config  # noqa: E402


def write_config(d: Path, fsync: str = "never"):
    """3 nodes on free loopback ports, snapshots every 200 entries (so a new member
    gets a snapshot, not the log)."""
    ports = free_ports(6, "127.0.0.1")
    cfg = node_config.local_cluster(size=3, fsync=fsync, data_dir=str(d / "data"))
    nodes = tuple(
        dataclasses.replace(n, http_port=ports[2 * i], raft_port=ports[2 * i + 1])
        for i, n in enumerate(cfg.nodes)
    )
    raft = dataclasses.replace(cfg.raft, snapshot_min_entries=200)
    cfg = dataclasses.replace(cfg, nodes=nodes, raft=raft)
    node_config.write(cfg, d / "cluster.toml")
    return d / "cluster.toml", node_config.load(d / "cluster.toml")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mib", type=int, default=20, help="MiB of values to write first")
    p.add_argument("--dir", default="/tmp/sk-members-bench")
    p.add_argument(
        "--fsync",
        choices=("never", "always"),
        default="never",
        help="always: the new member syncs the snapshot it receives (its log says how long)",
    )
    a = p.parse_args()
    d = Path(a.dir)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    path, cfg = write_config(d, a.fsync)
    lc = LocalCluster(cfg, path, progress=None)
    lc.up()
    m = Membership(path, say=lambda s: print("  " + s), timeout=300)
    try:
        value = os.urandom(16 * 1024)
        t = time.monotonic()
        with Client(cfg.http_urls()) as c:
            for i in range(a.mib * 64 // 16):
                with c.batch() as b:
                    for j in range(16):
                        b.put(f"k{i}-{j}", value)
        print(f"wrote {a.mib} MiB in {time.monotonic() - t:.1f} s")
        node = m.new_node()
        t = time.monotonic()
        try:
            m.add_node(node)
        except MemberChangeError as e:
            raft = Path(m.cfg.node_data_dir(node.id)) / "raft"
            got = sum(f.stat().st_size for f in raft.glob("snapshot*"))
            print(
                f"add-node {node.id} with {a.mib} MiB: FAILED after {time.monotonic() - t:.0f} s "
                f"({got / 2**20:.0f} MiB of snapshot received): {e}"
            )
            return
        print(f"add-node {node.id} with {a.mib} MiB: {time.monotonic() - t:.1f} s in all")
        node_log = Path(m.cfg.node_data_dir(node.id)) / "node.log"
        for line in node_log.read_text(errors="replace").splitlines():
            if "snapshot file synced in" in line or "state machine restored" in line:
                print("  " + line.split(": ", 1)[-1])
        leader = m.leader(time.monotonic() + 10)["node_id"]
        t = time.monotonic()
        m.remove_node(leader)
        print(f"remove-node {leader} (the leader): {time.monotonic() - t:.1f} s")
    finally:
        m.reload()
        for n in m.cfg.nodes:
            m.lc.kill_node(n.id)
        for n in cfg.nodes:
            lc.kill_node(n.id)


if __name__ == "__main__":
    main()
