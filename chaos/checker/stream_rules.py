"""The rules of :mod:`chaos.checker.streams`, one function per invariant (see that
module's docstring for what each one states and why it must hold). Each returns the
violations it found, as :class:`~chaos.checker.streams.StreamViolation`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from statekeeper.chaos.checker.stream_model import (
    Append,
    Ev,
    StreamIndex,
    StreamViolation,
    appended,
)
from statekeeper.chaos.history import Op

__all__ = [
    "acknowledged",
    "commit_order",
    "expectations",
    "phantoms",
    "presence",
    "readers",
    "replica_copies",
    "sequence",
    "stale_observations",
]


def _v(rule: str, stream: str, msg: str, *ops: Op) -> StreamViolation:
    return StreamViolation(rule, stream, msg, tuple(o.id for o in ops))


def fmt_seqs(seqs: Sequence[int], limit: int = 8) -> str:
    """[1, 2, 3, 7] -> "1..3, 7" (at most ``limit`` runs)."""
    runs: list[list[int]] = []
    for s in seqs:
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    parts = [f"{a}" if a == b else f"{a}..{b}" for a, b in runs[:limit]]
    return ", ".join(parts) + (", ..." if len(runs) > limit else "") if parts else "none"


def _where(idx: StreamIndex, event_id: Any) -> str:
    seq = idx.seq_of(event_id)
    return "absent from the final stream" if seq is None else f"at seq {seq}"


# ----------------------------------------------------------------- the final stream


def sequence(idx: StreamIndex) -> list[StreamViolation]:
    """``gap``: seqs 1..N consecutive, ascending, each once; ``duplicate``: ids unique."""
    found = []
    seqs = [ev[0] for ev in idx.events]
    if seqs != list(range(1, len(seqs) + 1)):
        missing = sorted(set(range(1, max(seqs, default=0) + 1)) - set(seqs))
        twice = sorted({s for s in seqs if seqs.count(s) > 1}) if len(set(seqs)) < len(seqs) else []
        what = [f"missing seqs {fmt_seqs(missing)}"] if missing else []
        what += [f"seqs {fmt_seqs(twice)} more than once"] if twice else []
        if not what:
            what = ["seqs out of order"]
        found.append(_v("gap", idx.name, f"final seqs are not 1..{len(seqs)}: " + "; ".join(what)))
    for event_id, at in idx.by_id.items():
        if len(at) > 1:
            found.append(
                _v(
                    "duplicate",
                    idx.name,
                    f"event {event_id} appears at seqs {fmt_seqs(sorted(at))}",
                )
            )
    return found


def phantoms(idx: StreamIndex, groups: Sequence[Append]) -> list[StreamViolation]:
    """``phantom``: every final event was invoked by some append, with this data."""
    data: dict[str, Any] = {i: g.data[i] for g in groups for i in g.ids}
    found = []
    for seq, event_id, d in idx.events:
        if event_id is None:
            found.append(_v("phantom", idx.name, f"seq {seq} has an event without an id"))
        elif event_id not in data:
            found.append(_v("phantom", idx.name, f"seq {seq}: event {event_id} was never appended"))
        elif data[event_id] != d:
            found.append(
                _v(
                    "phantom",
                    idx.name,
                    f"seq {seq}: event {event_id} holds {d!r}, appended as {data[event_id]!r}",
                )
            )
    return found


# --------------------------------------------------------------------- the appends


def _answer_shape(g: Append, op: Op) -> str | None:
    """What is inconsistent in an ok append's answer, or None."""
    seqs, dups = op.output.get("seqs"), op.output.get("duplicates")
    if not isinstance(seqs, list) or not isinstance(dups, list):
        return "answer without seqs / duplicates"
    if len(seqs) != len(g.ids) or len(dups) != len(g.ids):
        return f"answer names {len(seqs)} seqs for {len(g.ids)} events"
    new = [s for s, d in zip(seqs, dups, strict=True) if not d]
    first, last = op.output.get("first_seq"), op.output.get("last_seq")
    if new and (new != list(range(new[0], new[0] + len(new))) or first != new[0]):
        return f"new events at seqs {fmt_seqs(new)} with first_seq {first}"
    if new and last != new[-1]:
        return f"last_seq {last} but its last new event is at seq {new[-1]}"
    if not new and first is not None:
        return f"every event a duplicate but first_seq {first}"
    return None


def acknowledged(idx: StreamIndex, g: Append) -> list[StreamViolation]:
    """``lost``: each ok answer's events sit at the seqs it gave, with their data."""
    found = []
    for op in g.ops:
        if op.outcome != "ok":
            continue
        bad = _answer_shape(g, op)
        if bad is not None:
            found.append(_v("lost", g.stream, f"#{op.id} {g.label()}: {bad}", op))
            continue
        for event_id, seq in zip(g.ids, op.output["seqs"], strict=True):
            ev = idx.by_seq.get(seq)
            if ev is None or ev[1] != event_id:
                there = "nothing" if ev is None else f"event {ev[1]}"
                found.append(
                    _v(
                        "lost",
                        g.stream,
                        f"#{op.id} acknowledged {event_id} at seq {seq}, but the final stream "
                        f"has {there} there ({event_id} is {_where(idx, event_id)})",
                        op,
                    )
                )
            elif ev[2] != g.data[event_id]:
                found.append(
                    _v(
                        "lost",
                        g.stream,
                        f"#{op.id}: seq {seq} holds {ev[2]!r}, not the "
                        f"acknowledged {g.data[event_id]!r}",
                        op,
                    )
                )
    return found


def expectations(idx: StreamIndex, g: Append) -> list[StreamViolation]:
    """``expectation``: ok with expect=N appended at N+1; a 409 was a real mismatch and
    none of its events were already stored at or below the ``last_seq`` it reported."""
    found = []
    for op in g.ops:
        expect = op.input.get("expect")
        if op.outcome == "ok" and isinstance(expect, int) and appended(op):
            first = op.output.get("first_seq")
            if first != expect + 1:
                found.append(
                    _v(
                        "expectation",
                        g.stream,
                        f"#{op.id} expected last_seq {expect} but "
                        f"appended at first seq {first} (should be {expect + 1})",
                        op,
                    )
                )
        if op.outcome != "fail" or op.output.get("error") != "expectation_failed":
            continue
        last = op.output.get("last_seq")
        if not isinstance(expect, int) or last == expect:
            found.append(
                _v(
                    "expectation",
                    g.stream,
                    f"#{op.id} got expectation_failed with expect "
                    f"{expect!r} and last_seq {last!r}: no mismatch",
                    op,
                )
            )
        stored = [(i, idx.seq_of(i)) for i in g.ids]
        early = [(i, s) for i, s in stored if s is not None and isinstance(last, int) and s <= last]
        if early:
            i, s = early[0]
            found.append(
                _v(
                    "expectation",
                    g.stream,
                    f"#{op.id} got expectation_failed (last_seq {last}) "
                    f"but its event {i} was already stored at seq {s}: it should have been "
                    "answered as a duplicate",
                    op,
                )
            )
    return found


def presence(idx: StreamIndex, g: Append) -> list[StreamViolation]:
    """``failed``: present only if some op may have applied it; ``unknown``: all or none
    of its events, contiguous, in order."""
    if not g.present:
        return []
    found = []
    if not g.appliers:
        why = ", ".join(f"#{o.id} {o.outcome} {o.output.get('error', 'duplicate')}" for o in g.ops)
        found.append(
            _v(
                "failed",
                g.stream,
                f"{g.label()} appears at seqs {fmt_seqs(sorted(g.seqs))} "
                f"though no op applied it ({why})",
                *g.ops,
            )
        )
    n = len(g.ids)
    if len(g.seqs) != n:
        found.append(
            _v(
                "unknown",
                g.stream,
                f"{g.label()}: only {len(g.seqs)} of its {n} events appear "
                f"(seqs {fmt_seqs(sorted(g.seqs))})",
                *g.ops,
            )
        )
    elif g.seqs != list(range(g.seqs[0], g.seqs[0] + n)):
        found.append(
            _v(
                "unknown",
                g.stream,
                f"{g.label()}: its events are at seqs {g.seqs}, not contiguous in their order",
                *g.ops,
            )
        )
    return found


# ----------------------------------------------------------------------- the reads


def _covered(op: Op, last: int) -> list[int]:
    """The seqs a read served with ``last_seq`` must return, in its order."""
    start = op.input.get("start")
    if op.input.get("direction", "forward") == "backward":
        top = last if start is None else min(int(start), last)
        limit = op.input.get("limit") or top
        return list(range(top, max(0, top - int(limit)), -1))
    return list(range(1 if start is None else int(start), last + 1))


def readers(idx: StreamIndex, reads: Sequence[Op]) -> list[StreamViolation]:
    """``reader``: every read saw exactly the seqs its request covers, each the final
    event at that seq (a prefix of the final stream)."""
    found = []
    for op in reads:
        last, events = op.output.get("last_seq"), op.output.get("events")
        if not isinstance(last, int) or not isinstance(events, list):
            found.append(_v("reader", idx.name, f"#{op.id}: read without last_seq / events", op))
            continue
        seqs = [int(e[0]) for e in events]
        want = _covered(op, last)
        if seqs != want:
            found.append(
                _v(
                    "reader",
                    idx.name,
                    f"#{op.id} read with last_seq {last} returned seqs "
                    f"{fmt_seqs(seqs)}, not {fmt_seqs(want)}",
                    op,
                )
            )
        for seq, event_id, data in events:
            ev = idx.by_seq.get(int(seq))
            if ev is None or ev[1] != event_id or ev[2] != data:
                there = "nothing" if ev is None else f"{ev[1]} ({ev[2]!r})"
                found.append(
                    _v(
                        "reader",
                        idx.name,
                        f"#{op.id} saw {event_id} ({data!r}) at seq {seq}; "
                        f"the final stream has {there} there",
                        op,
                    )
                )
                break  # one per read: the rest usually follows from it
    return found


def _seen_by(reads: Sequence[Op]) -> dict[Any, float]:
    """event id -> earliest completion of a read that returned it."""
    seen: dict[Any, float] = {}
    for op in reads:
        for _seq, event_id, _data in op.output.get("events") or ():
            if op.complete_time < seen.get(event_id, math.inf):
                seen[event_id] = op.complete_time
    return seen


def _windows(groups: Sequence[Append], reads: Sequence[Op]) -> list[tuple[float, float, Append]]:
    """(lo, hi, append) of every present append: it was applied in [lo, hi] (hi: the
    first ok answer or read that shows it done; inf if none)."""
    seen = _seen_by(reads)
    out = []
    for g in groups:
        if not g.present or not g.appliers:
            continue  # a "failed" violation already; no time to reason with
        hi = min([o.complete_time for o in g.ops if o.outcome == "ok"] + [math.inf])
        hi = min([hi] + [seen.get(i, math.inf) for i in g.ids])
        out.append((g.lo, hi, g))
    return out


def commit_order(name: str, groups: Sequence[Append], reads: Sequence[Op]) -> list[StreamViolation]:
    """``order``: an append done (acked or read) before another's appliers started has
    smaller seqs."""
    wins = _windows(groups, reads)
    by_hi = sorted(wins, key=lambda w: w[1])
    found, i = [], 0
    top: tuple[int, Append] | None = None  # highest seq among the appends done so far
    for lo, _hi, g in sorted(wins, key=lambda w: w[0]):
        while i < len(by_hi) and by_hi[i][1] < lo:
            a = by_hi[i][2]
            if top is None or max(a.seqs) > top[0]:
                top = (max(a.seqs), a)
            i += 1
        if top is not None and top[0] > min(g.seqs):
            a = top[1]
            found.append(
                _v(
                    "order",
                    name,
                    f"{a.label()} (seqs {fmt_seqs(sorted(a.seqs))}) was done "
                    f"before {g.label()} was invoked, yet the later one got seqs "
                    f"{fmt_seqs(sorted(g.seqs))}",
                    *a.ops,
                    *g.ops,
                )
            )
    return found


def _observations(groups: Sequence[Append], reads: Sequence[Op]) -> list[tuple[Op, int]]:
    """(op, last_seq) of every linearizable observation of a stream's length."""
    out = [
        (op, op.output["last_seq"]) for op in reads if isinstance(op.output.get("last_seq"), int)
    ]
    for g in groups:
        for op in g.ops:
            last = op.output.get("last_seq")
            if isinstance(last, int) and (
                op.outcome == "ok" or op.output.get("error") == "expectation_failed"
            ):
                out.append((op, last))
    return out


def stale_observations(
    name: str, groups: Sequence[Append], reads: Sequence[Op]
) -> list[StreamViolation]:
    """``stale``: an observed last_seq covers every append done before the op was invoked
    (floor) and none whose appliers all started after it completed (ceiling)."""
    wins, obs = _windows(groups, reads), _observations(groups, reads)
    found = []
    by_hi, i, floor = sorted(wins, key=lambda w: w[1]), 0, None
    for op, last in sorted(obs, key=lambda x: x[0].invoke_time):
        while i < len(by_hi) and by_hi[i][1] < op.invoke_time:
            g = by_hi[i][2]
            floor = (max(g.seqs), g) if floor is None or max(g.seqs) > floor[0] else floor
            i += 1
        if floor is not None and last < floor[0]:
            found.append(
                _v(
                    "stale",
                    name,
                    f"#{op.id} {op.f} saw last_seq {last}, but "
                    f"{floor[1].label()} was done at seq {floor[0]} before it started",
                    op,
                )
            )
    by_lo, j, ceiling = sorted(wins, key=lambda w: -w[0]), 0, None
    for op, last in sorted(obs, key=lambda x: -x[0].complete_time):
        while j < len(by_lo) and by_lo[j][0] > op.complete_time:
            g = by_lo[j][2]
            ceiling = (min(g.seqs), g) if ceiling is None or min(g.seqs) < ceiling[0] else ceiling
            j += 1
        if ceiling is not None and last >= ceiling[0]:
            found.append(
                _v(
                    "stale",
                    name,
                    f"#{op.id} {op.f} saw last_seq {last}, but seq {ceiling[0]} "
                    f"belongs to {ceiling[1].label()}, invoked after it completed",
                    op,
                )
            )
    return found


# ---------------------------------------------------------------------- replicas


def _first_difference(a: Sequence[Ev], b: Sequence[Ev]) -> str:
    for x, y in zip(a, b, strict=False):
        if tuple(x) != tuple(y):
            return f"seq {x[0]}: {x[1]} ({x[2]!r}) vs the final {y[1]} ({y[2]!r})"
    return f"{len(a)} events vs {len(b)} in the final read"


def replica_copies(
    final: Mapping[str, Sequence[Ev]],
    replicas: Mapping[str, Mapping[str, Sequence[Ev] | None] | None],
) -> list[StreamViolation]:
    """``replica``: each node's copy of each stream equals the final read."""
    found = []
    for node, copies in sorted(replicas.items()):
        for name, events in sorted(final.items()):
            copy = None if copies is None else copies.get(name)
            if copy is None:
                found.append(_v("replica", name, f"{node}: its copy could not be read"))
            elif [tuple(e) for e in copy] != [tuple(e) for e in events]:
                found.append(
                    _v("replica", name, f"{node} differs: {_first_difference(copy, events)}")
                )
    return found
