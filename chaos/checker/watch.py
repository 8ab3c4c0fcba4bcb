"""The chaos watch check: what the watchers of a run saw must be exactly the committed
changes of the watched prefix.

Pure (no network). Inputs:

- the history (``chaos.history``): the kv workload's writes, with the revision of every
  acknowledged one;
- each watcher's log (:class:`WatcherLog`, recorded by ``chaos.watch_workload``): in
  order, its connections (the first and every resume: the node and the revision it
  resumed from), the frames the nodes sent (before the client drops anything), the
  events and progress frames the client delivered to the application, and how the watch
  ended if it did not last the run;
- the *truth* (:class:`WatchTruth`, read by ``chaos.watch_reads`` after the run): the
  change history of the prefix read back from the cluster itself, once the faults healed,
  every node was ready and the replicas had converged: a fresh watch from the watchers'
  start revision up to the final revision (the revision of a linearizable read of the
  prefix after the workload stopped), the prefix's range at the start, at the end and at
  a sample of revisions in between.

Why the truth can be trusted: it is read from a healthy cluster after convergence, by
one reader that starts from scratch (the catch-up path over the stored change log, not
the live path the watchers mostly ran on) and is not disturbed by any fault; the replayed
changes must rebuild the ranges read through the MVCC history (another read path); and it
is itself cross-checked against the history's acknowledged writes, so a server bug that
drops a change from both the watch and the storage is still caught (``acknowledged``).

The rules, one name each (``WatchViolation.rule``):

``order``
    delivered event revisions never go down.
``duplicate``
    no revision is delivered in two frames, and no key twice at one revision.
``progress``
    a progress revision is never below the position already delivered (the last event's
    or progress revision), and no event comes at or below a progress revision delivered
    before it (progress promised everything up to it had been sent).
``frames``
    every connection resumes from the last delivered position + 1, and the node's frames
    on it ascend from there (a frame the node sends twice is a protocol violation even
    though the client drops it).
``gap``
    every revision at which the truth changed the prefix, from the watcher's start up to
    how far it got, is delivered.
``content``
    a delivered revision carries exactly the truth's changes at it: same keys, types and
    values.
``phantom``
    nothing extra: every delivered revision is one at which the prefix changed, and every
    change (the truth's, and a watcher's where the truth does not reach) was written by
    an op of the history that may have applied it (acknowledged at that revision, or of
    unknown outcome; never one that failed).
``acknowledged``
    every acknowledged write to the prefix is in the truth at its revision; where the
    truth does not have it, every watcher that covered its revision must have delivered
    it (if they did not either, the change is lost from storage and watch alike).
``incomplete``
    every watcher lasted the run (no error ended it) and reached the final revision.
``truth``
    the truth is consistent: its changes replayed onto the range at the start give the
    range at every sampled revision and at the end; no delete of a key that did not exist.

``check_watch`` returns a :class:`WatchResult`: the violations, and the counts the report
shows (events and progress frames delivered, resumes, ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from statekeeper.chaos.checker import watch_rules as rules
from statekeeper.chaos.checker.watch_model import (
    Change,
    WatcherLog,
    WatchTruth,
    WatchViolation,
    Write,
)
from statekeeper.chaos.history import Op
from statekeeper.chaos.stats import percentile

__all__ = [
    "LOSS_RULES",
    "RULES",
    "Change",
    "WatchResult",
    "WatchTruth",
    "WatchViolation",
    "WatcherLog",
    "Write",
    "check_watch",
    "prefix_writes",
]


RULES = (
    "order",
    "duplicate",
    "progress",
    "frames",
    "gap",
    "content",
    "phantom",
    "acknowledged",
    "incomplete",
    "truth",
)
# Rules a loss of acknowledged entries (power loss with fsync=never: allowed by the
# contract) can break: the cluster may re-commit a revision a watcher already saw with
# other changes, or end below where a watcher got. order / duplicate / progress / frames
# hold even then (the client and each node keep them on their own).
LOSS_RULES = frozenset({"gap", "content", "phantom", "acknowledged", "incomplete", "truth"})


@dataclass
class WatchResult:
    violations: list[WatchViolation] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    unread: bool = False  # the truth could not be read: only the history checks ran

    @property
    def ok(self) -> bool:
        return not self.violations and not self.unread

    def summary(self) -> str:
        s = self.stats
        lag = (
            f"; delivered {s['lag_p50_ms']:.1f} / {s['lag_p99_ms']:.1f} ms (p50 / p99) after "
            "the write's acknowledgement"
            if s.get("lag_p50_ms") is not None
            else ""
        )
        return (
            f"{s.get('watchers', 0)} watchers: {s.get('events', 0)} events, "
            f"{s.get('progress', 0)} progress frames, {s.get('resumes', 0)} resumes "
            f"(nodes used: {s.get('nodes', '-')}); truth: {s.get('truth_revisions', 0)} "
            f"revisions up to {s.get('final_revision', '-')}, "
            f"{s.get('acknowledged', 0)} acknowledged changes checked" + lag
        )


def prefix_writes(ops: Iterable[Op], prefix: str) -> list[Write]:
    """Every change a write op of the history asked for on a key starting with
    ``prefix``: puts (put, cas, a txn's success puts) and deletes (prefix deletes are not
    recorded by the workload)."""
    out: list[Write] = []
    for op in ops:
        if op.f in ("put", "cas") and op.key is not None:
            out.append(Write(op, op.key, "put", op.input.get("value")))
        elif op.f == "delete" and op.key is not None:
            out.append(Write(op, op.key, "delete", None))
        elif op.f == "txn":
            for step in op.input.get("success") or []:
                if step.get("f") in ("put", "delete"):
                    value = step.get("value") if step["f"] == "put" else None
                    out.append(Write(op, step["key"], step["f"], value))
    return [w for w in out if isinstance(w.key, str) and w.key.startswith(prefix)]


def _stats(
    watchers: Sequence[WatcherLog], truth: WatchTruth | None, writes: Sequence[Write]
) -> dict[str, Any]:
    nodes: dict[str, set[str]] = {}
    for w in watchers:
        nodes[w.name] = {r[2] for r in w.of("connect") if r[2]}
    acked = [x for x in writes if x.acknowledged and x.revision is not None]
    lags = _lags(watchers, acked)
    return {
        "watchers": len(watchers),
        "events": sum(len(w.of("event")) for w in watchers),
        "progress": sum(len(w.of("progress")) for w in watchers),
        "resumes": sum(w.resumes for w in watchers),
        "nodes": "; ".join(f"{n}: {', '.join(sorted(s)) or '-'}" for n, s in nodes.items()),
        "final_revision": truth.final_revision if truth else None,
        "truth_revisions": len(truth.changes) if truth and truth.changes is not None else 0,
        "truth_changes": (
            sum(len(c) for c in truth.changes.values())
            if truth and truth.changes is not None
            else 0
        ),
        "acknowledged": len(acked),
        "lag_p50_ms": percentile(lags, 50),
        "lag_p99_ms": percentile(lags, 99),
    }


def _lags(watchers: Sequence[WatcherLog], acked: Sequence[Write]) -> list[float]:
    """Milliseconds from each acknowledged change's acknowledgement to its delivery, per
    watcher (negative: delivered before the writer heard back)."""
    done = {(w.revision, w.key): w.op.complete_time for w in acked}
    out = []
    for w in watchers:
        for r in w.of("event"):
            t = done.get((r[2], r[3]))
            if t is not None:
                out.append((r[1] - t) / 1e6)
    return out


def check_watch(
    history: Iterable[Op],
    watchers: Sequence[WatcherLog],
    truth: WatchTruth | None,
    prefix: str,
) -> WatchResult:
    """Check every watcher against the truth and the history (module docstring: the
    rules). ``truth`` None (or without changes): the truth could not be read; the
    history checks still run, the result is not ok (``unread``)."""
    writes = prefix_writes(history, prefix)
    result = WatchResult(stats=_stats(watchers, truth, writes))
    found = result.violations
    if truth is None or truth.changes is None:
        result.unread = True
        truth = None
    else:
        found += rules.truth_consistent(truth)
    explain = rules.Explainer(writes)
    if truth is not None:
        found += explain.truth(truth)
    for w in watchers:
        found += rules.order(w)
        found += rules.duplicates(w)
        found += rules.progress(w)
        found += rules.frames(w)
        if truth is not None:
            found += rules.gaps(w, truth)
            found += rules.content(w, truth)
            found += rules.incomplete(w, truth.final_revision)
        else:
            found += rules.incomplete(w, None)
        found += explain.delivered(w, truth)
    found += rules.acknowledged(writes, watchers, truth)
    return result
