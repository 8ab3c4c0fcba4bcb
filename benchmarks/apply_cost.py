"""CPU of apply per put, with and without the validated mark: `python -m benchmarks.apply_cost`.

One StateMachine in a temp dir (no raft, no network), entries of `--batch` puts of 256 B
values with an idempotency key each over `--keys` keys (cpu_per_op's batch workload, as the
state machine sees it). After a warm-up that writes every key, blocks of `--entries`
entries alternate between ops marked as validate_op's output (node/entry.py, what the
proposer sends) and the same ops unmarked (validated again in apply, as entries of older
journals are), ABAB...; the process time of each block (all threads, RocksDB's included)
is divided by its puts. Alternating blocks in one process cancel most of a shared
machine's drift; the per-block difference says how often the mark won.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from node import entry
from node.config import Limits
from node.ops import validate_op
from node.store import StateMachine

MODES = ("marked", "unmarked")


class Entries:
    """Entries of puts over a fixed key set, each op with a fresh idempotency key."""

    def __init__(self, batch: int, keys: int, value_size: int) -> None:
        self.batch = batch
        self.keys = [f"k{i:07d}" for i in range(keys)]
        self.value = os.urandom(value_size)
        self.limits = Limits()
        self.next_key = 0
        self.t = 1_700_000_000_000

    def make(self, marked: bool) -> bytes:
        ops = []
        for _ in range(self.batch):
            self.next_key = (self.next_key + 1) % len(self.keys)
            body = {
                "op": "put",
                "ns": "bench",
                "key": self.keys[self.next_key],
                "value": self.value,
                "idempotency_key": str(uuid.uuid4()),
            }
            op = validate_op(body, self.limits)
            ops.append(entry.mark_validated(op) if marked else op)
        self.t += 1
        return entry.encode(self.t, ops)


def run(args: argparse.Namespace, work: Path) -> dict[str, list[float]]:
    """us of process time per put, per block, by mode."""
    gen = Entries(args.batch, args.keys, args.value_size)
    sm = StateMachine(work / "db")
    index = 0
    try:
        for _ in range(-(-args.keys // args.batch) * 2):  # every key written twice
            index += 1
            sm.apply(index, gen.make(False))
        per_put: dict[str, list[float]] = {m: [] for m in MODES}
        for block in range(args.blocks):
            for mode in MODES if block % 2 else reversed(MODES):
                payloads = [gen.make(mode == "marked") for _ in range(args.entries)]
                start = time.process_time()
                for p in payloads:
                    index += 1
                    sm.apply(index, p)
                spent = time.process_time() - start
                per_put[mode].append(spent / (args.entries * args.batch) * 1e6)
        return per_put
    finally:
        sm.close()


def report(per_put: dict[str, list[float]]) -> str:
    lines = [f"{m}: median {statistics.median(xs):.2f} us/put" for m, xs in per_put.items()]
    diff = [u - m for m, u in zip(per_put["marked"], per_put["unmarked"], strict=True)]
    won = sum(d > 0 for d in diff)
    lines.append(
        f"unmarked - marked: median {statistics.median(diff):.2f} us/put per block, "
        f"the mark cheaper in {won} of {len(diff)} blocks"
    )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.apply_cost", description=__doc__.split("\n\n")[1]
    )
    p.add_argument("--batch", type=int, default=64, help="puts per entry (default 64)")
    p.add_argument("--keys", type=int, default=10000, help="distinct keys (default 10000)")
    p.add_argument("--value-size", type=int, default=256, help="bytes per value")
    p.add_argument("--entries", type=int, default=10, help="entries per block (default 10)")
    p.add_argument("--blocks", type=int, default=40, help="blocks of each mode (default 40)")
    return p


def main() -> None:
    args = build_parser().parse_args()
    with tempfile.TemporaryDirectory(prefix="apply-cost-") as tmp:
        print(report(run(args, Path(tmp))))


if __name__ == "__main__":
    main()
