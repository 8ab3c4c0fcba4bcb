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

__all__ = [
    "SUMMARY_BATCH",
    "AgentSummary",
    "IdPage",
    "agent_ids_plan",
    "agent_page_plan",
    "key_of",
    "key_prefix_end",
    "summaries_plan",
]

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


# -- one page of agent ids (the console's Agents page) -------------------------------------

KEY_PAGE = 1000
"""The most keys per keys-only range of :func:`agent_page_plan`; it asks for 4 per agent
wanted (an agent's keys are its head, its checkpoint manifests and chunks; the rest of an
agent's keys is skipped once one is seen)."""
STREAM_PAGE = 500
"""The most streams per list_streams of :func:`agent_page_plan` (it asks for limit + 1)."""


@dataclass(frozen=True, slots=True)
class IdPage:
    """One page of agent ids in key order (of ``agent/{id}/``) and where the next starts:
    ``after`` (None: this is the last page), ``stream_token`` / ``streams_done`` (where the
    stream listing resumes); ``streams`` the stream of each id that has one; ``requests``
    the reads it took."""

    ids: list[str]
    streams: dict[str, Any]
    after: str | None
    stream_token: Any
    streams_done: bool
    requests: int


def key_of(agent_id: str) -> str:
    """Where an agent's keys sort: the order of the list."""
    return f"agent/{agent_id}/"


def key_prefix_end(prefix: str) -> str | None:
    """The smallest key after every key starting with ``prefix`` (code point order is
    UTF-8 byte order, the server's); None: no bound."""
    while prefix:
        c = ord(prefix[-1]) + 1
        if c <= 0x10FFFF:
            return prefix[:-1] + chr(0xE000 if 0xD800 <= c < 0xE000 else c)
        prefix = prefix[:-1]
    return None


def _key_ids_plan(
    ns: str, start: str, end: str | None, want: int
) -> AgentPlan[tuple[list[str], str | None, int]]:
    """Ids owning keys from ``start`` on, more than ``want`` of them or all: (ids, the key
    below which every owner is listed (None: all), requests)."""
    ids: list[str] = []
    requests = 0
    while True:
        size = min(KEY_PAGE, 4 * (want + 1))
        rr = yield call("range", start=start, end=end, limit=size, keys_only=True, ns=ns)
        requests += 1
        for kv in rr.kvs:
            aid, sep, _ = kv.key[6:].partition("/")
            if sep and aid and (not ids or ids[-1] != aid):
                ids.append(aid)
        if not rr.more or not rr.kvs:
            return ids, None, requests
        aid, sep, _ = rr.kvs[-1].key[6:].partition("/")
        # past the rest of the last owner's keys ('0' follows '/'); a stray key: just past it
        start = f"agent/{aid}0" if sep else rr.kvs[-1].key + "\x00"
        if len(ids) > want:
            return ids, start, requests


def agent_page_plan(
    ns: str,
    prefix: str = "",
    limit: int = 50,
    after: str | None = None,
    stream_token: Any = None,
    streams_done: bool = False,
) -> AgentPlan[IdPage]:
    """The ``limit`` agents (ids starting with ``prefix``) after agent ``after``, in the
    order of their keys, without reading every agent: keys-only ranges that skip the rest
    of an agent's keys once one is seen, merged with the stream listing (agents that only
    logged events own no key). Each source is read only as far as the other's frontier
    (every id sorting below a frontier has been seen), so the page is exact; the stream
    listing resumes from ``stream_token`` (re-reading at most one page; its ids up to
    ``after`` were settled by the previous page)."""
    base = "agent/" + prefix
    end = key_prefix_end(base)
    start = f"agent/{after}0" if after is not None else base
    key_ids, fk, requests = yield from _key_ids_plan(ns, start, end, limit)
    streams: dict[str, Any] = {}
    pages: list[tuple[Any, list[str]]] = []
    token, done = stream_token, streams_done
    frontier: str | None = None  # every stream named below it is seen (None: none read yet)

    def seen() -> list[str]:
        """Ids both sources have settled (below both frontiers), in key order."""
        bounds = [b for b in (fk, None if done else frontier or "") if b is not None]
        found = set(key_ids) | set(streams)
        return sorted((a for a in found if not bounds or key_of(a) < min(bounds)), key=key_of)

    while not done:
        if frontier is not None and (frontier >= fk if fk is not None else len(seen()) > limit):
            break
        size = min(STREAM_PAGE, limit + 1)
        page = yield call("list_streams", base, limit=size, continuation=token, ns=ns)
        requests += 1
        named = {s.stream[6:]: s for s in page.streams if s.stream[6:] and "/" not in s.stream[6:]}
        pages.append((token, list(named)))
        streams.update(
            (a, s) for a, s in named.items() if after is None or key_of(a) > key_of(after)
        )
        done = not page.more or not page.streams
        token = None if done else page.continuation
        frontier = None if done else page.streams[-1].stream
    found = seen()
    chosen = found[:limit]
    last = fk is None and done and len(found) <= limit
    nxt = None if last or not chosen else chosen[-1]
    if nxt is not None:  # resume at the first page holding an id after this page's last
        for used, ids in pages:
            if any(key_of(a) > key_of(nxt) for a in ids):
                token, done = used, False
                break
    return IdPage(
        chosen, {a: streams[a] for a in chosen if a in streams}, nxt, token, done, requests
    )
