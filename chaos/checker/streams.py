"""Event streams: what a chaos history's stream appends and reads must satisfy.

Pure (no network): the history (``chaos.history``: ``append`` / ``read_stream`` ops) plus
the final content of every stream, read once the faults healed and the workload stopped
(``final``: stream -> ``[(seq, id, data), ...]``), and optionally each node's own copy
(``replicas``: node -> stream -> events, read at the final read's revision).

A *logical append* is the set of history ops appending the same events (same stream,
same event ids, in order): the first attempt and its re-sends (``retry_of``), which reuse
the ids so that the store's event-id dedup answers ``duplicate`` instead of appending
them again. Its *appliers* are the ops that may have applied it: ``info`` (unknown) ops
and ``ok`` ops that appended at least one event (not all ``duplicate``). A ``fail`` op
(``expectation_failed`` 409, another 4xx, or never submitted) applied nothing.

The invariants, one rule name each (``StreamViolation.rule``):

``gap``
    the final stream's seqs are exactly 1..N, consecutive.
``duplicate``
    an event id appears at most once in the final stream.
``phantom``
    every final event was appended by some op (its id was invoked, with this data).
``lost``
    every acknowledged (ok) append's events are in the final stream at the seqs its
    answer gave, with their data; a ``duplicate`` answer's seq is where that id is; the
    answer is consistent (new seqs consecutive from ``first_seq``, ``last_seq`` the last).
``expectation``
    an ok append with ``expect=N`` that appended events got first new seq N+1; a 409's
    ``last_seq`` differs from its ``expect``, and none of its events were already in the
    stream at or below that ``last_seq`` (the dedup must have answered ``duplicate``).
``failed``
    events of a logical append whose ops all failed (or that only duplicate answers
    claim) never appear: something nobody applied is in the stream.
``unknown``
    a logical append appears all or nothing, its events contiguous, in their order.
``reader``
    every read is a prefix of the final stream: each event it saw is the final event at
    that seq (same id, same data), and it saw exactly the seqs its request covers given
    the ``last_seq`` it was served (a forward read from s: s..last_seq).
``order``
    appends follow commit order: if logical append A was acknowledged (or seen by a
    reader) before any applier of B was invoked, A's seqs are below B's.
``stale``
    every ``last_seq`` observed (reads, 409s, ok answers; all linearizable) is at least
    the last seq of every append acknowledged before the observing op was invoked, and
    below the seqs of every append whose appliers were all invoked after it completed.
``replica``
    every node's copy of a stream (read at the final read's revision) equals the final.

``check_streams`` returns a :class:`StreamsResult` with the violations and the counts
the chaos report shows. Message texts name ops as ``#id`` (history op ids).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statekeeper.chaos.checker import stream_rules as rules
from statekeeper.chaos.checker.stream_model import (
    Append,
    Ev,
    StreamIndex,
    StreamViolation,
    appended,
)
from statekeeper.chaos.history import HistoryError, Op

__all__ = [
    "LOSS_RULES",
    "RULES",
    "Append",
    "Ev",
    "StreamViolation",
    "StreamsResult",
    "appended",
    "check_streams",
]


RULES = (
    "gap",
    "duplicate",
    "phantom",
    "lost",
    "expectation",
    "failed",
    "unknown",
    "reader",
    "order",
    "stale",
    "replica",
)
# Rules a loss of acknowledged entries (power loss with fsync=never: allowed by the
# contract) can break; the others hold even then.
LOSS_RULES = frozenset({"lost", "expectation", "reader", "order", "stale"})


@dataclass
class StreamsResult:
    violations: list[StreamViolation] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    unread: list[str] = field(default_factory=list)  # streams written but not read at the end

    @property
    def ok(self) -> bool:
        return not self.violations and not self.unread

    def summary(self) -> str:
        s = self.stats
        return (
            f"{s.get('streams', 0)} streams, {s.get('events', 0)} events; appends "
            f"{s.get('appends_ok', 0)} ok / {s.get('appends_failed', 0)} failed "
            f"({s.get('expectation_failed', 0)} expectation) / {s.get('appends_unknown', 0)} "
            f"unknown, {s.get('retries', 0)} re-sends, {s.get('duplicates_answered', 0)} "
            f"answered duplicate; {s.get('reads_checked', 0)} reads checked"
            + (f", {s['replicas_checked']} replica copies" if s.get("replicas_checked") else "")
        )


def _event_ids(op: Op) -> tuple[tuple[str, ...], dict[str, Any]]:
    events = op.input.get("events")
    if not isinstance(events, list) or not events:
        raise HistoryError(f"append #{op.id} records no events")
    ids, data = [], {}
    for e in events:
        if not isinstance(e, dict) or not isinstance(e.get("id"), str):
            raise HistoryError(f"append #{op.id}: every event needs a str id: {e!r}")
        ids.append(e["id"])
        data[e["id"]] = e.get("data")
    return tuple(ids), data


def group_appends(ops: Iterable[Op]) -> dict[str, list[Append]]:
    """stream -> its logical appends (ops with the same stream and event ids), in order
    of their first invoke. Raises HistoryError when two different logical appends share
    an event id, or re-sends change an event's data (a workload bug: the checks assume
    ids are unique per logical append)."""
    groups: dict[tuple[str, tuple[str, ...]], Append] = {}
    owner: dict[tuple[str, str], tuple[str, ...]] = {}
    for op in sorted(ops, key=lambda o: o.invoke_time):
        if op.f != "append":
            continue
        stream = op.input.get("stream")
        if not isinstance(stream, str):
            raise HistoryError(f"append #{op.id} names no stream")
        ids, data = _event_ids(op)
        g = groups.get((stream, ids))
        if g is None:
            for i in ids:
                if owner.setdefault((stream, i), ids) != ids:
                    raise HistoryError(f"append #{op.id}: event id {i!r} used by two appends")
            g = groups[(stream, ids)] = Append(stream, ids, data)
        elif g.data != data:
            raise HistoryError(f"append #{op.id} re-sends {ids[0]!r}.. with other data")
        g.ops.append(op)
    out: dict[str, list[Append]] = defaultdict(list)
    for g in groups.values():
        out[g.stream].append(g)
    return dict(out)


def stream_reads(ops: Iterable[Op]) -> dict[str, list[Op]]:
    """stream -> its ok read_stream ops."""
    out: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.f == "read_stream" and op.outcome == "ok" and isinstance(op.input.get("stream"), str):
            out[op.input["stream"]].append(op)
    return dict(out)


def _stats(appends: Mapping[str, list[Append]], reads: Mapping[str, list[Op]]) -> dict[str, int]:
    ops = [o for gs in appends.values() for g in gs for o in g.ops]
    return {
        "streams": len(set(appends) | set(reads)),
        "appends": len(ops),
        "appends_ok": sum(o.outcome == "ok" for o in ops),
        "appends_failed": sum(o.outcome == "fail" for o in ops),
        "appends_unknown": sum(o.outcome == "info" for o in ops),
        "expectation_failed": sum(o.output.get("error") == "expectation_failed" for o in ops),
        "retries": sum("retry_of" in o.input for o in ops),
        "duplicates_answered": sum(
            o.outcome == "ok" and any(o.output.get("duplicates") or []) for o in ops
        ),
        "reads_checked": sum(len(rs) for rs in reads.values()),
    }


def check_streams(
    history: Iterable[Op],
    final: Mapping[str, Sequence[Ev]],
    *,
    replicas: Mapping[str, Mapping[str, Sequence[Ev] | None]] | None = None,
) -> StreamsResult:
    """Check every stream the history touched against its final content (module
    docstring: the rules). A stream the history wrote but ``final`` lacks is reported in
    ``unread`` (nothing can be checked about it) and makes the result not ok."""
    ops = list(history)
    appends, reads = group_appends(ops), stream_reads(ops)
    result = StreamsResult(stats=_stats(appends, reads))
    result.stats["events"] = sum(len(evs) for evs in final.values())
    for name in sorted(set(appends) | set(reads)):
        if name not in final:
            result.unread.append(name)
            continue
        idx = StreamIndex(name, final[name])
        groups = appends.get(name, [])
        for g in groups:
            g.seqs = [s for s in (idx.seq_of(i) for i in g.ids) if s is not None]
        found = result.violations
        found += rules.sequence(idx)
        found += rules.phantoms(idx, groups)
        for g in groups:
            found += rules.acknowledged(idx, g)
            found += rules.expectations(idx, g)
            found += rules.presence(idx, g)
        found += rules.readers(idx, reads.get(name, []))
        found += rules.commit_order(name, groups, reads.get(name, []))
        found += rules.stale_observations(name, groups, reads.get(name, []))
    if replicas:
        found = rules.replica_copies(final, replicas)
        result.violations += found
        result.stats["replicas_checked"] = sum(
            1 for copies in replicas.values() for s in final if copies is not None and s in copies
        )
    return result
