"""The console's sessions: a bounded in-memory table, session id -> the user's token, its
AsyncClient, its CSRF token and what `auth_whoami` said about it.

Why in memory: a session is only a handle on a token the user typed; losing the table (a
restart) costs a new login, and nothing secret is ever written to disk or put in a page.
The cookie carries only the random session id (32 bytes, secrets.token_urlsafe):
HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it), Secure
when the console is served over TLS.

Bounds: at most MAX_SESSIONS sessions (each holds a client with a small connection pool);
a login beyond that closes the session idle the longest. Only a login that the cluster
accepted (a valid token) makes a session, so filling the table needs valid tokens. A
session unused for IDLE_SECONDS is gone (checked when it is next used, and swept at each
login).

Per-session resources (e.g. the Keys page's live tail, a watch held open on the
cluster) are kept with :meth:`Session.hold`: one per name, and each is closed with the
session however it ends (logout, idle expiry, eviction by a newer login), so a session
that goes away leaves no watch running.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from statekeeper.client.aio import AsyncClient
    from statekeeper.client.auth.commands import TokenInfo

log = logging.getLogger("statekeeper.console")

MAX_SESSIONS = 256


class Closable(Protocol):
    async def close(self) -> None: ...


IDLE_SECONDS = 30 * 60.0


@dataclass(eq=False)
class Session:
    id: str
    client: AsyncClient
    whoami: TokenInfo
    # The hidden field every POST form carries (compared in constant time: csrf_ok).
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    last_used: float = 0.0
    # Objects pages keep for this session (hold()), closed with it.
    _held: dict[str, Closable] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:  # never the session id, the token or the CSRF token
        return f"Session(token_id={self.whoami.id!r})"

    def csrf_ok(self, sent: str | None) -> bool:
        return sent is not None and hmac.compare_digest(sent.encode(), self.csrf.encode())

    def held(self, name: str) -> Any:
        """The resource held under ``name`` (None: none)."""
        return self._held.get(name)

    async def hold(self, name: str, resource: Closable) -> None:
        """Keep ``resource`` under ``name`` until the session ends (then its ``close()`` is
        awaited); the one it replaces is closed now."""
        old = self._held.pop(name, None)
        self._held[name] = resource
        if old is not None and old is not resource:
            await _close_quietly(old)

    async def close(self) -> None:
        """Close what the session holds, then its client."""
        held, self._held = list(self._held.values()), {}
        for resource in held:
            await _close_quietly(resource)
        await self.client.close()


async def _close_quietly(resource: Closable) -> None:
    # One resource failing to close must not keep the others (or the client) open.
    try:
        await resource.close()
    except Exception:
        log.warning(
            "console: closing a session's %s failed", type(resource).__name__, exc_info=True
        )


class Sessions:
    """The table. Least recently used first (an OrderedDict moved to the end on use)."""

    def __init__(
        self,
        max_sessions: int = MAX_SESSIONS,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._table: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._table)

    async def open(self, client: AsyncClient, whoami: TokenInfo) -> Session:
        """A new session for a token the cluster accepted; closes the idle-longest one
        when the table is full, and any that expired."""
        now = self._clock()
        for stale in [s for s in self._table.values() if now - s.last_used > self.idle_seconds]:
            await self.close(stale.id)
        while len(self._table) >= self.max_sessions:
            await self.close(next(iter(self._table)))
        session = Session(secrets.token_urlsafe(32), client, whoami, last_used=now)
        self._table[session.id] = session
        return session

    async def get(self, session_id: str | None) -> Session | None:
        """The live session of this id (and it counts as used now), else None."""
        session = self._table.get(session_id or "")
        if session is None:
            return None
        now = self._clock()
        if now - session.last_used > self.idle_seconds:
            await self.close(session.id)
            return None
        session.last_used = now
        self._table.move_to_end(session.id)
        return session

    async def close(self, session_id: str) -> None:
        session = self._table.pop(session_id, None)
        if session is not None:
            await session.close()

    async def close_all(self) -> None:
        for session_id in list(self._table):
            await self.close(session_id)

    def sessions(self) -> list[Any]:
        """The live sessions, least recently used first (for tests and metrics)."""
        return list(self._table.values())
