"""Raw-socket fuzz of node/api/server.py (the parser, framing and limits) on loopback.

Seeded random (the same cases every run): random bytes, mutated valid requests (byte flips,
insertions, deletions, repeated or dropped header lines), huge request lines and headers,
bodies shorter or longer than Content-Length, chunked bodies with bad sizes, heads dribbled
byte by byte, and many connections at once. For every case, everything the server sends
must parse as a sequence of HTTP/1.1 responses with a 2xx or 4xx status (never 5xx, never
garbage); the connection ends (no hang); afterwards a normal request is served, and no
connection or task is left behind.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from statekeeper.node.api.server import HttpServer, Request, Response, ServerLimits

SEED = 15
CASES = 300

VALID = [
    b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n",
    b'POST /v1/kv/get HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{"key":"abc"}',
    b"POST /v1/kv/put HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"POST /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
    b"HEAD /v1/health/live HTTP/1.0\r\n\r\n",
]


def _error(status: int, code: str, message: str) -> Response:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return Response(status, body, "application/json")


async def _handler(req: Request) -> Response:
    return Response(200, json.dumps({"len": len(req.body)}).encode(), "application/json")


@pytest.fixture
async def server():
    limits = ServerLimits(
        max_body_bytes=4096,
        max_header_bytes=8192,
        header_timeout=0.5,
        body_timeout=0.5,
        linger_seconds=0.5,
        keepalive_timeout=1.0,
    )
    srv = HttpServer(_handler, _error, limits)
    await srv.start("127.0.0.1", 0)
    yield srv
    await srv.close(grace=1.0)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        pos = rng.randrange(len(b) + 1)
        if op == 0 and b:
            b[min(pos, len(b) - 1)] = rng.randrange(256)
        elif op == 1:
            b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2 and b:
            del b[pos : pos + rng.randint(1, 8)]
        elif op == 3:
            lines = bytes(b).split(b"\r\n")
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])  # a repeated line (header, request line...)
            b = bytearray(b"\r\n".join(lines))
        elif op == 4:
            lines = bytes(b).split(b"\r\n")
            del lines[rng.randrange(len(lines))]
            b = bytearray(b"\r\n".join(lines))
        else:
            b[pos:pos] = rng.choice([b"\r\n", b"\n", b"\x00", b":", b" ", b"\r\n\r\n", b"-1"])
    return bytes(b)


def _case(rng: random.Random) -> tuple[str, bytes]:
    kind = rng.randrange(7)
    if kind == 0:
        return "random", bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
    if kind == 1:
        return "mutated", _mutate(rng, rng.choice(VALID))
    if kind == 2:  # a huge request line or header
        n = rng.choice([5000, 9000, 70000])
        if rng.random() < 0.5:
            return "huge-url", b"GET /" + b"a" * n + b" HTTP/1.1\r\nHost: x\r\n\r\n"
        return "huge-header", b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * n + b"\r\n\r\n"
    if kind == 3:  # many headers
        hs = b"".join(b"X-H%d: v\r\n" % i for i in range(rng.choice([100, 1000])))
        return "many-headers", b"GET / HTTP/1.1\r\nHost: x\r\n" + hs + b"\r\n"
    if kind == 4:  # body shorter or longer than Content-Length
        body = b"x" * rng.randint(0, 50)
        declared = max(0, len(body) + rng.choice([-20, -1, 1, 20, 5000, 10**12]))
        head = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % declared
        return "content-length", head + body
    if kind == 5:  # chunked with bad sizes / framing
        size = rng.choice([b"zz", b"-1", b"ffffffffffffffffff", b"5;ext=1", b"3", b""])
        return "chunked", (
            b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + size
            + b"\r\nhello\r\n0\r\n\r\n"
        )
    # pipelined valid + mutated
    return "pipelined", rng.choice(VALID) + _mutate(rng, rng.choice(VALID))


def _check_stream(data: bytes, what: str, head_sent: bool = False) -> list[int]:
    """Split what the server sent into responses; each must be well-formed, 1xx/2xx/4xx."""
    statuses = []
    rest = data
    while rest:
        head, sep, rest = rest.partition(b"\r\n\r\n")
        assert sep, f"{what}: truncated response head {head[:200]!r}"
        lines = head.split(b"\r\n")
        version, status, _reason = lines[0].split(b" ", 2)
        assert version == b"HTTP/1.1", f"{what}: bad status line {lines[0]!r}"
        code = int(status)
        assert code < 500, f"{what}: {code} for {data[:300]!r}"
        statuses.append(code)
        if code == 100:
            continue
        headers = dict(ln.split(b": ", 1) for ln in lines[1:])
        n = int(headers[b"Content-Length"])
        if head_sent and code == 200 and (len(rest) < n or rest.startswith(b"HTTP/1.1 ")):
            n = 0  # the answer to a HEAD: Content-Length without the body
        assert len(rest) >= n, f"{what}: body shorter than its Content-Length"
        if code >= 400:
            body = json.loads(rest[:n])
            assert body["error"]["code"], what
        rest = rest[n:]
    return statuses


async def _send(port: int, payload: bytes, dribble: bool = False) -> bytes:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        try:
            if dribble:
                for i in range(0, len(payload), 7):
                    w.write(payload[i : i + 7])
                    await asyncio.sleep(0.001)
            else:
                w.write(payload)
            await w.drain()
            w.write_eof()
        except ConnectionError:
            pass  # the server answered and closed before taking everything: read that
        chunks = []
        try:
            while chunk := await asyncio.wait_for(r.read(65536), 5):
                chunks.append(chunk)
        except ConnectionError:
            pass  # a reset after what we read (the server dropped the rest of a flood)
        return b"".join(chunks)
    finally:
        w.close()


async def _normal_request_served(port: int) -> None:
    data = await _send(port, b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert _check_stream(data, "normal") == [200]


async def test_fuzz_cases_never_5xx_and_server_keeps_serving(server):
    rng = random.Random(SEED)
    tasks0 = len(asyncio.all_tasks())
    kinds: dict[str, int] = {}
    for i in range(CASES):
        what, payload = _case(rng)
        kinds[what] = kinds.get(what, 0) + 1
        data = await _send(server.port, payload, dribble=(i % 10 == 0))
        _check_stream(data, f"case {i} ({what})", b"HEAD" in payload)
        if i % 50 == 0:
            await _normal_request_served(server.port)
    await _normal_request_served(server.port)
    await asyncio.sleep(0.8)  # lingering rejections close
    assert not server.connections
    assert len(asyncio.all_tasks()) <= tasks0
    assert set(kinds) >= {"random", "mutated", "huge-url", "content-length", "chunked"}


async def test_fuzz_many_connections_at_once(server):
    rng = random.Random(SEED + 1)
    payloads = [_case(rng)[1] for _ in range(200)]
    results = await asyncio.gather(*(_send(server.port, p) for p in payloads))
    for i, data in enumerate(results):
        _check_stream(data, f"concurrent {i}", b"HEAD" in payloads[i])
    await _normal_request_served(server.port)
    await asyncio.sleep(0.8)
    assert not server.connections


async def test_fuzz_dribbled_heads_time_out_cleanly(server):
    # Heads that never complete, sent a byte at a time: 408 (or a 4xx for bad bytes).
    rng = random.Random(SEED + 2)
    loop = asyncio.get_running_loop()
    for _ in range(5):
        payload = _mutate(rng, VALID[0])[:-4]
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        t0 = loop.time()
        reading = asyncio.create_task(asyncio.wait_for(r.read(), 5))
        for b in payload[:20]:
            if reading.done():
                break  # answered already (a 4xx for a bad byte)
            w.write(bytes([b]))
            await asyncio.sleep(0.01)
        data = await reading
        assert loop.time() - t0 < 2
        _check_stream(data, "dribbled")
        w.close()
    await _normal_request_served(server.port)
