"""The LangGraph page: the threads StatekeeperSaver stored in a namespace ("langgraph" by
default, a box changes it), one thread's checkpoints as a tree (parents, forks, the
abandoned branches of a time travel), and one checkpoint's channel values, pending writes
and metadata. The data is console/views/langgraph.py's; this module only lays it out.

The tree is drawn as an indented table, newest first (LangGraph's own order): the head
branch (the newest checkpoint and its ancestors) at depth 0, and each other branch one
step deeper than the checkpoint it forked from, so a linear run stays flat and only a
time travel indents (see layout()).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from statekeeper.console.context import PageContext
from statekeeper.console.views import langgraph as view
from statekeeper.node.api.server import Response

TITLE = "LangGraph"
PATH = "/ui/langgraph"
THREAD = PATH + "/thread"
CHECKPOINT = PATH + "/checkpoint"
MAX_DEPTH = 8  # deeper branches are drawn at this indentation (langgraph.css has d0..d8)
OPEN_BELOW = 400  # a JSON value shorter than this (characters) is shown unfolded


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the drawn tree: the checkpoint, its indentation, and whether it starts
    a branch (its parent is a fork point: the line says which)."""

    node: view.CheckpointNode
    depth: int
    branch_of: str | None


def layout(nodes: tuple[view.CheckpointNode, ...]) -> list[Row]:
    """The rows of ``nodes`` (newest first) with their depth: a checkpoint keeps its
    parent's depth when it continues the parent's branch (it is the child on the head
    branch, or else the parent's newest child) and is one deeper when it starts a new
    branch; a checkpoint whose parent is not on this page starts at depth 0 (head) or 1."""
    by_id = {n.checkpoint_id: n for n in nodes}
    depth: dict[str, int] = {}
    branch_of: dict[str, str | None] = {}
    for n in reversed(nodes):  # oldest first: a parent is placed before its children
        parent = by_id.get(n.parent_id) if n.parent_id is not None else None
        if parent is None:
            depth[n.checkpoint_id] = 0 if n.on_head else 1
            branch_of[n.checkpoint_id] = None
            continue
        on_head = [c for c in parent.children if by_id.get(c) and by_id[c].on_head]
        main = on_head[0] if on_head else parent.children[0]
        continues = n.checkpoint_id == main
        depth[n.checkpoint_id] = depth[parent.checkpoint_id] + (0 if continues else 1)
        branch_of[n.checkpoint_id] = None if continues else parent.checkpoint_id
    return [
        Row(n, min(depth[n.checkpoint_id], MAX_DEPTH), branch_of[n.checkpoint_id]) for n in nodes
    ]


def as_json(value: Any) -> str:
    """A JSON-ready value as indented JSON (the view made it JSON-ready)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _ns(ctx: PageContext) -> str:
    return ctx.query.get("ns", "").strip() or view.SAVER_NS


async def threads_page(ctx: PageContext) -> Response:
    ns = _ns(ctx)
    limit, cursor = ctx.page_args()
    page = await view.threads(ctx.client, ns=ns, limit=limit, cursor=cursor)
    return ctx.render("langgraph.html", model=page, limit=limit, cursor=cursor, thread_url=THREAD)


def _missing(ctx: PageContext, what: str) -> Response:
    return ctx.render("error.html", 404, title="Not found", message=what)


async def thread_page(ctx: PageContext) -> Response:
    ns, thread = _ns(ctx), ctx.query.get("thread", "")
    if not thread:
        return _missing(ctx, "no thread given (?thread=...)")
    limit, cursor = ctx.page_args()
    history = await view.thread_history(
        ctx.client,
        thread,
        ns=ns,
        checkpoint_ns=ctx.query.get("cns", ""),
        limit=limit,
        cursor=cursor,
    )
    return ctx.render(
        "langgraph_thread.html",
        model=history,
        rows=layout(history.nodes),
        limit=limit,
        cursor=cursor,
        checkpoint_url=CHECKPOINT,
    )


async def checkpoint_page(ctx: PageContext) -> Response:
    ns, thread = _ns(ctx), ctx.query.get("thread", "")
    if not thread:
        return _missing(ctx, "no thread given (?thread=...)")
    cns, wanted = ctx.query.get("cns", ""), ctx.query.get("id") or None
    detail = await view.checkpoint(ctx.client, thread, wanted, ns=ns, checkpoint_ns=cns)
    if detail is None:
        which = f"checkpoint {wanted}" if wanted else "no checkpoint"
        return _missing(ctx, f"{which} of thread {thread!r} in namespace {ns!r}")
    return ctx.render(
        "langgraph_checkpoint.html",
        model=detail,
        as_json=as_json,
        open_below=OPEN_BELOW,
        thread_url=THREAD,
        checkpoint_url=CHECKPOINT,
    )


ROUTES = [
    ("GET", PATH, threads_page),
    ("GET", THREAD, thread_page),
    ("GET", CHECKPOINT, checkpoint_page),
]
