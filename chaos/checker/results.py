"""What ``check`` returns (``Result``, one ``PartitionResult`` per partition) and the
rendering of a counterexample: the failing sub-history one op per line
(``render_history``), then the longest legal order the search found (``explain``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from statekeeper.chaos.checker.model import Prepared
from statekeeper.chaos.checker.search import bind_steps, reduce_and_search
from statekeeper.chaos.checker.values import UNKNOWN, Verdict, fmt_value
from statekeeper.chaos.history import Op

__all__ = ["PartitionResult", "Result", "explain", "render_history"]


def _describe(op: Op) -> str:
    inp, out, ok = op.input, op.output, op.outcome == "ok"
    if op.f == "put":
        return f"put({op.key}, {fmt_value(inp.get('value'))})"
    if op.f == "delete":
        return f"delete({op.key})"
    if op.f == "get":
        return f"get({op.key}) -> {fmt_value(out.get('value')) if ok else '?'}"
    if op.f == "cas":
        head = f"cas({op.key}, {fmt_value(inp.get('expect'))} -> {fmt_value(inp.get('value'))})"
        if not ok:
            return f"{head} -> ?"
        if out.get("succeeded"):
            return f"{head} -> succeeded"
        seen = f" (current {fmt_value(out['value'])})" if "value" in out else ""
        return f"{head} -> failed{seen}"
    if op.f == "txn":

        def branch(name: str) -> str:
            parts = []
            for b in inp.get(name) or ():
                bf = b.get("f") or b.get("op")
                arg = f", {fmt_value(b.get('value'))}" if bf == "put" else ""
                parts.append(f"{bf}({b.get('key')}{arg})")
            return "; ".join(parts) or "-"

        cond = " && ".join(
            f"{c['key']} {c.get('op', '==')} {fmt_value(c.get('value'))}" for c in inp.get("compare") or ()
        )
        text = f"txn(if {cond or 'true'} then {branch('success')} else {branch('failure')})"
        if not ok:
            return f"{text} -> ?"
        res = out.get("results")
        shown = f" results {[fmt_value(r) for r in res]}" if res else ""
        return f"{text} -> {'succeeded' if out.get('succeeded') else 'failed'}{shown}"
    return f"{op.f}({', '.join(op.keys)})"


def render_history(ops: Iterable[Op], *, t0: int | None = None) -> str:
    """One line per op, by invoke time: process, id, op, [invoke .. complete] ms, outcome.

    Times are milliseconds relative to ``t0`` (default: the first invoke shown).
    """
    ops = sorted(ops, key=lambda o: (o.invoke_time, str(o.id)))
    if not ops:
        return "(no ops)"
    base = min(o.invoke_time for o in ops) if t0 is None else t0
    lines = []
    for op in ops:
        start = (op.invoke_time - base) / 1e6
        if op.complete_time == math.inf:
            end = "?"
            note = "info (unknown)"
            if op.end_time is not None:
                note += f", client gave up at {(op.end_time - base) / 1e6:.3f} ms"
        else:
            end = f"{(op.complete_time - base) / 1e6:.3f}"
            note = op.outcome
        rev = op.output.get("revision")
        if rev is not None and op.outcome == "ok":
            note += f" rev={rev}"
        lines.append(
            f"  p{op.process:<3} #{str(op.id):<8} {_describe(op):<48} "
            f"{start:>11.3f} .. {end:>11} ms  {note}"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------ results


@dataclass
class PartitionResult:
    """Verdict for one partition (one key, or keys joined by txns)."""

    keys: tuple[str, ...]
    valid: Verdict
    ops: int  # ops the search considered (after dropping / pruning)
    elapsed: float  # seconds spent searching (minimization not included)
    configurations: int  # distinct (linearized set, state) pairs explored
    reason: str = ""  # why "unknown"
    counterexample: list[Op] | None = None  # minimal failing sub-history (valid is False)
    minimal: bool = False  # the counterexample is 1-minimal (shrinking finished in time)
    explanation: str = ""  # human-readable rendering of the counterexample
    minimize_elapsed: float = 0.0  # seconds spent shrinking and explaining a failure

    @property
    def total_elapsed(self) -> float:
        """Seconds spent on this partition: search, then shrinking if it failed."""
        return self.elapsed + self.minimize_elapsed


@dataclass
class Result:
    """Overall verdict: False if any partition fails, else "unknown" if any timed out."""

    valid: Verdict
    per_key: dict[str, PartitionResult]
    partitions: list[PartitionResult]
    stats: dict[str, Any]
    elapsed: float = 0.0  # seconds for the whole check (preparation, search, shrinking)

    @property
    def group_elapsed(self) -> dict[tuple[str, ...], float]:
        """Seconds per key group (partition), search plus shrinking."""
        return {p.keys: p.total_elapsed for p in self.partitions}

    def timing(self) -> str:
        """One line for the chaos report: ``checker: N groups, X s (slowest ...)``."""
        n = len(self.partitions)
        line = f"checker: {n} group{'' if n == 1 else 's'}, {self.elapsed:.2f} s"
        slow = sorted(self.partitions, key=lambda p: -p.total_elapsed)[:3]
        if slow:
            shown = "; ".join(f"{','.join(p.keys)} {p.total_elapsed:.2f} s" for p in slow)
            line += f" (slowest: {shown})"
        return line

    def report(self) -> str:
        """Text for the chaos report: the verdict, the timing, every failing partition."""
        s = self.stats
        lines = [
            f"linearizability: {self.valid} ({s['checked']} ops in {s['partitions']} "
            f"partition(s) checked in {s['elapsed']:.2f} s; {s['dropped_failed']} failed and "
            f"{s['dropped_unknown_reads']} unknown reads dropped, "
            f"{s['promoted_observed_info_writes']} observed unknown writes promoted, "
            f"{s['pruned_unobserved_info_writes']} unobserved unknown writes pruned)",
            self.timing(),
        ]
        for part in self.partitions:
            if part.valid is False:
                lines.append(part.explanation)
            elif part.valid == UNKNOWN:
                lines.append(
                    f"keys {', '.join(part.keys)}: unknown ({part.reason}; {part.ops} ops, "
                    f"{part.configurations} configurations)"
                )
        return "\n".join(lines)


def explain(
    keys: tuple[str, ...],
    total_ops: int,
    ops: list[Prepared],
    init: Any,
    initial: Mapping[str, Any],
    minimal: bool,
    t0: int,
    max_configurations: int,
    time_limit: float = 5.0,
) -> str:
    single = len(keys) == 1
    deadline = time.monotonic() + time_limit
    out, reduced = reduce_and_search(ops, init, initial, deadline, max_configurations, track=True)
    kind = "a minimal" if minimal else "a reduced (shrinking ran out of time)"
    lines = [
        f"NOT LINEARIZABLE: key{'s' if not single else ''} {', '.join(keys)} - "
        f"{kind} failing sub-history of {len(ops)} of {total_ops} ops "
        f"(times in ms since the history's first invoke):",
        render_history([p.op for p in ops], t0=t0),
    ]
    if out.verdict is False:
        steps = bind_steps(reduced, list(initial))
        state = init
        for i in out.best:
            state = steps[i](state)
        placed = {reduced[i].op.id for i in out.best}
        order = ", ".join(f"#{reduced[i].op.id}" for i in out.best) or "nothing"
        shown = (
            fmt_value(state)
            if single
            else ", ".join(f"{k}={fmt_value(v)}" for k, v in zip(keys, state, strict=True))
        )
        left = [f"#{p.op.id}" for p in reduced if p.required and p.op.id not in placed]
        lines.append(
            f"  longest legal order found: {order}; then {keys[0] if single else 'state'}"
            f" = {shown}, and none of {', '.join(left)} can come next"
        )
    return "\n".join(lines)
