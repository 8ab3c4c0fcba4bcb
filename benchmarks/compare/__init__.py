"""statekeeper and etcd side by side: `python -m statekeeper.benchmarks.compare --help`.

For each workload group (key-value rows, failover, cold start) each system is measured in
`--rounds` rounds (default 3), every round on a fresh 3-node cluster, alternating which
system goes first (etcd, sk | sk, etcd | ...): one cluster at a time, same machine, same
loopback, same disk, fsync on for both, driven by the same closed-loop harness
(benchmarks/harness.py) through each system's own Python client. One table with both
systems' medians, the median ratio statekeeper/etcd per row with its spread over rounds,
and the client's CPU per op is printed and appended, with the date, the machine and the
exact command, to benchmarks/RESULTS.md (--results); a PNG chart goes to
benchmarks/results/. The stream-append rows (group "append") add Redis 7 Streams as a
third system (benchmarks/redis_streams.py) and get tables of their own.

The package, one job per module:
- workloads.py: the rows (Workload, kv_matrix) and the per-request coroutines (make_op)
- rounds.py: the sans-IO core: round order, Measure/Row, medians, spread, pooled failover
- measure.py: one group on one running cluster (key-value rows, failover, cold start)
- runner.py: groups x rounds x systems, each on a fresh cluster
- table.py, report.py, chart.py: the tables and notes, the RESULTS.md section, the PNG
- progress.py: the progress bar; cli.py: options, settings, main
"""

from statekeeper.benchmarks.compare.chart import write_chart
from statekeeper.benchmarks.compare.cli import build_parser, main, parse_groups, settings_from_args
from statekeeper.benchmarks.compare.measure import (
    Settings,
    first_put_after,
    measure_from_load,
    run_cold_start,
    run_failover,
    run_kv_group,
)
from statekeeper.benchmarks.compare.progress import (
    BarStream,
    LoadProgress,
    QuietBar,
    SimpleBar,
    make_bar,
)
from statekeeper.benchmarks.compare.report import results_section
from statekeeper.benchmarks.compare.rounds import Measure, Row, ratio, round_order, summarize_row
from statekeeper.benchmarks.compare.table import (
    format_ratio,
    format_value,
    markdown_table,
    row_notes,
)
from statekeeper.benchmarks.compare.workloads import (
    BATCH_OPS,
    GROUPS,
    TXN_OPS,
    Workload,
    kv_matrix,
    select_workloads,
    supports,
)

__all__ = [
    "BATCH_OPS",
    "GROUPS",
    "TXN_OPS",
    "BarStream",
    "LoadProgress",
    "Measure",
    "QuietBar",
    "Row",
    "Settings",
    "SimpleBar",
    "Workload",
    "build_parser",
    "first_put_after",
    "format_ratio",
    "format_value",
    "kv_matrix",
    "main",
    "make_bar",
    "markdown_table",
    "measure_from_load",
    "parse_groups",
    "ratio",
    "results_section",
    "round_order",
    "row_notes",
    "run_cold_start",
    "run_failover",
    "run_kv_group",
    "select_workloads",
    "settings_from_args",
    "summarize_row",
    "supports",
    "write_chart",
]
