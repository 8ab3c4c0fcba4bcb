"""HttpServer.drain() (graceful shutdown, node/shutdown.py) on a real loopback socket."""

from __future__ import annotations

import asyncio
import json

import pytest

from statekeeper.node.api.server import HttpServer, ServerLimits
from tests.loopback.test_http_server import _connect, _echo, _error, _post, _read_response


@pytest.fixture
async def server():
    limits = ServerLimits(max_body_bytes=1000, max_header_bytes=2000, keepalive_timeout=5.0)
    srv = HttpServer(_echo, _error, limits)
    await srv.start("127.0.0.1", 0)
    yield srv
    await srv.close(grace=1.0)


async def test_new_request_on_an_open_connection_gets_a_retryable_503_and_close(server):
    reader, writer = await _connect(server)
    writer.write(_post("/before", b""))
    assert (await _read_response(reader))[0] == 200
    server.drain("n0 is shutting down")
    writer.write(_post("/after", b"x"))
    status, headers, body = await _read_response(reader)
    assert status == 503
    assert json.loads(body) == {"error": {"code": "unavailable"}}
    assert headers["connection"] == "close"
    assert headers["retry-after"] == "0"
    assert await asyncio.wait_for(reader.read(), 5) == b""  # then the server closes
    writer.close()


async def test_drain_stops_accepting_connections(server):
    port = server.port
    server.drain("n0 is shutting down")
    await asyncio.sleep(0.05)
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_a_request_in_progress_finishes_and_its_answer_closes_the_connection(server):
    reader, writer = await _connect(server)
    writer.write(_post("/sleep/0.3", b""))
    await asyncio.sleep(0.1)
    assert server.busy() == 1
    server.drain("n0 is shutting down")
    status, headers, body = await _read_response(reader)
    assert status == 200 and json.loads(body)["path"] == "/sleep/0.3"
    assert headers["connection"] == "close"
    assert server.busy() == 0
    writer.close()


async def test_pipelined_requests_behind_the_one_in_progress_get_503(server):
    reader, writer = await _connect(server)
    writer.write(_post("/sleep/0.3", b"") + _post("/second", b""))
    await asyncio.sleep(0.1)
    server.drain("n0 is shutting down")
    status, headers, _ = await _read_response(reader)
    assert status == 200 and headers["connection"] == "close"
    # The second was never started: nothing more is answered on this connection.
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
