"""Streamed answers of node/api/server.py (node/api/chunked.py) on a real loopback socket:
chunked framing, keep-alive afterwards, the producer stopped when the client goes away,
a clean end at close(), and a client that stops reading (flow control, then StreamStalled)."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from statekeeper.node.api.server import (
    HttpServer,
    Request,
    Response,
    ServerLimits,
    StreamedResponse,
    StreamStalled,
)

LOG: list[str] = []


def _error(status: int, code: str, message: str) -> Response:
    return Response(status, json.dumps({"error": {"code": code}}).encode(), "application/json")


async def _chunks(n: int | None, size: int, pause: float):
    i = 0
    LOG.append("start")
    try:
        while n is None or i < n:
            try:
                yield b"%d:" % i + b"x" * size + b"\n"
            except StreamStalled:
                LOG.append("stalled")
                yield b"OVERFLOW\n"
                return
            i += 1
            LOG.append(f"sent {i}")
            if pause:
                await asyncio.sleep(pause)
    except asyncio.CancelledError:
        LOG.append("cancelled")
        raise
    finally:
        LOG.append("end")


async def _handler(req: Request) -> Response | StreamedResponse:
    if req.path == "/stream":
        return StreamedResponse(200, "application/x-ndjson", _chunks(3, 1, 0))
    if req.path == "/forever":
        return StreamedResponse(200, "application/x-ndjson", _chunks(None, 10, 0.01))
    if req.path == "/flood":
        return StreamedResponse(200, "application/x-ndjson", _chunks(None, 64 * 1024, 0))
    return Response(200, b'{"ok": true}', "application/json")


@pytest.fixture
async def server():
    LOG.clear()
    limits = ServerLimits(max_body_bytes=1000, stream_stall_seconds=0.5, linger_seconds=3.0)
    srv = HttpServer(_handler, _error, limits, extra_headers=(("X-Node", "n0"),))
    await srv.start("127.0.0.1", 0)
    yield srv
    await srv.close(grace=1.0)


def _post(path: str) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode()


async def _head(reader: asyncio.StreamReader) -> dict[str, str]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 200")
    return {k.lower(): v for k, _, v in (ln.partition(": ") for ln in lines[1:] if ln)}


async def _chunk(reader: asyncio.StreamReader) -> bytes:
    size = int((await asyncio.wait_for(reader.readuntil(b"\r\n"), 5))[:-2], 16)
    data = await asyncio.wait_for(reader.readexactly(size + 2), 5)
    assert data[-2:] == b"\r\n"
    return data[:-2]


async def _until(cond, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_chunked_stream_then_keep_alive(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(_post("/stream"))
    headers = await _head(reader)
    assert headers["transfer-encoding"] == "chunked" and "content-length" not in headers
    assert headers["content-type"] == "application/x-ndjson" and headers["x-node"] == "n0"
    assert [await _chunk(reader) for _ in range(4)] == [b"0:x\n", b"1:x\n", b"2:x\n", b""]
    writer.write(_post("/plain"))  # the same connection serves the next request
    await _head(reader)
    assert LOG[0] == "start" and LOG[-1] == "end"
    writer.close()


async def test_the_producer_stops_when_the_client_goes_away(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(_post("/forever"))
    await _head(reader)
    await _chunk(reader)
    writer.transport.abort()
    await _until(lambda: "end" in LOG and not server.connections)
    assert "cancelled" in LOG
    sent = len([e for e in LOG if e.startswith("sent")])
    await asyncio.sleep(0.1)
    assert len([e for e in LOG if e.startswith("sent")]) <= sent  # nothing runs any more


async def test_close_ends_a_stream_cleanly(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(_post("/forever"))
    await _head(reader)
    await _chunk(reader)
    await asyncio.wait_for(server.close(grace=2.0), 3)
    chunks = []
    while (c := await _chunk(reader)) != b"":
        chunks.append(c)
    assert all(c.endswith(b"x\n") for c in chunks)  # whole chunks, then the last one
    assert await asyncio.wait_for(reader.read(), 2) == b""  # then the connection closes
    assert "end" in LOG and not server.connections


async def test_a_client_that_stops_reading_gets_the_last_chunk_and_is_dropped(server):
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", server.port))
    await loop.sock_sendall(sock, _post("/flood"))
    await _until(lambda: "stalled" in LOG, timeout=10)  # nothing read for 0.5 s
    produced = len([e for e in LOG if e.startswith("sent")])
    assert produced < 200  # flow control held the producer back (64 KiB per chunk)
    data = bytearray()
    while True:
        part = await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 5)
        if not part:
            break
        data += part
    assert data.endswith(b"9\r\nOVERFLOW\n\r\n0\r\n\r\n")
    assert "end" in LOG
    sock.close()
