"""The soak report: the nemesis' schedule, per-fault availability and verdicts, added to
the runner's report.md, with a timeline PNG (split from chaos/nemesis.py, which injects)."""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.chaos.nemesis import NS, Nemesis

__all__ = ["nemesis_verdicts", "render_nemesis", "write_nemesis_png", "write_soak_report"]

@dataclass
class _Availability:
    """Per-step numbers from the history (ok ops only; times in the history's clock)."""

    first_write_s: float | None  # fault start -> first ok write invoked at or after it
    first_read_s: float | None
    ops: int  # ops that completed while the fault was held
    errors: int  # of which failed or unknown


class _Index:
    """Finds, for any time, the first ok op of a kind invoked at or after it (bisect)."""

    def __init__(self, ops: Sequence[Any]) -> None:
        from statekeeper.chaos.report import WRITE_FS

        def build(pick: Callable[[Any], bool]) -> tuple[list[int], list[int]]:
            sel = sorted(
                (o.invoke_time, o.complete_time) for o in ops if o.outcome == "ok" and pick(o)
            )
            inv = [a for a, _ in sel]
            best = [0] * len(sel)
            low = math.inf
            for i in range(len(sel) - 1, -1, -1):
                low = min(low, sel[i][1])
                best[i] = int(low)
            return inv, best

        self.writes = build(lambda o: o.f in WRITE_FS)
        self.reads = build(
            lambda o: (
                o.f == "get"
                and o.input.get("consistency") != "serializable"
                and not o.input.get("revision")
            )
        )
        ends = sorted(
            (o.end_time if o.end_time is not None else o.invoke_time, o.outcome != "ok")
            for o in ops
        )
        self.end_times = [t for t, _ in ends]
        self.err_prefix = [0]
        for _, bad in ends:
            self.err_prefix.append(self.err_prefix[-1] + bad)

    @staticmethod
    def _first(index: tuple[list[int], list[int]], since: int) -> float | None:
        inv, best = index
        i = bisect.bisect_left(inv, since)
        return None if i >= len(inv) else (best[i] - since) / NS

    def availability(self, start: int, stop: int) -> _Availability:
        a = bisect.bisect_left(self.end_times, start)
        b = bisect.bisect_right(self.end_times, stop)
        return _Availability(
            self._first(self.writes, start),
            self._first(self.reads, start),
            b - a,
            self.err_prefix[b] - self.err_prefix[a],
        )


def _t0(nemesis: Nemesis, result: Any, ops: Sequence[Any]) -> int:
    """The runner's t0 (workload start) in the monotonic clock."""
    if result.fault_window and nemesis.injected_ns is not None:
        return nemesis.injected_ns - int(result.fault_window[0] * NS)
    return min((o.invoke_time for o in ops), default=nemesis.injected_ns or 0)


def _fs(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def nemesis_verdicts(nemesis: Nemesis) -> list[Any]:
    from statekeeper.chaos.report import FAIL, INFO, PASS, Verdict

    recs = nemesis.records
    crashed = nemesis.crashes
    not_ready = [f"#{r.step.index} {r.name}: {r.not_ready}" for r in recs if r.not_ready]
    heal_failed = [f"#{r.step.index} {r.name}: {r.heal_error}" for r in recs if r.heal_error]
    start_failed = [r for r in recs if r.start_error]
    kinds = sorted({r.name for r in recs})
    out = [
        Verdict(
            "nemesis: no node crashed by itself",
            FAIL if crashed else PASS,
            str(len(crashed)),
            "; ".join(crashed),
        ),
        Verdict(
            "nemesis: every heal worked",
            FAIL if heal_failed else PASS,
            f"{len(recs) - len(heal_failed)}/{len(recs)}",
            "; ".join(heal_failed),
        ),
        Verdict(
            "nemesis: all nodes ready after every heal",
            FAIL if not_ready else PASS,
            f"{len(recs) - len(not_ready)}/{len(recs)}",
            "; ".join(not_ready) or f"within {nemesis.cfg.recover_timeout:.0f} s",
        ),
        Verdict(
            "nemesis: faults injected",
            INFO,
            f"{len(recs) - len(start_failed)} of {len(recs)} ({len(kinds)} kinds)",
            (
                f"injection failed: {', '.join(f'#{r.step.index} {r.name}' for r in start_failed)}"
                if start_failed
                else ""
            ),
        ),
    ]
    if nemesis.error is not None:
        out.append(Verdict("nemesis: thread", FAIL, "failed", repr(nemesis.error)))
    return out


def render_nemesis(
    nemesis: Nemesis, t0: int, index: _Index | None, checker_time: str = "", png: str = ""
) -> str:
    """The report's nemesis section (Markdown)."""
    cfg = nemesis.cfg
    out = [
        "## Nemesis",
        "",
        f"- {cfg.describe()}",
        f"- schedule seed {cfg.seed}: the same seed gives the same sequence of faults, windows "
        "and quiet times",
    ]
    by_reason: dict[str, list[str]] = {}
    for n, why in cfg.excluded.items():
        by_reason.setdefault(why, []).append(f"`{n}`")
    for why, names in by_reason.items():
        out.append(f"- not used: {', '.join(names)}: {why}")
    if checker_time:
        out.append(f"- linearizability checker: {checker_time}")
    out += [
        "- times in seconds since the workload started; a fault is held from when it took "
        "effect until its heal begins, then healed (a killed node restarted and live)",
    ]
    out += [
        "",
        "| # | fault | start (s) | healed (s) | held (s) | first ok write / read after start (s) "
        "| errors until healed | all ready after heal (s) | what it did |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    from statekeeper.chaos.report import md_escape

    for r in nemesis.records:
        start = r.start_ns or r.begin_ns
        rel_start = (start - t0) / NS
        rel_stop = None if r.stop_ns is None else (r.stop_ns - t0) / NS
        held = None if r.heal_ns is None else (r.heal_ns - start) / NS
        avail = "-"
        errs = "-"
        if index is not None and r.stop_ns is not None:
            a = index.availability(start, r.stop_ns)
            avail = f"{_fs(a.first_write_s)} / {_fs(a.first_read_s)}"
            errs = f"{a.errors}/{a.ops}" + (f" ({100 * a.errors / a.ops:.0f}%)" if a.ops else "")
        what = r.description or ""
        if r.start_error:
            what = f"INJECTION FAILED: {r.start_error}"
        if r.heal_error:
            what += f"; HEAL FAILED: {r.heal_error}"
        if r.crashed:
            what += f"; CRASHED: {', '.join(r.crashed)}"
        ready = _fs(r.ready_s) if not r.not_ready else f"NOT READY ({r.not_ready})"
        out.append(
            f"| {r.step.index} | {r.name} | {rel_start:.2f} | {_fs(rel_stop)} | {_fs(held)} | "
            f"{avail} | {errs} | {ready} | {md_escape(what)} |"
        )
    counts: dict[str, int] = {}
    for r in nemesis.records:
        counts[r.name] = counts.get(r.name, 0) + 1
    if counts:
        out += ["", "Injected: " + ", ".join(f"{n} x{c}" for n, c in sorted(counts.items()))]
    if png:
        out += ["", f"![nemesis timeline]({png})"]
    out.append("")
    return "\n".join(out)


_KIND_COLORS = {"process": "#d9534f", "partition": "#337ab7", "proxy": "#8e44ad"}


def write_nemesis_png(result: Any, nemesis: Nemesis, t0: int, path: Path) -> None:
    """Ok / failed ops per second (binned for long soaks), each fault's window shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from statekeeper.chaos.faults import FAULTS

    m = result.metrics
    rows = m.timeline
    width = max(1, math.ceil(len(rows) / 300))  # at most ~300 bars
    ts, ok, bad, p99 = [], [], [], []
    for i in range(0, len(rows), width):
        chunk = rows[i : i + width]
        w = sum(max(r.get("width", 1.0), 0.05) for r in chunk)
        ts.append(chunk[0]["t"])
        ok.append(sum(r["ok"] for r in chunk) / w)
        bad.append(sum(r["fail"] + r["info"] for r in chunk) / w)
        lat = [r["p99_ms"] for r in chunk if r["p99_ms"] is not None]
        p99.append(max(lat) if lat else float("nan"))
    fig, (ax1, ax2) = plt.subplots(
        2, 1, figsize=(13, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    ax1.bar(ts, ok, width=width, align="edge", color="#4c9f50", label="ok", zorder=2)
    ax1.bar(ts, bad, width=width, align="edge", bottom=ok, color="#f0ad4e",
            label="fail + unknown", zorder=2)  # fmt: skip
    ax2.plot([t + width / 2 for t in ts], p99, color="#8e44ad", label="p99 (max in bin)")
    if any(not math.isnan(x) and x > 0 for x in p99):
        ax2.set_yscale("log")
    top = max([a + b for a, b in zip(ok, bad, strict=True)] or [1.0])
    kinds_seen: set[str] = set()
    for r in nemesis.records:
        if r.stop_ns is None:
            continue
        a, b = ((r.start_ns or r.begin_ns) - t0) / NS, (r.stop_ns - t0) / NS
        cls = FAULTS.get(r.name)
        kind = cls.kind if cls is not None else "process"
        kinds_seen.add(kind)
        color = _KIND_COLORS.get(kind, "#999999")
        for ax in (ax1, ax2):
            ax.axvspan(a, b, color=color, alpha=0.18, zorder=0)
        ax1.text(a, top * 1.01, f"{r.step.index} {r.name}", rotation=60, fontsize=6,
                 va="bottom", ha="left")  # fmt: skip
    ax1.set_ylim(0, top * 1.35)
    ax1.set_ylabel("ops completed / s")
    ax1.set_title(f"chaos soak (nemesis, {len(nemesis.records)} faults) - {result.status.upper()}")
    ax2.set_ylabel("latency of ok ops (ms)")
    ax2.set_xlabel(f"seconds since the workload started (bins of {width} s)")
    handles = [Patch(color=_KIND_COLORS.get(k, "#999999"), alpha=0.3, label=f"{k} fault")
               for k in sorted(kinds_seen)]  # fmt: skip
    for ax, extra in ((ax1, handles), (ax2, [])):
        ax.grid(True, alpha=0.3, zorder=1)
        h, _ = ax.get_legend_handles_labels()
        ax.legend(handles=h + extra, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                  borderaxespad=0)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_soak_report(result: Any, nemesis: Nemesis | None, report_dir: Path) -> Path:
    """Add the nemesis' verdicts, schedule table, PNG and nemesis.json to the run's report
    (rewrites report.md / result.json / timeline.png); returns report.md."""
    from statekeeper.chaos.history import read_history
    from statekeeper.chaos.report import write_run_report

    report_dir = Path(report_dir)
    md = report_dir / "report.md"
    if nemesis is None:  # skipped before the cluster was built, or failed before start
        return md
    result.verdicts += nemesis_verdicts(nemesis)
    result.settle()
    history = report_dir / "history.jsonl"
    ops: list[Any] = []
    with contextlib.suppress(FileNotFoundError):
        ops = read_history(history)
    index = _Index([o for o in ops if o.process != result.options.get("clients")]) if ops else None
    t0 = _t0(nemesis, result, ops)
    png = ""
    if result.metrics is not None and nemesis.records:
        try:
            write_nemesis_png(result, nemesis, t0, report_dir / "nemesis.png")
            png = "nemesis.png"
            result.files["nemesis timeline"] = png
        except ImportError as e:
            result.files["nemesis timeline"] = f"(not drawn: {e})"
    result.files["nemesis schedule"] = "nemesis.json"
    lin = result.verdict("linearizable")
    checker_time = ""
    if lin is not None:
        checker_time = f"{lin.value}; {lin.detail}" if lin.detail else lin.value
    for line in (result.checker_report or "").splitlines():  # per-partition times, if given
        if line.startswith("checker:"):
            checker_time += f" ({line.strip()})"
    (report_dir / "nemesis.json").write_text(
        json.dumps(
            {
                "config": dataclasses.asdict(nemesis.cfg),
                "steps": [
                    {
                        **dataclasses.asdict(r.step),
                        "held_window": r.window,
                        "start_s": round(((r.start_ns or r.begin_ns) - t0) / NS, 3),
                        "heal_s": None if r.heal_ns is None else round((r.heal_ns - t0) / NS, 3),
                        "stop_s": None if r.stop_ns is None else round((r.stop_ns - t0) / NS, 3),
                        "description": r.description,
                        "start_error": r.start_error,
                        "heal_error": r.heal_error,
                        "ready_s": r.ready_s,
                        "not_ready": r.not_ready,
                        "crashed": r.crashed,
                    }
                    for r in nemesis.records
                ],
            },
            indent=2,
        )
    )
    write_run_report(result, report_dir)
    section = render_nemesis(nemesis, t0, index, checker_time, png)
    text = md.read_text()
    for anchor in ("\n## Timeline", "\n## Events", "\n## Files"):
        at = text.find(anchor)
        if at >= 0:
            text = text[: at + 1] + section + "\n" + text[at + 1 :]
            break
    else:
        text += "\n" + section
    md.write_text(text)
    return md
