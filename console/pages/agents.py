"""The Agents page (issue 31, "Agents"; the data is console/views/agents.py): the agents of
a namespace, one agent's timeline, its state at a step, a diff between two checkpoints and
a rollback behind a confirmation page.

Every parameter is in the query string (the router matches exact paths): ``ns``, ``agent``,
``prefix``, ``limit``/``cursor`` (the list), ``before`` (a timeline window), ``step``,
``left``/``right`` (a diff), ``ckpt``/``to`` (a rollback). The rollback is two requests: a
GET that shows the preview (what will change: the view's diff of the current state against
the target's) and a POST (CSRF checked by the app) that rolls back with ``expect_head`` =
the head the preview showed, so a head that moved in between is refused, not overwritten.
The form is shown only to a token that can write the namespace (``ctx.can_write``); a
reader who posts anyway gets the API's 403 as a page that says nothing was rolled back.
"""

from __future__ import annotations

import datetime as dt

from statekeeper.client.agent.errors import CheckpointConflict
from statekeeper.client.errors import NotFound, PermissionDenied
from statekeeper.console.context import PageContext
from statekeeper.console.views import agents as av
from statekeeper.node.api.server import Response

TITLE = "Agents"
PATH = "/ui/agents"
LIST = PATH + "/list"  # the list's table alone (htmx: search as you type)
TIMELINE = PATH + "/timeline"
STATE = PATH + "/state"
DIFF = PATH + "/diff"
ROLLBACK = PATH + "/rollback"
DEFAULT_NS = "default"


def when(ms: int | None) -> str:
    """A time in ms since the epoch as UTC text ("–": unknown)."""
    if not ms:
        return "–"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _int(ctx: PageContext, name: str) -> int | None:
    """?name= as an int (None: absent); a malformed one is the caller's 400."""
    raw = ctx.query.get(name, ctx.form.get(name, ""))
    if raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, not {raw[:40]!r}") from None


def _render(ctx: PageContext, template: str, status: int = 200, **values) -> Response:
    """A template with the page's common values (paths, ns, the time format)."""
    return ctx.render(
        template, status, paths=PATHS, ns=values.pop("ns", ctx.namespace()), when=when, **values
    )


def _problem(ctx: PageContext, status: int, message: str) -> Response:
    return ctx.render("error.html", status, title="Agents", message=message)


async def _list_model(ctx: PageContext) -> tuple[str, av.AgentPage]:
    ns = ctx.namespace()
    limit, cursor = ctx.page_args()
    return ns, await av.list_agents(
        ctx.client, ns, prefix=ctx.query.get("prefix", ""), limit=limit, cursor=cursor
    )


async def agents(ctx: PageContext) -> Response:
    try:
        ns, page = await _list_model(ctx)
    except ValueError as e:  # a cursor the view did not make
        return _problem(ctx, 400, str(e))
    return _render(ctx, "agents.html", ns=ns, page=page, can_write=ctx.can_write(ns))


async def agents_list(ctx: PageContext) -> Response:
    try:
        ns, page = await _list_model(ctx)
    except ValueError as e:
        return _problem(ctx, 400, str(e))
    return _render(ctx, "agents_list.html", ns=ns, page=page)


def _agent(ctx: PageContext) -> str | None:
    return ctx.query.get("agent") or ctx.form.get("agent") or None


async def timeline(ctx: PageContext) -> Response:
    ns, agent = ctx.namespace(), _agent(ctx)
    if agent is None:
        return _problem(ctx, 400, "which agent? (?agent=ID)")
    limit, _ = ctx.page_args()
    try:
        before, rolled = _int(ctx, "before"), _int(ctx, "rolled")
        window = await av.agent_timeline(ctx.client, ns, agent, before=before, limit=limit)
    except ValueError as e:
        return _problem(ctx, 400, str(e))
    ckpts = [r.ckpt for r in window.rows if r.ckpt is not None]
    return _render(
        ctx, "agent_timeline.html", ns=ns, agent=agent, window=window, limit=limit,
        can_write=ctx.can_write(ns), rolled=rolled,
        left=ckpts[-2] if len(ckpts) > 1 else (ckpts[0] if ckpts else None),
        right=ckpts[-1] if ckpts else window.head,
    )  # fmt: skip


async def state(ctx: PageContext) -> Response:
    ns, agent = ctx.namespace(), _agent(ctx)
    try:
        step = _int(ctx, "step")
    except ValueError as e:
        return _problem(ctx, 400, str(e))
    if agent is None or step is None:
        return _problem(ctx, 400, "which agent and step? (?agent=ID&step=N)")
    model = await av.state_at(ctx.client, ns, agent, step)
    return _render(ctx, "agent_state.html", ns=ns, agent=agent, model=model)


async def diff(ctx: PageContext) -> Response:
    ns, agent = ctx.namespace(), _agent(ctx)
    try:
        left, right = _int(ctx, "left"), _int(ctx, "right")
    except ValueError as e:
        return _problem(ctx, 400, str(e))
    if agent is None or left is None or right is None:
        return _problem(ctx, 400, "which agent and checkpoints? (?agent=ID&left=N&right=M)")
    try:
        model = await av.checkpoint_diff(ctx.client, ns, agent, left, right)
    except NotFound as e:
        return _problem(ctx, 404, e.message)
    return _render(
        ctx, "agent_diff.html", ns=ns, agent=agent, model=model, can_write=ctx.can_write(ns)
    )


def _target(ctx: PageContext) -> tuple[int | None, int | None]:
    """(to, ckpt) of a rollback: exactly one must be given."""
    to, ckpt = _int(ctx, "to"), _int(ctx, "ckpt")
    if (to is None) == (ckpt is None):
        raise ValueError("a rollback needs exactly one of to=STEP or ckpt=N")
    return to, ckpt


async def _confirm(ctx: PageContext, status: int = 200, error: str = "") -> Response:
    """The confirmation page: the preview (what will change), and the form if allowed."""
    ns, agent = ctx.namespace(), _agent(ctx)
    to, ckpt = _target(ctx)
    preview = await av.rollback_preview(ctx.client, ns, agent, to=to, ckpt=ckpt)
    return _render(
        ctx, "agent_rollback.html", status, ns=ns, agent=agent, preview=preview, to=to,
        ckpt=ckpt, can_write=ctx.can_write(ns), error=error,
    )  # fmt: skip


async def rollback_confirm(ctx: PageContext) -> Response:
    if _agent(ctx) is None:
        return _problem(ctx, 400, "which agent? (?agent=ID)")
    try:
        return await _confirm(ctx)
    except ValueError as e:
        return _problem(ctx, 400, str(e))
    except NotFound as e:
        return _problem(ctx, 404, e.message)


async def rollback_do(ctx: PageContext) -> Response:
    ns, agent = ctx.form.get("ns") or DEFAULT_NS, _agent(ctx)
    try:
        to, ckpt = _target(ctx)
        expect = _int(ctx, "expect_head")
    except ValueError as e:
        return _problem(ctx, 400, str(e))
    if agent is None or expect is None:
        return _problem(ctx, 400, "a rollback form names the agent and the head it previewed")
    try:
        new = await av.rollback_agent(ctx.client, ns, agent, to=to, ckpt=ckpt, expect_head=expect)
    except PermissionDenied as e:
        return _problem(
            ctx, 403, f"Not allowed: the cluster refused the rollback ({e.message}). "
            f"Nothing was rolled back: your token cannot write namespace {ns!r}.",
        )  # fmt: skip
    except CheckpointConflict as e:
        ctx.query.update(ns=ns, agent=agent)  # the preview again, at the head now
        ctx.query.update({"to": str(to)} if to is not None else {"ckpt": str(ckpt)})
        return await _confirm(ctx, 409, f"Nothing was rolled back: {e.message}.")
    # 303: the browser GETs the timeline, which names the new head (a reload re-posts nothing).
    done = ctx.url(TIMELINE, ns=ns, agent=agent, rolled=new.n)
    return Response(303, b"", "text/html; charset=utf-8", (("Location", done),))


PATHS = {
    "list": PATH, "fragment": LIST, "timeline": TIMELINE, "state": STATE, "diff": DIFF,
    "rollback": ROLLBACK,
}  # fmt: skip

ROUTES = [
    ("GET", PATH, agents),
    ("GET", LIST, agents_list),
    ("GET", TIMELINE, timeline),
    ("GET", STATE, state),
    ("GET", DIFF, diff),
    ("GET", ROLLBACK, rollback_confirm),
    ("POST", ROLLBACK, rollback_do),
]
