"""asyncio client over a small HTTP/1.1 keep-alive connection pool.

Same methods and arguments as :class:`client.Client`, as coroutines. One AsyncClient
belongs to one event loop; share it between the tasks of that loop.

The transport is an ``asyncio.Protocol`` per connection with httptools (llhttp) parsing
the answers, not aiohttp: aiohttp's ClientSession machinery cost ~300 µs of CPU per
request, which on a small machine capped what a client could offer a cluster. It does
what the node API needs and no more: one request at a time per connection (no
pipelining), keep-alive connections reused last-in first-out per endpoint, at most
``max_connections`` open in total, Content-Length and chunked answers, ``Connection:
close``, a lazily re-armed deadline timer per connection, and https through asyncio's TLS.

Transport failures map to the three kinds of :func:`protocol.connection_error`:
``connect`` (:class:`CannotConnect`: nothing was sent), ``timeout`` (no whole answer in
time) and ``lost`` (:class:`ConnectionLost`: the connection broke or closed after the
request was written, including a keep-alive connection the server closed just as it was
reused; the retry layer resends with the same idempotency key).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httptools

from .errors import StatekeeperError
from .protocol import (
    CONSISTENCY_LEVELS,
    DEFAULT_ENDPOINT,
    MISSING,
    BatchOps,
    CompactResult,
    DeleteResult,
    KeyValue,
    RangeResult,
    Request,
    TxnResult,
    WriteResult,
    cas_request,
    compact_request,
    compare,
    connection_error,
    delete_request,
    get_request,
    ops,
    put_request,
    range_request,
    scan_next,
    status_request,
    txn_request,
)
from .retry import DEFAULT_RETRY, Backoff, Endpoints, Exchange, RetryPolicy, normalize_endpoint

__all__ = ["AsyncBatch", "AsyncClient"]


class CannotConnect(OSError):
    """No connection could be made (refused, DNS, TLS handshake, connect timeout, or closed
    by the server before anything was sent): the request was not sent."""


class ConnectionLost(ConnectionError):
    """The connection closed or broke after the request was written, before the whole
    answer arrived (also: an answer that is not valid HTTP/1.1). Outcome unknown."""


# TimeoutError (no whole answer in time) is an OSError too; listed for the reader.
_TRANSPORT_ERRORS = (OSError, TimeoutError)


def _kind(exc: BaseException) -> str:
    if isinstance(exc, CannotConnect):  # refused, DNS, connect timeout: nothing sent
        return "connect"
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "lost"


def _expire_wait(fut: asyncio.Future[Any], limit: int) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(f"no free connection in time (max_connections={limit})"))


class _Endpoint:
    """One node URL, parsed once: where to connect, the request-line prefix, and the idle
    keep-alive connections to it (most recently used last)."""

    __slots__ = ("heads", "host", "host_header", "idle", "port", "prefix", "tls", "url")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"endpoint {url!r}: the scheme must be http or https")
        if parts.username is not None or parts.password is not None:
            raise ValueError(f"endpoint {url!r}: credentials in the URL are not supported")
        try:
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"endpoint {url!r}: bad port") from exc
        if not parts.hostname:
            raise ValueError(f"endpoint {url!r}: no host")
        self.url = url
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = port if port is not None else (443 if self.tls else 80)
        self.host_header = parts.netloc
        self.prefix = parts.path
        self.idle: deque[_Conn] = deque()
        # (method, path) -> (the headers mapping it was built from, request head bytes)
        self.heads: dict[tuple[str, str], tuple[Mapping[str, str], bytes]] = {}

    def head(self, req: Request) -> bytes:
        """Request line, Host and the request's headers (without Content-Length and the
        blank line), built once per (method, path, headers mapping)."""
        key = (req.method, req.path)
        entry = self.heads.get(key)
        if entry is not None and entry[0] is req.headers:
            return entry[1]
        lines = [f"{req.method} {self.prefix}{req.path} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{k}: {v}" for k, v in req.headers.items() if k.lower() != "content-length"]
        for line in lines:
            if "\r" in line or "\n" in line:
                raise ValueError(f"line break in HTTP request head: {line!r}")
        head = ("\r\n".join(lines) + "\r\n").encode("utf-8")
        if len(self.heads) < 256:
            self.heads[key] = (req.headers, head)
        return head


class _Conn(asyncio.Protocol):
    """One keep-alive connection, one outstanding request at a time.

    The request's future (``fut``) gets ``(status, content_type, body)``, or
    ConnectionLost when the connection ends first, or TimeoutError at ``deadline``.
    ``reusable`` says whether the connection may serve another request afterwards.

    The deadline timer is armed lazily: one that fires before the current request's
    deadline (armed by an earlier request) re-arms itself, so a busy connection
    schedules about one timer per ``timeout`` seconds, not one per request.
    """

    __slots__ = (
        "answered",
        "chunks",
        "closed",
        "ctype",
        "deadline",
        "ep",
        "framed",
        "fut",
        "headers_done",
        "idle",
        "parser",
        "pool",
        "reusable",
        "seen",
        "slot",
        "timeout",
        "timer",
        "timer_at",
        "transport",
    )

    def __init__(self, pool: _Pool, ep: _Endpoint) -> None:
        self.pool = pool
        self.ep = ep
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set at once
        self.parser = httptools.HttpResponseParser(self)
        self.fut: asyncio.Future[tuple[int, str | None, bytes]] | None = None
        self.closed = False  # connection_lost has run
        self.idle = False  # in ep.idle
        self.slot = False  # counts against max_connections (see _Pool)
        self.reusable = False
        self.answered = 0  # whole answers received on this connection
        self.seen = False  # a byte of the current answer has arrived
        self.headers_done = False
        self.framed = False  # the answer has Content-Length or Transfer-Encoding
        self.ctype: str | None = None
        self.chunks: list[bytes] = []
        self.deadline = 0.0  # loop time by which the current answer must be complete
        self.timeout = 0.0  # the current request's timeout (for the error message)
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0  # when self.timer fires

    def arm(self, deadline: float, timeout: float) -> None:
        """Expire the current request at ``deadline`` (loop time)."""
        self.deadline = deadline
        self.timeout = timeout
        timer = self.timer
        if timer is None or self.timer_at > deadline:
            if timer is not None:
                timer.cancel()
            self.timer_at = deadline
            self.timer = self.pool.loop.call_at(deadline, self._on_timer)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _on_timer(self) -> None:
        self.timer = None
        fut = self.fut
        if fut is None or fut.done():  # idle (or already answered): stay disarmed
            return
        if self.deadline <= self.timer_at:
            fut.set_exception(TimeoutError(f"no answer within {self.timeout:g} s"))
        else:  # armed for an earlier request: wait for this one's deadline
            self.timer_at = self.deadline
            self.timer = self.pool.loop.call_at(self.deadline, self._on_timer)

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # asyncio and uvloop set it already
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.fut is None:  # nothing was asked: out of step, never reuse it
            self.reusable = False
            self.transport.abort()
            return
        self.seen = True
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.reusable = False
            fut, self.fut = self.fut, None
            if fut is not None and not fut.done():
                fut.set_exception(
                    ConnectionLost(f"invalid HTTP answer from {self.ep.url}: {exc!r}")
                )
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        fut, self.fut = self.fut, None
        if fut is not None and not fut.done():
            status = self.parser.get_status_code()
            if exc is None and self.headers_done and not self.framed and status >= 200:
                # An answer without Content-Length or chunking ends with the connection.
                fut.set_result((status, self.ctype, b"".join(self.chunks)))
            else:
                if self.seen:
                    why = "the connection closed in the middle of the answer"
                elif self.answered:
                    why = "the server closed the keep-alive connection before answering"
                else:
                    why = "the server closed the connection before answering"
                err = ConnectionLost(f"{why} ({exc})" if exc is not None else why)
                err.__cause__ = exc
                fut.set_exception(err)
        self.pool.lost(self)

    # -- httptools callbacks

    def on_message_begin(self) -> None:
        if self.fut is None:  # a second answer to one request
            self.reusable = False
        self.headers_done = False
        self.framed = False
        self.ctype = None
        self.chunks.clear()

    def on_header(self, name: bytes, value: bytes) -> None:
        n = len(name)
        if n == 12:
            if name.lower() == b"content-type":
                self.ctype = value.decode("latin-1")
        elif (n == 14 and name.lower() == b"content-length") or (
            n == 17 and name.lower() == b"transfer-encoding"
        ):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.headers_done = True
        # Connection: close, HTTP/1.0 without keep-alive, or a body read to EOF: no reuse.
        self.reusable = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # 100 Continue and other interim answers: the real one follows
            return
        self.answered += 1
        chunks = self.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()  # an idle connection keeps no answer alive
        fut, self.fut = self.fut, None
        if fut is None:
            self.reusable = False
        elif not fut.done():
            fut.set_result((status, self.ctype, body))


class _Pool:
    """The connections of one AsyncClient, bound to one event loop.

    At most ``limit`` connections are open (or being opened) at a time; each holds a
    "slot". A request takes the most recently used idle connection to its endpoint, else
    opens one if a slot is free (closing an idle connection to another endpoint if that
    frees one), else queues. A released connection goes straight to the first waiter
    (if it wants another endpoint, the connection is closed and its slot passed on).
    """

    __slots__ = ("_tls", "closed", "conns", "endpoints", "limit", "loop", "nopen", "waiters")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, limit: int, endpoints: dict[str, _Endpoint]
    ) -> None:
        self.loop = loop
        self.limit = max(limit, 0)  # 0: no limit (aiohttp's TCPConnector semantics)
        self.endpoints = endpoints
        self.nopen = 0
        self.conns: set[_Conn] = set()  # every connection holding a slot
        # (endpoint, future): the future gets a connection to that endpoint, or None
        # meaning "a slot is yours: open one".
        self.waiters: deque[tuple[_Endpoint, asyncio.Future[_Conn | None]]] = deque()
        self.closed = False
        self._tls: ssl.SSLContext | None = None

    def endpoint(self, url: str) -> _Endpoint:
        ep = self.endpoints.get(url)
        if ep is None:
            ep = self.endpoints[url] = _Endpoint(url)
        return ep

    def take(self, ep: _Endpoint) -> _Conn | None:
        """An idle live connection to ``ep``, or None."""
        idle = ep.idle
        while idle:
            conn = idle.pop()
            conn.idle = False
            if not conn.closed and not conn.transport.is_closing():
                return conn
            self.discard(conn)
        return None

    async def connect(self, ep: _Endpoint, deadline: float) -> _Conn:
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

    async def _open(self, ep: _Endpoint, deadline: float) -> _Conn:
        tls = None
        if ep.tls:
            tls = self._tls
            if tls is None:
                tls = self._tls = ssl.create_default_context()
        try:
            async with asyncio.timeout_at(deadline):
                _, conn = await self.loop.create_connection(
                    lambda: _Conn(self, ep), ep.host, ep.port, ssl=tls
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

    async def _wait(self, ep: _Endpoint, deadline: float) -> _Conn | None:
        fut: asyncio.Future[_Conn | None] = self.loop.create_future()
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

    def _evict(self, ep: _Endpoint) -> bool:
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

    def _unslot(self, conn: _Conn) -> bool:
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

    def release(self, conn: _Conn) -> None:
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

    def discard(self, conn: _Conn) -> None:
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

    def lost(self, conn: _Conn) -> None:
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


class AsyncClient:
    """asyncio statekeeper client; same arguments and methods as :class:`client.Client`.

    Args:
        endpoints: one node URL, a list of them, or a comma-separated string. Any node
            serves any request; the client sticks to the node that last answered and
            moves on to the next one when it fails.
        ns: default namespace of every call.
        timeout: seconds to wait for one HTTP answer.
        retry: the RetryPolicy (attempts, backoff, overall deadline).
        consistency: default read consistency, ``"linearizable"`` or ``"serializable"``.
        prefer_leader: ask ``GET /v1/status`` which node leads and talk to it first, and
            again after a failure (default; saves the follower-to-leader hop). False:
            stick to the order given.
        max_connections: keep-alive connections kept (in total).

    Example::

        async with AsyncClient("http://127.0.0.1:7000", ns="agent-42") as c:
            await c.put("plan", b"step 1")
            kv = await c.get("plan")

    Connections are opened on first use; call :meth:`close` (or use ``async with``)
    when done.
    """

    ops = ops
    """Op builders for :meth:`txn` branches: ``client.ops.put(key, value)`` etc."""
    compare = compare
    """Compare builders for :meth:`txn`: ``client.compare.version(key) == 3`` etc."""

    def __init__(
        self,
        endpoints: str | Sequence[str] = DEFAULT_ENDPOINT,
        *,
        ns: str = "default",
        timeout: float = 10.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        consistency: str = "linearizable",
        prefer_leader: bool = True,
        max_connections: int = 32,
    ) -> None:
        if consistency not in CONSISTENCY_LEVELS:
            raise ValueError(f"consistency must be one of {CONSISTENCY_LEVELS}")
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        self.ns = ns
        self.timeout = float(timeout)
        self.retry = retry
        self.consistency = consistency
        self._max_connections = max_connections
        self._endpoints = Endpoints(endpoints)
        # Parsed here so a bad endpoint fails now, not at the first request.
        self._eps = {url: _Endpoint(url) for url in self._endpoints.urls}
        self._pool: _Pool | None = None  # created on first use, in the loop that uses it
        # With one endpoint there is nothing to choose: no status round trip.
        self.prefer_leader = prefer_leader and len(self._endpoints.urls) > 1
        self._leader_stale = self.prefer_leader
        self._closed = False

    # ------------------------------------------------------------------ plumbing

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The normalized endpoint URLs."""
        return self._endpoints.urls

    @property
    def endpoint(self) -> str:
        """The endpoint the next request goes to."""
        return self._endpoints.current

    def _open(self) -> _Pool:
        if self._closed:
            raise RuntimeError("AsyncClient is closed")
        if self._pool is None:
            self._pool = _Pool(asyncio.get_running_loop(), self._max_connections, self._eps)
        return self._pool

    async def _send(self, url: str, req: Request, timeout: float) -> tuple[int, str | None, bytes]:
        pool = self._pool or self._open()
        loop = pool.loop
        if loop is not asyncio.get_running_loop():
            raise RuntimeError("an AsyncClient belongs to the event loop that first used it")
        ep = self._eps.get(url) or pool.endpoint(url)
        body = req.body
        if body is not None:
            data = b"%sContent-Length: %d\r\n\r\n%s" % (ep.head(req), len(body), body)
        elif req.method == "GET":
            data = ep.head(req) + b"\r\n"
        else:
            data = ep.head(req) + b"Content-Length: 0\r\n\r\n"
        deadline = loop.time() + timeout
        conn = pool.take(ep) or await pool.connect(ep, deadline)
        fut = loop.create_future()
        conn.fut = fut
        conn.seen = conn.headers_done = False
        conn.arm(deadline, timeout)
        try:
            conn.transport.write(data)
            answer = await fut
        except BaseException:  # timeout, lost, cancelled: its answer must not reach anyone
            pool.discard(conn)
            raise
        if conn.reusable:
            pool.release(conn)
        else:
            pool.discard(conn)
        return answer

    async def _once(self, url: str, req: Request, timeout: float) -> Any:
        """One attempt at ``url``, no retry."""
        try:
            status, ctype, body = await self._send(url, req, timeout)
        except _TRANSPORT_ERRORS as exc:
            raise connection_error(_kind(exc), url, exc) from exc
        return req.parse(status, ctype, body)

    async def _call(self, req: Request) -> Any:
        if self._closed:
            raise RuntimeError("AsyncClient is closed")
        if self._leader_stale:
            await self._discover_leader()
        ex = Exchange(req, self._endpoints, self.retry, self.timeout)
        while True:
            url, timeout = ex.next_attempt()
            try:
                status, ctype, body = await self._send(url, req, timeout)
            except _TRANSPORT_ERRORS as exc:
                out = ex.failed(connection_error(_kind(exc), url, exc))
            else:
                out = ex.received(status, ctype, body)
                if type(out) is not Backoff:
                    return out
            await asyncio.sleep(out.delay)
            if self.prefer_leader:
                await self._discover_leader()

    async def _discover_leader(self) -> None:
        self._leader_stale = False
        timeout = min(self.timeout, 1.0)
        for url in self._endpoints.rotation():
            try:
                info = await self._once(url, status_request(), timeout)
            except StatekeeperError:
                continue
            leader = url if info.get("role") == "leader" else info.get("leader_url")
            if isinstance(leader, str) and self._endpoints.prefer(leader):
                return

    def _ns(self, ns: str | None) -> str:
        return self.ns if ns is None else ns

    def _consistency(self, consistency: str | None) -> str:
        return self.consistency if consistency is None else consistency

    # ------------------------------------------------------------------ API

    async def put(
        self,
        key: str,
        value: bytes | str,
        *,
        ns: str | None = None,
        idempotency_key: str | None = None,
        prev_kv: bool = False,
    ) -> WriteResult:
        """Set ``key`` to ``value`` (bytes, or str stored as UTF-8).

        Args:
            key: the key (str, no NUL, at most 4 KiB of UTF-8).
            value: the value (at most 1 MiB).
            ns: namespace; defaults to the client's.
            idempotency_key: reuse a key to make a repeated call apply once (a fresh
                uuid4 is used otherwise; retries inside the call always reuse it).
            prev_kv: also return the key's previous KeyValue.

        Returns:
            WriteResult with the write's ``revision`` (and ``prev_kv``).

        Raises:
            InvalidRequest: bad key/value, too large.
            Unavailable, Timeout: no node could apply it in time (after retries); for a
                Timeout the write may still happen, retry with ``err.idempotency_key``.
        """
        return await self._call(
            put_request(self._ns(ns), key, value, idempotency_key=idempotency_key, prev_kv=prev_kv)
        )

    async def get(
        self,
        key: str,
        *,
        ns: str | None = None,
        revision: int | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
        default: Any = MISSING,
    ) -> KeyValue | Any:
        """Read ``key``.

        Args:
            key: the key.
            ns: namespace; defaults to the client's.
            revision: read the key as it was right after this store revision.
            consistency: ``"linearizable"`` or ``"serializable"``; defaults to the
                client's.
            min_revision: serve only once the node has applied at least this revision.
            default: returned instead of raising NotFound when the key does not exist.

        Returns:
            The KeyValue (``.value`` bytes, ``.text`` str, ``.version``,
            ``.mod_revision``, ``.revision`` = revision the read was served at).

        Raises:
            NotFound: the key does not exist (and no ``default`` was given).
            Compacted: ``revision`` is older than the compaction point.
            InvalidRequest: ``future_revision`` and other bad arguments.
        """
        return await self._call(
            get_request(
                self._ns(ns),
                key,
                revision=revision,
                consistency=self._consistency(consistency),
                min_revision=min_revision,
                default=default,
            )
        )

    async def delete(
        self,
        key: str,
        *,
        ns: str | None = None,
        prefix: bool = False,
        idempotency_key: str | None = None,
        prev_kv: bool = False,
    ) -> DeleteResult:
        """Delete ``key`` (or, with ``prefix=True``, every key starting with ``key``).

        Deleting a missing key is not an error: ``deleted`` is 0.

        Returns:
            DeleteResult(revision, deleted, prev_kvs).
        """
        return await self._call(
            delete_request(
                self._ns(ns), key, prefix=prefix, prev_kv=prev_kv, idempotency_key=idempotency_key
            )
        )

    async def range(
        self,
        prefix: str | None = None,
        *,
        start: str | None = None,
        end: str | None = None,
        limit: int | None = None,
        ns: str | None = None,
        revision: int | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
        keys_only: bool = False,
        continuation: Any = None,
    ) -> RangeResult:
        """Read one page of keys in byte order: keys starting with ``prefix``, or keys in
        ``[start, end)``, or (neither given) the whole namespace.

        Args:
            prefix: key prefix (exclusive with start/end).
            start: first key (inclusive).
            end: stop before this key (exclusive); open-ended if omitted.
            limit: page size (server default 1000).
            ns: namespace; defaults to the client's.
            revision: read as of this store revision.
            consistency: ``"linearizable"`` or ``"serializable"``.
            min_revision: see :meth:`get`.
            keys_only: skip values (``KeyValue.value`` is ``b""``).
            continuation: the previous page's ``continuation``.

        Returns:
            RangeResult(kvs, revision, more, continuation). Use :meth:`scan` to iterate
            over all pages.
        """
        return await self._call(
            range_request(
                self._ns(ns),
                prefix,
                start=start,
                end=end,
                limit=limit,
                continuation=continuation,
                revision=revision,
                consistency=self._consistency(consistency),
                min_revision=min_revision,
                keys_only=keys_only,
            )
        )

    async def scan(
        self,
        prefix: str | None = None,
        *,
        start: str | None = None,
        end: str | None = None,
        ns: str | None = None,
        revision: int | None = None,
        consistency: str | None = None,
        keys_only: bool = False,
        page_size: int | None = None,
    ) -> AsyncIterator[KeyValue]:
        """Iterate (``async for``) over every matching KeyValue, fetching pages lazily.

        Same selection as :meth:`range`; all pages are read at the first page's revision
        (one consistent snapshot).
        """
        ns = self._ns(ns)
        page = await self.range(
            prefix,
            start=start,
            end=end,
            limit=page_size,
            ns=ns,
            revision=revision,
            consistency=consistency,
            keys_only=keys_only,
        )
        while True:
            for kv in page.kvs:
                yield kv
            nxt = scan_next(page)
            if nxt is None:
                return
            page = await self.range(
                prefix, start=start, end=end, limit=page_size, ns=ns, keys_only=keys_only, **nxt
            )

    async def cas(
        self,
        key: str,
        value: bytes | str,
        *,
        expect_version: int | None = None,
        expect_mod_revision: int | None = None,
        must_not_exist: bool = False,
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> WriteResult:
        """Compare-and-swap: write ``value`` only if the key is as expected.

        Give exactly one of ``expect_version=v`` (0 = missing),
        ``expect_mod_revision=r`` or ``must_not_exist=True``.

        Returns:
            WriteResult(revision, ...) when the swap happened.

        Raises:
            Conflict: the expectation did not hold; ``err.current`` is the key's current
                KeyValue (None if it does not exist). Nothing was written.
            InvalidRequest: not exactly one expectation given, or bad arguments.
        """
        return await self._call(
            cas_request(
                self._ns(ns),
                key,
                value,
                expect_version=expect_version,
                expect_mod_revision=expect_mod_revision,
                must_not_exist=must_not_exist,
                idempotency_key=idempotency_key,
            )
        )

    async def txn(
        self,
        compare: Iterable[Mapping[str, Any]],
        success: Iterable[Mapping[str, Any]],
        failure: Iterable[Mapping[str, Any]] = (),
        *,
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> TxnResult:
        """Atomic transaction: if every compare holds run ``success``, else ``failure``.

        ::

            r = await client.txn(
                [client.compare.version("lock") == 0],
                [client.ops.put("lock", "agent-1")],
                [client.ops.get("lock")],
            )

        Branch ops: put, delete, get, range. All writes share one revision.

        Returns:
            TxnResult(succeeded, revision, results), one result per op of the branch run.
        """
        return await self._call(
            txn_request(self._ns(ns), compare, success, failure, idempotency_key=idempotency_key)
        )

    def batch(self, *, ns: str | None = None, consistency: str | None = None) -> AsyncBatch:
        """Collect several ops and send them in one request (POST /v1/batch).

        Not atomic (use :meth:`txn`); ``results`` holds, per op, its result or the
        exception instance (not raised)::

            async with client.batch() as b:
                b.put("a", "1").put("b", "2").get("c")
            a_res, b_res, c_kv = b.results

        Leaving the ``async with`` block sends it; or ``await b.execute()``.
        """
        return AsyncBatch(self, self._ns(ns), consistency)

    async def compact(self, revision: int, *, idempotency_key: str | None = None) -> CompactResult:
        """Drop history older than ``revision`` (reads below it then fail Compacted).

        Args:
            revision: the new compaction point.
            idempotency_key: see :meth:`put`.

        Returns:
            CompactResult(revision, compact_revision).
        """
        return await self._call(compact_request(revision, idempotency_key=idempotency_key))

    async def status(self, endpoint: str | None = None) -> dict[str, Any]:
        """Node status (role, term, leader_url, commit_index, applied_index, revision,
        compact_revision, node id) as a dict.

        Args:
            endpoint: ask this node (one attempt, no retry); by default the current
                endpoint, with retries.
        """
        if endpoint is None:
            return await self._call(status_request())
        if self._closed:
            raise RuntimeError("AsyncClient is closed")
        return await self._once(normalize_endpoint(endpoint), status_request(), self.timeout)

    async def close(self) -> None:
        """Close the connections. The client cannot be used afterwards."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None and pool.close():
            await asyncio.sleep(0)  # let the transports finish closing their sockets

    async def __aenter__(self) -> AsyncClient:
        self._open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncClient({list(self.endpoints)!r}, ns={self.ns!r})"


class AsyncBatch(BatchOps):
    """Ops collected for one POST /v1/batch; see :meth:`AsyncClient.batch`.

    Attributes:
        results: after sending, one entry per op: its result or the StatekeeperError
            instance for an op that failed.
    """

    def __init__(self, client: AsyncClient, ns: str, consistency: str | None = None) -> None:
        super().__init__(ns, consistency)
        self._client = client
        self.results: list[Any] | None = None

    async def execute(self) -> list[Any]:
        """Send the collected ops; returns (and stores in ``results``) the per-op results."""
        self.results = await self._client._call(self.request()) if self.ops else []
        return self.results

    async def __aenter__(self) -> AsyncBatch:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None and self.results is None:
            await self.execute()
