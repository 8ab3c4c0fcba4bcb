"""Metrics (RTO, timeline, latency) and report rendering from a synthetic history."""

from __future__ import annotations

import io
import json

import pytest

from statekeeper.chaos.history import HistoryWriter, parse_events
from statekeeper.chaos.report import (
    FAIL,
    PASS,
    Metrics,
    RunResult,
    Verdict,
    compute_metrics,
    first_ok_after,
    format_verdicts,
    longest_gap,
    render_markdown,
    render_summary,
    write_run_report,
    write_summary,
)

S = 1_000_000_000  # ns per second
MS = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def synthetic_history():
    """10 s of ops: a write + a read every 100 ms, nothing succeeds between 4.0 s and
    5.5 s (fault from 4.0 s; writes fail, reads time out), healed at 6.0 s."""
    clock = Clock()
    buf = io.StringIO()
    h = HistoryWriter(buf, clock=clock)
    n = 0
    for tick in range(100):
        t = tick * 100 * MS
        clock.now = t
        w = h.invoke(0, "put", "k", value=f"0-{n}", idempotency_key=f"i{n}")
        r = h.invoke(1, "get", "k")
        clock.now = t + 20 * MS
        if 4 * S <= t < 5.5 * S:
            h.fail(w, error="unavailable")
            h.info(r, error="client_timeout")
        else:
            h.ok(w, revision=n + 1)
            h.ok(r, value=f"0-{n}", revision=n + 1, mod_revision=n + 1)
        n += 1
    h.flush()
    events = [json.loads(line) for line in buf.getvalue().splitlines()]
    return parse_events(events)


def test_rto_counts_only_ops_invoked_after_the_mark() -> None:
    ops = synthetic_history()
    # First ok write invoked at or after 4.0 s is the one at 5.5 s, done at 5.52 s.
    assert first_ok_after(ops, 4 * S, "write") == pytest.approx(1.52)
    assert first_ok_after(ops, 4 * S, "read") == pytest.approx(1.52)
    # An op in flight at the mark does not count: mark at 3.99 s -> the 4.0 s op fails.
    assert first_ok_after(ops, 4 * S - 10 * MS, "write") == pytest.approx(1.53)
    assert first_ok_after(ops, 11 * S, "write") is None


def test_longest_gap_without_ok_writes() -> None:
    ops = synthetic_history()
    # Last ok write before the fault completes at 3.92 s, next one at 5.52 s.
    assert longest_gap(ops, 3 * S, 10 * S) == pytest.approx(1.6)


def test_compute_metrics_counts_timeline_and_rto() -> None:
    ops = synthetic_history()
    m = compute_metrics(ops, t0=0, end=10 * S, fault_start=4 * S, heal=6 * S)
    assert (m.total, m.ok, m.fail, m.info) == (200, 170, 15, 15)
    assert m.by_op["put"] == {"ok": 85, "fail": 15, "info": 0}
    assert m.by_op["get"] == {"ok": 85, "fail": 0, "info": 15}
    assert m.error_rate == pytest.approx(30 / 200)
    assert m.throughput_ok == pytest.approx(17.0)
    assert m.rto_write_s == pytest.approx(1.52)
    assert m.recovery_write_s == pytest.approx(0.02)
    assert m.latency_ms["p50"] == pytest.approx(20.0)
    assert len(m.timeline) == 10
    assert m.timeline[0] == {
        "t": 0,
        "ok": 20,
        "fail": 0,
        "info": 0,
        "width": 1.0,
        "p50_ms": 20.0,
        "p99_ms": 20.0,
    }
    assert m.timeline[4]["ok"] == 0 and m.timeline[4]["fail"] == 10 and m.timeline[4]["info"] == 10
    assert m.timeline[4]["p50_ms"] is None
    # Window 4.0 .. 6.0 s: 40 ops complete in it, 30 of them not ok.
    assert m.fault_error_rate == pytest.approx(30 / 40)


def test_excluded_processes_do_not_count() -> None:
    ops = synthetic_history()
    m = compute_metrics(ops, t0=0, end=10 * S, exclude_processes=[1])
    assert m.total == 100 and m.by_op.keys() == {"put"}
    assert m.rto_write_s is None  # no fault given


def _result(tmp_fault: str = "kill-leader") -> RunResult:
    ops = synthetic_history()
    r = RunResult(fault=tmp_fault, description="SIGKILL the leader", options={"seed": 7})
    r.metrics = compute_metrics(ops, t0=0, end=10 * S, fault_start=4 * S, heal=6 * S)
    r.fault_window = (4.0, 6.0)
    r.events = [(4.0, "fault start: SIGKILL node-0"), (6.0, "healed")]
    r.verdicts = [
        Verdict("linearizable", PASS, "yes (200 ops)"),
        Verdict("lost acknowledged writes", FAIL, "1", "k: lost | really"),
        Verdict("duplicate applications", PASS, "0"),
    ]
    r.checker_report = "linearizability: True"
    r.lost = ["k: acknowledged write #3 lost"]
    return r


def test_settle_and_verdict_table() -> None:
    r = _result()
    r.settle()
    assert r.status == "failed" and not r.ok
    text = format_verdicts(r)
    assert text.splitlines()[0].split() == ["CHECK", "VERDICT", "VALUE"]
    assert "lost acknowledged writes  FAIL" in text
    r.verdicts[1] = Verdict("lost acknowledged writes", PASS, "0")
    r.settle()
    assert r.status == "passed" and r.ok


def test_markdown_has_verdicts_metrics_and_escapes_pipes() -> None:
    r = _result()
    r.settle()
    md = render_markdown(r)
    assert md.startswith("# Chaos run: `kill-leader` - FAILED")
    assert "| lost acknowledged writes | **FAIL** | 1 | k: lost \\| really |" in md
    assert "| RTO: fault start -> first ok write | 1.52 s |" in md
    assert "| put | 85 | 15 | 0 |" in md
    assert "## Lost acknowledged writes" in md


def test_write_run_report_writes_markdown_png_and_json(tmp_path) -> None:
    r = _result()
    r.settle()
    md = write_run_report(r, tmp_path / "run")
    assert md.read_text().count("![timeline](timeline.png)") == 1
    png = (tmp_path / "run" / "timeline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    data = json.loads((tmp_path / "run" / "result.json").read_text())
    assert data["fault"] == "kill-leader" and data["status"] == "failed"
    assert data["metrics"]["ok"] == 170


def test_skipped_run_report_has_no_png(tmp_path) -> None:
    r = RunResult(fault="power-loss", status="skipped", reason="no /dev/fuse")
    write_run_report(r, tmp_path)
    assert not (tmp_path / "timeline.png").exists()
    assert "**skipped:** no /dev/fuse" in (tmp_path / "report.md").read_text()


def test_suite_summary(tmp_path) -> None:
    a = _result("kill-leader")
    a.settle()
    a.report_dir = str(tmp_path / "kill-leader")
    b = RunResult(fault="power-loss", status="skipped", reason="no /dev/fuse")
    c = RunResult(fault="none", metrics=Metrics(ok=5))
    c.verdicts = [Verdict("linearizable", PASS, "yes")]
    c.settle()
    text = render_summary([a, b, c], markdown=False)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["scenario", "result", "linearizable"]
    assert "SKIPPED (no /dev/fuse)" in text
    path = write_summary([a, b, c], tmp_path / "summary.md")
    md = path.read_text()
    assert "3 scenarios: 1 passed, 1 failed, 1 skipped, 0 unknown." in md
    assert "[report](kill-leader/report.md)" in md


def _op_events(events):
    return parse_events(events)


def test_revision_regressions_flag_a_store_that_went_back_in_time() -> None:
    from statekeeper.chaos.report import revision_regressions

    ev = [
        {"type": "invoke", "process": 0, "id": 1, "time": 0, "f": "put", "key": "k", "value": "a"},
        {"type": "ok", "process": 0, "id": 1, "time": 10, "revision": 50},
        # Concurrent with #1: may legitimately see an older revision.
        {"type": "invoke", "process": 1, "id": 2, "time": 5, "f": "get", "key": "k"},
        {"type": "ok", "process": 1, "id": 2, "time": 12, "value": None, "revision": 49},
        # Started after #1 completed: must see >= 50.
        {"type": "invoke", "process": 1, "id": 3, "time": 20, "f": "get", "key": "k"},
        {"type": "ok", "process": 1, "id": 3, "time": 25, "value": None, "revision": 3},
        # A serializable read may be stale by contract; unknown ops carry nothing.
        {
            "type": "invoke",
            "process": 2,
            "id": 4,
            "time": 30,
            "f": "get",
            "key": "k",
            "consistency": "serializable",
        },
        {"type": "ok", "process": 2, "id": 4, "time": 31, "value": None, "revision": 1},
        {"type": "invoke", "process": 2, "id": 5, "time": 40, "f": "put", "key": "k", "value": "b"},
        {"type": "ok", "process": 2, "id": 5, "time": 45, "revision": 51},
    ]
    regs = revision_regressions(_op_events(ev))
    assert [(g.op.id, g.revision, g.floor, g.floor_op.id) for g in regs] == [(3, 3, 50, 1)]
    assert revision_regressions(_op_events(ev), exclude_processes=[1]) == []
    assert revision_regressions(synthetic_history()) == []


def test_a_replayed_resend_reports_its_first_revision_and_is_no_regression() -> None:
    from statekeeper.chaos.report import revision_regressions

    put = {"f": "put", "key": "idem-1", "value": "1-1", "idempotency_key": "x"}
    ev = [
        {"type": "invoke", "process": 0, "id": 1, "time": 0, **put},
        {"type": "ok", "process": 0, "id": 1, "time": 10, "revision": 7},
        {"type": "invoke", "process": 1, "id": 2, "time": 20, "f": "put", "key": "k", "value": "b"},
        {"type": "ok", "process": 1, "id": 2, "time": 25, "revision": 50},
        # The same write re-sent later: the store replays revision 7, as it must.
        {"type": "invoke", "process": 0, "id": 3, "time": 30, **put, "resend_of": 1},
        {"type": "ok", "process": 0, "id": 3, "time": 35, "revision": 7, "replayed": True},
    ]
    assert revision_regressions(_op_events(ev)) == []
    ev[-1] = {"type": "ok", "process": 0, "id": 3, "time": 35, "revision": 7}  # not a replay
    assert [g.op.id for g in revision_regressions(_op_events(ev))] == [3]
