"""The asyncio transport of AsyncClient: a small HTTP/1.1 keep-alive connection pool.

An ``asyncio.Protocol`` per connection (:class:`aio_connection.Connection`) with
httptools (llhttp) parsing the answers, not aiohttp: aiohttp's ClientSession machinery
cost ~300 µs of CPU per request, which on a small machine capped what a client could
offer a cluster. It does what the node API needs and no more: one request at a time per
connection (no pipelining), keep-alive connections reused last-in first-out per
endpoint, at most ``max_connections`` open in total, Content-Length and chunked answers,
``Connection: close``, a lazily re-armed deadline timer per connection, and https
through asyncio's TLS.

Transport failures map to the three kinds of :func:`responses.connection_error`:
``connect`` (:class:`aio_connection.CannotConnect`: nothing was sent), ``timeout`` (no
whole answer in time) and ``lost`` (:class:`aio_connection.ConnectionLost`: the
connection broke or closed after the request was written, including a keep-alive
connection the server closed just as it was reused; the retry layer resends with the
same idempotency key).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from typing import Any

from .aio_connection import CannotConnect, Connection, Endpoint
from .errors import StatekeeperError
from .responses import connection_error
from .wire import Request

__all__ = ["Pool"]


# TimeoutError (no whole answer in time) is an OSError too; listed for the reader.
TRANSPORT_ERRORS = (OSError, TimeoutError)


def failure_kind(exc: BaseException) -> str:
    if isinstance(exc, CannotConnect):  # refused, DNS, connect timeout: nothing sent
        return "connect"
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "lost"


def _expire_wait(fut: asyncio.Future[Any], limit: int) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(f"no free connection in time (max_connections={limit})"))


class Pool:
    """The connections of one AsyncClient, bound to one event loop.

    At most ``limit`` connections are open (or being opened) at a time; each holds a
    "slot". A request takes the most recently used idle connection to its endpoint, else
    opens one if a slot is free (closing an idle connection to another endpoint if that
    frees one), else queues. A released connection goes straight to the first waiter
    (if it wants another endpoint, the connection is closed and its slot passed on).
    """

    __slots__ = (
        "_tls",
        "auth",
        "closed",
        "conns",
        "endpoints",
        "limit",
        "loop",
        "nopen",
        "waiters",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        limit: int,
        endpoints: dict[str, Endpoint],
        tls: ssl.SSLContext | None = None,
        auth: str = "",
    ) -> None:
        self.loop = loop
        self.limit = max(limit, 0)  # 0: no limit (aiohttp's TCPConnector semantics)
        self.endpoints = endpoints
        self.auth = auth  # the Authorization header of every request ("" for none)
        self.nopen = 0
        self.conns: set[Connection] = set()  # every connection holding a slot
        # (endpoint, future): the future gets a connection to that endpoint, or None
        # meaning "a slot is yours: open one".
        self.waiters: deque[tuple[Endpoint, asyncio.Future[Connection | None]]] = deque()
        self.closed = False
        self._tls = tls  # for https endpoints (client/tls.py)

    def endpoint(self, url: str) -> Endpoint:
        ep = self.endpoints.get(url)
        if ep is None:
            ep = self.endpoints[url] = Endpoint(url, self.auth)
        return ep

    async def attempt(
        self, url: str, req: Request, timeout: float
    ) -> tuple[int, str | None, bytes] | StatekeeperError:
        """One exchange with ``url``: ``(status, content_type, body)``, or the error a
        transport failure maps to (:func:`responses.connection_error`), returned."""
        try:
            return await self.send(url, req, timeout)
        except TRANSPORT_ERRORS as exc:
            return connection_error(failure_kind(exc), url, exc)

    async def send(self, url: str, req: Request, timeout: float) -> tuple[int, str | None, bytes]:
        """Send ``req`` to ``url`` and wait at most ``timeout`` seconds (waiting for a free
        connection included) for the whole answer; raises the transport's errors."""
        loop = self.loop
        if loop is not asyncio.get_running_loop():
            raise RuntimeError("an AsyncClient belongs to the event loop that first used it")
        ep = self.endpoints.get(url) or self.endpoint(url)
        body = req.body
        if body is not None:
            data = b"%sContent-Length: %d\r\n\r\n%s" % (ep.head(req), len(body), body)
        elif req.method == "GET":
            data = ep.head(req) + b"\r\n"
        else:
            data = ep.head(req) + b"Content-Length: 0\r\n\r\n"
        deadline = loop.time() + timeout
        conn = self.take(ep) or await self.connect(ep, deadline)
        fut = loop.create_future()
        conn.fut = fut
        conn.seen = conn.headers_done = False
        conn.arm(deadline, timeout)
        try:
            conn.transport.write(data)
            answer = await fut
        except BaseException:  # timeout, lost, cancelled: its answer must not reach anyone
            self.discard(conn)
            raise
        if conn.reusable:
            self.release(conn)
        else:
            self.discard(conn)
        return answer

    def take(self, ep: Endpoint) -> Connection | None:
        """An idle live connection to ``ep``, or None."""
        idle = ep.idle
        while idle:
            conn = idle.pop()
            conn.idle = False
            if not conn.closed and not conn.transport.is_closing():
                return conn
            self.discard(conn)
        return None

    async def connect(self, ep: Endpoint, deadline: float) -> Connection:
        """A connection to ``ep`` when none is idle: a new one, or one handed over."""
        while True:
            if self.closed:
                raise RuntimeError("AsyncClient is closed")
            if not self.limit or self.nopen < self.limit:
                self.nopen += 1
            elif not self._evict(ep):
                got = await self._wait(ep, deadline)
                if got is not None:
                    if not got.closed and not got.transport.is_closing():
                        return got
                    self.discard(got)
                    conn = self.take(ep)
                    if conn is not None:
                        return conn
                    continue
            try:  # we hold a slot
                return await self._open(ep, deadline)
            except BaseException:
                self._slot_freed()
                raise

    async def _open(self, ep: Endpoint, deadline: float) -> Connection:
        tls = self._tls if ep.tls else None
        try:
            async with asyncio.timeout_at(deadline):
                _, conn = await self.loop.create_connection(
                    lambda: Connection(self, ep), ep.host, ep.port, ssl=tls
                )
        except TimeoutError as exc:
            raise CannotConnect(f"connecting to {ep.url} timed out") from exc
        except OSError as exc:
            raise CannotConnect(str(exc) or type(exc).__name__) from exc
        if self.closed:
            conn.transport.abort()
            raise RuntimeError("AsyncClient is closed")
        if conn.closed or conn.transport.is_closing():
            raise CannotConnect(f"{ep.url} closed the connection before the request was sent")
        conn.slot = True
        self.conns.add(conn)
        return conn

    async def _wait(self, ep: Endpoint, deadline: float) -> Connection | None:
        fut: asyncio.Future[Connection | None] = self.loop.create_future()
        w = (ep, fut)
        self.waiters.append(w)
        timer = self.loop.call_at(deadline, _expire_wait, fut, self.limit)
        try:
            return await fut
        except BaseException:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                got = fut.result()  # handed over, but we were cancelled: pass it on
                if got is None:
                    self._slot_freed()
                else:
                    self.release(got)
            else:
                with contextlib.suppress(ValueError):
                    self.waiters.remove(w)
            raise
        finally:
            timer.cancel()

    def _evict(self, ep: Endpoint) -> bool:
        """Close the least recently used idle connection to another endpoint, keeping its
        slot for the caller; False if there is none."""
        for other in self.endpoints.values():
            if other is not ep and other.idle:
                conn = other.idle.popleft()
                conn.idle = False
                self._unslot(conn)
                conn.transport.close()
                return True
        return False

    def _unslot(self, conn: Connection) -> bool:
        if conn.slot:
            conn.slot = False
            self.conns.discard(conn)
            return True
        return False

    def _slot_freed(self) -> None:
        waiters = self.waiters
        while waiters:
            _, fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes to this waiter
                return
        self.nopen -= 1

    def release(self, conn: Connection) -> None:
        """``conn`` answered in full and may be reused."""
        if self.closed or conn.closed or conn.transport.is_closing():
            self.discard(conn)
            return
        waiters = self.waiters
        while waiters:
            ep, fut = waiters.popleft()
            if fut.done():
                continue
            if ep is conn.ep:
                fut.set_result(conn)
            else:
                self._unslot(conn)
                conn.transport.close()
                fut.set_result(None)
            return
        conn.idle = True
        conn.ep.idle.append(conn)

    def discard(self, conn: Connection) -> None:
        """Close ``conn`` at once (broken, timed out, cancelled, or not reusable)."""
        if conn.idle:
            conn.idle = False
            with contextlib.suppress(ValueError):
                conn.ep.idle.remove(conn)
        conn.fut = None
        conn.disarm()
        conn.transport.abort()
        if self._unslot(conn):
            self._slot_freed()

    def lost(self, conn: Connection) -> None:
        """From ``conn.connection_lost``."""
        conn.disarm()
        if conn.idle:
            conn.idle = False
            with contextlib.suppress(ValueError):
                conn.ep.idle.remove(conn)
        if self._unslot(conn):
            self._slot_freed()

    def close(self) -> int:
        """Close every connection (requests in flight fail as lost) and fail the waiters;
        returns how many connections were closed."""
        self.closed = True
        for ep in self.endpoints.values():
            for conn in ep.idle:
                conn.idle = False
            ep.idle.clear()
        conns = list(self.conns)
        self.conns.clear()
        self.nopen = 0
        for conn in conns:
            conn.slot = False
            with contextlib.suppress(RuntimeError):  # its loop is closed already
                if conn.fut is None:
                    conn.transport.close()
                else:
                    conn.transport.abort()
        waiters, self.waiters = self.waiters, deque()
        for _, fut in waiters:
            if not fut.done():
                fut.set_exception(RuntimeError("AsyncClient is closed"))
        return len(conns)
