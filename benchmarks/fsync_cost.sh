#!/usr/bin/env bash
# Durable vs non-durable put throughput at 64 clients, alternating runs, medians.
# Usage: bash benchmarks/fsync_cost.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
for i in $(seq "$rounds"); do
  for f in always never; do
    .venv/bin/python -m statekeeper.benchmarks.load --workload put --value-size 256 --clients 64 \
      --duration 8 --warmup 2 --start-cluster --fsync "$f" --data-dir benchmarks/out \
      --no-results --no-progress 2>/dev/null | tail -1 | sed "s/^/$f /"
  done
done
