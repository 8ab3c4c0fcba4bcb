"""AsyncClient's own HTTP/1.1 transport (client/aio_transport.py and aio_connection.py)
against a tiny real asyncio server.

The server speaks just enough HTTP/1.1 on loopback and misbehaves on request: each
request takes the next action from ``script`` (answer, chunked answer, ``Connection:
close``, drop the connection, never answer, ...). It counts connections, so keep-alive
reuse and the max_connections cap are observed from the server's side.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from statekeeper.client import AsyncClient, RetryPolicy, Timeout, TlsError, Unavailable
from statekeeper.client.kv_requests import status_request
from statekeeper.client.wire import Request
from tests.loopback.self_signed import self_signed

MSGPACK = "application/msgpack"
ONCE = RetryPolicy.disabled()


class Server:
    """HTTP/1.1 on 127.0.0.1 (one or more ports sharing the counters below)."""

    def __init__(self) -> None:
        self.script: list[Any] = []  # actions, consumed one per request; default "ok"
        self.servers: list[asyncio.Server] = []
        self.ports: list[int] = []
        self.conns = 0  # connections accepted so far
        self.open = 0  # connections open right now
        self.max_open = 0
        self.closed: list[int] = []  # ids of connections that ended
        self.requests: list[tuple[int, str, bytes]] = []  # (connection id, path, body)
        self.tasks: set[asyncio.Task[Any]] = set()

    async def start(self, n: int = 1, tls: ssl.SSLContext | None = None) -> Server:
        for _ in range(n):
            srv = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)
            self.servers.append(srv)
            self.ports.append(srv.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        for srv in self.servers:
            srv.close()
        for t in list(self.tasks):
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def url(self, i: int = 0, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.ports[i]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        self.conns += 1
        cid = self.conns
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            n = 0
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)
                }
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                n += 1
                self.requests.append((cid, path, body))
                action = self.script.pop(0) if self.script else "ok"
                if not await self._act(action, writer, reader, cid, n, path, body):
                    return
        except asyncio.CancelledError:  # stop(): end quietly
            return
        finally:
            self.open -= 1
            self.closed.append(cid)
            writer.close()

    async def _act(
        self,
        action: Any,
        writer: asyncio.StreamWriter,
        reader: asyncio.StreamReader,
        cid: int,
        n: int,
        path: str,
        body: bytes,
    ) -> bool:
        """Carry out one action; False ends the connection."""
        if action == "drop":  # read the request, close without a byte of answer
            return False
        if action == "hang":  # never answer; notice when the client goes away
            await reader.read()
            return False
        if isinstance(action, tuple) and action[0] == "slow":
            await asyncio.sleep(action[1])
            action = "ok"
        payload = msgpack.packb(_answer(cid, n, path, body), use_bin_type=True)
        if action == "chunked":
            parts = [payload[i : i + 3] for i in range(0, len(payload), 3)]
            chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: " + MSGPACK.encode() + b"\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
            )
            return True
        if action == "eof_body":  # no Content-Length: the body ends with the connection
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/msgpack\r\n\r\n" + payload)
            await writer.drain()
            return False
        extra = b"Connection: close\r\n" if action == "close_header" else b""
        answer = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/msgpack\r\n"
            b"Content-Length: %d\r\n%s\r\n%s" % (len(payload), extra, payload)
        )
        writer.write(answer * 2 if action == "twice" else answer)  # twice: out of step
        await writer.drain()
        if action == "close_idle":  # answer, then close the idle connection (idle timeout)
            await asyncio.sleep(0.01)
            return False
        # "close_header" keeps the socket open on purpose: only the header says to close,
        # so a client ignoring it would send its next request here.
        return True


def _answer(cid: int, n: int, path: str, body: bytes) -> dict[str, Any]:
    if path == "/v1/status":
        return {"role": "follower", "leader_url": None, "conn": cid, "n": n}
    req = msgpack.unpackb(body, raw=False)
    if path == "/v1/kv/get":  # echo the key as the value: shows whose answer this is
        key = req["key"]
        kv = {"key": key, "value": key.encode(), "version": 1, "mod_revision": 1}
        return {"revision": 1, "kv": kv}
    if path == "/v1/kv/put":
        return {"revision": len(req["value"])}
    return {"error": {"code": "not_found", "message": path}}


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = await Server().start(n=2)
    yield srv
    await srv.stop()


@pytest.fixture
def server_port() -> Iterator[int]:
    """A Server on its own loop in a thread, for tests that run several event loops."""
    loop = asyncio.new_event_loop()
    srv = Server()
    loop.run_until_complete(srv.start())
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    yield srv.ports[0]
    asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    t.join(5)
    loop.close()


async def _until(cond: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def _once(c: AsyncClient, url: str, request: Request, timeout: float) -> Any:
    """One attempt at ``url`` with its own timeout, no retry (a plan of client/base.py)."""
    return await c._drive(c._once(url, request, timeout))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------- keep-alive, pool


async def test_sequential_requests_reuse_one_connection(server: Server) -> None:
    async with AsyncClient(server.url(), retry=ONCE) as c:
        answers = [await c.status() for _ in range(50)]
        w = await c.put("k", b"x" * 300_000)  # a large body, framed by Content-Length
        assert w.revision == 300_000
        assert (await c.get("key-1")).value == b"key-1"
    assert {a["conn"] for a in answers} == {1} and [a["n"] for a in answers] == list(range(1, 51))
    assert server.conns == 1
    await _until(lambda: server.closed == [1])  # close() closed it


async def test_max_connections_caps_open_connections_under_concurrency(server: Server) -> None:
    server.script[:] = [("slow", 0.02)] * 30
    async with AsyncClient(server.url(), retry=ONCE, max_connections=3) as c:
        answers = await asyncio.gather(*(c.status() for _ in range(30)))
    assert server.max_open == 3  # the cap was reached, never exceeded
    assert server.conns == 3  # released connections were handed to the waiting requests
    assert {a["conn"] for a in answers} == {1, 2, 3}


async def test_max_connections_counts_every_endpoint(server: Server) -> None:
    async with AsyncClient(server.url(0), retry=ONCE, max_connections=1) as c:
        assert (await c.status())["conn"] == 1
        # An idle connection to node 0 is closed to make room for one to node 1.
        assert (await c.status(endpoint=server.url(1)))["conn"] == 2
        await _until(lambda: 1 in server.closed)
        assert (await c.status())["conn"] == 3
        await _until(lambda: 2 in server.closed)
        assert server.conns == 3


async def test_server_closing_an_idle_connection_is_transparent(server: Server) -> None:
    server.script[:] = ["close_idle"]
    async with AsyncClient(server.url(), retry=ONCE) as c:
        assert (await c.status())["conn"] == 1
        await _until(lambda: server.closed == [1])
        await asyncio.sleep(0.05)  # the client has seen the EOF of its idle connection
        # No retries: the request must not go to the dead connection at all.
        assert (await c.status())["conn"] == 2


async def test_connection_close_header_is_honoured(server: Server) -> None:
    server.script[:] = ["close_header", "close_header", "ok", "ok"]
    async with AsyncClient(server.url(), retry=ONCE) as c:
        conns = [(await c.status())["conn"] for _ in range(4)]
    assert conns == [1, 2, 3, 3]
    assert [cid for cid, _, _ in server.requests] == [1, 2, 3, 3]
    await _until(lambda: {1, 2} <= set(server.closed))  # the client closed them


async def test_chunked_answer_is_decoded_and_connection_reused(server: Server) -> None:
    server.script[:] = ["chunked", "chunked"]
    async with AsyncClient(server.url(), retry=ONCE) as c:
        kv = await c.get("a-key-long-enough-for-several-chunks")
        assert kv.value == b"a-key-long-enough-for-several-chunks"
        st = await c.status()
    assert st["conn"] == 1 and st["n"] == 2


async def test_answer_delimited_by_eof_is_read_and_not_reused(server: Server) -> None:
    server.script[:] = ["eof_body"]
    async with AsyncClient(server.url(), retry=ONCE) as c:
        assert (await c.get("k1")).value == b"k1"
        assert (await c.status())["conn"] == 2


# ------------------------------------------------------------------- error kinds


async def test_refused_connection_is_kind_connect() -> None:
    async with AsyncClient(f"127.0.0.1:{_free_port()}", retry=ONCE) as c:
        with pytest.raises(Unavailable) as ei:
            await c.put("k", b"v")
    assert ei.value.code == "connection_failed"


async def test_close_before_answering_is_kind_lost(server: Server) -> None:
    server.script[:] = ["drop"]
    async with AsyncClient(server.url(), retry=ONCE) as c:
        with pytest.raises(Unavailable) as ei:
            await c.put("k", b"v")
        assert ei.value.code == "connection_lost"
        assert [p for _, p, _ in server.requests] == ["/v1/kv/put"]  # it was sent
        # Same on a reused keep-alive connection: the request went out, outcome unknown.
        await c.status()
        server.script[:] = ["drop"]
        with pytest.raises(Unavailable) as ei:
            await c.put("k", b"v")
        assert ei.value.code == "connection_lost"
        assert (await c.status())["conn"] == 3


async def test_lost_write_is_retried_with_the_same_idempotency_key(server: Server) -> None:
    server.script[:] = ["drop"]
    fast = RetryPolicy(max_attempts=3, backoff_base=0.01, backoff_max=0.02)
    async with AsyncClient(server.url(), retry=fast) as c:
        assert (await c.put("k", b"vv")).revision == 2
    keys = [msgpack.unpackb(b)["idempotency_key"] for _, p, b in server.requests]
    assert len(keys) == 2 and keys[0] == keys[1]


async def test_no_answer_is_kind_timeout_within_the_timeout(server: Server) -> None:
    server.script[:] = ["hang"]
    async with AsyncClient(server.url(), timeout=0.3, retry=ONCE) as c:
        t0 = time.monotonic()
        with pytest.raises(Timeout) as ei:
            await c.put("k", b"v")
        elapsed = time.monotonic() - t0
        assert ei.value.code == "client_timeout"
        assert 0.25 <= elapsed < 1.0
        await _until(lambda: server.closed == [1])  # the timed-out connection was closed
        assert (await c.status())["conn"] == 2


async def test_each_request_gets_its_own_timeout_on_a_reused_connection(server: Server) -> None:
    status = status_request()
    async with AsyncClient(server.url(), timeout=0.2, retry=ONCE) as c:
        url = c.endpoint
        # A short timeout after a long one on the same connection: still 0.2 s.
        await _once(c, url, status, 10.0)
        server.script[:] = ["hang"]
        t0 = time.monotonic()
        with pytest.raises(Timeout):
            await _once(c, url, status, 0.2)
        assert time.monotonic() - t0 < 5.0  # far from the first request's 10 s
        # A long timeout after a short one: the first request's deadline does not apply.
        # The short one opens a fresh connection, so it gets 0.5 s (0.2 s timed out once
        # on a loaded CI machine), and the slow answer takes three times that.
        await _once(c, url, status, 0.5)
        server.script[:] = [("slow", 1.5)]
        assert (await _once(c, url, status, 10.0))["conn"] == 2
    assert server.conns == 2


async def test_waiting_for_a_connection_counts_against_the_timeout(server: Server) -> None:
    server.script[:] = ["hang"]
    async with AsyncClient(server.url(), timeout=0.3, retry=ONCE, max_connections=1) as c:
        # One attempt with a longer timeout holds the only connection.
        busy = asyncio.ensure_future(_once(c, c.endpoint, status_request(), 5.0))
        await _until(lambda: len(server.requests) == 1)
        t0 = time.monotonic()
        with pytest.raises(Timeout):
            await c.status()  # no free connection within 0.3 s
        assert 0.25 <= time.monotonic() - t0 < 1.0
        assert len(server.requests) == 1 and not busy.done()
        busy.cancel()
        with pytest.raises(asyncio.CancelledError):
            await busy
        assert (await c.status())["conn"] == 2  # the slot came back


async def test_cancelled_request_closes_its_connection(server: Server) -> None:
    server.script[:] = [("slow", 0.2)]
    async with AsyncClient(server.url(), retry=ONCE, max_connections=1) as c:
        task = asyncio.ensure_future(c.get("first"))
        await _until(lambda: len(server.requests) == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Had the connection gone back to the pool, this request would be written on it
        # and read the late answer meant for "first".
        kv = await c.get("second")
        assert kv.value == b"second"
        assert server.requests[-1][0] == 2
        await _until(lambda: 1 in server.closed)


async def test_failures_give_their_connection_slots_back(server: Server) -> None:
    async with AsyncClient(server.url(), timeout=0.2, retry=ONCE, max_connections=1) as c:
        for action in ["drop", "hang", "drop", "hang"]:
            server.script[:] = [action]
            with pytest.raises((Unavailable, Timeout)):
                await c.status()
        task = asyncio.ensure_future(c.status())
        await asyncio.sleep(0)  # cancelled while connecting
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        dead = f"http://127.0.0.1:{_free_port()}"
        with pytest.raises(Unavailable):
            await c.status(endpoint=dead)
        assert (await c.status())["n"] == 1


async def test_closed_client_refuses_and_closes_idle_connections(server: Server) -> None:
    c = AsyncClient(server.url(), retry=ONCE)  # created outside any request
    await c.status()
    await c.close()
    await _until(lambda: server.closed == [1])
    with pytest.raises(RuntimeError):
        await c.status()


# ------------------------------------------------------------------- https


async def test_https_endpoint_verifies_the_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    srv = await Server().start(tls=tls)
    try:
        async with AsyncClient(srv.url(scheme="https"), retry=ONCE) as c:
            with pytest.raises(TlsError) as ei:  # not trusted: the handshake fails
                await c.status()
            assert ei.value.code == "tls_failed" and ei.value.attempts == 1
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trusted by the default context
        async with AsyncClient(srv.url(scheme="https"), retry=ONCE) as c:
            first = await c.status()
            assert (await c.get("k")).value == b"k"
            assert (await c.status()) == {**first, "n": 3}  # same TLS connection
        assert srv.conns == 1  # the failed handshake never reached the handler
    finally:
        await srv.stop()


def test_bad_endpoints_fail_at_construction() -> None:
    for bad in ("ftp://127.0.0.1:1", "http://127.0.0.1:notaport", "http://u:p@127.0.0.1:1"):
        with pytest.raises(ValueError):
            AsyncClient(bad)


def test_a_client_belongs_to_the_loop_that_first_used_it(server_port: int) -> None:
    c = AsyncClient(f"http://127.0.0.1:{server_port}", retry=ONCE)
    assert asyncio.run(c.status())["conn"] == 1
    with pytest.raises(RuntimeError, match="event loop"):
        asyncio.run(c.status())
