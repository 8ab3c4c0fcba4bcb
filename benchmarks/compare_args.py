"""The options of `python -m benchmarks.compare`, importable without the benchmark code.

Declared in the (flags, kwargs) form cluster/cli.py's @command takes, so
`statekeeper bench compare` accepts exactly the same options, and importing the CLI (which
every node process does) costs only this standard-library module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_RESULTS = BENCH_DIR / "RESULTS.md"
DEFAULT_CHART_DIR = BENCH_DIR / "results"
DEFAULT_DATA_DIR = BENCH_DIR / "out"  # git-ignored and on the same disk as the project

DEFAULT_SYSTEMS = ("etcd", "statekeeper")  # measured in this order, per group
GROUPS = ("put", "get", "mix", "cas", "txn", "batch", "failover", "cold-start")

CLI_ARGS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--quick",), {"action": "store_true", "help": "a few-minute subset: fewer rows, "
        "3 s windows, 1 s warm-up, 100,000 keys for the cold start"}),
    (("--only",), {"metavar": "GROUPS", "help": "comma-separated subset of: " + ",".join(GROUPS)}),
    (("--systems",), {"default": ",".join(DEFAULT_SYSTEMS), "metavar": "NAMES",
        "help": "systems to run, in this order per group (default: etcd,statekeeper)"}),
    (("--duration",), {"type": float, "help": "measured seconds per row (default 10; --quick 3)"}),
    (("--warmup",), {"type": float, "help": "unmeasured seconds before each row (default 2; --quick 1)"}),
    (("--keys",), {"type": int, "default": 10_000, "help": "key space of the key-value rows (default 10000)"}),
    (("--skip-cold-start",), {"action": "store_true", "help": "leave out the cold-start and memory rows"}),
    (("--keys-cold-start",), {"type": int, "metavar": "N",
        "help": "keys of 256 B a member holds for cold start and RSS (default 1000000; --quick 100000)"}),
    (("--failover-trials",), {"type": int, "default": 5, "help": "leader kills per system (default 5)"}),
    (("--data-dir",), {"type": Path, "default": DEFAULT_DATA_DIR,
        "help": "parent of the clusters' temp dirs (default benchmarks/out; keep it on disk, not tmpfs)"}),
    (("--results",), {"type": Path, "default": DEFAULT_RESULTS, "help": "markdown file to append to"}),
    (("--no-results",), {"action": "store_true", "help": "do not append to the results file or write a chart"}),
    (("--chart-dir",), {"type": Path, "default": DEFAULT_CHART_DIR, "help": "where the PNG chart goes"}),
    (("--json",), {"type": Path, "metavar": "PATH", "help": "also write every figure as JSON"}),
    (("--note",), {"default": "", "help": "free text for the results section"}),
    (("--no-progress",), {"action": "store_true", "help": "no progress bar"}),
]  # fmt: skip
