"""CPU of apply per put: `python -m statekeeper.benchmarks.apply_cost` (validated mark A/B) and
`python -m statekeeper.benchmarks.apply_cost --shapes --against OTHER_PYTHON` (entry shapes, old vs new).

One StateMachine in a temp dir (no raft, no network), entries of `--batch` puts of 256 B
values with an idempotency key each over `--keys` keys (cpu_per_op's batch workload, as the
state machine sees it). After a warm-up that writes every key, blocks of `--entries`
entries alternate between ops marked as validate_op's output (node/entry.py, what the
proposer sends) and the same ops unmarked (validated again in apply, as entries of older
journals are), ABAB...; the process time of each block (all threads, RocksDB's included)
is divided by its puts. Alternating blocks in one process cancel most of a shared
machine's drift; the per-block difference says how often the mark won.

`--shapes`: per-put process time of six entry shapes, SHAPES (one put per entry, a batch
of 64 puts, a txn of 10 puts; each with and without an idempotency key per op), on the
code this interpreter imports. With `--against PYTHON` each round runs once under this
interpreter and once under PYTHON (another worktree's venv, which imports that tree's
node.store: the script is run by path from outside both trees), alternating which goes
first, a fresh process each; the report gives the medians per shape and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from statekeeper.node import entry
from statekeeper.node.config import Limits
from statekeeper.node.ops.core import validate_op
from statekeeper.node.store import StateMachine

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


# name -> (ops per entry, puts per op (a txn's inner puts), idempotency key per op)
SHAPES = {
    "put x1": (1, 1, False),
    "put x1 +idem": (1, 1, True),
    "batch of 64": (64, 1, False),
    "batch of 64 +idem": (64, 1, True),
    "txn of 10": (1, 10, False),
    "txn of 10 +idem": (1, 10, True),
}


def shape_entry(gen: Entries, ops: int, puts: int, idem: bool) -> bytes:
    """One entry of `ops` ops, each a put (puts == 1) or a txn of `puts` puts; marked as
    the proposer marks them (entry.mark_validated leaves what it does not trust)."""
    out = []
    for _ in range(ops):
        inner = []
        for _ in range(puts):
            gen.next_key = (gen.next_key + 1) % len(gen.keys)
            inner.append({"op": "put", "ns": "bench", "key": gen.keys[gen.next_key]})
            inner[-1]["value"] = gen.value
        body = inner[0] if puts == 1 else {"op": "txn", "ns": "bench", "success": inner}
        if idem:
            body["idempotency_key"] = str(uuid.uuid4())
        out.append(entry.mark_validated(validate_op(body, gen.limits)))
    gen.t += 1
    return entry.encode(gen.t, out)


def run_shapes(args: argparse.Namespace, work: Path) -> dict[str, float]:
    """us of process time per put, by shape: ~`--puts` puts each, after a warm-up that
    writes every key twice (every put then overwrites a live key)."""
    gen = Entries(64, args.keys, args.value_size)
    sm = StateMachine(work / "db")
    index = 0
    try:
        for _ in range(-(-args.keys // 64) * 2):
            index += 1
            sm.apply(index, shape_entry(gen, 64, 1, False))
        per_put = {}
        for name, (ops, puts, idem) in SHAPES.items():
            n = max(1, args.puts // (ops * puts))
            payloads = [shape_entry(gen, ops, puts, idem) for _ in range(n)]
            start = time.process_time()
            for p in payloads:
                index += 1
                sm.apply(index, p)
            per_put[name] = (time.process_time() - start) / (n * ops * puts) * 1e6
        return per_put
    finally:
        sm.close()


def run_against(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """Alternating rounds of --shapes under this interpreter ("new") and --against ("old")."""
    cmd = [
        "--shapes",
        "--json",
        f"--keys={args.keys}",
        f"--value-size={args.value_size}",
        f"--puts={args.puts}",
    ]
    pythons = {"new": sys.executable, "old": args.against}
    out: dict[str, dict[str, list[float]]] = {side: {s: [] for s in SHAPES} for side in pythons}
    for r in range(args.rounds):
        for side in ("new", "old") if r % 2 else ("old", "new"):
            done = subprocess.run(
                [pythons[side], str(Path(__file__).resolve()), *cmd],
                cwd=tempfile.gettempdir(),  # not a tree: each interpreter imports its own node
                capture_output=True,
                text=True,
                check=True,
            )
            for shape, us in json.loads(done.stdout).items():
                out[side][shape].append(us)
    return out


def report_against(out: dict[str, dict[str, list[float]]]) -> str:
    lines = [f"{'shape':<20} {'old us/put':>18} {'new us/put':>18} {'new/old':>8}"]
    for shape in SHAPES:
        old, new = out["old"][shape], out["new"][shape]
        mo, mn = statistics.median(old), statistics.median(new)
        lines.append(
            f"{shape:<20} {mo:8.1f} ({min(old):.0f}-{max(old):.0f}) "
            f"{mn:8.1f} ({min(new):.0f}-{max(new):.0f}) {mn / mo:8.2f}"
        )
    lines.append("medians of alternating rounds (range in parentheses), process time")
    return "\n".join(lines)


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
        prog="python -m statekeeper.benchmarks.apply_cost", description=__doc__.split("\n\n")[1]
    )
    p.add_argument("--batch", type=int, default=64, help="puts per entry (default 64)")
    p.add_argument("--keys", type=int, default=10000, help="distinct keys (default 10000)")
    p.add_argument("--value-size", type=int, default=256, help="bytes per value")
    p.add_argument("--entries", type=int, default=10, help="entries per block (default 10)")
    p.add_argument("--blocks", type=int, default=40, help="blocks of each mode (default 40)")
    p.add_argument("--shapes", action="store_true", help="time the SHAPES instead")
    p.add_argument("--puts", type=int, default=1280, help="--shapes: puts per shape per round")
    p.add_argument("--against", help="--shapes: the other interpreter (old code) for an A/B")
    p.add_argument("--rounds", type=int, default=10, help="--against: rounds (default 10)")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    return p


def main() -> None:
    args = build_parser().parse_args()
    if args.against:
        print(report_against(run_against(args)))
        return
    with tempfile.TemporaryDirectory(prefix="apply-cost-") as tmp:
        if args.shapes:
            per_put = run_shapes(args, Path(tmp))
            print(json.dumps(per_put) if args.json else per_put)
        else:
            print(report(run(args, Path(tmp))))


if __name__ == "__main__":
    main()
