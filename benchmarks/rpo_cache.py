"""The RPO of the client cache's write-back mode (docs/cache.md), for benchmarks/rpo.py's
`writer-kill` fault:

    python -m statekeeper.benchmarks.rpo --faults writer-kill [--cache-modes write-back,write-through]
                             [--flush-ms 100] [--rate 200]

A child process writes unique keys through ``client.cache("w/", mode=...)`` at a steady
rate and logs every write the cache acknowledged (after ``put`` returned: in write-back
mode, when it was buffered) with its monotonic time, unbuffered, so the log survives the
process. After `--before` seconds plus a random part of one flush interval (so the kill
lands anywhere in it) the child is SIGKILLed. Then every logged key is read back: lost =
acknowledged writes the cluster does not hold; their age = kill time - their ack time (the
write-back RPO in time: at most flush_ms + one flush's round trip). Write-through is the
control: an acknowledged write was committed, nothing is lost. The cluster is not faulted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.client import Client
from statekeeper.cluster.supervisor import LocalCluster

PREFIX = "w/"


@dataclass
class KillTrial:
    mode: str
    fsync: str
    flush_ms: float
    acked: int = 0
    lost: int = 0
    lost_age_max_s: float = 0.0  # oldest lost write's age at the kill
    flushes: str = ""


def child(urls: str, ns: str, mode: str, flush_ms: float, rate: float, log: str) -> None:
    """The writer: put unique keys through a cache, log each acknowledged one."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with Client(urls.split(","), ns=ns, timeout=3) as c:
        cache = c.cache(PREFIX, mode=mode, flush_ms=flush_ms)
        print("ready", flush=True)
        period, next_at, i = 1 / rate, time.monotonic(), 0
        while True:
            key, value = f"{PREFIX}{i}", uuid.uuid4().hex
            cache.put(key, value)
            os.write(fd, f"{key} {value} {time.monotonic():.6f}\n".encode())
            i += 1
            next_at += period
            time.sleep(max(0.0, next_at - time.monotonic()))


def _acked(log: Path) -> dict[str, tuple[str, float]]:
    out = {}
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:  # the last line may be cut by the kill
            out[parts[0]] = (parts[1], float(parts[2]))
    return out


def run_trial(
    mode: str,
    fsync: str,
    rate: float,
    before: float,
    flush_ms: float,
    config: Callable[[Path, str, Path, bool], tuple[Path, Any]],
) -> KillTrial:
    """One writer kill on a fresh 3-node cluster (``config`` writes its config)."""
    trial = KillTrial(mode, fsync, flush_ms)
    with tempfile.TemporaryDirectory(prefix="sk-rpo-cache-") as tmp, contextlib.ExitStack() as st:
        work = Path(tmp)
        (work / "data").mkdir()
        path, cfg = config(work, fsync, work / "data", False)
        lc = LocalCluster(cfg, path)
        st.callback(lc.close)
        st.callback(lc.kill_all)
        lc.up()
        urls = ",".join(lc.url(n) for n in lc.node_ids)
        ns, log = f"rpo-cache-{uuid.uuid4().hex[:6]}", work / "acked.log"
        cmd = [sys.executable, "-m", "statekeeper.benchmarks.rpo_cache", "--urls", urls, "--ns", ns,
               "--mode", mode, "--flush-ms", str(flush_ms), "--rate", str(rate), "--log", str(log)]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        st.callback(lambda: proc.poll() is None and proc.kill())
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the writer did not start")
        time.sleep(before + random.uniform(0, flush_ms / 1000))  # anywhere in an interval
        killed_at = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        acked = _acked(log)
        with Client(urls.split(","), ns=ns) as c:
            found = {kv.key: kv.text for kv in c.scan(PREFIX)}
        lost = [t for k, (v, t) in acked.items() if found.get(k) != v]
        trial.acked, trial.lost = len(acked), len(lost)
        trial.lost_age_max_s = killed_at - min(lost) if lost else 0.0
    return trial


def summarize(trials: list[KillTrial]) -> str:
    rows = [
        "| writer kill | fsync | flush_ms | trials | acked (median) | lost per trial | lost (max) | oldest lost write's age at the kill, s (max) |",
        "|---|---|--:|--:|--:|---|--:|--:|",
    ]
    groups: dict[tuple[str, str], list[KillTrial]] = {}
    for t in trials:
        groups.setdefault((t.mode, t.fsync), []).append(t)
    for (mode, fsync), ts in groups.items():
        acked = sorted(t.acked for t in ts)[len(ts) // 2]
        rows.append(
            f"| {mode} | {fsync} | {ts[0].flush_ms:g} | {len(ts)} | {acked} "
            f"| {', '.join(str(t.lost) for t in ts)} | {max(t.lost for t in ts)} "
            f"| {max(t.lost_age_max_s for t in ts):.3f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the writer child of benchmarks.rpo's writer-kill")
    ap.add_argument("--urls", required=True)
    ap.add_argument("--ns", required=True)
    ap.add_argument("--mode", default="write-back")
    ap.add_argument("--flush-ms", type=float, default=100)
    ap.add_argument("--rate", type=float, default=200)
    ap.add_argument("--log", required=True)
    a = ap.parse_args(argv)
    child(a.urls, a.ns, a.mode, a.flush_ms, a.rate, a.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
