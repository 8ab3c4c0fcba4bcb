"""node/openapi/document.py against what the node's HTTP server actually answers: the server on a
free loopback port, driven by an aiohttp client. The document itself: tests/unit/test_openapi.py."""

from __future__ import annotations

import json

import aiohttp
import pytest
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from statekeeper.node.openapi import document as openapi
from tests.unit.test_openapi import DOC_URI, _api, _pointer, _validator

DOC = openapi.document()
REGISTRY = Registry().with_resource(DOC_URI, DRAFT202012.create_resource(DOC))


class _RaftProgress:
    """The one thing /v1/health/live asks raft (node/api/liveness.py): its loop's progress."""

    age = 0.05

    def progress(self) -> tuple[float, float, bool]:
        return self.age, 0.3, False


@pytest.fixture
async def raft():
    return _RaftProgress()


@pytest.fixture
async def client(raft):
    # The node's own HTTP server on a free loopback port, driven by an aiohttp client.
    api = _api()
    api.raft = raft
    server = api.server()
    await server.start("127.0.0.1", 0)
    async with aiohttp.ClientSession(f"http://127.0.0.1:{server.port}") as c:
        yield c
    await server.close()


async def test_served_document(client):
    r = await client.get("/v1/openapi.json")
    assert r.status == 200
    assert r.content_type == openapi.JSON
    assert await r.json() == json.loads(json.dumps(DOC))


async def test_live_matches_schema(client):
    r = await client.get("/v1/health/live")
    assert r.status == 200
    assert r.headers[openapi.NODE_HEADER] == "node-0"
    pointer = _pointer(
        "paths", "/v1/health/live", "get", "responses", "200", "content", openapi.JSON, "schema"
    )
    _validator(REGISTRY, pointer).validate(await r.json())


async def test_live_with_a_stuck_raft_loop_is_503_not_live_and_matches_schema(client, raft):
    raft.age = 60.0  # over the default [raft] live_stall_seconds
    r = await client.get("/v1/health/live")
    assert r.status == 503
    body = await r.json()
    assert body["error"]["code"] == "not_live" and body["raft_loop_age_seconds"] == 60.0
    pointer = _pointer(
        "paths", "/v1/health/live", "get", "responses", "503", "content", openapi.JSON, "schema"
    )
    _validator(REGISTRY, pointer).validate(body)


def _documented_error(method: str, path: str, status: int):
    """Schema pointer of the documented error answer (components.responses for bad paths)."""
    op = DOC["paths"].get(path, {}).get(method.lower())
    if op is not None:
        assert str(status) in op["responses"], (method, path, status)
        return _pointer(
            "paths",
            path,
            method.lower(),
            "responses",
            str(status),
            "content",
            openapi.JSON,
            "schema",
        )
    name = {404: "NotFound", 405: "MethodNotAllowed"}[status]
    return _pointer("components", "responses", name, "content", openapi.JSON, "schema")


ERROR_PROBES = [
    pytest.param("GET", "/v1/nope", None, None, "not_found", id="unknown-path"),
    pytest.param(
        "POST", "/v1/kv/put", "text/plain", b"x", "unsupported_media_type", id="media-type"
    ),
    pytest.param("POST", "/v1/kv/put", openapi.JSON, b'{"key": ', "malformed_body", id="malformed"),
    pytest.param("POST", "/v1/kv/put", openapi.JSON, b"[1]", "malformed_body", id="not-an-object"),
    pytest.param(
        "POST", "/v1/kv/put", openapi.JSON, b'{"key": "k"}', "invalid_argument", id="no-value"
    ),
    pytest.param(
        "POST",
        "/v1/kv/put",
        openapi.JSON,
        json.dumps({"key": "k" * 5000, "value": "v"}).encode(),
        "key_too_large",
        id="key-too-large",
    ),
    pytest.param(
        "POST",
        "/v1/kv/get",
        openapi.JSON,
        b'{"key": "k", "consistency": "eventual"}',
        "invalid_argument",
        id="bad-consistency",
    ),
    pytest.param(
        "POST",
        "/v1/batch",
        openapi.JSON,
        b'{"ops": [{"op": "watch"}]}',
        "unknown_op",
        id="batch-unknown-op",
    ),
    pytest.param(
        "POST",
        "/v1/kv/txn",
        openapi.JSON,
        b'{"success": [{"op": "compact", "revision": 1}]}',
        "invalid_argument",
        id="txn-bad-op",
    ),
    pytest.param(
        "POST",
        "/v1/streams/append",
        openapi.JSON,
        b'{"stream": "s", "events": []}',
        "invalid_argument",
        id="append-no-events",
    ),
    pytest.param(
        "POST",
        "/v1/streams/append",
        openapi.JSON,
        json.dumps({"stream": "s", "events": [{"data": "x"}] * 1001}).encode(),
        "too_many_events",
        id="append-too-many-events",
    ),
    pytest.param(
        "POST",
        "/v1/batch",
        openapi.JSON,
        b'{"ops": [{"op": "read_stream", "stream": "s", "wait_ms": 10}]}',
        "invalid_argument",
        id="batch-long-poll",
    ),
    pytest.param(
        "POST",
        "/v1/streams/read",
        openapi.JSON,
        b'{"stream": "s", "wait_ms": 10, "direction": "backward"}',
        "invalid_argument",
        id="backward-long-poll",
    ),
    pytest.param(
        "POST",
        "/v1/status",
        openapi.JSON,
        b"{}",
        "method_not_allowed",
        id="method-not-allowed",
    ),
]


@pytest.mark.parametrize(("method", "path", "ctype", "body", "code"), ERROR_PROBES)
async def test_error_answers_match_document(client, method, path, ctype, body, code):
    headers = {"Content-Type": ctype} if ctype else {}
    r = await client.request(method, path, data=body, headers=headers)
    answer = await r.json()
    assert answer["error"]["code"] == code, answer
    assert r.status == openapi.error_status(code), answer
    _validator(REGISTRY, _documented_error(method, path, r.status)).validate(answer)


async def test_unknown_kv_op(client):
    r = await client.post("/v1/kv/watch", json={"key": "k"})
    assert r.status == openapi.error_status("unknown_op") == 400
    assert (await r.json())["error"]["code"] == "unknown_op"
