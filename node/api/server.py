"""A small HTTP/1.1 server: asyncio.Protocol + httptools (llhttp, the parser Node.js uses).

Why not aiohttp's server: on two shared cores its per-request machinery (request and
response objects, router, middleware chain, stream writer) cost a leader about as much CPU
as raft replication itself. This module does only what the node's API needs: keep-alive,
pipelining (answers in order), Content-Length and chunked request bodies, Expect:
100-continue, size limits that answer before reading an oversize body, an idle timeout,
and a graceful close. Routing and error bodies belong to the caller (node/api/routes.py).

Streamed answers (a handler returns a `StreamedResponse`, e.g. node/api/watch.py's watch): the
head goes out with `Transfer-Encoding: chunked`, then each bytes item of the response's
async generator as one chunk, then the last (empty) chunk. The writer asks the generator
for the next item only while the socket drains (pause_writing/resume_writing), so a slow
client holds back the producer instead of filling memory. A client that accepts nothing
for `stream_stall_seconds` gets `StreamStalled` thrown into the generator at its yield
(it may yield one last chunk, say an overflow notice), and the connection is closed. When
the client goes away the generator is cancelled; at `close()` it is cancelled too and the
stream ends cleanly (last chunk, then the connection closes).

Graceful shutdown (node/shutdown.py): `drain()` stops accepting, answers every request
not yet started with a retryable 503 `unavailable` + Connection: close, and lets the
requests in progress finish (`busy()` counts them); `close()` then drops what is left.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus

import httptools

from statekeeper.node.api.audit_log import loggable
from statekeeper.node.api.chunked import (
    LAST_CHUNK,
    Flow,
    StreamedResponse,
    StreamStalled,
    pump,
    stream_head,
)
from statekeeper.node.api.limits import REFUSAL_LINGER, ConnectionTable, ReadClock, ServerLimits

__all__ = ["HttpServer", "Request", "Response", "ServerLimits", "StreamStalled", "StreamedResponse"]

log = logging.getLogger("statekeeper.http")

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_HEAD_STARTS_KEPT = 64  # HttpServer.head_starts: statuses x content types seen


@dataclass(slots=True)
class Request:
    method: str
    path: str  # without the query string
    query: str
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    body: bytes
    peer: str = ""  # the client's "host:port" (for logs)
    # Set by the handler when the caller proved who it is (a valid token, or auth off):
    # its connection then keeps the long keep-alive (ServerLimits.keepalive_timeout).
    trusted: bool = False

    @property
    def content_length(self) -> int:
        return len(self.body)


@dataclass(slots=True)
class Response:
    status: int
    body: bytes
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Awaitable[Response | StreamedResponse]]
# (status, code, message) -> the error body in the API's own format.
ErrorResponder = Callable[[int, str, str], Response]


class _Reject(Exception):
    """Raised inside a parser callback; the protocol answers `status` and closes."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class HttpServer:
    """Listens on one address; `close()` lets answers in progress finish first."""

    def __init__(
        self,
        handler: Handler,
        error_response: ErrorResponder,
        limits: ServerLimits,
        *,
        extra_headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.handler = handler
        self.error_response = error_response
        self.limits = limits
        # Pre-encoded once: every answer carries them (e.g. X-Statekeeper-Node).
        self.fixed_headers = b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in extra_headers)
        # (status, content type) -> the head up to the Content-Length value: built once,
        # formatting it per answer cost ~1.5 us (issue 28). Bounded: few of each.
        self.head_starts: dict[tuple[int, str], bytes] = {}
        # The connections served, counted by client address (node/api/limits.py).
        self.table = ConnectionTable(limits)
        self.connections: set[_HttpProtocol] = self.table.members
        self._server: asyncio.base_events.Server | None = None
        self.closing = False
        self.draining = ""  # set by drain(): the 503's message
        self.require_client_cert = False

    async def start(
        self,
        host: str,
        port: int,
        tls: ssl.SSLContext | None = None,
        require_client_cert: bool = False,
    ) -> None:
        """Listen; with `tls`, HTTPS (the handshake counts against header_timeout).

        `require_client_cert`: connections without a (verified) client certificate get a
        401 client_certificate_required and are closed. Checked here rather than by the
        handshake (`tls` then asks with CERT_OPTIONAL): in TLS 1.3 the client finishes its
        handshake before the server judges its certificate, so a handshake refusal reaches
        the client as a bare EOF after it sent its request, which it cannot tell from a
        crash ("outcome unknown"); an HTTP answer says what is wrong."""
        self.require_client_cert = require_client_cert
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _HttpProtocol(self),
            host,
            port,
            reuse_address=True,
            ssl=tls,
            ssl_handshake_timeout=self.limits.header_timeout if tls else None,
        )

    @property
    def port(self) -> int:
        """The bound port (useful after start(host, 0))."""
        assert self._server is not None, "not started"
        return self._server.sockets[0].getsockname()[1]

    def drain(self, message: str) -> None:
        """Begin a graceful shutdown: stop accepting connections; from now on every request
        not yet started gets 503 `unavailable` (`message`) with Connection: close, and an
        answer in progress goes out with Connection: close. Idle connections stay open, so
        a client's next request on one gets that clean, retryable 503 rather than a reset
        it would have to read as "outcome unknown". Streamed answers end now."""
        self.draining = message
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn._stop_stream()

    def busy(self) -> int:
        """Connections with a request in progress (drain() waits for these)."""
        return sum(1 for c in self.connections if c._busy)

    async def close(self, grace: float = 5.0) -> None:
        """Stop accepting, close idle connections, wait up to `grace` s for busy ones."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close_when_idle()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            conn.abort()
        if self._server is not None:
            await self._server.wait_closed()


def _head_start(status: int, content_type: str) -> bytes:
    """An answer's status line and Content-Type, up to the Content-Length value."""
    return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: " % (
        status,
        _REASONS.get(status, b"Unknown"),
        content_type.encode("latin-1"),
    )


def _peer_certificate(transport: asyncio.BaseTransport) -> bool:
    """Whether the TLS peer sent a certificate (which the handshake then verified)."""
    tls = transport.get_extra_info("ssl_object")
    return tls is not None and bool(tls.getpeercert(binary_form=True))


class _HttpProtocol(asyncio.Protocol):
    """One client connection. Requests are parsed as they arrive and answered in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.limits = server.limits
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._peer = ""  # "host:port" of the client, set by connection_made
        self.address = ""  # the client's IP address (the per-address limit's key)
        self.parser = httptools.HttpRequestParser(self)
        # Parse state of the request being read.
        self._url = b""
        self._headers: dict[str, str] = {}
        self._header_bytes = 0
        self._body: list[bytes] = []
        self._body_bytes = 0
        # Parsed requests waiting for their turn; (request, keep_alive, bytes) or a rejection.
        self._queue: deque[tuple[Request, bool, int] | _Reject] = deque()
        self.queued_bytes = 0  # bodies and heads of the requests in _queue
        self._busy = False
        self._paused = False
        self._closed = False
        self._close_when_idle = False
        self._lingering = 0  # > 0: bytes still allowed in before we drop the connection
        self._idle_timer: asyncio.TimerHandle | None = None
        self.idle_since = 0.0  # loop time of the last answer (or of the connection)
        # Streamed answers: the task writing one, whether we asked it to stop, and the
        # transport's flow control (see the module docstring).
        self._stream_task: asyncio.Task | None = None
        self._stream_stop = False
        self._flow = Flow(self.loop)
        self._clock = ReadClock(self.loop, self._read_expired, lambda: self._busy or self._queue)
        self._reading = False  # between a request's first byte and its end
        self._trusted = False  # a request on it was Request.trusted

    # -- connection -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else ""
        self.address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        self.idle_since = self.loop.time()
        refusal = self.server.table.admit(self)
        if refusal:
            self._refuse(message=refusal)
            return
        if self.server.closing:
            self.abort()
            return
        if self.server.require_client_cert and not _peer_certificate(transport):
            self._refuse(
                401,
                "client_certificate_required",
                "this node requires a client certificate signed by the cluster CA (mTLS)",
            )
            return
        self._arm_idle_timer()
        self._clock.start(self.limits.header_timeout)  # the first request's head, from now

    def _refuse(self, status: int = 503, code: str = "", message: str = "") -> None:
        """Answer before any request arrives (the client reads it as the answer to its
        first request), then close."""
        resp = self.server.error_response(
            status,
            code or "too_many_connections",
            message,
        )
        if status == 503:
            resp.headers = (("Retry-After", "1"),)
        self._write(resp, "GET", keep_alive=False, linger=REFUSAL_LINGER)

    def _read_expired(self) -> None:
        if self._closed:
            return
        if not self._reading:  # never sent a byte of a request: nothing to answer
            self.abort()
            return
        self._queue_reject(
            _Reject(408, "request_timeout", "the request did not arrive in time; closing")
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._queue.clear()
        self.queued_bytes = 0
        self.server.table.forget(self)
        self._clock.cancel()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        # A handler still running is not cancelled: a write it proposed may commit, and
        # it must finish its bookkeeping; its answer is dropped (see _write). A streamed
        # answer has nobody left to read it: it stops.
        self.resume_writing()
        self._stop_stream()

    def idle(self) -> bool:
        """Between requests (or before the first): closing it loses no request."""
        return not (self._busy or self._queue or self._reading or self._closed)

    def close_when_idle(self) -> None:
        self._close_when_idle = True
        if not self._busy and not self._queue:
            self.abort()
        self._stop_stream()

    def pause_writing(self) -> None:
        self._flow.pause()

    def resume_writing(self) -> None:
        self._flow.resume()

    def _stop_stream(self) -> None:
        task = self._stream_task
        if task is not None and not self._stream_stop:
            self._stream_stop = True
            task.cancel()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _arm_idle_timer(self) -> None:
        # Called after every answer: only note the time; the one timer re-arms itself lazily
        # (a cancel + call_later per request showed up in the leader's profile).
        self.idle_since = self.loop.time()
        if self._idle_timer is None:
            self._idle_timer = self.loop.call_at(
                self.idle_since + self._keepalive(), self._idle_expired
            )

    def _keepalive(self) -> float:
        limits = self.limits
        if self._trusted:
            return limits.keepalive_timeout
        return min(limits.keepalive_timeout, limits.anonymous_keepalive_timeout)

    def _idle_expired(self) -> None:
        self._idle_timer = None
        now = self.loop.time()
        if self._busy or self._queue:
            due = now + self._keepalive()  # serving: look again a period later
        else:
            due = self.idle_since + self._keepalive()
            if now >= due:
                self.abort()
                return
        self._idle_timer = self.loop.call_at(due, self._idle_expired)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._lingering -= min(len(data), self._lingering)
            if not self._lingering:
                self.abort()
            return
        if self._closed or self._reject_pending():
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as e:
            cause = e.__context__ if isinstance(e.__context__, _Reject) else None
            self._queue_reject(cause or _Reject(400, "malformed_http", f"bad HTTP request: {e}"))
        except httptools.HttpParserUpgrade:
            self._queue_reject(
                _Reject(400, "malformed_http", "protocol upgrades are not supported")
            )
        except httptools.HttpParserError as e:
            self._queue_reject(_Reject(400, "malformed_http", f"bad HTTP request: {e}"))
        except _Reject as e:
            self._queue_reject(e)

    def _reject_pending(self) -> bool:
        return bool(self._queue) and isinstance(self._queue[-1], _Reject)

    def _queue_reject(self, rej: _Reject) -> None:
        # Answered after the requests before it, then the connection closes: after a
        # framing error nothing later on this connection can be trusted.
        self._queue.append(rej)
        self._pause()
        self._next()

    # -- parser callbacks -------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._reading = True
        if not self._clock.deadline:  # a later request: its head's time starts now
            self._clock.start(self.limits.header_timeout)
        self._url = b""
        self._headers = {}
        self._header_bytes = 0
        self._body = []
        self._body_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._header_bytes += len(url)
        if self._header_bytes > self.limits.max_header_bytes:
            raise _Reject(431, "headers_too_large", "the request line and headers are too large")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > self.limits.max_header_bytes:
            raise _Reject(
                431,
                "headers_too_large",
                f"the request headers exceed {self.limits.max_header_bytes} bytes",
            )
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        old = self._headers.get(key)
        self._headers[key] = text if old is None else f"{old}, {text}"

    def on_headers_complete(self) -> None:
        self._clock.start(self.limits.body_timeout)
        declared = self._headers.get("content-length")
        if (
            declared is not None
            and declared.isdigit()
            and int(declared) > self.limits.max_body_bytes
        ):
            # Answer now instead of reading megabytes we would throw away.
            raise _Reject(413, "request_too_large", self._too_large())
        if (
            self._headers.get("expect", "").lower() == "100-continue"
            and not self._busy
            and not self._queue
            and self.transport is not None
        ):
            self.transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self.limits.max_body_bytes:
            raise _Reject(413, "request_too_large", self._too_large())
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._reading = False
        self._clock.stop()
        path, _, query = self._url.decode("latin-1").partition("?")
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        req = Request(
            self.parser.get_method().decode("ascii"), path, query, self._headers, body, self._peer
        )
        size = self._header_bytes + len(body)
        self._queue.append((req, self.parser.should_keep_alive(), size))
        self.queued_bytes += size
        if (
            len(self._queue) >= self.limits.max_pipelined
            or self.queued_bytes >= self.limits.max_queued_bytes
        ):
            self._pause()
        self._next()

    def _too_large(self) -> str:
        return f"the request body exceeds {self.limits.max_body_bytes} bytes"

    # -- serving ----------------------------------------------------------------------

    def _pause(self) -> None:
        if not self._paused and self.transport is not None and not self._closed:
            self._paused = True
            self.transport.pause_reading()

    def _next(self) -> None:
        if self._busy or not self._queue or self._closed:
            return
        item = self._queue.popleft()
        if not isinstance(item, _Reject):
            self.queued_bytes -= item[2]
            if self.server.draining:
                item = _Reject(503, "unavailable", self.server.draining)
        if isinstance(item, _Reject):
            resp = self.server.error_response(item.status, item.code, item.message)
            if item.status == 503:
                resp.headers = (("Retry-After", "0"),)
            self._write(resp, "GET", keep_alive=False, linger=self.limits.linger_seconds)
            return
        self._busy = True
        self.loop.create_task(self._serve(item[0], item[1]))

    async def _serve(self, req: Request, keep_alive: bool) -> None:
        try:
            resp = await self.server.handler(req)
            self._trusted = self._trusted or req.trusted
        except Exception:  # the handler maps its own errors; this is a bug in it
            log.exception("unhandled error serving %s %s", loggable(req.method), loggable(req.path))
            resp = self.server.error_response(500, "internal", "internal error; see the node's log")
        streamed = isinstance(resp, StreamedResponse)
        if streamed:
            keep_alive = await self._stream(
                resp, keep_alive and not self._close_when_idle and not self.server.draining
            )
        self._busy = False
        if self._closed:
            return
        keep_alive = keep_alive and not self._close_when_idle and not self.server.draining
        if streamed:
            if not keep_alive:
                self._close_streamed()
                return
        else:
            self._write(resp, req.method, keep_alive)
            if not keep_alive:
                return
        if (
            self._paused
            and len(self._queue) < self.limits.max_pipelined // 2
            and self.queued_bytes < self.limits.max_queued_bytes // 2
            and not self._reject_pending()
        ):
            self._paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]
        if self._queue:
            self._next()
        else:
            self._arm_idle_timer()

    def _write(self, resp: Response, method: str, keep_alive: bool, linger: float = 0.0) -> None:
        transport = self.transport
        if transport is None or self._closed:
            return
        server = self.server
        start = server.head_starts.get((resp.status, resp.content_type))
        if start is None:
            start = _head_start(resp.status, resp.content_type)
            if len(server.head_starts) < _HEAD_STARTS_KEPT:
                server.head_starts[(resp.status, resp.content_type)] = start
        extra = "".join(f"{k}: {v}\r\n" for k, v in resp.headers) if resp.headers else ""
        head = b"%s%d\r\n%s%s%s\r\n" % (
            start,
            len(resp.body),
            server.fixed_headers,
            extra.encode("latin-1"),
            b"" if keep_alive else b"Connection: close\r\n",
        )
        # One write per answer: with TCP_NODELAY two writes would be two packets.
        transport.write(head if method == "HEAD" else head + resp.body)
        if not keep_alive:
            self._queue.clear()
            self.queued_bytes = 0
            if linger:
                self._linger(linger)
            else:
                self._closed = True
                transport.close()

    # -- streamed answers ----------------------------------------------------------------

    async def _stream(self, resp: StreamedResponse, keep_alive: bool) -> bool:
        """Send a streamed answer; True if the connection may serve another request."""
        try:
            return await self._send_stream(resp, keep_alive)
        finally:
            if resp.on_end is not None:
                resp.on_end()

    async def _send_stream(self, resp: StreamedResponse, keep_alive: bool) -> bool:
        chunks = resp.chunks
        transport = self.transport
        if self._closed or transport is None:
            await chunks.aclose()
            return False
        transport.write(stream_head(resp, self.server.fixed_headers, keep_alive))
        # A task of its own, so _stop_stream cancels the producer and nothing else.
        pumping = self._stream_task = self.loop.create_task(
            pump(
                chunks,
                transport.write,
                self._flow,
                self.limits.stream_stall_seconds,
                lambda: self._closed,
            )
        )
        finished = False
        try:
            finished = await pumping
        except asyncio.CancelledError:
            stopped = self._stream_stop and pumping.cancelled()
            if not stopped or asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
            # We stopped it (client gone, or close()): end cleanly.
        except Exception:  # a bug in the producer: the answer cannot be completed
            log.exception("streamed answer failed")
            self.abort()
            return False
        finally:
            self._stream_task = None
            self._stream_stop = False
            await chunks.aclose()
        if not self._closed:
            transport.write(LAST_CHUNK)
        return finished and keep_alive

    def _close_streamed(self) -> None:
        """Close after a streamed answer; a client that does not read gets aborted."""
        self._closed = True
        self._queue.clear()
        self.queued_bytes = 0
        transport = self.transport
        if transport is not None:
            transport.close()
            self.loop.call_later(self.limits.linger_seconds, transport.abort)

    def _linger(self, seconds: float) -> None:
        """Half-close after a rejection and drain the rest of the client's request.

        Closing at once would make the client's unfinished send fail with a reset (EPIPE)
        before it ever reads our 413/400; so we shut our side, discard what still comes,
        and drop the connection when the client closes, or after linger_seconds/_bytes.
        """
        transport = self.transport
        if transport is None or self._closed:
            return
        self._closed = True  # no more requests are parsed or answered
        self._lingering = self.limits.linger_bytes
        try:
            transport.write_eof()
        except (OSError, RuntimeError):
            transport.close()
            return
        if self._paused:
            self._paused = False
            transport.resume_reading()
        self.loop.call_later(seconds, transport.close)
