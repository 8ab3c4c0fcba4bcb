"""CPU cost of op validation: `python -m statekeeper.benchmarks.validate_cost [--rounds N]`.

Times node.ops.core.validate_op / validate_ops on typical bodies (a 256 B put with an
idempotency key, a get, a txn of 1 compare and 4 ops, a batch of 16 puts) in CPU time
(process_time, so a busy machine inflates it less), best of N rounds. The numbers in
node/ops/core.py's docstring came from this and from the same bodies run through the
alternatives named there.
"""

from __future__ import annotations

import argparse
import time
import timeit

from statekeeper.node.config import Limits
from statekeeper.node.ops.core import validate_op, validate_ops

IDEMPOTENCY_KEY = "6f1c2b0e-4a55-4b7e-9d8f-0c3e2a1b9d44"
PUT = {
    "op": "put",
    "ns": "agents",
    "key": "agent-7/chat/0001",
    "value": b"x" * 256,
    "idempotency_key": IDEMPOTENCY_KEY,
}
GET = {"op": "get", "ns": "agents", "key": "agent-7/chat/0001"}
TXN = {
    "op": "txn",
    "ns": "agents",
    "compare": [{"key": "agent-7/lock", "target": "version", "op": "==", "value": 3}],
    "success": [
        {"op": "put", "key": "agent-7/state", "value": b"s" * 128},
        {"op": "put", "key": "agent-7/lock", "value": b"owner"},
        {"op": "get", "key": "agent-7/chat/0001"},
    ],
    "failure": [{"op": "get", "key": "agent-7/lock"}],
    "idempotency_key": IDEMPOTENCY_KEY,
}
BATCH = [
    dict(PUT, key=f"agent-7/chat/{i:04d}", idempotency_key=f"{IDEMPOTENCY_KEY}-{i}")
    for i in range(16)
]
CASES = (
    ("put", lambda lim: validate_op(PUT, lim), 20_000),
    ("get", lambda lim: validate_op(GET, lim), 20_000),
    ("txn", lambda lim: validate_op(TXN, lim), 4_000),
    ("batch of 16 puts", lambda lim: validate_ops(BATCH, lim), 1_500),
)


def best_us(fn, limits: Limits, number: int, rounds: int) -> float:
    times = timeit.repeat(lambda: fn(limits), number=number, repeat=rounds, timer=time.process_time)
    return min(times) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.validate_cost", description=__doc__
    )
    p.add_argument("--rounds", type=int, default=15, help="timing rounds per case (default 15)")
    args = p.parse_args(argv)
    limits = Limits()
    for name, fn, number in CASES:
        print(f"{name:18s} {best_us(fn, limits, number, args.rounds):7.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
