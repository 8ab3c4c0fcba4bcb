"""Metrics over a chaos history, verdicts, and the reports (Markdown + PNG).

Everything here is pure (a history and a few timestamps in, numbers and text out) except
the ``write_*`` functions, so it is unit-tested without a cluster. matplotlib is imported
only when a PNG is drawn (Agg backend: no display needed).

Times: the history's ``time.monotonic_ns()``; metrics are in seconds relative to ``t0``
(the workload's start).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.chaos.history import Op
from statekeeper.chaos.report_png import write_png
from statekeeper.chaos.stats import percentile

__all__ = [
    "Metrics",
    "Regression",
    "RunResult",
    "Verdict",
    "compute_metrics",
    "first_ok_after",
    "format_verdicts",
    "render_markdown",
    "render_summary",
    "revision_regressions",
    "write_png",
    "write_run_report",
    "write_summary",
]

WRITE_FS = frozenset({"put", "delete", "cas", "txn"})
NS = 1_000_000_000

PASS, FAIL, UNKNOWN, ALLOWED, INFO = "PASS", "FAIL", "UNKNOWN", "ALLOWED", "INFO"


# ------------------------------------------------------------------------------ metrics


def _is_write(op: Op) -> bool:
    return op.f in WRITE_FS


def _is_linearizable_read(op: Op) -> bool:
    return (
        op.f == "get"
        and op.input.get("consistency") != "serializable"
        and not op.input.get("revision")
    )


def first_ok_after(ops: Iterable[Op], since_ns: int, kind: str) -> float | None:
    """Seconds from ``since_ns`` to the completion of the first ok op of ``kind``
    ("write" or "read") invoked at or after it; None if there is none.

    Ops invoked before ``since_ns`` do not count: one that was already in flight may
    have been served by the cluster as it was before the fault.
    """
    pick = _is_write if kind == "write" else _is_linearizable_read
    best: float | None = None
    for op in ops:
        if op.outcome == "ok" and op.invoke_time >= since_ns and pick(op):
            if best is None or op.complete_time < best:
                best = op.complete_time
    return None if best is None else (best - since_ns) / NS


def longest_gap(ops: Iterable[Op], start_ns: int, end_ns: int, kind: str = "write") -> float:
    """Longest time (s) within [start, end] with no ok op of ``kind`` completing."""
    pick = _is_write if kind == "write" else _is_linearizable_read
    times = sorted(
        op.complete_time
        for op in ops
        if op.outcome == "ok" and pick(op) and start_ns <= op.complete_time <= end_ns
    )
    edges = [start_ns, *times, end_ns]
    return max((b - a for a, b in zip(edges, edges[1:], strict=False)), default=0) / NS


@dataclass(frozen=True)
class Regression:
    """An op answered at a store revision older than one already acknowledged."""

    op: Op
    revision: int  # what the op reported
    floor: int  # the highest revision of an ok op that completed before it was invoked
    floor_op: Op


def revision_regressions(
    ops: Iterable[Op], exclude_processes: Iterable[int] = ()
) -> list[Regression]:
    """Ok ops that report a store revision below one acknowledged before they started.

    Every answer of a linearizable op carries the store revision it was served at (a
    write: its own; a failed cas / a get / a delete of nothing: the current one). Once an
    op completed at revision R, any op invoked later must see at least R; seeing less
    means the store went back in time (committed entries lost, or a stale read). Cheap,
    and it catches a lost state even when later writes overwrote every key. A replayed
    write (``replayed``: an idempotent re-send answered with the stored result) reports
    its first application's revision, an old one by design: it says nothing here.
    """
    skip = set(exclude_processes)
    relevant = [
        o
        for o in ops
        if o.outcome == "ok"
        and o.process not in skip
        and not o.output.get("replayed")
        and isinstance(o.output.get("revision"), int)
        and (o.f != "get" or _is_linearizable_read(o))
        and o.f in ("get", "put", "delete", "cas", "txn")
    ]
    by_complete = sorted(relevant, key=lambda o: o.complete_time)
    found: list[Regression] = []
    best: Op | None = None
    i = 0
    for op in sorted(relevant, key=lambda o: o.invoke_time):
        while i < len(by_complete) and by_complete[i].complete_time < op.invoke_time:
            done = by_complete[i]
            if best is None or done.output["revision"] > best.output["revision"]:
                best = done
            i += 1
        if best is not None and op.output["revision"] < best.output["revision"]:
            found.append(Regression(op, op.output["revision"], best.output["revision"], best))
    return found


@dataclass
class Metrics:
    """What the runs report about availability and performance (seconds, ms)."""

    total: int = 0
    ok: int = 0
    fail: int = 0
    info: int = 0
    by_op: dict[str, dict[str, int]] = field(default_factory=dict)
    duration_s: float = 0.0
    throughput_ok: float = 0.0  # ok ops per second over the whole run
    error_rate: float = 0.0  # (fail + info) / total
    latency_ms: dict[str, float | None] = field(default_factory=dict)  # ok ops
    rto_write_s: float | None = None  # fault start -> first ok write invoked after it
    rto_read_s: float | None = None
    recovery_write_s: float | None = None  # heal -> first ok write invoked after it
    recovery_read_s: float | None = None
    longest_write_gap_s: float | None = None  # from fault start to the end of the run
    fault_error_rate: float | None = None  # error rate of ops completing in the window
    # One row per second: t (s since t0), ok, fail, info, p50_ms, p99_ms.
    timeline: list[dict[str, Any]] = field(default_factory=list)


def compute_metrics(
    ops: Sequence[Op],
    *,
    t0: int,
    end: int,
    fault_start: int | None = None,
    heal: int | None = None,
    exclude_processes: Iterable[int] = (),
) -> Metrics:
    """Throughput, errors, latency, RTO and the per-second timeline of a history.

    ``exclude_processes``: processes that are not the workload (the final reads).
    """
    skip = set(exclude_processes)
    ops = [o for o in ops if o.process not in skip]
    m = Metrics()
    m.duration_s = max(0.0, (end - t0) / NS)
    seconds = max(1, math.ceil(m.duration_s))
    rows = [{"t": s, "ok": 0, "fail": 0, "info": 0, "_lat": []} for s in range(seconds)]
    lat_all: list[float] = []
    window_total = window_err = 0
    for op in ops:
        m.total += 1
        setattr(m, op.outcome, getattr(m, op.outcome) + 1)
        per = m.by_op.setdefault(op.f, {"ok": 0, "fail": 0, "info": 0})
        per[op.outcome] += 1
        done = op.end_time if op.end_time is not None else op.invoke_time
        b = min(max(0, int((done - t0) // NS)), seconds - 1)
        rows[b][op.outcome] += 1
        if op.outcome == "ok":
            ms = (op.complete_time - op.invoke_time) / 1e6
            lat_all.append(ms)
            rows[b]["_lat"].append(ms)
        if fault_start is not None and heal is not None and fault_start <= done <= heal:
            window_total += 1
            window_err += op.outcome != "ok"
    for row in rows:
        # The last second is usually partial: its width turns counts into rates.
        row["width"] = (
            round(min(1.0, m.duration_s - row["t"]), 3) if m.duration_s > row["t"] else 1.0
        )
        lat = row.pop("_lat")
        row["p50_ms"] = percentile(lat, 50)
        row["p99_ms"] = percentile(lat, 99)
    m.timeline = rows
    m.throughput_ok = m.ok / m.duration_s if m.duration_s else 0.0
    m.error_rate = (m.fail + m.info) / m.total if m.total else 0.0
    m.latency_ms = {
        "p50": percentile(lat_all, 50),
        "p90": percentile(lat_all, 90),
        "p99": percentile(lat_all, 99),
        "max": max(lat_all) if lat_all else None,
    }
    if fault_start is not None:
        m.rto_write_s = first_ok_after(ops, fault_start, "write")
        m.rto_read_s = first_ok_after(ops, fault_start, "read")
        m.longest_write_gap_s = longest_gap(ops, fault_start, end, "write")
    if heal is not None:
        m.recovery_write_s = first_ok_after(ops, heal, "write")
        m.recovery_read_s = first_ok_after(ops, heal, "read")
    if window_total:
        m.fault_error_rate = window_err / window_total
    return m


# ------------------------------------------------------------------------------ results


@dataclass
class Verdict:
    """One checked property: ``status`` is PASS / FAIL / UNKNOWN / ALLOWED / INFO."""

    name: str
    status: str
    value: str
    detail: str = ""


@dataclass
class RunResult:
    """Everything a run found; rendered by ``render_markdown`` and the CLI."""

    fault: str
    description: str = ""
    status: str = "passed"  # passed | failed | unknown | skipped | error
    reason: str = ""  # why skipped / error
    options: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    elapsed_s: float = 0.0
    # (seconds since the workload started, what happened)
    events: list[tuple[float, str]] = field(default_factory=list)
    fault_window: tuple[float, float] | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    metrics: Metrics | None = None
    checker_report: str = ""
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    # chaos.convergence: reads contradicting the acknowledged writes; replica differences.
    divergent: list[str] = field(default_factory=list)
    replica_diffs: list[str] = field(default_factory=list)
    crashes: dict[str, int] = field(default_factory=dict)  # failpoint -> exits (status 86)
    # chaos.checker.streams: its violations and counts (appends ok / failed / unknown ...).
    streams: list[str] = field(default_factory=list)
    stream_stats: dict[str, int] = field(default_factory=dict)
    # chaos.checker.watch: its violations and counts (events, progress frames, resumes ...).
    watch: list[str] = field(default_factory=list)
    watch_stats: dict[str, Any] = field(default_factory=dict)
    # chaos.checker.locks: its violations and counts (acquisitions, fenced writes ...).
    locks: list[str] = field(default_factory=list)
    lock_stats: dict[str, Any] = field(default_factory=dict)
    # chaos.checker.crdt: its violations and counts (adds, syncs, the store's value ...).
    crdt: list[str] = field(default_factory=list)
    crdt_stats: dict[str, Any] = field(default_factory=dict)
    error_codes: dict[str, int] = field(default_factory=dict)
    report_dir: str | None = None
    files: dict[str, str] = field(default_factory=dict)  # label -> path relative to report_dir

    def verdict(self, name: str) -> Verdict | None:
        return next((v for v in self.verdicts if v.name == name), None)

    def settle(self) -> None:
        """Set ``status`` from the verdicts (unless skipped / error)."""
        if self.status in ("skipped", "error"):
            return
        statuses = {v.status for v in self.verdicts}
        if FAIL in statuses:
            self.status = "failed"
        elif UNKNOWN in statuses:
            self.status = "unknown"
        else:
            self.status = "passed"

    @property
    def ok(self) -> bool:
        """Not failed (skipped and unknown count as not failed)."""
        return self.status not in ("failed", "error")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} s"


def _fmt_ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} ms"


def _fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def format_verdicts(result: RunResult) -> str:
    """An aligned text table of the verdicts, for the console."""
    rows = [("CHECK", "VERDICT", "VALUE")] + [(v.name, v.status, v.value) for v in result.verdicts]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return "\n".join(f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows)


def md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render_markdown(result: RunResult) -> str:
    """The run's report.md."""
    r, m, o = result, result.metrics, result.options
    out = [f"# Chaos run: `{r.fault}` - {r.status.upper()}", ""]
    if r.description:
        out += [r.description, ""]
    if r.reason:
        out += [f"**{r.status}:** {r.reason}", ""]
    opts = ", ".join(f"{k}={v}" for k, v in o.items())
    out += [
        f"- started: {r.started_at}, took {r.elapsed_s:.0f} s",
        f"- options: {opts}",
    ]
    if r.fault_window:
        out.append(
            f"- fault window: {r.fault_window[0]:.1f} s .. {r.fault_window[1]:.1f} s "
            "after the workload started"
        )
    out.append("")
    if r.verdicts:
        out += ["## Verdicts", "", "| check | verdict | value | detail |", "|---|---|---|---|"]
        for v in r.verdicts:
            out.append(
                f"| {v.name} | **{v.status}** | {md_escape(v.value)} | {md_escape(v.detail)} |"
            )
        out.append("")
    if m is not None:
        lat = m.latency_ms
        out += [
            "## Metrics",
            "",
            "| metric | value |",
            "|---|---|",
            f"| ops (ok / fail / unknown) | {m.total} ({m.ok} / {m.fail} / {m.info}) |",
            f"| throughput (ok ops/s) | {m.throughput_ok:.1f} |",
            f"| error rate (fail+unknown) | {_fmt_pct(m.error_rate)} |",
            f"| error rate during the fault | {_fmt_pct(m.fault_error_rate)} |",
            f"| latency p50 / p90 / p99 / max (ok ops) | {_fmt_ms(lat.get('p50'))} / "
            f"{_fmt_ms(lat.get('p90'))} / {_fmt_ms(lat.get('p99'))} / {_fmt_ms(lat.get('max'))} |",
            f"| RTO: fault start -> first ok write | {_fmt_s(m.rto_write_s)} |",
            f"| RTO: fault start -> first ok linearizable read | {_fmt_s(m.rto_read_s)} |",
            f"| heal -> first ok write / read | {_fmt_s(m.recovery_write_s)} / "
            f"{_fmt_s(m.recovery_read_s)} |",
            f"| longest time without an ok write (from fault start) | "
            f"{_fmt_s(m.longest_write_gap_s)} |",
            "",
            "| op | ok | fail | unknown |",
            "|---|---|---|---|",
        ]
        for f, c in sorted(m.by_op.items()):
            out.append(f"| {f} | {c['ok']} | {c['fail']} | {c['info']} |")
        out.append("")
    if r.files.get("timeline", "").endswith(".png"):
        out += ["## Timeline", "", f"![timeline]({r.files['timeline']})", ""]
    if r.events:
        out += ["## Events", "", "| t (s) | event |", "|---|---|"]
        out += [f"| {t:.2f} | {md_escape(e)} |" for t, e in r.events]
        out.append("")
    if r.error_codes:
        out += ["## Client-side errors (per attempt)", "", "| code | count |", "|---|---|"]
        out += [f"| {k} | {v} |" for k, v in sorted(r.error_codes.items(), key=lambda kv: -kv[1])]
        out.append("")
    if r.checker_report:
        out += ["## Linearizability", "", "```", r.checker_report, "```", ""]
    for title, items in (
        ("Lost acknowledged writes", r.lost),
        ("Duplicate applications", r.duplicates),
        ("Store revision went back", r.regressions),
        ("Reads contradicting the acknowledged writes", r.divergent),
        ("Replicas differ", r.replica_diffs),
        ("Event streams", r.streams),
        ("Watch", r.watch),
        ("Locks", r.locks),
        ("CRDTs", r.crdt),
        ("Failpoint crashes", [f"{k}: {v}" for k, v in r.crashes.items()]),
    ):
        if items:
            out += [f"## {title}", ""] + [f"- {md_escape(x)}" for x in items] + [""]
    if r.files:
        out += ["## Files", ""] + [f"- {k}: `{v}`" for k, v in r.files.items()] + [""]
    return "\n".join(out)


def write_run_report(result: RunResult, report_dir: str | os.PathLike[str]) -> Path:
    """Write report.md, timeline.png and result.json into ``report_dir``; returns report.md."""
    d = Path(report_dir)
    d.mkdir(parents=True, exist_ok=True)
    result.report_dir = str(d)
    if result.metrics is not None:
        try:
            write_png(result, d / "timeline.png")
            result.files["timeline"] = "timeline.png"
        except ImportError as e:  # the report is still useful without the picture
            result.files["timeline"] = f"(not drawn: {e}; pip install matplotlib)"
    result.files["result"] = "result.json"
    md = d / "report.md"
    result.files.setdefault("report", "report.md")
    md.write_text(render_markdown(result))
    (d / "result.json").write_text(json.dumps(result.to_json(), indent=2, default=str))
    return md


# ------------------------------------------------------------------------------ suite


_SUMMARY_COLUMNS = (
    "scenario",
    "result",
    "linearizable",
    "lost",
    "dup",
    "watch",
    "locks",
    "RTO write",
    "RTO read",
    "ok ops",
    "errors",
    "p99",
)


def _summary_row(r: RunResult) -> list[str]:
    def cell(name: str) -> str:
        v = r.verdict(name)
        return "-" if v is None else (v.status if v.status != PASS else "ok")

    m = r.metrics
    lost = r.verdict("lost acknowledged writes")
    dup = r.verdict("duplicate applications")
    return [
        r.fault,
        r.status.upper()
        + (f" ({r.reason})" if r.reason and r.status in ("skipped", "error") else ""),
        cell("linearizable"),
        "-" if lost is None else lost.value,
        "-" if dup is None else dup.value,
        cell("watch"),
        cell("locks"),
        _fmt_s(m.rto_write_s) if m else "-",
        _fmt_s(m.rto_read_s) if m else "-",
        str(m.ok) if m else "-",
        _fmt_pct(m.error_rate) if m else "-",
        _fmt_ms(m.latency_ms.get("p99")) if m else "-",
    ]


def render_summary(
    results: Sequence[RunResult], *, markdown: bool = True, base: Path | None = None
) -> str:
    """The suite's table (Markdown, or aligned text for the console)."""
    rows = [_summary_row(r) for r in results]
    if markdown:
        out = [
            "| " + " | ".join(_SUMMARY_COLUMNS) + " | report |",
            "|" + "---|" * (len(_SUMMARY_COLUMNS) + 1),
        ]
        for r, row in zip(results, rows, strict=True):
            link = "-"
            if r.report_dir:
                target = Path(r.report_dir) / "report.md"
                if base is not None:
                    try:
                        target = target.relative_to(base)
                    except ValueError:
                        pass
                link = f"[report]({target})"
            out.append("| " + " | ".join(md_escape(c) for c in row) + f" | {link} |")
        return "\n".join(out)
    table = [list(_SUMMARY_COLUMNS), *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(_SUMMARY_COLUMNS))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table
    )


def write_summary(
    results: Sequence[RunResult], path: str | os.PathLike[str], *, title: str = "Chaos suite"
) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    passed = sum(r.status == "passed" for r in results)
    failed = sum(not r.ok for r in results)
    skipped = sum(r.status == "skipped" for r in results)
    text = [
        f"# {title}",
        "",
        f"{len(results)} scenarios: {passed} passed, {failed} failed, {skipped} skipped, "
        f"{len(results) - passed - failed - skipped} unknown.",
        "",
        render_summary(results, markdown=True, base=p.parent),
        "",
    ]
    p.write_text("\n".join(text))
    return p
