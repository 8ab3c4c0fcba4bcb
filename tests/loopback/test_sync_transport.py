"""The blocking Client's own HTTP/1.1 transport (client/sync_transport.py) against the
scriptable loopback server of test_aio_transport.py, run on its own event loop in a thread.
Each test: keep-alive reuse and the ways an answer can end, as the server sees them."""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgpack
import pytest

from statekeeper.client import Client, RetryPolicy, Timeout, TlsError, Unavailable
from tests.loopback.self_signed import self_signed
from tests.loopback.test_aio_transport import Server

ONCE = RetryPolicy.disabled()


@pytest.fixture
def server() -> Iterator[Server]:
    yield from _threaded(None)


def _threaded(tls: ssl.SSLContext | None) -> Iterator[Server]:
    """A Server on its own event loop in a thread (the Client under test blocks)."""
    loop = asyncio.new_event_loop()
    srv = Server()
    loop.run_until_complete(srv.start(tls=tls))
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    yield srv
    asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    t.join(5)
    loop.close()


def _until(cond: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def test_sequential_requests_reuse_one_connection(server: Server) -> None:
    with Client(server.url(), retry=ONCE) as c:
        assert [c.status()["conn"] for _ in range(3)] == [1, 1, 1]
        assert c.put("k", b"vvv").revision == 3
    assert server.conns == 1
    _until(lambda: server.closed == [1])  # close() closed the idle connection


def test_server_closing_an_idle_connection_is_transparent(server: Server) -> None:
    server.script[:] = ["close_idle"]
    with Client(server.url(), retry=ONCE) as c:
        assert c.status()["conn"] == 1
        _until(lambda: server.closed == [1])
        # No retries: the request must not go to the dead connection at all.
        assert c.status()["conn"] == 2


def test_connection_close_header_is_honoured(server: Server) -> None:
    server.script[:] = ["close_header", "close_header", "ok", "ok"]
    with Client(server.url(), retry=ONCE) as c:
        assert [c.status()["conn"] for _ in range(4)] == [1, 2, 3, 3]
    _until(lambda: {1, 2} <= set(server.closed))  # the client closed them


def test_chunked_answer_is_decoded_and_connection_reused(server: Server) -> None:
    server.script[:] = ["chunked", "chunked"]
    with Client(server.url(), retry=ONCE) as c:
        assert c.get("a-key-long-enough-for-several-chunks").value == (
            b"a-key-long-enough-for-several-chunks"
        )
        st = c.status()
    assert st["conn"] == 1 and st["n"] == 2


def test_answer_delimited_by_eof_is_read_and_not_reused(server: Server) -> None:
    server.script[:] = ["eof_body"]
    with Client(server.url(), retry=ONCE) as c:
        assert c.get("k1").value == b"k1"
        assert c.status()["conn"] == 2


def test_a_second_answer_to_one_request_is_dropped_with_its_connection(
    server: Server,
) -> None:
    server.script[:] = ["twice"]
    with Client(server.url(), retry=ONCE) as c:
        assert c.get("k1").value == b"k1"
        # Had the connection been reused, this would read the stray answer to "k1".
        assert c.get("k2").value == b"k2"
    assert [cid for cid, _, _ in server.requests] == [1, 2]


def test_close_before_answering_is_kind_lost_and_retried_with_the_same_key(
    server: Server,
) -> None:
    with Client(server.url(), retry=ONCE) as c:
        c.status()  # a keep-alive connection the next request reuses
        server.script[:] = ["drop"]
        with pytest.raises(Unavailable) as ei:
            c.put("k", b"v")
        assert ei.value.code == "connection_lost"
        assert c.status()["conn"] == 2
    server.requests.clear()
    server.script[:] = ["drop"]
    fast = RetryPolicy(max_attempts=3, backoff_base=0.01, backoff_max=0.02)
    with Client(server.url(), retry=fast) as c:
        assert c.put("k", b"vv").revision == 2
    keys = [msgpack.unpackb(b)["idempotency_key"] for _, p, b in server.requests]
    assert len(keys) == 2 and keys[0] == keys[1]


def test_no_answer_is_kind_timeout_within_the_timeout(server: Server) -> None:
    server.script[:] = ["hang"]
    with Client(server.url(), timeout=0.3, retry=ONCE) as c:
        t0 = time.monotonic()
        with pytest.raises(Timeout) as ei:
            c.put("k", b"v")
        assert ei.value.code == "client_timeout"
        assert 0.25 <= time.monotonic() - t0 < 1.0
        _until(lambda: server.closed == [1])  # the timed-out connection was closed
        assert c.status()["conn"] == 2


def test_refused_connection_is_kind_connect(server: Server) -> None:
    dead = server.url().rsplit(":", 1)[0] + ":1"
    with Client(dead, retry=ONCE) as c, pytest.raises(Unavailable) as ei:
        c.put("k", b"v")
    assert ei.value.code == "connection_failed"


def test_threads_get_their_own_answers_on_their_own_connections(server: Server) -> None:
    server.script[:] = [("slow", 0.1)] * 4
    with Client(server.url(), retry=ONCE, max_connections=2) as c:
        got: dict[str, bytes] = {}

        def get(key: str) -> None:
            got[key] = c.get(key).value

        ts = [threading.Thread(target=get, args=(f"key-{i}",)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(5)
        assert got == {f"key-{i}": f"key-{i}".encode() for i in range(4)}
        assert server.max_open >= 2  # in flight together: a connection each
        c.status()
    _until(lambda: server.open == 0)  # two kept idle (max_connections) and closed at close()


def test_https_verifies_the_certificate_and_keeps_the_connection(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    for srv in _threaded(tls):
        url = srv.url(scheme="https")
        with Client(url, retry=ONCE) as c, pytest.raises(TlsError) as ei:
            c.status()  # not trusted: the handshake fails
        assert ei.value.code == "tls_failed"
        with Client(url, retry=ONCE, ca=cert) as c:
            assert [c.status()["n"] for _ in range(3)] == [1, 2, 3]  # one TLS connection
            assert c.get("k").value == b"k"
        assert srv.conns == 1  # the failed handshake never reached the handler
