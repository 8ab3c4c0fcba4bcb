"""The Agents page's data (issue 31, "Agents"): the agents of a namespace, one agent's
timeline, its state at any step, a diff between two checkpoints, and rollback with a
preview of what it changes. Everything goes through the user's own AsyncClient, as sans-IO
plans of the agent layer (client/agent/) run by ``arun``; states are decoded without the
schema registry, as ``statekeeper agent show`` does (console/views/values.py).

Sizes (issue 31 point 4): the list reads one page of ids (client/agent/listing.py's
``agent_page_plan``: keys-only ranges that skip each agent's other keys, merged with the
stream listing) and then the page's heads and last events in one batch: never every agent.
The timeline reads a window of ``limit`` events (one backward read at the head's revision)
and the checkpoints committed among them (found by a binary search over the dense
checkpoint numbers on their positions: about log2(checkpoints) one-key reads, then the
window's manifests), never the whole stream.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from statekeeper.client.agent import AsyncAgent, Checkpoint, TimelineRow
from statekeeper.client.agent.archived import manifest_plan
from statekeeper.client.agent.checkpoints import Ctx, head_call, head_of, load_envelope_plan
from statekeeper.client.agent.codec import Codec
from statekeeper.client.agent.errors import CheckpointConflict
from statekeeper.client.agent.layout import Layout
from statekeeper.client.agent.listing import agent_page_plan, summaries_plan
from statekeeper.client.agent.records import checkpoint_from, unpack_manifest
from statekeeper.client.agent.steps import at_step_plan
from statekeeper.client.agent.timeline import checkpoint_row, event_row, merge_rows, stops_after
from statekeeper.client.plan import AgentPlan, arun, call

from .paging import MAX_LIMIT, page_limit
from .values import DecodedValue, ValueDiff, decode_value, diff_values

__all__ = [
    "AgentPage",
    "AgentRow",
    "CheckpointDiff",
    "RollbackPreview",
    "StateAt",
    "TimelinePage",
    "agent_timeline",
    "checkpoint_diff",
    "list_agents",
    "rollback_agent",
    "rollback_preview",
    "state_at",
]


def _ctx(ns: str, agent_id: str) -> Ctx:
    return Ctx(Layout(agent_id), ns, Codec())


# -- the list ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One agent: its current checkpoint (None: none yet), step, position, the events in
    its stream (its last seq), the state's size, when it last checkpointed and last logged,
    and ``last_activity_ms`` the later of the two (ms since the epoch; None: unknown)."""

    agent: str
    ckpt: int | None
    kind: str | None
    step: int | None
    position: int | None
    events: int
    size: int | None
    checkpointed_ms: int | None
    last_event_ms: int | None
    last_activity_ms: int | None


@dataclass(frozen=True, slots=True)
class AgentPage:
    """A page of agents (ids starting with ``prefix``) in id order; ``cursor`` opens the
    next page (None: the last); ``requests`` the reads it took."""

    ns: str
    prefix: str
    agents: tuple[AgentRow, ...]
    cursor: str | None
    requests: int


def _encode_cursor(after: str, token: Any, done: bool) -> str:
    raw = json.dumps([after, token, done], separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _decode_cursor(cursor: str) -> tuple[str, Any, bool]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        after, token, done = json.loads(raw)
        if not isinstance(after, str) or not isinstance(done, bool):
            raise ValueError(cursor)
        return after, token, done
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a cursor of the agents list: {cursor!r}") from exc


def _row(s: Any) -> AgentRow:
    m = s.manifest or {}
    ckpt_ms = m.get("time_ms") if m else None
    times = [t for t in (ckpt_ms, s.last_event_ms) if t]
    return AgentRow(
        s.agent, m.get("ckpt"), m.get("kind"), m.get("step"), m.get("position"),
        s.last_seq or 0, m.get("size"), ckpt_ms, s.last_event_ms, max(times) if times else None,
    )  # fmt: skip


async def list_agents(
    client: Any, ns: str, *, prefix: str = "", limit: int | None = None, cursor: str | None = None
) -> AgentPage:
    """A page of the agents whose id starts with ``prefix`` (module docstring: one page of
    ids, then one batch for their heads and last events)."""
    n = page_limit(limit)
    after, token, done = _decode_cursor(cursor) if cursor else (None, None, False)
    ids = await arun(client, agent_page_plan(ns, prefix, n, after, token, done))
    summaries = await arun(client, summaries_plan(ns, ids.ids)) if ids.ids else []
    nxt = _encode_cursor(ids.after, ids.stream_token, ids.streams_done) if ids.after else None
    batches = -(-len(ids.ids) // 200)
    return AgentPage(ns, prefix, tuple(_row(s) for s in summaries), nxt, ids.requests + batches)


# -- the timeline --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TimelinePage:
    """A window of an agent's timeline, oldest first: ``rows`` its events, checkpoints and
    rollbacks (client/agent/records.py TimelineRow) read at ``revision``. ``older`` /
    ``newer``: the ``before`` of the neighbouring windows (None: none); ``first_seq`` /
    ``last_seq`` the stream's; ``requests`` the reads it took."""

    agent: str
    rows: tuple[TimelineRow, ...]
    revision: int
    older: int | None
    newer: int | None
    first_seq: int
    last_seq: int
    head: int | None
    requests: int


def _first_at_plan(ctx: Ctx, top: int, position: int, rev: int) -> AgentPlan[tuple[int, int]]:
    """(the smallest checkpoint number whose position is >= ``position`` (top + 1: none),
    reads): a binary search over the dense numbers (positions grow with them); a deleted
    number reads as the next one that exists."""
    lo, hi, found, reads = 1, top, top + 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        rr = yield call("range", start=ctx.layout.ckpt(mid), end=ctx.layout.ckpt(hi + 1),
                        limit=1, revision=rev, ns=ctx.ns)  # fmt: skip
        reads += 1
        if not rr.kvs:
            hi = mid - 1
            continue
        m = unpack_manifest(rr.kvs[0].value, rr.kvs[0].key)
        if int(m.get("position") or 0) >= position:
            found, hi = m["ckpt"], mid - 1
        else:
            lo = m["ckpt"] + 1
    return found, reads


def _window_checkpoints_plan(
    ctx: Ctx, top: int, lo: int | None, hi: int | None, rev: int, most: int
) -> AgentPlan[tuple[list[Checkpoint], int]]:
    """Checkpoints with ``lo`` <= position <= ``hi`` (None: unbounded), oldest first, at
    most ``most``: (checkpoints, reads)."""
    first, reads = (1, 0) if lo is None else (yield from _first_at_plan(ctx, top, lo, rev))
    out: list[Checkpoint] = []
    start = first
    while start <= top and len(out) < most:
        rr = yield call("range", start=ctx.layout.ckpt(start), end=ctx.layout.ckpt(top + 1),
                        limit=min(32, most - len(out)), revision=rev, ns=ctx.ns)  # fmt: skip
        reads += 1
        for kv in rr.kvs:
            m = unpack_manifest(kv.value, kv.key)
            if hi is not None and int(m.get("position") or 0) > hi:
                return out, reads
            out.append(checkpoint_from(m, kv.mod_revision))
        if not rr.more or not rr.kvs:
            break
        start = out[-1].n + 1
    return out, reads


def _timeline_plan(ctx: Ctx, before: int | None, limit: int) -> AgentPlan[TimelinePage]:
    rr = yield head_call(ctx)
    head, _ = head_of(ctx, rr)
    rev, top = rr.revision, (head["ckpt"] if head else 0)
    start = None if before is None or before <= 1 else before - 1
    page = yield call("read_stream", ctx.layout.stream, direction="backward", start=start,
                      limit=limit, revision=rev, ns=ctx.ns)  # fmt: skip
    events = [] if before is not None and before <= 1 else list(reversed(page.events))
    older = newer = None
    lo = hi = None
    if events:
        s1, s2 = events[0].seq, events[-1].seq
        if s1 > page.first_seq:
            lo, older = s1, s1
        if s2 < page.last_seq:
            hi, newer = s2, min(s2 + limit + 1, page.last_seq + 1)
    elif page.last_seq:  # before the stream's first stored event: the oldest checkpoints
        hi = page.first_seq - 1
    cks, reads = yield from _window_checkpoints_plan(ctx, top, lo, hi, rev, MAX_LIMIT)
    if not events:
        cks = cks[-limit:]
    rows = merge_rows([event_row(ctx.codec, e) for e in events], [checkpoint_row(c) for c in cks])
    return TimelinePage(ctx.layout.agent_id, tuple(rows), rev, older, newer, page.first_seq,
                        page.last_seq, top or None, 2 + reads)  # fmt: skip


async def agent_timeline(
    client: Any, ns: str, agent_id: str, *, before: int | None = None, limit: int | None = None
) -> TimelinePage:
    """The window of ``limit`` events with seqs below ``before`` (None: the newest), with
    the checkpoints and rollbacks committed among them, at one revision."""
    return await arun(client, _timeline_plan(_ctx(ns, agent_id), before, page_limit(limit)))


# -- state at a step, checkpoint diff -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StateAt:
    """The state at the end of ``step`` as the console can show it without the agent's
    reducer: ``checkpoint`` (the newest with step <= it; None: the initial state, which the
    console does not know) and its ``state`` decoded, then ``events`` the events after its
    position up to the end of the step, which the agent's reducer would fold (at most
    ``limit``; ``more_events``: there are more)."""

    agent: str
    step: int
    revision: int
    checkpoint: Checkpoint | None
    state: DecodedValue | None
    events: tuple[TimelineRow, ...]
    more_events: bool


def _state_at_plan(ctx: Ctx, step: int, limit: int) -> AgentPlan[StateAt]:
    rr = yield head_call(ctx)
    head, _ = head_of(ctx, rr)
    at = yield from at_step_plan(ctx, step, head["ckpt"] if head else 0, rr.revision, events=False)
    state = None
    if at.manifest is not None:
        state = decode_value((yield from load_envelope_plan(ctx, at.manifest)))
    start = at.checkpoint.position + 1 if at.checkpoint is not None else 1
    page = yield call("read_stream", ctx.layout.stream, start=start, limit=limit + 1,
                      revision=rr.revision, ns=ctx.ns)  # fmt: skip
    stop = stops_after(step)
    events = []
    for e in page.events:
        if stop(e):
            break
        events.append(e)
    more = len(events) > limit
    rows = tuple(event_row(ctx.codec, e) for e in events[:limit])
    return StateAt(ctx.layout.agent_id, step, rr.revision, at.checkpoint, state, rows, more)


async def state_at(
    client: Any, ns: str, agent_id: str, step: int, *, limit: int | None = None
) -> StateAt:
    """The state at the end of ``step``: its checkpoint's state and the events after it."""
    return await arun(client, _state_at_plan(_ctx(ns, agent_id), step, page_limit(limit)))


@dataclass(frozen=True, slots=True)
class CheckpointDiff:
    """Checkpoints ``left`` and ``right`` (their states decoded in ``diff``)."""

    agent: str
    left: Checkpoint
    right: Checkpoint
    diff: ValueDiff


def _loaded_plan(ctx: Ctx, n: int) -> AgentPlan[tuple[Checkpoint, DecodedValue]]:
    m, kv = yield from manifest_plan(ctx, n, "error")
    return checkpoint_from(m, kv.mod_revision), decode_value(
        (yield from load_envelope_plan(ctx, m))
    )


def _diff_plan(ctx: Ctx, a: int, b: int) -> AgentPlan[CheckpointDiff]:
    left, lv = yield from _loaded_plan(ctx, a)
    right, rv = yield from _loaded_plan(ctx, b)
    return CheckpointDiff(ctx.layout.agent_id, left, right, diff_values(lv, rv, (f"#{a}", f"#{b}")))


async def checkpoint_diff(
    client: Any, ns: str, agent_id: str, left: int, right: int
) -> CheckpointDiff:
    """What changed from checkpoint ``left`` to checkpoint ``right`` (CheckpointNotFound /
    CheckpointArchived as the agent layer's)."""
    return await arun(client, _diff_plan(_ctx(ns, agent_id), left, right))


# -- rollback ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RollbackPreview:
    """What ``rollback_agent(to=step)`` or ``(ckpt=n)`` would do, read at ``revision``:
    ``current`` the head now, ``target`` the checkpoint whose stored state becomes current
    again (copied as stored, so the new head's state is exactly ``diff.right``), ``step``
    the step the agent goes on after. ``possible`` False with ``reason`` when the console
    cannot do it: events of steps <= ``step`` follow the target and folding them needs the
    agent's reducer (roll back to ``target`` by ``ckpt=`` instead), or there is no
    checkpoint to go back to. ``diff``: the current state against the target's."""

    agent: str
    revision: int
    current: Checkpoint | None
    target: Checkpoint | None
    step: int | None
    possible: bool
    reason: str | None
    diff: ValueDiff | None


def _preview_plan(ctx: Ctx, to: int | None, ckpt: int | None) -> AgentPlan[RollbackPreview]:
    agent = ctx.layout.agent_id
    rr = yield head_call(ctx)
    head, head_kv = head_of(ctx, rr)
    if head is None:
        msg = f"agent {agent!r} has no checkpoints to roll back to"
        return RollbackPreview(agent, rr.revision, None, None, to, False, msg, None)
    current = checkpoint_from(head, head_kv.mod_revision)
    if ckpt is not None:
        m, kv = yield from manifest_plan(ctx, ckpt, "error")
        target, step, reason = checkpoint_from(m, kv.mod_revision), int(m["step"]), None
    else:
        at = yield from at_step_plan(ctx, to, head["ckpt"], rr.revision, events=False)
        m, target, step = at.manifest, at.checkpoint, to
        reason = None if m else f"agent {agent!r} has no checkpoint with step <= {to}"
        if m is not None:
            nxt = yield call("read_stream", ctx.layout.stream, start=target.position + 1,
                             limit=1, revision=rr.revision, ns=ctx.ns)  # fmt: skip
            if nxt.events and not stops_after(to)(nxt.events[0]):
                reason = (
                    f"checkpoint #{target.n} (step {target.step}) is the newest at or below "
                    f"step {to}, and events of steps up to {to} follow it: folding them needs "
                    f"the agent's reducer; roll back to checkpoint #{target.n} instead"
                )
    if m is None or reason is not None:
        return RollbackPreview(agent, rr.revision, current, target, step, False, reason, None)
    now = decode_value((yield from load_envelope_plan(ctx, head)))
    then = decode_value((yield from load_envelope_plan(ctx, m)))
    diff = diff_values(now, then, (f"#{current.n} (current)", f"#{target.n}"))
    return RollbackPreview(agent, rr.revision, current, target, step, True, None, diff)


async def rollback_preview(
    client: Any, ns: str, agent_id: str, *, to: int | None = None, ckpt: int | None = None
) -> RollbackPreview:
    """What a rollback to step ``to`` (or to checkpoint ``ckpt``) would change."""
    if (to is None) == (ckpt is None):
        raise ValueError("rollback needs exactly one of to=STEP or ckpt=N")
    return await arun(client, _preview_plan(_ctx(ns, agent_id), to, ckpt))


async def rollback_agent(
    client: Any,
    ns: str,
    agent_id: str,
    *,
    to: int | None = None,
    ckpt: int | None = None,
    expect_head: int | None = None,
) -> Checkpoint:
    """Roll the agent back as the user (their token; no fence: the console is not the
    agent's writer) with the agent layer's ``rollback``; returns the new checkpoint.
    ``expect_head``: the head the preview showed; if another checkpoint is current now, it
    raises CheckpointConflict instead (checked just before: a writer may still move the
    head in between, then the rollback lands on the newer head, as the CLI's does)."""
    agent = AsyncAgent(client, agent_id, ns=ns)
    if expect_head is not None:
        rr = await client.range(agent.layout.head, limit=1, ns=ns)
        head, _ = head_of(agent.ctx, rr)
        if head is None or head["ckpt"] != expect_head:
            now = f"#{head['ckpt']}" if head else "no checkpoint"
            raise CheckpointConflict(
                f"agent {agent_id!r} moved since the preview: its head is {now}, not "
                f"#{expect_head}; preview again",
                current=checkpoint_from(head, 0) if head else None,
            )
    return await agent.rollback(to=to, ckpt=ckpt)
