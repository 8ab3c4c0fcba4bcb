"""A streamed answer (a watch) for AsyncClient, on a connection of its own.

The pooled connections of client/aio_transport.py collect a whole answer before handing
it over; a watch's answer never ends, so it gets :class:`StreamConnection` instead: an
``asyncio.Protocol`` with httptools parsing the answer that hands the head over as soon as
it is parsed and the body piece by piece (:meth:`StreamConnection.read`). It is not
pooled (it lives as long as the watch) and not counted against ``max_connections``; it is
closed when the watch ends or the client closes.

Bounded memory: above ``max_buffer`` unread body bytes the connection stops reading from
the socket (``pause_reading``) until the reader catches up, so a slow consumer pushes back
on the server (which ends the stream with ``watch_overflow`` if it stalls too long).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import deque

import httptools

from .aio_connection import CannotConnect, ConnectionLost, Endpoint
from .wire import Request

__all__ = ["StreamConnection", "open_stream"]


class StreamConnection(asyncio.Protocol):
    """One request whose answer is read as it arrives (see the module docstring)."""

    def __init__(self, ep: Endpoint, max_buffer: int = 1 << 20) -> None:
        self.ep = ep
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set at once
        self.parser = httptools.HttpResponseParser(self)
        self.head: asyncio.Future[tuple[int, str | None]] = self.loop.create_future()
        self.max_buffer = max_buffer
        self._ctype: str | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._done = False  # the whole answer arrived
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None

    # -- reading

    async def read(self, timeout: float | None) -> bytes | None:
        """The body bytes that arrived since the last read (waiting up to ``timeout``
        seconds for some), or None at the end of the answer. Raises ConnectionLost, or
        TimeoutError when nothing arrived in time."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._done:
                return None
            fut = self._waiter = self.loop.create_future()
            try:
                async with asyncio.timeout(timeout):
                    await fut
            finally:
                self._waiter = None
        data = b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        if self._paused and not self._done:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def read_all(self, timeout: float | None) -> bytes:
        """The rest of the answer (for an error answer, which is short)."""
        parts = []
        while (data := await self.read(timeout)) is not None:
            parts.append(data)
        return b"".join(parts)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, err: Exception) -> None:
        if self._error is None and not self._done:
            self._error = err
        if not self.head.done():
            self.head.set_exception(err)
        self._wake()

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(ConnectionLost(f"invalid HTTP answer from {self.ep.url}: {exc!r}"))
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done:
            why = "the connection closed in the middle of the watch stream"
            err = ConnectionLost(f"{why} ({exc})" if exc is not None else why)
            err.__cause__ = exc
            self._fail(err)

    # -- httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-type":
            self._ctype = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status >= 200 and not self.head.done():
            self.head.set_result((status, self._ctype))

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > self.max_buffer and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.parser.get_status_code() < 200:  # 100 Continue: the real answer follows
            return
        self._done = True
        self._wake()


async def open_stream(
    ep: Endpoint, req: Request, timeout: float, tls: ssl.SSLContext | None
) -> StreamConnection:
    """Connect to ``ep``, send ``req`` and wait (at most ``timeout`` seconds in all) for the
    answer's head: ``conn.head.result()`` is then ``(status, content_type)``. ``tls``: the
    context of an https endpoint. Raises CannotConnect (nothing sent), ConnectionLost or
    TimeoutError."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    tls = tls if ep.tls else None
    try:
        async with asyncio.timeout_at(deadline):
            _, conn = await loop.create_connection(
                lambda: StreamConnection(ep), ep.host, ep.port, ssl=tls
            )
    except TimeoutError as exc:
        raise CannotConnect(f"connecting to {ep.url} timed out") from exc
    except OSError as exc:
        raise CannotConnect(str(exc) or type(exc).__name__) from exc
    try:
        body = req.body or b""
        conn.transport.write(b"%sContent-Length: %d\r\n\r\n%s" % (ep.head(req), len(body), body))
        async with asyncio.timeout_at(deadline):
            await conn.head
    except BaseException:
        conn.close()
        raise
    return conn
