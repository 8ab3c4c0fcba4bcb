"""Connection-level defences of node/api/server.py: a connection limit and read timeouts.

- `max_connections`: at most this many client connections are served at once. One more
  closes the connection that has been idle longest (no request in progress or queued, not
  in the middle of one: a keep-alive connection between requests, or one that never sent a
  byte), so idle connections cannot lock tenants out (issue 27, item 3: 1,024 idle
  connections without a token answered every new one 503). Only when every connection is
  serving a request is the new one answered `503 too_many_connections` with `Connection:
  close` (and `Retry-After: 1`), its side shut, what it sends discarded for
  `REFUSAL_LINGER` s (so it can read the answer instead of a reset), then closed. A refused
  connection is not counted.
- `keepalive_timeout` / `anonymous_keepalive_timeout`: how long a connection may stay
  idle between requests, the short one until the handler marked one of its requests
  `trusted` (node/api/routes.py: authenticated, or auth off).
- `max_connections_per_address`: the same among the connections of one client IP address
  (its own idle one closed first), so one host cannot take every slot.
- `header_timeout`: a connection must deliver a complete request head (request line and
  headers) within this many seconds of opening, and so must every later request on it,
  counted from its first byte. Slowloris (headers dribbled a byte at a time) and idle
  connections that never send a request are cut after it.
- `body_timeout`: once the head is in, the body must be complete within this many seconds.

A connection that runs out of time in the middle of a request gets `408 request_timeout`
and is closed; one that never sent a byte is closed without an answer (nothing to answer).
Pipelined requests waiting behind one being served do not run the clock (the server has
stopped reading, not the client).

- `max_pipelined` / `max_queued_bytes`: the server stops reading a connection once this
  many requests, or this many bytes of them (bodies and heads), are parsed and waiting
  behind the one being served, and reads again when they are below half. So a connection
  holds at most: the request being served (max_body_bytes + max_header_bytes), the queue
  (max_queued_bytes + one request that crossed it + what one socket read of 256 KiB
  completes), and one request being parsed. Defaults: 4 MiB bodies, 1 MiB queue: about
  10 MiB per connection, was 32 x 4 MiB (issue 27, item 4).

`fd_budget` keeps max_connections under the process's file-descriptor limit: it raises the
soft RLIMIT_NOFILE towards the hard one if needed, and lowers the effective limit (with a
warning) when even that is not enough, so accept() never fails with EMFILE.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("statekeeper.http")

# Seconds a refused connection may still read our 503 before it is closed.
REFUSAL_LINGER = 1.0
# File descriptors kept for everything but client connections (RocksDB, raft peers, logs).
FD_RESERVE = 256


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_body_bytes: int
    max_header_bytes: int = 64 * 1024
    # Pipelined requests parsed ahead of the one being served before we stop reading...
    max_pipelined: int = 32
    # ...and their bytes (bodies + heads): 32 requests of 4 MiB each behind a watch held
    # 128 MiB per connection that was never returned (issue 27, item 4).
    max_queued_bytes: int = 1024 * 1024
    # Seconds an idle keep-alive connection stays open (aiohttp's default too)...
    keepalive_timeout: float = 75.0
    # ...once one of its requests was `trusted` (authenticated); until then this long: a
    # connection that only sent a cheap open-route request lived 75 s (issue 27, item 3).
    anonymous_keepalive_timeout: float = 5.0
    # After rejecting a request mid-body we keep reading (and dropping) what the client
    # still sends, so it gets to read our answer instead of a reset: at most this long...
    linger_seconds: float = 5.0
    # ...and at most this many bytes.
    linger_bytes: int = 64 * 1024 * 1024
    # A streamed answer whose client accepts no data for this long is ended (StreamStalled).
    stream_stall_seconds: float = 30.0
    # Connections served at once, and how long a request's head / body may take to arrive
    # (node/api/limits.py).
    max_connections: int = 1024
    max_connections_per_address: int = 1024
    header_timeout: float = 10.0
    body_timeout: float = 30.0


def fd_budget(max_connections: int) -> int:
    """The connection limit this process can honour (see the module docstring)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return max_connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < want:
        effective = max(1, soft - FD_RESERVE)
        log.warning(
            "http.max_connections %d is above the file-descriptor limit %d (minus %d "
            "reserved): serving at most %d connections",
            max_connections,
            soft,
            FD_RESERVE,
            effective,
        )
        return effective
    return max_connections


class ReadClock:
    """One lazily re-armed timer per connection for header_timeout / body_timeout.

    The protocol moves `deadline` (0: not reading a request) as a request's head and body
    arrive; the timer only looks at it when it fires, so a request costs two float stores,
    not a cancel + call_at each.
    """

    __slots__ = ("deadline", "_handle", "_loop", "_expired", "_busy")

    def __init__(self, loop, expired, busy) -> None:
        self._loop = loop
        self._expired = expired  # called once the deadline passed while reading
        self._busy = busy  # () -> True while the server, not the client, holds things up
        self._handle = None
        self.deadline = 0.0

    def start(self, seconds: float) -> None:
        self.deadline = self._loop.time() + seconds
        if self._handle is None:
            self._handle = self._loop.call_at(self.deadline, self._fire)

    def stop(self) -> None:
        self.deadline = 0.0

    def cancel(self) -> None:
        self.deadline = 0.0
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        if not self.deadline:
            return
        now = self._loop.time()
        if self._busy():  # paused behind a request being served: look again later
            self.deadline = max(self.deadline, now + 1.0)
        if now >= self.deadline:
            self.deadline = 0.0
            self._expired()
            return
        self._handle = self._loop.call_at(self.deadline, self._fire)


class ConnectionTable:
    """The connections an HttpServer serves, counted by client address; at a limit a new
    one takes the place of the one idle longest (see the module docstring). A connection
    has `address`, `idle_since` (loop time), `idle()` and `abort()`."""

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.members: set[Any] = set()
        self.per_address: dict[str, int] = {}  # client IP -> its connections in `members`

    def admit(self, conn: Any) -> str:
        """Count a new connection in, closing the longest idle one (of its address, at the
        per-address limit) to make room; else why not ("": admitted)."""
        address = conn.address
        limits = self.limits
        if self.per_address.get(address, 0) >= limits.max_connections_per_address:
            if not self._evict_idle(address):
                return (
                    f"this node serves at most {limits.max_connections_per_address} "
                    "connections from one address, all busy; retry later"
                )
        if len(self.members) >= limits.max_connections and not self._evict_idle(None):
            return (
                f"this node serves at most {limits.max_connections} connections, all busy; "
                "retry later"
            )
        self.members.add(conn)
        self.per_address[address] = self.per_address.get(address, 0) + 1
        return ""

    def forget(self, conn: Any) -> None:
        if conn in self.members:
            self.members.discard(conn)
            left = self.per_address[conn.address] - 1
            if left:
                self.per_address[conn.address] = left
            else:
                del self.per_address[conn.address]

    def _evict_idle(self, address: str | None) -> bool:
        """Close the connection (of `address`, or any) idle the longest; False if none is.
        A scan of every connection, but only at a limit."""
        oldest = None
        for c in self.members:
            if (address is None or c.address == address) and c.idle():
                if oldest is None or c.idle_since < oldest.idle_since:
                    oldest = c
        if oldest is None:
            return False
        self.forget(oldest)
        oldest.abort()
        return True
