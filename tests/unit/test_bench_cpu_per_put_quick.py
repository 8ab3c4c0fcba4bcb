"""benchmarks/cpu_per_put_quick.py (`cpu_per_op --quick`): its pure parts, the metrics and
strace parsers, the per-put table and the options. No node, no strace is run."""

from __future__ import annotations

import argparse

import pytest

from statekeeper.benchmarks import cpu_per_op
from statekeeper.benchmarks import cpu_per_put_quick as q

METRICS = """# HELP statekeeper_journal_fsync_duration_seconds fsync/fdatasync calls
# TYPE statekeeper_journal_fsync_duration_seconds histogram
statekeeper_journal_fsync_duration_seconds_bucket{le="0.001"} 10.0
statekeeper_journal_fsync_duration_seconds_count 1234.0
statekeeper_journal_fsync_duration_seconds_sum 2.5
statekeeper_raft_entries_proposed_total 1200.0
statekeeper_raft_applied_index 4321.0
statekeeper_http_requests_total{route="put",code="200"} 99.0
"""

# strace -c output: the errors column is blank on most lines.
STRACE = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 40.10    0.040100          40      1000           fdatasync
 20.00    0.020000           2      9000           epoll_wait
 15.00    0.015000           1     12000      3000 recvfrom
  9.00    0.009000           1      8000           sendto
  6.00    0.006000           1      5000           write
  5.00    0.005000           1      4000           read
  4.90    0.004900           2      2000       100 futex
  0.00    0.000000           0        10           getpid
------ ----------- ----------- --------- --------- ----------------
100.00    0.100000           2     41010      3100 total
"""


def test_metrics_parser_takes_unlabelled_samples_and_skips_absent_ones() -> None:
    got = q.parse_metrics(METRICS, (q.FSYNC_COUNT, q.ENTRIES_PROPOSED, q.APPLIED_INDEX, q.TICKS))
    assert got == {q.FSYNC_COUNT: 1234.0, q.ENTRIES_PROPOSED: 1200.0, q.APPLIED_INDEX: 4321.0}
    assert q.TICKS not in got  # no ticks counter exported: the table says "-"
    with_ticks = METRICS + "statekeeper_raft_ticks_total 5000.0\n"
    assert q.parse_metrics(with_ticks, (q.TICKS,)) == {q.TICKS: 5000.0}


def test_strace_summary_counts_calls_by_kind() -> None:
    calls = q.parse_strace_summary(STRACE)
    assert calls["fdatasync"] == 1000 and calls["recvfrom"] == 12000 and calls["futex"] == 2000
    assert "total" not in calls and "syscall" not in calls and len(calls) == 8
    kinds = q.syscalls_by_kind(calls)
    assert kinds == {"reads": 16000, "writes": 13000, "waits": 9000, "fsyncs": 1000,
                     "futex": 2000, "all": 41010}  # fmt: skip
    assert q.parse_strace_summary("") == {}
    assert len(q.SYSCALL_HEADS) == len(q.SYSCALL_KINDS) + 1  # one column per kind and "all"


def _args(**kw: object) -> argparse.Namespace:
    base = dict(value_size=256, rounds=3, duration=4.0, warmup=1.0, strace_seconds=3.0)
    return argparse.Namespace(**{**base, **kw})


def test_the_table_has_a_line_per_client_count_and_node() -> None:
    leader = q.Counts(cpu_us=[1000.0, 1100.0, 900.0], fsyncs=[1.0, 1.0, 1.0],
                      entries=[1.0, 1.0, 1.0], ticks=[],
                      syscalls={"reads": 9.0, "writes": 8.0, "waits": 6.0, "fsyncs": 1.0,
                                "futex": 3.0, "all": 40.0})  # fmt: skip
    follower = q.Counts(cpu_us=[600.0, 500.0, 550.0], fsyncs=[0.03], entries=[0.03],
                        ticks=[2.0, 4.0, 3.0])  # fmt: skip
    results = [q.ClientCountResult(1, [500.0, 520.0], {"leader": leader, "follower": follower},
                                   "1500 puts in the 3 s strace window")]  # fmt: skip
    text = q.report(results, _args())
    lines = text.splitlines()
    assert "CPU us/put (median)" in lines[0] and "waits (loop passes)" in lines[0]
    assert lines[2].split(" | ")[:7] == ["| x1", "leader", "1000", "900-1100", "1.000", "1.000",
                                         "-"]  # fmt: skip
    assert lines[2].endswith("| 9.00 | 8.00 | 6.00 | 1.00 | 3.00 | 40.00 |")
    # ticks when the node exports them; no strace window: "-" in every syscall column
    assert lines[3].split(" | ")[:7] == ["| x1", "follower", "550", "500-600", "0.030", "0.030",
                                         "3.000"]  # fmt: skip
    assert lines[3].endswith("| - | - | - | - | - | - |")
    assert "x1: puts/s per round 500, 520; 1500 puts in the 3 s strace window" in text
    assert "strace slows the node" in text


def test_quick_options_and_defaults() -> None:
    p = cpu_per_op.build_parser()
    a = p.parse_args(["--quick"])
    assert a.quick and a.strace_seconds == 3.0 and a.duration is None and a.warmup is None
    full = p.parse_args([])
    assert not full.quick and full.rounds == 3
    assert q.QUICK_CLIENTS == (1, 64)
    with pytest.raises(SystemExit, match="puts only"):
        cpu_per_op.main(["--quick", "--workload", "batch"])
