"""node/api/server.py on a real loopback socket, driven by raw bytes."""

from __future__ import annotations

import asyncio
import json

import pytest

from statekeeper.node.api.server import HttpServer, Request, Response, ServerLimits


def _error(status: int, code: str, message: str) -> Response:
    return Response(status, json.dumps({"error": {"code": code}}).encode(), "application/json")


async def _echo(req: Request) -> Response:
    if req.path == "/boom":
        raise RuntimeError("handler bug")
    if req.path.startswith("/sleep/"):
        await asyncio.sleep(float(req.path[7:]))
    body = json.dumps(
        {"path": req.path, "query": req.query, "len": len(req.body), "method": req.method}
    )
    return Response(200, body.encode(), "application/json", (("X-Extra", "1"),))


@pytest.fixture
async def server():
    limits = ServerLimits(
        max_body_bytes=1000, max_header_bytes=2000, keepalive_timeout=0.5, linger_seconds=2.0
    )
    srv = HttpServer(_echo, _error, limits, extra_headers=(("X-Node", "n0"),))
    await srv.start("127.0.0.1", 0)
    yield srv
    await srv.close(grace=1.0)


async def _connect(srv: HttpServer):
    return await asyncio.open_connection("127.0.0.1", srv.port)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v for k, _, v in (ln.partition(": ") for ln in lines[1:] if ln)}
    n = int(headers.get("content-length", "0"))
    body = await asyncio.wait_for(reader.readexactly(n), 5) if n else b""
    return status, headers, body


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode()
        + body
    )


async def test_keep_alive_serves_many_requests_on_one_connection(server):
    reader, writer = await _connect(server)
    for i in range(3):
        writer.write(_post(f"/r{i}?a=1", b"x" * i))
        status, headers, body = await _read_response(reader)
        assert status == 200
        assert json.loads(body) == {"path": f"/r{i}", "query": "a=1", "len": i, "method": "POST"}
        assert headers["x-node"] == "n0" and headers["x-extra"] == "1"
        assert "connection" not in headers
    assert len(server.connections) == 1
    writer.close()


async def test_pipelined_requests_are_answered_in_order(server):
    reader, writer = await _connect(server)
    # The first one is the slowest: its answer must still come first.
    writer.write(_post("/sleep/0.2", b"") + _post("/sleep/0", b"") + _post("/third", b""))
    paths = [json.loads((await _read_response(reader))[2])["path"] for _ in range(3)]
    assert paths == ["/sleep/0.2", "/sleep/0", "/third"]
    writer.close()


async def test_chunked_request_body(server):
    reader, writer = await _connect(server)
    writer.write(
        b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
    )
    status, _, body = await _read_response(reader)
    assert status == 200 and json.loads(body)["len"] == 7
    writer.close()


async def test_oversize_declared_body_is_answered_413_while_the_client_still_sends(server):
    reader, writer = await _connect(server)
    # Declare more than max_body_bytes but send only part of it: the answer must come
    # without waiting for the rest, and the connection must not be reset under us.
    writer.write(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + b"y" * 100)
    status, headers, body = await _read_response(reader)
    assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"
    assert headers["connection"] == "close"
    writer.write(b"y" * 4900)  # the rest is drained, not a reset
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5) == b""  # then EOF
    writer.close()


async def test_oversize_chunked_body_is_rejected(server):
    reader, writer = await _connect(server)
    chunk = b"x" * 600
    writer.write(
        b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"258\r\n"
        + chunk
        + b"\r\n"
        + b"258\r\n"
        + chunk
        + b"\r\n0\r\n\r\n"
    )
    status, _, body = await _read_response(reader)
    assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"
    writer.close()


async def test_garbage_gets_400_and_the_connection_closes(server):
    reader, writer = await _connect(server)
    writer.write(b"\x00\x01\x02 not http at all\r\n\r\n")
    status, headers, body = await _read_response(reader)
    assert status == 400 and json.loads(body)["error"]["code"] == "malformed_http"
    assert headers["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


async def test_a_valid_request_before_garbage_is_still_answered(server):
    reader, writer = await _connect(server)
    writer.write(_post("/ok", b"") + b"BROKEN\x00\r\n\r\n")
    assert (await _read_response(reader))[0] == 200
    assert (await _read_response(reader))[0] == 400
    writer.close()


async def test_too_large_headers_get_431(server):
    reader, writer = await _connect(server)
    writer.write(b"GET /h HTTP/1.1\r\nHost: x\r\nX-Big: " + b"z" * 3000 + b"\r\n\r\n")
    status, _, body = await _read_response(reader)
    assert status == 431 and json.loads(body)["error"]["code"] == "headers_too_large"
    writer.close()


async def test_expect_100_continue(server):
    reader, writer = await _connect(server)
    writer.write(
        b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"
    )
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert interim.startswith(b"HTTP/1.1 100 Continue")
    writer.write(b"abc")
    status, _, body = await _read_response(reader)
    assert status == 200 and json.loads(body)["len"] == 3
    writer.close()


async def test_connection_close_is_honoured(server):
    reader, writer = await _connect(server)
    writer.write(_post("/x", b"", "Connection: close\r\n"))
    status, headers, _ = await _read_response(reader)
    assert status == 200 and headers["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


async def test_http_1_0_without_keep_alive_is_closed(server):
    reader, writer = await _connect(server)
    writer.write(b"GET /old HTTP/1.0\r\n\r\n")
    assert (await _read_response(reader))[0] == 200
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


async def test_head_has_no_body_but_the_length(server):
    reader, writer = await _connect(server)
    writer.write(b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n" + _post("/after", b""))
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: " in head
    # The next answer follows the head directly: no body bytes in between.
    status, _, body = await _read_response(reader)
    assert status == 200 and json.loads(body)["path"] == "/after"
    writer.close()


async def test_handler_bug_is_a_500_and_the_connection_survives(server):
    reader, writer = await _connect(server)
    writer.write(_post("/boom", b""))
    status, _, body = await _read_response(reader)
    assert status == 500 and json.loads(body)["error"]["code"] == "internal"
    writer.write(_post("/after", b""))
    assert (await _read_response(reader))[0] == 200
    writer.close()


async def test_idle_connections_are_closed_after_the_keepalive_timeout(server):
    reader, writer = await _connect(server)
    writer.write(_post("/x", b""))
    await _read_response(reader)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
    writer.close()


async def test_close_lets_a_busy_request_finish(server):
    port = server.port
    reader, writer = await _connect(server)
    idle_reader, idle_writer = await _connect(server)
    writer.write(_post("/sleep/0.3", b""))
    await asyncio.sleep(0.05)
    closing = asyncio.create_task(server.close(grace=3.0))
    status, headers, _ = await _read_response(reader)
    assert status == 200 and headers["connection"] == "close"
    assert await asyncio.wait_for(idle_reader.read(), 5) == b""
    await closing
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    writer.close()
    idle_writer.close()


async def test_client_gone_mid_request_does_not_cancel_the_handler(server):
    finished = asyncio.Event()

    async def slow(req: Request) -> Response:
        await asyncio.sleep(0.2)
        finished.set()
        return Response(200, b"{}", "application/json")

    server.handler = slow
    _, writer = await _connect(server)
    writer.write(_post("/slow", b""))
    await asyncio.sleep(0.05)
    writer.close()
    await asyncio.wait_for(finished.wait(), 5)


async def test_a_connection_in_use_outlives_the_keepalive_timeout(server):
    # keepalive_timeout is 0.5 s: a request every 0.2 s for 1.4 s keeps one connection.
    reader, writer = await _connect(server)
    for i in range(7):
        writer.write(_post(f"/r{i}", b""))
        assert (await _read_response(reader))[0] == 200
        await asyncio.sleep(0.2)
    assert len(server.connections) == 1
    writer.close()
