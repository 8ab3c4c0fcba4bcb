"""The blocking transport of Client: HTTP/1.1 keep-alive connections over plain sockets,
with httptools (llhttp) parsing the answers, as AsyncClient's transport does
(client/aio_transport.py), instead of urllib3 + http.client.

Why. urllib3's request path (its pool, http.client's request and header objects, the
email parser http.client runs on every answer's headers) cost 710-812 us of client CPU
per request against 180-207 us for the same exchange over a bare socket (a put of 256 B
to a local 3-node cluster, 300 requests per round, two rounds, process time, issue 28).
A LangGraph saver put is one request: its client CPU fell from 1200-1280 to 483-488 us
(400 puts of benchmarks/langgraph_workload.py's checkpoints, two rounds each). And
http.client sends a request's head and body in two send() calls (cProfile: 600 sendall
for 300 requests), so the node reads each request in two segments; here it is one.

What it does, no more: one request at a time per connection (no pipelining); idle
connections reused last-in first-out per endpoint, at most ``max_idle`` kept per
endpoint (more may be open while threads are busy: urllib3's ``block=False``);
Content-Length, chunked and EOF-delimited answers; ``Connection: close``; an idle
connection the server closed (or that has stray bytes) is noticed before reuse and
dropped; https through ``ssl`` with the client's context. Watch streams stay on urllib3
(client/sync.py): long-lived, their per-request cost does not matter.

Failures map as AsyncClient's do: :class:`CannotConnect` (``connect``: nothing sent),
TimeoutError (``timeout``: no whole answer within the timeout) and
:class:`ConnectionLost` (``lost``: the connection broke after the request was written;
the retry layer resends with the same idempotency key).
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time

import httptools

from .aio_connection import AnswerHeaders, CannotConnect, ConnectionLost, Endpoint
from .wire import Request

__all__ = ["SyncPool"]

_RECV = 1 << 16
_NO_ANSWER: tuple[int, str | None, bytes] = (0, None, b"")


class _Conn(AnswerHeaders):
    """One keep-alive connection and its answer parser (httptools callbacks)."""

    __slots__ = (
        "answer",
        "answered",
        "chunks",
        "ctype",
        "done",
        "ep",
        "extra",
        "framed",
        "headers_done",
        "parser",
        "reusable",
        "sock",
        "status",
    )

    def __init__(self, ep: Endpoint, sock: socket.socket) -> None:
        self.ep = ep
        self.sock = sock
        self.parser = httptools.HttpResponseParser(self)
        self.answered = 0  # whole answers received on this connection
        self.done = False  # the current answer is complete
        self.extra = False  # more came after it: out of step, never reuse
        self.answer = _NO_ANSWER
        self.reusable = False
        self.headers_done = False
        self.framed = False  # Content-Length or Transfer-Encoding given
        self.ctype: str | None = None
        self.status = 0
        self.chunks: list[bytes] = []

    def exchange(self, data: bytes, timeout: float) -> tuple[int, str | None, bytes]:
        """Send ``data``, read its whole answer within ``timeout`` seconds."""
        sock = self.sock
        deadline = time.monotonic() + timeout
        self.done = self.headers_done = self.extra = False
        sock.settimeout(timeout)
        try:
            sock.sendall(data)
        except TimeoutError:
            raise
        except OSError as exc:  # e.g. a reused connection the server reset
            raise ConnectionLost(f"sending the request failed ({exc})") from exc
        seen = False
        while not self.done:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer within {timeout:g} s")
            if seen:
                sock.settimeout(left)
            chunk = sock.recv(_RECV)
            if not chunk:
                return self._eof(seen)
            seen = True
            try:
                self.parser.feed_data(chunk)
            except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
                self.reusable = False
                raise ConnectionLost(f"invalid HTTP answer from {self.ep.url}: {exc!r}") from exc
        answer, self.answer = self.answer, _NO_ANSWER  # an idle connection keeps none
        return answer

    def _eof(self, seen: bool) -> tuple[int, str | None, bytes]:
        self.reusable = False
        if self.headers_done and not self.framed and self.status >= 200:
            return self.status, self.ctype, b"".join(self.chunks)  # delimited by EOF
        if seen:
            why = "the connection closed in the middle of the answer"
        elif self.answered:
            why = "the server closed the keep-alive connection before answering"
        else:
            why = "the server closed the connection before answering"
        raise ConnectionLost(why)

    # -- httptools callbacks

    def on_message_begin(self) -> None:
        if self.done:  # a second answer to one request: out of step (self.answer is kept)
            self.extra = True
            self.reusable = False
        self.framed = self.headers_done = False
        self.ctype = None
        self.chunks = []

    def on_headers_complete(self) -> None:
        self.headers_done = True
        self.status = self.parser.get_status_code()
        self.reusable = self.parser.should_keep_alive() and not self.extra

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        if self.parser.get_status_code() < 200:  # an interim answer: the real one follows
            return
        if self.extra:
            return
        chunks = self.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.chunks = []
        self.answer = (self.status, self.ctype, body)
        self.answered += 1
        self.done = True

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _dropped(sock: socket.socket) -> bool:
    """An idle connection that is readable has been closed by the server (or holds stray
    bytes, or TLS records): not reusable. One zero-timeout poll, as urllib3 checks before
    reuse (poll, not select: select refuses descriptors above 1023)."""
    try:
        if _HAS_POLL:
            p = select.poll()
            p.register(sock, select.POLLIN)
            return bool(p.poll(0))
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


_HAS_POLL = hasattr(select, "poll")


class SyncPool:
    """The keep-alive connections of one Client, shared by its threads."""

    def __init__(self, max_idle: int, tls: ssl.SSLContext | None = None, auth: str = "") -> None:
        self.max_idle = max(1, max_idle)
        self.tls = tls
        self.auth = auth  # the Authorization header of every request ("" for none)
        self.closed = False
        self._lock = threading.Lock()
        self._endpoints: dict[str, Endpoint] = {}
        self._idle: dict[str, list[_Conn]] = {}

    def endpoint(self, url: str) -> Endpoint:
        ep = self._endpoints.get(url)
        if ep is None:
            with self._lock:
                ep = self._endpoints.setdefault(url, Endpoint(url, self.auth))
                self._idle.setdefault(url, [])
        return ep

    def send(self, url: str, req: Request, timeout: float) -> tuple[int, str | None, bytes]:
        """Send ``req`` to ``url``, wait at most ``timeout`` seconds for the whole answer;
        raises CannotConnect, TimeoutError or ConnectionLost."""
        if self.closed:
            raise RuntimeError("Client is closed")
        ep = self._endpoints.get(url) or self.endpoint(url)
        body = req.body
        with self._lock:  # Endpoint.head caches into a dict shared by the threads
            head = ep.head(req)
        if body is not None:
            data = b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body)
        elif req.method == "GET":
            data = head + b"\r\n"
        else:
            data = head + b"Content-Length: 0\r\n\r\n"
        conn = self._take(url)
        if conn is None:
            start = time.monotonic()
            conn = self._open(ep, timeout)
            timeout = max(timeout - (time.monotonic() - start), 0.001)  # one deadline
        try:
            answer = conn.exchange(data, timeout)
        except BaseException:
            conn.close()
            raise
        self._release(url, conn)
        return answer

    def _take(self, url: str) -> _Conn | None:
        while True:
            with self._lock:
                idle = self._idle[url]
                if not idle:
                    return None
                conn = idle.pop()
            if not _dropped(conn.sock):
                return conn
            conn.close()

    def _open(self, ep: Endpoint, timeout: float) -> _Conn:
        try:
            sock = socket.create_connection((ep.host, ep.port), timeout=timeout)
        except OSError as exc:  # refused, DNS, connect timeout: nothing sent
            raise CannotConnect(str(exc) or type(exc).__name__) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ep.tls:
                ctx = self.tls if self.tls is not None else ssl.create_default_context()
                sock = ctx.wrap_socket(sock, server_hostname=ep.host)
        except OSError as exc:  # the TLS handshake (ssl.SSLError is an OSError)
            sock.close()
            raise CannotConnect(str(exc) or type(exc).__name__) from exc
        return _Conn(ep, sock)

    def _release(self, url: str, conn: _Conn) -> None:
        if conn.reusable and not self.closed:
            with self._lock:
                idle = self._idle[url]
                if len(idle) < self.max_idle:
                    idle.append(conn)
                    return
        conn.close()

    def close(self) -> None:
        """Close the idle connections; those in use close when their answer is in."""
        self.closed = True
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            for idle in self._idle.values():
                idle.clear()
        for c in conns:
            c.close()

    def __repr__(self) -> str:
        return f"SyncPool({list(self._endpoints)!r})"
