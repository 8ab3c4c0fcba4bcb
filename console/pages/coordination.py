"""The Coordination page: locks (holder and fence), leases (TTL counting down, attached
keys), effects (state, attempt, maybe_happened) and CRDTs (value, replicas) of one
namespace (console/views/coordination.py has the data).

Live parts, fetched again by htmx every second: the locks (a lock changing holder shows
its new holder and fence without a reload) and the leases. The lease TTL counts down on
the console's own clock: the API's ``remaining_ms`` is ``expires_ms`` minus the cluster
clock, which moves only with applied raft entries, so on a quiet cluster every read
answers the same number. LeaseCountdown keeps, per (lease, expiry), the earliest deadline
any read implied (read time + remaining_ms) and shows deadline - now; a keepalive moves
the expiry, which starts a new deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from statekeeper.client.errors import PermissionDenied
from statekeeper.console.context import PageContext
from statekeeper.console.views import coordination as view
from statekeeper.node.api.server import Response

TITLE = "Coordination"
PATH = "/ui/coordination"
LOCKS = PATH + "/locks"
LEASES = PATH + "/leases"


class LeaseCountdown:
    """(lease id, expires_ms) -> the deadline on this process's monotonic clock; at most
    MAX entries (the least recently shown go first), so the table stays bounded however
    many leases come and go."""

    MAX = 10_000

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._deadlines: OrderedDict[tuple[int, int], float] = OrderedDict()

    def remaining_ms(self, row: view.LeaseRow) -> int | None:
        """The time left as this read and the earlier ones imply (never more than the
        earliest deadline seen: the cluster clock only lags real time)."""
        if row.remaining_ms is None:
            return None
        now = self._clock()
        key = (row.lease_id, row.expires_ms)
        deadline = min(self._deadlines.get(key, float("inf")), now + row.remaining_ms / 1000)
        self._deadlines[key] = deadline
        self._deadlines.move_to_end(key)
        while len(self._deadlines) > self.MAX:
            self._deadlines.popitem(last=False)
        return max(0, round((deadline - now) * 1000))

    def __len__(self) -> int:
        return len(self._deadlines)


async def section(read: Awaitable[Any]) -> tuple[Any, str | None]:
    """(the view's page, None), or (None, the API's refusal) when the token may not read it:
    one refused section does not hide the others."""
    try:
        return await read, None
    except PermissionDenied as e:
        return None, e.message or "not allowed"


def _args(ctx: PageContext, name: str) -> dict[str, Any]:
    """The view arguments of one section: ns, prefix, limit and this section's cursor."""
    limit, _ = ctx.page_args()
    return {
        "ns": ctx.namespace(),
        "prefix": ctx.query.get("prefix", ""),
        "limit": limit,
        "cursor": ctx.query.get(f"{name}_cursor") or None,
    }


async def _locks(ctx: PageContext) -> dict[str, Any]:
    locks, error = await section(view.locks(ctx.client, **_args(ctx, "locks")))
    return {"locks": locks, "locks_error": error}


async def _leases(ctx: PageContext) -> dict[str, Any]:
    args = _args(ctx, "leases")
    del args["prefix"]
    leases, error = await section(view.leases(ctx.client, **args))
    clock = ctx.shared("coordination.lease_countdown", LeaseCountdown)
    left = {r.lease_id: clock.remaining_ms(r) for r in leases.leases} if leases else {}
    return {"leases": leases, "leases_error": error, "left": left}


def _values(ctx: PageContext) -> dict[str, Any]:
    """What every template of the page uses: the namespace, the filter and the links."""
    ns, prefix = ctx.namespace(), ctx.query.get("prefix", "")
    return {
        "ns": ns,
        "name_prefix": prefix,
        "locks_url": ctx.url(LOCKS, ns=ns, prefix=prefix or None, **_cursor(ctx, "locks")),
        "leases_url": ctx.url(LEASES, ns=ns, **_cursor(ctx, "leases")),
        "page_url": lambda **q: ctx.url(PATH, ns=ns, prefix=prefix or None, **q),
    }


def _cursor(ctx: PageContext, name: str) -> dict[str, str]:
    key = f"{name}_cursor"
    return {key: ctx.query[key]} if ctx.query.get(key) else {}


async def page(ctx: PageContext) -> Response:
    args = (_args(ctx, "effects"), _args(ctx, "crdts"))
    locks, leases, (effects, effects_error), (crdts, crdts_error) = await asyncio.gather(
        _locks(ctx),
        _leases(ctx),
        section(view.effects(ctx.client, **args[0])),
        section(view.crdts(ctx.client, **args[1])),
    )
    return ctx.render(
        "coordination.html",
        **_values(ctx),
        **locks,
        **leases,
        effects=effects,
        effects_error=effects_error,
        crdts=crdts,
        crdts_error=crdts_error,
    )


async def locks_live(ctx: PageContext) -> Response:
    return ctx.render("coordination_locks.html", **_values(ctx), **await _locks(ctx))


async def leases_live(ctx: PageContext) -> Response:
    return ctx.render("coordination_leases.html", **_values(ctx), **await _leases(ctx))


ROUTES = [("GET", PATH, page), ("GET", LOCKS, locks_live), ("GET", LEASES, leases_live)]
