"""One HTTP/1.1 keep-alive connection of AsyncClient's transport (see client/aio_transport.py).

:class:`Endpoint` is a node URL parsed once, with its idle connections; :class:`Connection`
is the ``asyncio.Protocol`` of one connection, with httptools (llhttp) parsing the answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httptools

from .wire import Request

if TYPE_CHECKING:
    from .aio_transport import Pool

__all__ = ["AnswerHeaders", "CannotConnect", "Connection", "ConnectionLost", "Endpoint"]


class CannotConnect(OSError):
    """No connection could be made (refused, DNS, TLS handshake, connect timeout, or closed
    by the server before anything was sent): the request was not sent."""


class ConnectionLost(ConnectionError):
    """The connection closed or broke after the request was written, before the whole
    answer arrived (also: an answer that is not valid HTTP/1.1). Outcome unknown."""


class Endpoint:
    """One node URL, parsed once: where to connect, the request-line prefix, and the idle
    keep-alive connections to it (most recently used last)."""

    __slots__ = ("auth", "heads", "host", "host_header", "idle", "port", "prefix", "tls", "url")

    def __init__(self, url: str, auth: str = "") -> None:
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
        self.auth = auth  # the Authorization header's value, "" for none
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = port if port is not None else (443 if self.tls else 80)
        self.host_header = parts.netloc
        self.prefix = parts.path
        self.idle: deque[Connection] = deque()
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
        if self.auth:
            lines.append(f"Authorization: {self.auth}")
        for line in lines:
            if "\r" in line or "\n" in line:
                raise ValueError(f"line break in HTTP request head: {line!r}")
        head = ("\r\n".join(lines) + "\r\n").encode("utf-8")
        if len(self.heads) < 256:
            self.heads[key] = (req.headers, head)
        return head


class AnswerHeaders:
    """httptools' ``on_header`` for an answer: its Content-Type (``ctype``), and whether
    Content-Length or Transfer-Encoding frame its body (``framed``; else it ends at EOF).
    Shared by this module's Connection and the blocking client's (client/sync_transport.py)."""

    __slots__ = ()
    ctype: str | None
    framed: bool

    def on_header(self, name: bytes, value: bytes) -> None:
        n = len(name)
        if n == 12:
            if name.lower() == b"content-type":
                self.ctype = value.decode("latin-1")
        elif (n == 14 and name.lower() == b"content-length") or (
            n == 17 and name.lower() == b"transfer-encoding"
        ):
            self.framed = True


class Connection(AnswerHeaders, asyncio.Protocol):
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

    def __init__(self, pool: Pool, ep: Endpoint) -> None:
        self.pool = pool
        self.ep = ep
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set at once
        self.parser = httptools.HttpResponseParser(self)
        self.fut: asyncio.Future[tuple[int, str | None, bytes]] | None = None
        self.closed = False  # connection_lost has run
        self.idle = False  # in ep.idle
        self.slot = False  # counts against max_connections (see Pool)
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
