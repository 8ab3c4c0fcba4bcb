"""The background checksum scan of a node's RocksDB (node/recovery.py BackgroundVerify):
how long it takes, and how long it keeps another thread (the raft/HTTP loop's stand-in)
from running.

    python -m statekeeper.benchmarks.verify_scan [--records 4200000] [--value-size 64] [--dir DIR]

A RocksDB of `--records` records (256 B values at 1M keys make about 4.2M records in a
node's DB: keys, history, indexes) is written once into `--dir` (default benchmarks/out;
reused when it is there), opened as a StateMachine, then read whole three ways: one
unbroken pass (what every start did before the scan moved to the background), and
BackgroundVerify with its default chunks and pause, while a thread that asks to wake every
1 ms records how much longer it waited (GIL hand-over, with a node's 1 ms switch interval).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

from statekeeper.node import recovery
from statekeeper.node.store import StateMachine
from statekeeper.node.store.backend import open_db

DEFAULT_DIR = Path(__file__).resolve().parent / "out" / "verify-scan"


def build(path: Path, records: int, value_size: int) -> None:
    if (path / "CURRENT").exists():
        return
    db = open_db(path)
    value = b"v" * value_size
    for i in range(records):
        db.put(b"k%012d" % i, value)
    db.flush()
    db.close()


class LongestWait:
    """A thread sleeping 1 ms at a time; how long it waited beyond that, in seconds."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(0.001)
            self.waits.append(time.perf_counter() - t - 0.001)

    def summary(self) -> str:
        w = sorted(self.waits) or [0.0]
        p99 = w[int(0.99 * (len(w) - 1))]
        return f"another thread's extra wait p99 {p99 * 1000:.1f} ms, max {w[-1] * 1000:.1f} ms"

    def __enter__(self) -> LongestWait:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def timed_scan(sm: StateMachine, chunk: int, pause: float) -> tuple[float, int, str]:
    """(seconds, records, the other thread's waits) of one whole scan."""
    v = recovery.BackgroundVerify(sm.verify_chunk, lambda e: None, chunk, pause)
    with LongestWait() as waits:
        started = time.perf_counter()
        v.run()
        seconds = time.perf_counter() - started
    assert v.done, "the scan did not reach the end"
    return seconds, v.records, waits.summary()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=4_200_000)
    p.add_argument("--value-size", type=int, default=64)
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = p.parse_args()
    sys.setswitchinterval(0.001)  # as a node does (node/main.py)
    path = args.dir / f"db-{args.records}-{args.value_size}"
    started = time.perf_counter()
    build(path, args.records, args.value_size)
    print(f"DB ready in {time.perf_counter() - started:.1f} s: {path}")
    sm = StateMachine(path)
    try:
        runs = [
            ("one pass (the old start-up scan)", args.records + 1, 0.0),
            (
                f"chunks of {recovery.CHUNK_RECORDS}, {recovery.PAUSE_SECONDS * 1000:.0f} ms pause",
                recovery.CHUNK_RECORDS,
                recovery.PAUSE_SECONDS,
            ),
        ]
        for label, chunk, pause in runs:
            seconds, records, waits = timed_scan(sm, chunk, pause)
            print(f"{label}: {seconds:.2f} s for {records:,} records; {waits}")
    finally:
        sm.close()


if __name__ == "__main__":
    main()
