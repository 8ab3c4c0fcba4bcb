"""The CI chaos smoke: a few short scenarios against real clusters (one with failpoint
crashes), the mutation runs that prove the checkers can fail (unsafe reads; a watcher that
loses an event), and Ctrl-C cleanup. About 5 minutes on 2 cores.

The full suite is `statekeeper chaos suite` (see the README).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from statekeeper.chaos.checker.streams import check_streams
from statekeeper.chaos.faults import FAULTS
from statekeeper.chaos.history import HistoryWriter, read_history
from statekeeper.chaos.runner import RunOptions, run_scenario
from statekeeper.chaos.stream_reads import final_stream_reads, replica_stream_reads
from statekeeper.chaos.workload import Workload
from statekeeper.chaos.workload_config import WorkloadConfig

# iptables rules match loopback link addresses, which every link-address cluster shares:
# `make test`'s two workers run these modules on one worker (xdist group "links").
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("links")]

ROOT = Path(__file__).resolve().parents[2]
DURATION = 14.0  # warmup 2.8 s, fault 4.9 s, recovery 6.3 s


def _skip_unless_runnable(fault: str) -> None:
    ok, why = FAULTS[fault].available()
    if not ok:
        pytest.skip(f"{fault}: {why}")


def _assert_clean_pass(result, report_dir: Path) -> None:
    verdicts = {v.name: v for v in result.verdicts}
    failing = [
        f"{v.name}={v.status} ({v.value}; {v.detail})"
        for v in result.verdicts
        if v.status != "PASS" and v.status != "INFO"
    ]
    assert not failing, f"{result.fault}: {failing}\n{result.checker_report}"
    assert verdicts["linearizable"].status == "PASS"
    assert verdicts["lost acknowledged writes"].value == "0"
    assert verdicts["duplicate applications"].value == "0"
    assert result.status == "passed"
    m = result.metrics
    assert m is not None and m.ok > 500, "the workload barely ran"
    assert m.rto_write_s is not None and m.rto_read_s is not None
    assert (
        (report_dir / "report.md").read_text().startswith(f"# Chaos run: `{result.fault}` - PASSED")
    )
    assert (report_dir / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert (report_dir / "history.jsonl").stat().st_size > 10_000
    # event streams are in every scenario's workload, checked, and in the report
    assert verdicts["event streams"].status == "PASS", verdicts["event streams"]
    st = result.stream_stats
    assert st["appends_ok"] > 20 and st["expectation_failed"] > 0 and st["reads_checked"] > 5
    nodes, streams = result.options["nodes"], len(WorkloadConfig().stream_names())
    assert st["events"] > 20 and st["replicas_checked"] == nodes * streams
    assert m.by_op["append"]["ok"] == st["appends_ok"]
    # so are the watchers on the kv keys: every committed change, once, in order
    assert verdicts["watch"].status == "PASS", verdicts["watch"]
    ws = result.watch_stats
    assert ws["watchers"] == 2 and ws["truth_revisions"] > 100 and ws["acknowledged"] > 100
    assert ws["events"] >= 2 * ws["truth_changes"]  # both watchers saw every change
    assert ws["progress"] >= 2  # both caught up to the final revision by a progress frame
    assert (report_dir / "watch.jsonl").stat().st_size > 10_000
    # and the lockers: never two holders whose fenced writes both land interleaved
    assert verdicts["locks"].status == "PASS", verdicts["locks"]
    ls = result.lock_stats
    assert ls["lockers"] == 3 and ls["acquisitions"] >= 3 and ls["handovers"] >= 2, ls
    assert ls["writes_ok"] >= 6 and ls["landed"] >= ls["writes_ok"], ls
    assert ls["stale_ok"] == 0 and ls["stale_refused"] + ls["stale_unknown"] == ls["stale_writes"]
    assert ls["truth_changes"] == ls["landed"], ls  # every change of the key is a landed write


@pytest.mark.parametrize(
    "fault", ["kill-leader", "pause-leader", "partition-leader", "proxy-blackhole"]
)
def test_scenario_passes(fault: str, tmp_path: Path) -> None:
    """The smoke runs the way production should: TLS on both ports and auth on (issue 15)."""
    _skip_unless_runnable(fault)
    # proxy-blackhole runs without TLS for now: with raft TLS, the old leader's links through
    # the blackholing proxy once took longer than the 3 s "every node serves after the
    # heal" allows (CI at add1ee9; the CLI smoke and an earlier CI passed). Open in issue 15's
    # note until the TLS connection's recovery after a silent peer is bounded.
    tls = fault != "proxy-blackhole"
    opts = RunOptions(
        fault=fault,
        duration=DURATION,
        clients=12,
        seed=7,
        report_dir=tmp_path / fault,
        tls=tls,
        auth=True,
    )
    result = run_scenario(opts)
    _assert_clean_pass(result, tmp_path / fault)
    assert result.options["tls"] == tls and result.options["auth"]
    logs = "".join(p.read_text() for p in (tmp_path / fault / "logs").glob("node-*.log"))
    assert ("serving HTTP on https://" in logs) == tls and "auth is disabled" not in logs
    # Each of these takes the leader away: writes stop until a new one is elected.
    assert result.metrics.longest_write_gap_s > 0.2


def test_failpoint_crashes_are_restarted_counted_and_checked(tmp_path: Path) -> None:
    """crash-snapshot: nodes exit at the compaction failpoints (status 86) until the heal,
    the watcher restarts them (without failpoints after the heal, so each node crashes at
    most once more), the report counts the crashes per failpoint, and every check
    (replicas converge, reads agree with the acknowledged writes, every node serves again)
    still passes."""
    report = tmp_path / "crash-snapshot"
    opts = RunOptions(
        fault="crash-snapshot", duration=DURATION, clients=12, seed=7, report_dir=report
    )
    result = run_scenario(opts)
    _assert_clean_pass(result, report)
    crashes = {v.name: v for v in result.verdicts}["failpoint crashes"]
    assert crashes.status == "PASS" and sum(result.crashes.values()) >= 3, crashes
    assert set(result.crashes) <= set(FAULTS["crash-snapshot"].failpoints)
    verdicts = {v.name: v for v in result.verdicts}
    assert verdicts["replicas converge"].status == "PASS"
    assert verdicts["reads agree with acknowledged writes"].status == "PASS"
    assert verdicts["every node serves after the heal"].status == "PASS"
    assert "## Failpoint crashes" in (report / "report.md").read_text()
    healed = next(t for t, msg in result.events if msg == "healed")
    after = Counter(
        msg.split()[0] for t, msg in result.events if t > healed and "exited at failpoint" in msg
    )
    assert max(after.values(), default=0) <= 1, after  # restarted clean after the heal


def _leader(cluster) -> str:
    deadline = time.monotonic() + 10
    while (leader := cluster.leader_id()) is None:
        assert time.monotonic() < deadline, "no leader"
        time.sleep(0.1)
    return leader


def test_stream_workload_across_leader_faults_checks_clean_and_can_fail(cluster, tmp_path) -> None:
    """The stream ops against a real cluster whose leader is paused (requests to it hang:
    unknown appends, re-sent with the same event ids) and then killed: the history and
    the final reads (through the cluster and each node's copy) pass every stream rule;
    the same history against a tampered final stream does not."""
    urls = [cluster.url(n) for n in cluster.node_ids]
    cfg = WorkloadConfig(
        clients=8, seed=3, stream_share=0.6, stream_resend_delay=(0.1, 0.5),
        op_deadline=0.5, attempt_timeout=0.5,  # a hung attempt leaves its op unknown
    )  # fmt: skip
    path = tmp_path / "history.jsonl"
    history = HistoryWriter(path)
    workload = Workload(urls, history, cfg, node_ids=cluster.node_ids)
    workload.start()
    try:
        time.sleep(2.5)
        paused = _leader(cluster)
        cluster.pause_node(paused)
        time.sleep(3.0)
        cluster.resume_node(paused)
        time.sleep(2.0)
        killed = _leader(cluster)
        cluster.kill_node(killed)
        time.sleep(2.0)
        cluster.start_and_wait(killed)
        time.sleep(2.5)
    finally:
        workload.stop()
    names = cfg.stream_names()
    streams = final_stream_reads(urls, names, history=history, process=cfg.clients, ns=cfg.ns)
    history.close()
    assert not streams.missing
    copies = replica_stream_reads(dict(zip(cluster.node_ids, urls, strict=True)), names,
                                  streams.revision, ns=cfg.ns)  # fmt: skip
    ops = read_history(path)
    res = check_streams(ops, streams.final, replicas=copies)
    assert res.ok, [v.describe() for v in res.violations[:10]]
    st = res.stats
    print(res.summary())
    assert st["appends_ok"] > 30 and st["expectation_failed"] > 0 and st["reads_checked"] > 5
    assert st["appends_unknown"] > 0 and st["retries"] > 0, res.summary()
    assert st["replicas_checked"] == len(urls) * len(names)
    # The checker can fail on this history: the final stream without its last event
    # (which someone appended), or with one event from the middle gone.
    name = max(names, key=lambda n: len(streams.final[n]))
    events = streams.final[name]
    assert len(events) > 10
    short = {v.rule for v in check_streams(ops, {**streams.final, name: events[:-1]}).violations}
    assert short & {"lost", "reader", "stale", "unknown"}, short
    holed = {v.rule for v in check_streams(ops, {**streams.final, name: events[:4] + events[5:]}).violations}
    assert "gap" in holed, holed


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_mutation_a_watcher_that_loses_an_event_is_caught(tmp_path: Path) -> None:
    """One watcher drops one delivered event (--debug-watch-drop): the watch verdict must
    fail, naming the missing revision (a gap, or a revision missing one of its changes),
    while every other check of the run still passes."""
    opts = RunOptions(
        fault="none", duration=8.0, clients=6, seed=7, report_dir=tmp_path / "drop",
        debug_watch_drop=True,
    )  # fmt: skip
    result = run_scenario(opts)
    verdicts = {v.name: v for v in result.verdicts}
    watch = verdicts["watch"]
    assert watch.status == "FAIL" and result.status == "failed", watch
    assert re.search(r"^1 violations \((1 gap|1 content)\)", watch.value), watch
    assert result.watch[0].startswith(("[gap] w0", "[content] w0")), result.watch
    others = [v for v in result.verdicts if v.status == "FAIL" and v.name != "watch"]
    assert not others, others
    assert "## Watch" in (tmp_path / "drop" / "report.md").read_text()


def test_mutation_unfenced_lock_writes_are_caught(tmp_path: Path) -> None:
    """The lockers write without their fence (--debug-lock-unfenced): a paused holder's
    write lands after its successor's, and the lock verdict must fail (order / stale),
    while every other check of the run still passes."""
    opts = RunOptions(
        fault="none", duration=12.0, clients=6, seed=7, report_dir=tmp_path / "unfenced",
        debug_lock_unfenced=True,
    )  # fmt: skip
    result = run_scenario(opts)
    verdicts = {v.name: v for v in result.verdicts}
    locks = verdicts["locks"]
    assert locks.status == "FAIL" and result.status == "failed", locks
    assert re.search(r"^\d+ violations \(.*\d+ (order|stale)", locks.value), locks
    assert result.lock_stats["stale_ok"] >= 1 and result.lock_stats["writes_refused"] == 0
    assert result.locks[0].startswith(("[order]", "[stale]")), result.locks
    others = [v for v in result.verdicts if v.status == "FAIL" and v.name != "locks"]
    assert not others, others
    assert "## Locks" in (tmp_path / "unfenced" / "report.md").read_text()


def _chaos(*args: str) -> list[str]:
    return [sys.executable, "-m", "statekeeper.chaos", *args]


def test_mutation_unsafe_reads_are_caught_under_a_leader_partition(tmp_path: Path) -> None:
    """Nodes that serve 'linearizable' reads from local state (no raft barrier) must be
    caught: pinned readers keep reading from the isolated old leader while the majority
    elects a new one and writes on. Through the CLI: exit code 1 and a FAIL verdict."""
    _skip_unless_runnable("partition-leader")
    report = tmp_path / "mutation"
    proc = subprocess.run(
        _chaos(
            "run",
            "--fault",
            "partition-leader",
            "--duration",
            "12",
            "--clients",
            "12",
            "--debug-unsafe-reads",
            "--report-dir",
            str(report),
        ),  # fmt: skip
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"^linearizable\s+FAIL\s+NO: violation", proc.stdout, re.M), proc.stdout[
        -3000:
    ]
    assert re.search(r"^store revision never went back\s+FAIL", proc.stdout, re.M)
    # the pinned readers' stream reads from the old leader are stale too
    assert re.search(r"^event streams\s+FAIL\s+\d+ violations \(\d+ stale", proc.stdout, re.M)
    md = (report / "report.md").read_text()
    assert "NOT LINEARIZABLE" in md and "longest legal order found" in md
    assert (report / "timeline.png").exists()


def _iptables_chain_exists(pid: int) -> bool:
    from statekeeper.chaos.partition import CHAIN_PREFIX

    r = subprocess.run(["iptables", "-w", "-S", f"{CHAIN_PREFIX}{pid}"], capture_output=True, text=True)
    return r.returncode == 0 and "-A" in r.stdout


def _processes_using(path: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if path.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def test_ctrl_c_during_a_partition_heals_and_stops_everything(tmp_path: Path) -> None:
    _skip_unless_runnable("partition-leader")
    proc = subprocess.Popen(
        _chaos(
            "run",
            "--fault",
            "partition-leader",
            "--duration",
            "30",
            "--clients",
            "4",
            "--report-dir",
            str(tmp_path / "interrupted"),
        ),  # fmt: skip
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Ctrl-C as a terminal delivers it: a test run started in the background of a
        # non-interactive shell inherits SIGINT ignored, and Python then never raises
        # KeyboardInterrupt (this test failed so: the run went on to the end, exit 0).
        preexec_fn=_default_sigint,
    )
    work = None
    lines = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        for line in proc.stdout:
            lines.append(line)
            if "cluster data:" in line:
                work = line.split("cluster data:", 1)[1].strip()
            if ">> fault start" in line:
                break
            assert time.monotonic() < deadline, "".join(lines)
        assert work and _iptables_chain_exists(proc.pid), "".join(lines)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(lines) + out
    assert "interrupted" in out
    assert not _iptables_chain_exists(proc.pid), "iptables rules left behind"
    time.sleep(0.5)
    assert _processes_using(work) == [], f"node processes left running for {work}"
    assert not os.path.exists(work), "the cluster's temp dir was not removed"
