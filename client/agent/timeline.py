"""Reading an agent back (sans-IO plans, see plan.py): the view (head + stream tail) that
``hydrate`` and ``state_at(revision=)`` fold, ``state_at(step=)``, and ``history``.

Round trips of a hydrate: ONE batch holds the head read and a backward read of the last
``tail`` events; when the head's state is inline and the events after its position are
among those ``tail``, that is the whole hydrate. A second request only for chunks, for a
longer tail (read forward at the same revision), or when the two reads of the batch were
served at different revisions (then the stream is re-read at the head's revision, so the
state is always "the checkpoint and the events after it, as of one revision").

Never across a hole: when the events after the checkpoint's position are gone (the
stream's ``first_seq`` is past position + 1 after a truncation, or the read answered 410
``archived``), the read raises :class:`EventsMissing` naming the agent, the position and
``first_seq`` instead of folding what is left.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import StatekeeperError
from ..plan import AgentPlan, batch, call, raise_errors
from .checkpoints import Ctx, head_call, head_of, newest_plan
from .codec import Codec
from .errors import EventsMissing
from .records import ROLLBACK_EVENT, AgentEvent, Checkpoint, TimelineRow

__all__ = ["View", "agent_event", "fold", "history_plan", "read_forward_plan", "view_plan"]

Reducer = Callable[[Any, AgentEvent], Any]


@dataclass(slots=True)
class View:
    """The head (manifest + KeyValue, or None) and the raw stream events after its
    position, as of ``revision``; ``last_seq`` is the stream's at that revision."""

    revision: int
    manifest: dict[str, Any] | None
    head_kv: Any
    tail: list[Any] = field(default_factory=list)
    last_seq: int = 0
    requests: int = 1
    first_seq: int = 1

    @property
    def position(self) -> int:
        return int(self.manifest["position"]) if self.manifest else 0


def agent_event(codec: Codec, e: Any) -> AgentEvent:
    """A client StreamEvent as an AgentEvent (data decoded, meta.step lifted)."""
    meta = dict(e.meta or {})
    step = meta.get("step")
    return AgentEvent(
        seq=e.seq,
        type=e.type,
        data=codec.decode_event(e.data),
        step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        time_ms=e.time_ms,
        revision=e.revision,
        id=e.id,
        meta=meta,
    )


def initial_state(initial: Any) -> Any:
    """A fresh copy of the initial state (or what a zero-argument factory returns)."""
    return initial() if callable(initial) else copy.deepcopy(initial)


def fold(
    reducer: Reducer, state: Any, events: Iterable[AgentEvent], step: int
) -> tuple[Any, int, int, int]:
    """(state, step, last seq, count) after folding ``events`` in order."""
    seq = n = 0
    for ev in events:
        state = reducer(state, ev)
        if ev.step is not None:
            step = max(step, ev.step)
        seq, n = ev.seq, n + 1
    return state, step, seq, n


# Events per read_stream page when folding a tail: the server clamps it to its
# max_range_limit (default 10,000). With its default page of 1,000, hydrating a 10,000-event
# tail took 11 requests and 153 ms p50, no faster than replaying twice as many events in
# pages of 10,000 (169 ms; benchmarks/hydrate.py, 2026-11-30 19:20).
TAIL_PAGE = 10_000


def check_gap(ctx: Ctx, position: int, first_seq: int, last_seq: int) -> None:
    """Raise EventsMissing if events after ``position`` are needed (the stream's last seq
    is past it) but the stream no longer holds position + 1 (its first_seq is later)."""
    if last_seq > position and first_seq > position + 1:
        raise EventsMissing(
            agent=ctx.layout.agent_id, position=position, first_seq=first_seq, last_seq=last_seq
        )


def is_archived(exc: BaseException) -> bool:
    return isinstance(exc, StatekeeperError) and exc.code == "archived"


def archived_gap(ctx: Ctx, position: int, exc: StatekeeperError) -> EventsMissing:
    """The EventsMissing for a read of the events after ``position`` answered 410."""
    before = exc.details.get("before_seq")
    first = before if isinstance(before, int) and not isinstance(before, bool) else None
    return EventsMissing(
        agent=ctx.layout.agent_id, position=position, first_seq=first,
        details={"archived": dict(exc.details)},
    )


def read_forward_plan(
    ctx: Ctx,
    start: int,
    revision: int | None,
    stop: Callable[[Any], bool] | None = None,
    page_size: int = TAIL_PAGE,
    *,
    whole: bool = False,
) -> AgentPlan[tuple[list[Any], int, int]]:
    """Events from seq ``start`` on, at ``revision`` (pinned to the first page's), up to
    (excluding) the first one ``stop`` accepts: (events, last_seq, requests). ``whole``:
    every event from ``start`` is needed, so a hole (truncated or archived events) raises
    EventsMissing instead of starting at the first event still stored."""
    out: list[Any] = []
    cont = None
    requests = 0
    while True:
        try:
            page = yield call(
                "read_stream", ctx.layout.stream, start=None if cont else start,
                limit=page_size, revision=revision, continuation=cont, ns=ctx.ns,
            )
        except StatekeeperError as exc:
            if whole and is_archived(exc):
                raise archived_gap(ctx, start - 1, exc) from exc
            raise
        if whole and cont is None:
            check_gap(ctx, start - 1, page.first_seq, page.last_seq)
        requests += 1
        for e in page.events:
            if stop is not None and stop(e):
                return out, page.last_seq, requests
            out.append(e)
        if not page.more or not page.events:
            return out, page.last_seq, requests
        cont, revision = page.continuation, page.revision
        if cont is None:  # no token: go on by seq, at the same revision
            start = page.events[-1].seq + 1


def view_plan(
    ctx: Ctx, *, revision: int | None = None, tail: int = 100, need_tail: bool = True
) -> AgentPlan[View]:
    """The head and the events after its position in as few requests as possible (see
    the module docstring). ``need_tail=False``: only the head and the stream's last seq
    (one request, whatever the tail)."""
    rr, page = (
        yield batch(
            head_call(ctx, revision),
            call("read_stream", ctx.layout.stream, direction="backward", limit=tail,
                 revision=revision, ns=ctx.ns),
            ns=ctx.ns,
        )
    )
    if need_tail and is_archived(page) and not isinstance(rr, BaseException):
        # The newest ``tail`` events reach into an archived range: read forward from the
        # head's position instead (a 410 there too is a hole, EventsMissing).
        manifest, kv = head_of(ctx, rr)
        view = View(rr.revision, manifest, kv)
        view.tail, view.last_seq, n = yield from read_forward_plan(
            ctx, view.position + 1, rr.revision, whole=True
        )
        view.requests += n
        return view
    rr, page = raise_errors([rr, page])
    manifest, kv = head_of(ctx, rr)
    view = View(rr.revision, manifest, kv)
    if not need_tail:
        view.last_seq, view.first_seq = page.last_seq, page.first_seq
        return view
    events = page.events  # newest first
    covered = (
        page.revision == rr.revision
        and (not page.more or not events or events[-1].seq <= view.position + 1)
    )
    if covered:
        check_gap(ctx, view.position, page.first_seq, page.last_seq)
        view.tail = [e for e in reversed(events) if e.seq > view.position]
        view.last_seq, view.first_seq = page.last_seq, page.first_seq
    else:
        view.tail, view.last_seq, n = yield from read_forward_plan(
            ctx, view.position + 1, rr.revision, whole=True
        )
        view.requests += n
    return view


def stops_after(step: int) -> Callable[[Any], bool]:
    """The event where the state at ``step`` ends: a rollback, or a later step."""

    def stop(e: Any) -> bool:
        s = (e.meta or {}).get("step")
        return e.type == ROLLBACK_EVENT or (isinstance(s, int) and s > step)

    return stop


# -- history -----------------------------------------------------------------------------


def _short(value: Any, width: int = 60) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / 1048576:.1f} MiB"


def event_row(codec: Codec, e: Any) -> TimelineRow:
    ev = agent_event(codec, e)
    kind = "rollback" if e.type == ROLLBACK_EVENT else "event"
    if kind == "rollback" and isinstance(ev.data, dict):
        d = ev.data
        summary = (
            f"rolled back from #{d.get('from_ckpt')} (step {d.get('from_step')}) to "
            f"#{d.get('to_ckpt')} (step {d.get('to_step')})"
        )
    else:
        summary = _short(ev.data)
    return TimelineRow(e.revision, e.time_ms, kind, ev.step, e.seq, None, e.type, summary)


def checkpoint_row(ck: Checkpoint) -> TimelineRow:
    where = "inline" if not ck.chunks else f"{ck.chunks} chunks"
    meta = f", {ck.metadata}" if ck.metadata else ""
    summary = f"step {ck.step}, position {ck.position}, {_size(ck.size)} {where}{meta}"
    kind = "rollback" if ck.kind == "rollback" else "checkpoint"
    return TimelineRow(ck.revision, ck.time_ms, kind, ck.step, None, ck.n, ck.kind, summary)


def merge_rows(event_rows: list[TimelineRow], ckpt_rows: list[TimelineRow]) -> list[TimelineRow]:
    """Oldest first; at one revision the events come before the checkpoint committed
    with them; a rollback's event and checkpoint (one txn) become one row."""
    rollbacks = {r.revision: i for i, r in enumerate(event_rows) if r.kind == "rollback"}
    merged = list(event_rows)
    rows: list[tuple[int, int, TimelineRow]] = []
    for r in ckpt_rows:
        i = rollbacks.get(r.revision) if r.kind == "rollback" else None
        if i is not None:
            e = merged[i]
            merged[i] = TimelineRow(e.revision, e.time_ms, "rollback", e.step, e.seq, r.ckpt,
                                    e.type, e.summary)
        else:
            rows.append((r.revision, 1, r))
    rows += [(r.revision, 0, r) for r in merged]
    rows.sort(key=lambda t: (t[0], t[1], t[2].seq or 0, t[2].ckpt or 0))
    return [r for _, _, r in rows]


def history_plan(ctx: Ctx, limit: int | None = None) -> AgentPlan[list[TimelineRow]]:
    """Events and checkpoints, oldest first (the last ``limit`` rows), at one revision."""
    rr = yield head_call(ctx)
    manifest, _ = head_of(ctx, rr)
    rev = rr.revision
    top = manifest["ckpt"] if manifest else 0
    found = yield from newest_plan(ctx, top, limit=limit, revision=rev)
    ckpt_rows = [checkpoint_row(ck) for _, ck in found]
    if limit is None:
        events, _, _ = yield from read_forward_plan(ctx, 1, rev)
    else:
        page = yield call("read_stream", ctx.layout.stream, direction="backward", limit=limit,
                          revision=rev, ns=ctx.ns)
        events = list(reversed(page.events))
    rows = merge_rows([event_row(ctx.codec, e) for e in events], ckpt_rows)
    return rows if limit is None else rows[-limit:]
