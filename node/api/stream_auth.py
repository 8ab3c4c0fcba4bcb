"""Open streams keep their caller's token honest: a watch (node/api/watch.py) or a long poll
(node/reads.py) authenticated once when it opened, and would otherwise keep serving after
the token was revoked or expired (issue 27, item 2: a revoked reader's watch delivered
writes for as long as it stayed open, progress frames keeping it alive).

`TokenChanges` notices, after each apply, that the state machine's token table was
replaced (node/store/machine.py replaces the dict whole on every create or revoke; a
token op does not move the revision, so RevisionWaiters would not wake anybody) and wakes
every stream waiting on the loop through one shared future per change. `StreamGuard` is
one stream's principal: `error()` re-runs the check (revoked, expired), `wake_at()` is
the loop time at which the token expires, so a waiting stream looks again then.

A stream checks its guard after reading a page and before sending it: the token table is
replaced before the applied revision moves (machine.py), so a page holding a write
applied after the revoke is never sent. With auth off there is no guard.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from statekeeper.node.api.authz import Authorizer, Principal
from statekeeper.node.errors import OpError


class TokenChanges:
    """Wakes the loop's waiting streams when the token table changes."""

    def __init__(self, tokens: Callable[[], Mapping[str, Any]]) -> None:
        self._tokens = tokens
        self._seen: Mapping[str, Any] | None = None  # (the first apply wakes for nothing)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next: asyncio.Future[None] | None = None

    def applied(self) -> None:
        """Any thread (the raft thread, after each apply): one identity test per entry."""
        table = self._tokens()
        if table is self._seen:
            return
        self._seen = table
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._wake)

    def next_change(self) -> asyncio.Future[None]:
        """On the loop: resolved at the next change of the token table (shared)."""
        if self._next is None or self._next.done():
            self._loop = loop = asyncio.get_running_loop()
            self._next = loop.create_future()
        return self._next

    def _wake(self) -> None:
        fut, self._next = self._next, None
        if fut is not None and not fut.done():
            fut.set_result(None)


@dataclass(frozen=True, slots=True)
class StreamGuard:
    """One open stream's caller, re-checked (module docstring)."""

    authz: Authorizer
    principal: Principal
    changes: TokenChanges

    def error(self) -> OpError | None:
        """None while the token stands; else the `unauthenticated` error that ends it."""
        return self.authz.standing(self.principal)

    def wake_at(self, loop_now: float) -> float | None:
        """The loop time at which the token expires (None: it never does)."""
        expires = self.principal.expires_ms
        if not expires:
            return None
        return loop_now + max(0, expires - self.authz.clock()) / 1000

    def next_change(self) -> asyncio.Future[None]:
        return self.changes.next_change()
