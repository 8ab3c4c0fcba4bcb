"""The LangGraph page's data: the threads StatekeeperSaver stored in its namespace
("langgraph" by default), one thread's checkpoints as a tree (parents and forks), and one
checkpoint decoded (channel values, pending writes, metadata).

Everything is read with the user's AsyncClient through the saver's own reads:
client/langgraph/inspect.py (shared with `statekeeper langgraph`) for the lists and the
saver's ``aget_tuple`` for a checkpoint, decoded with the saver's serde (LangGraph's
JsonPlusSerializer, never pickle); values are shown as JSON-ready data (objects by their
fields, bytes as {"$bytes": base64}).

Forks. LangGraph's time travel (invoke or update_state from an older checkpoint) gives
that checkpoint a second child: the tree is the parent ids, a fork point is a checkpoint
with two or more children, and the head branch is the newest checkpoint and its
ancestors. Children are found among the checkpoints of the page (a thread's history
is paged newest first, ``limit`` at most 500): a fork whose branches straddle two pages
shows on the page that holds both children.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statekeeper.client.langgraph.inspect import (
    CheckpointRow,
    ThreadSummary,
    default_serde,
    history_plan,
    jsonable,
    shown,
    threads_plan,
)
from statekeeper.client.plan import arun

from .paging import page_limit

__all__ = [
    "SAVER_NS",
    "CheckpointDetail",
    "CheckpointNode",
    "PendingWrite",
    "ThreadHistory",
    "ThreadsPage",
    "ThreadSummary",
    "checkpoint",
    "thread_history",
    "threads",
]

SAVER_NS = "langgraph"  # StatekeeperSaver's default namespace


@dataclass(frozen=True, slots=True)
class ThreadsPage:
    """A page of the namespace's threads in thread id order."""

    ns: str
    threads: tuple[ThreadSummary, ...]
    next_cursor: str | None
    revision: int


@dataclass(frozen=True, slots=True)
class CheckpointNode:
    """One checkpoint in a thread's tree: its parent (None: the thread's first), its
    children on this page (newest first), ``is_fork`` (two or more children: a time
    travel branched here), ``on_head`` (the newest checkpoint or one of its ancestors;
    False: an abandoned branch), its pending writes counted."""

    checkpoint_id: str
    checkpoint_ns: str
    parent_id: str | None
    step: Any
    source: Any
    ts: Any
    run_id: str | None
    pending_writes: int
    children: tuple[str, ...]
    is_fork: bool
    on_head: bool


@dataclass(frozen=True, slots=True)
class ThreadHistory:
    """A page of one thread's checkpoints of one checkpoint namespace, newest first, as a
    tree: ``head`` the newest checkpoint's id (None: the page is empty), ``fork_points``
    the ids with two or more children."""

    ns: str
    thread_id: str
    checkpoint_ns: str
    nodes: tuple[CheckpointNode, ...]
    head: str | None
    fork_points: tuple[str, ...]
    next_cursor: str | None
    revision: int


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """A pending write of a checkpoint: the task, the channel, the value (JSON-ready)."""

    task_id: str
    channel: str
    value: Any


@dataclass(frozen=True, slots=True)
class CheckpointDetail:
    """One checkpoint decoded by the saver (values JSON-ready)."""

    ns: str
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    ts: Any
    metadata: dict[str, Any]
    channel_values: dict[str, Any]
    channel_versions: dict[str, Any]
    pending_writes: tuple[PendingWrite, ...]


async def threads(
    client: Any, *, ns: str = SAVER_NS, limit: int | None = None, cursor: str | None = None
) -> ThreadsPage:
    """A page of the threads of namespace ``ns``: checkpoints, newest step, source, time
    and TTL lease of each; ``cursor``: the previous page's ``next_cursor``."""
    page = await arun(
        client, threads_plan(ns, default_serde(), after=cursor, limit=page_limit(limit))
    )
    return ThreadsPage(ns, page.threads, page.next_after, page.revision)


def tree_of(rows: tuple[CheckpointRow, ...] | list[CheckpointRow]) -> list[CheckpointNode]:
    """The nodes of ``rows`` (newest first): children, fork points and the head branch."""
    children: dict[str, list[str]] = {}
    for r in rows:
        if r.parent is not None:
            children.setdefault(r.parent, []).append(r.checkpoint_id)
    parents = {r.checkpoint_id: r.parent for r in rows}
    head_branch: set[str] = set()
    at = rows[0].checkpoint_id if rows else None
    while at is not None and at not in head_branch:
        head_branch.add(at)
        at = parents.get(at)
    return [
        CheckpointNode(
            r.checkpoint_id,
            r.checkpoint_ns,
            r.parent,
            r.step,
            r.source,
            r.ts,
            r.run,
            r.writes,
            tuple(children.get(r.checkpoint_id, ())),
            len(children.get(r.checkpoint_id, ())) > 1,
            r.checkpoint_id in head_branch,
        )
        for r in rows
    ]


async def thread_history(
    client: Any,
    thread_id: str,
    *,
    ns: str = SAVER_NS,
    checkpoint_ns: str = "",
    limit: int | None = None,
    cursor: str | None = None,
) -> ThreadHistory:
    """A page of ``thread_id``'s checkpoints in ``checkpoint_ns`` ("" the root graph),
    newest first, with parents, children and forks."""
    plan = history_plan(
        ns, default_serde(), thread_id, checkpoint_ns, after=cursor, limit=page_limit(limit)
    )
    page = await arun(client, plan)
    nodes = tree_of(page.rows)
    head = nodes[0].checkpoint_id if nodes and cursor is None else None
    forks = tuple(n.checkpoint_id for n in nodes if n.is_fork)
    return ThreadHistory(
        ns, thread_id, checkpoint_ns, tuple(nodes), head, forks, page.next_after, page.revision
    )


async def checkpoint(
    client: Any,
    thread_id: str,
    checkpoint_id: str | None = None,
    *,
    ns: str = SAVER_NS,
    checkpoint_ns: str = "",
) -> CheckpointDetail | None:
    """The checkpoint (default: the thread's newest in ``checkpoint_ns``) as the saver
    reads it, or None when there is none."""
    from statekeeper.client.langgraph.saver import StatekeeperSaver

    conf = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    tup = await StatekeeperSaver(aclient=client, ns=ns).aget_tuple({"configurable": conf})
    if tup is None:
        return None
    doc = shown(tup)
    writes = tuple(
        PendingWrite(w["task_id"], w["channel"], w["value"]) for w in doc["pending_writes"]
    )
    return CheckpointDetail(
        ns,
        doc["thread_id"],
        doc["checkpoint_ns"],
        doc["checkpoint_id"],
        doc["parent"],
        jsonable(doc["ts"]),
        doc["metadata"],
        doc["channel_values"],
        doc["channel_versions"],
        writes,
    )
