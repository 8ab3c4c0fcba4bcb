"""What the simulator's disks cost: LazyFS per node vs a plain dir, on a node-like workload.

``python -m statekeeper.chaos.sim.disk_bench [--ops 2000] [--rounds 5] [--tmp DIR]`` (root
and FUSE for the LazyFS rows). The workload is what a node does per entry: a 100-byte
journal append + fdatasync and a RocksDB put of 100 bytes (WriteOptions as the store's:
no sync), `--ops` times, then close. Rows run alternately, round after round; each row
prints the median over rounds and [min-max] of the wall time, this process's CPU and the
LazyFS daemon's CPU. Then the costs of SimDisks' own operations (mount, power_cut, wipe,
unmount), and whether power_cut's report was the same in every round (determinism).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from statekeeper.chaos.sim.disk import SimDisks
from statekeeper.node.store.backend import open_db

RECORD = b"x" * 100


def node_like_workload(data_dir: Path, ops: int) -> None:
    """`ops` x (journal append + fdatasync, RocksDB put), then close both (a node's kill)."""
    raft = data_dir / "raft"
    raft.mkdir(exist_ok=True)
    db = open_db(data_dir / "db")
    fd = os.open(raft / "journal", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for i in range(ops):
            os.write(fd, RECORD)
            os.fdatasync(fd)
            db[i.to_bytes(8, "big")] = RECORD
    finally:
        os.close(fd)
        db.close()


def daemon_cpu(disks: SimDisks) -> float:
    """CPU seconds used so far by every LazyFS daemon of `disks` (0 in plain mode)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in disks.daemon_pids():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def one_round(mode: str, tmp_root: str, ops: int) -> dict[str, object]:
    """Mount (lazyfs), run the workload, power-cut, wipe, unmount; every step timed (s)."""
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory(dir=tmp_root) as tmp:
        t0 = time.perf_counter()
        disks = SimDisks(Path(tmp), ["n1"], mode).__enter__()  # type: ignore[arg-type]
        out["mount"] = time.perf_counter() - t0
        try:
            d0, c0, w0 = daemon_cpu(disks), time.process_time(), time.perf_counter()
            node_like_workload(disks.data_dir("n1"), ops)
            out["wall"] = time.perf_counter() - w0
            out["cpu"] = time.process_time() - c0
            out["daemon"] = daemon_cpu(disks) - d0
            t0 = time.perf_counter()
            out["report"] = disks.power_cut("n1")
            out["power_cut"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            disks.wipe("n1")
            out["wipe"] = time.perf_counter() - t0
        finally:
            t0 = time.perf_counter()
            disks.close()
            out["unmount"] = time.perf_counter() - t0
    return out


def spread(xs: list[float], scale: float = 1.0, unit: str = "s") -> str:
    xs = [x * scale for x in xs]
    return f"{statistics.median(xs):8.3f} {unit} [{min(xs):.3f}-{max(xs):.3f}]"


def run(ops: int, rounds: int, tmp_roots: list[str]) -> None:
    rows: dict[str, list[dict[str, object]]] = {}
    for _ in range(rounds):  # the rows alternate: a burst of load elsewhere hits all of them
        for tmp_root in tmp_roots:
            for mode in ("plain", "lazyfs"):
                rows.setdefault(f"{mode:6s} on {tmp_root}", []).append(
                    one_round(mode, tmp_root, ops)
                )
    print(f"{ops} x (100 B append + fdatasync, RocksDB put), {rounds} rounds: median [min-max]")
    for name, results in rows.items():
        col = {k: [float(r[k]) for r in results] for k in ("wall", "cpu", "daemon")}  # type: ignore[arg-type]
        print(
            f"{name:24s} wall {spread(col['wall'])}  cpu {spread(col['cpu'])}"
            f"  daemon cpu {spread(col['daemon'])}"
        )
    lazy = [r for name, results in rows.items() if name.startswith("lazyfs") for r in results]
    for step in ("mount", "power_cut", "wipe", "unmount"):
        print(f"lazyfs {step:10s} {spread([float(r[step]) for r in lazy], 1000, 'ms')}")  # type: ignore[arg-type]
    reports = [r["report"] for r in lazy]
    same = all(r == reports[0] for r in reports)
    print(
        f"power_cut reports {'all equal' if same else 'DIFFER'}: {reports if not same else reports[0]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--tmp",
        action="append",
        help="a dir to run in (repeatable; default: the temp dir, /dev/shm)",
    )
    args = ap.parse_args()
    dirs = args.tmp or [tempfile.gettempdir(), "/dev/shm"]
    run(args.ops, args.rounds, [d for d in dirs if os.path.isdir(d)])


if __name__ == "__main__":
    main()
