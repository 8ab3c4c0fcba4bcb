"""The agents of a namespace and a summary of each (sans-IO plans, plan.py): what
``statekeeper agent list`` prints and the console's Agents page lists. An agent is the
owner of ``agent/{id}/...`` keys (it has checkpointed, or left chunks) or of an
``agent/{id}`` stream (it has logged events): client/agent/layout.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..plan import AgentPlan, batch, call
from .checkpoints import Ctx, head_call, head_of
from .codec import Codec
from .layout import Layout

__all__ = ["AgentSummary", "SUMMARY_BATCH", "agent_ids_plan", "summaries_plan"]

SUMMARY_BATCH = 200
"""Agents per batch request of :func:`summaries_plan` (two reads each)."""


@dataclass(frozen=True, slots=True)
class AgentSummary:
    """One agent: its head manifest (None: no checkpoint), its stream's last seq and the
    time of its last event (None: no stream, or the read failed)."""

    agent: str
    manifest: dict[str, Any] | None
    last_seq: int | None
    last_event_ms: int | None


def agent_ids_plan(ns: str) -> AgentPlan[list[str]]:
    """Agent ids of ``ns``: owners of agent/{id}/... keys (one key per agent read, the
    rest skipped) and of agent/{id} streams."""
    ids: set[str] = set()
    start = "agent/"
    while True:
        rr = yield call("range", start=start, end="agent0", limit=1, keys_only=True, ns=ns)
        if not rr.kvs:
            break
        aid = rr.kvs[0].key.split("/")[1]
        ids.add(aid)
        start = f"agent/{aid}0"  # past every agent/{aid}/... key ('0' follows '/')
    cont = None
    while True:
        page = yield call("list_streams", "agent/", ns=ns, continuation=cont)
        ids.update(s.stream[6:] for s in page.streams if "/" not in s.stream[6:])
        if not page.more:
            return sorted(i for i in ids if i)
        cont = page.continuation


def summaries_plan(ns: str, ids: list[str]) -> AgentPlan[list[AgentSummary]]:
    """An :class:`AgentSummary` per agent: its head and its last event, SUMMARY_BATCH
    agents per batch request."""
    out = []
    for i in range(0, len(ids), SUMMARY_BATCH):
        ctxs = [Ctx(Layout(a), ns, Codec()) for a in ids[i : i + SUMMARY_BATCH]]
        calls = []
        for ctx in ctxs:
            calls += [
                head_call(ctx),
                call("read_stream", ctx.layout.stream, direction="backward", limit=1, ns=ns),
            ]
        results = yield batch(*calls, ns=ns)
        for j, ctx in enumerate(ctxs):
            rr, page = results[2 * j], results[2 * j + 1]
            m = None if isinstance(rr, Exception) else head_of(ctx, rr)[0]
            failed = isinstance(page, Exception)
            last = None if failed else page.last_seq
            when = None if failed or not page.events else page.events[0].time_ms
            out.append(AgentSummary(ctx.layout.agent_id, m, last, when))
    return out
