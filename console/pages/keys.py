"""The Keys page (issue 31, "Keys"): a namespace chooser, a prefix browser paged by a
cursor, a key's value decoded with its revisions, a diff between any two revisions, and a
live tail of a prefix. The data is console/views/keys.py's; every read is the user's own
API call.

Routes (the query string carries every parameter: the router has no path parameters):

- ``/ui/keys?ns=&prefix=&limit=&cursor=``: the chooser and one page of keys (values not
  read: one keys-only range per page).
- ``/ui/keys/key?ns=&key=&rev=&limit=&before=``: the value (at ``rev``, default now) and a
  page of its revisions (``before``: the next page's start; each revision shown costs one
  read, so the page says how many it took).
- ``/ui/keys/diff?ns=&key=&left=&right=``: the two revisions' unified diff and structural
  changes.
- ``/ui/keys/watch?ns=&prefix=``: the live tail; its fragment ``/ui/keys/tail`` is polled
  by htmx every second. The tail (a KeyTail: one watch on the cluster) is held by the
  session under :data:`TAIL_HELD`: one per session (a watch of another prefix replaces and
  closes it), closed when the session ends however it ends (console/session.py).
"""

from __future__ import annotations

import asyncio

from statekeeper.client.errors import Compacted, NotFound
from statekeeper.console.context import PageContext
from statekeeper.console.views.keys import (
    KeyTail,
    browse_keys,
    key_diff,
    key_revisions,
    key_value,
    visible_namespaces,
)
from statekeeper.node.api.server import Response

TITLE = "Keys"
PATH = "/ui/keys"
KEY = PATH + "/key"
DIFF = PATH + "/diff"
WATCH = PATH + "/watch"
TAIL = PATH + "/tail"
TAIL_HELD = "keys.tail"
TAIL_SHOWN = 50
"""Events a tail keeps and shows (newest first): a session's tail holds at most 50 values
cut to 4 KiB each (views.keys.TAIL_TEXT), 256 sessions at most: 50 MiB in the worst case."""
REVISIONS_SHOWN = 10
"""Revisions a key page lists (then "Older"): each costs one sequential read, ~10 ms each
on a loaded 3-node cluster (benchmarks/console_keys.py: 20 of them made the page's
median 203 ms, max 513 ms)."""

LINKS = {"key": KEY, "diff": DIFF, "watch": WATCH, "tail": TAIL, "browse": PATH}


def _int(ctx: PageContext, name: str) -> int | None:
    """The query's integer ``name`` (None: absent, empty or not a number)."""
    try:
        return int(ctx.query.get(name, ""))
    except ValueError:
        return None


async def _namespace(ctx: PageContext):
    """(the namespaces the token sees, the one chosen): the typed ?ns_other=, else ?ns=,
    else the client's own namespace if the token names it (or auth is off), else the first
    one the token names; "" when it names none (only patterns: the user types one)."""
    spaces = await visible_namespaces(ctx.client)
    ns = (ctx.query.get("ns_other") or ctx.query.get("ns") or "").strip()
    if not ns:
        if not spaces.auth or spaces.default in spaces.namespaces:
            ns = spaces.default
        elif spaces.namespaces:
            ns = spaces.namespaces[0]
    return spaces, ns


async def browse(ctx: PageContext) -> Response:
    spaces, ns = await _namespace(ctx)
    prefix = ctx.query.get("prefix", "")
    limit, cursor = ctx.page_args()
    page = await browse_keys(ctx.client, ns, prefix, limit=limit, cursor=cursor) if ns else None
    return ctx.render(
        "keys.html",
        spaces=spaces,
        ns=ns,
        key_prefix=prefix,
        page=page,
        limit=limit,
        cursor=cursor,
        links=LINKS,
    )


def _missing(ctx: PageContext, e: Exception) -> Response:
    status = 410 if isinstance(e, Compacted) else 404
    return ctx.render("error.html", status, title="Not there", message=str(e))


async def key(ctx: PageContext) -> Response:
    ns, name = ctx.query.get("ns", ""), ctx.query.get("key", "")
    before = _int(ctx, "before")
    limit = _int(ctx, "limit") or REVISIONS_SHOWN
    try:
        # Together: the value's read does not wait for the revision walk (or the reverse).
        value, revisions = await asyncio.gather(
            key_value(ctx.client, ns, name, revision=_int(ctx, "rev")),
            key_revisions(ctx.client, ns, name, limit=limit, before=before),
        )
    except (NotFound, Compacted) as e:
        return _missing(ctx, e)
    return ctx.render(
        "keys_key.html", ns=ns, kv=value, revisions=revisions, before=before, links=LINKS
    )


async def diff(ctx: PageContext) -> Response:
    ns, name = ctx.query.get("ns", ""), ctx.query.get("key", "")
    left, right = _int(ctx, "left"), _int(ctx, "right")
    if left is None or right is None:
        message = "pick two revisions: one on the left, one on the right"
        return ctx.render("error.html", 400, title="Which revisions?", message=message)
    try:
        changes = await key_diff(ctx.client, ns, name, left, right)
    except (NotFound, Compacted) as e:
        return _missing(ctx, e)
    return ctx.render(
        "keys_diff.html", ns=ns, key=name, left=left, right=right, diff=changes, links=LINKS
    )


async def _tail(ctx: PageContext, ns: str, prefix: str) -> KeyTail:
    """The session's tail of (ns, prefix): the one it holds, or a new one replacing it."""
    tail = ctx.session.held(TAIL_HELD)
    if tail is None or (tail.ns, tail.prefix) != (ns, prefix):
        tail = await KeyTail(ctx.client, ns, prefix, bound=TAIL_SHOWN).start()
        await ctx.session.hold(TAIL_HELD, tail)
    return tail


async def watch(ctx: PageContext) -> Response:
    ns, prefix = ctx.query.get("ns", ""), ctx.query.get("prefix", "")
    tail = await _tail(ctx, ns, prefix)
    return ctx.render(
        "keys_watch.html",
        ns=ns,
        key_prefix=prefix,
        tail=tail.poll(0),
        shown=TAIL_SHOWN,
        links=LINKS,
    )


async def tail(ctx: PageContext) -> Response:
    ns, prefix = ctx.query.get("ns", ""), ctx.query.get("prefix", "")
    page = (await _tail(ctx, ns, prefix)).poll(0)
    return ctx.render("keys_tail.html", ns=ns, key_prefix=prefix, tail=page, links=LINKS)


ROUTES = [
    ("GET", PATH, browse),
    ("GET", KEY, key),
    ("GET", DIFF, diff),
    ("GET", WATCH, watch),
    ("GET", TAIL, tail),
]
