"""Backup and restore of 100,000 keys: `python -m statekeeper.benchmarks.backup [--keys 100000]
[--rounds 3]`.

A fresh local 3-node cluster (fsync=always, data under benchmarks/out), loaded with
`--keys` keys of ~100 B (txns of 1,000 puts), 5 versions of 1,000 of them and a stream
of 1,000 events; then `--rounds` times `statekeeper backup` (the CLI, as a user runs it)
while one client keeps putting, and once `statekeeper restore` into three new data
dirs. Reported: the apply pause each backup's node measured (how long the raft thread's
applies waited for the checkpoint, node/api/backup.py), the backup's size and wall time,
the writer's longest gap between two acknowledged puts during the backups, and the
restore's time. Appends a section to benchmarks/RESULTS.md with --record.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from statekeeper.benchmarks.cluster_control import free_port_block
from statekeeper.benchmarks.load import append_section, markdown_table
from statekeeper.client import Client
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node import config as node_config

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"


def _cli(*argv: str) -> tuple[str, float]:
    started = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "statekeeper.cluster.cli", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if p.returncode:
        raise SystemExit(f"statekeeper {' '.join(argv)} failed: {p.stderr}")
    return p.stdout, time.monotonic() - started


def _load(c: Client, keys: int) -> None:
    value = "x" * 96
    for b in range(0, keys, 1000):
        c.txn([], [{"op": "put", "key": f"k/{i:07d}", "value": value} for i in range(b, b + 1000)])
    for v in range(5):
        c.txn([], [{"op": "put", "key": f"k/{i:07d}", "value": f"{v}"} for i in range(1000)])
    for b in range(10):
        c.append("events", [f"event {b}-{j}" for j in range(100)])


class _Writer(threading.Thread):
    def __init__(self, c: Client) -> None:
        super().__init__(daemon=True)
        self.c, self.stop, self.gap, self.puts = c, threading.Event(), 0.0, 0

    def run(self) -> None:
        last = time.monotonic()
        while not self.stop.is_set():
            self.c.put(f"w/{self.puts}", "v")
            now = time.monotonic()
            self.gap, last, self.puts = max(self.gap, now - last), now, self.puts + 1


def run(args: argparse.Namespace) -> tuple[list[list[str]], list[str]]:
    OUT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="backup-", dir=OUT))
    base = free_port_block(6, set(), random.Random())
    cfg = node_config.local_cluster(http_base_port=base, raft_base_port=base + 3)
    path = work / "cluster.toml"
    node_config.write(cfg, path)
    lc = LocalCluster(node_config.load(path), path)
    rows, notes = [], []
    try:
        lc.up()
        with Client(lc.config.http_urls(), timeout=60) as c:
            t = time.monotonic()
            _load(c, args.keys)
            notes.append(
                f"loaded {args.keys:,} keys (+5 versions of 1,000) in {time.monotonic() - t:.1f} s"
            )
            writer = _Writer(c)
            writer.start()
            for r in range(args.rounds):
                out = work / f"b{r}.skb"
                _, took = _cli("backup", "--out", str(out), "--config", str(path), "-q")
                meta = json.loads(_cli("backup", "--inspect", str(out), "--json")[0])
                rows.append(
                    [
                        str(r + 1),
                        f"{meta['apply_pause_ms']:.1f}",
                        f"{meta['size'] / 2**20:.1f}",
                        f"{took:.2f}",
                        meta["source_node"],
                    ]
                )
            writer.stop.set()
            writer.join()
            notes.append(
                f"writer during the backups: {writer.puts} puts, longest gap between "
                f"two acknowledged puts {writer.gap * 1000:.0f} ms"
            )
        lc.down()
        new = node_config.local_cluster(http_base_port=base, raft_base_port=base + 3)
        new_path = work / "new" / "cluster.toml"
        new_path.parent.mkdir()
        node_config.write(new, new_path)
        _, took = _cli("restore", str(work / "b0.skb"), "--config", str(new_path))
        notes.append(
            f"restore of 3 nodes (verify, extract, store + raft snapshot each): {took:.2f} s"
        )
        pauses = [float(r[1]) for r in rows]
        notes.append(
            f"apply pause median {statistics.median(pauses):.1f} ms, max {max(pauses):.1f} ms"
        )
    finally:
        lc.kill_all()
        lc.close()
        shutil.rmtree(work, ignore_errors=True)
    return rows, notes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m statekeeper.benchmarks.backup", description=__doc__)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--record", action="store_true", help="append to benchmarks/RESULTS.md")
    args = p.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    rows, notes = run(args)
    columns = ["round", "apply pause ms", "size MiB", "backup s", "node"]
    table = markdown_table(rows, columns, numeric=columns[:4])
    print(table)
    print("\n".join(notes))
    if args.record:
        append_section(
            ROOT / "benchmarks" / "RESULTS.md",
            f"Backup of {args.keys:,} keys",
            "statekeeper.benchmarks.backup",
            argv or sys.argv[1:],
            notes,
            [table],
            started,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
