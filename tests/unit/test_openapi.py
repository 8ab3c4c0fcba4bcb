"""node/openapi/document.py: a valid OpenAPI 3.1 document that matches the registered routes and
docs/protocol.md. What the API answers over a socket: tests/loopback/test_openapi_served.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from statekeeper.node import errors
from statekeeper.node.api import routes as http_api
from statekeeper.node.config import local_cluster
from statekeeper.node.openapi import document as openapi

PROTOCOL = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
DOC_URI = "urn:statekeeper:openapi"
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
MSGPACK_TYPES = (openapi.MSGPACK, openapi.X_MSGPACK)


@pytest.fixture(scope="module")
def doc() -> dict:
    return openapi.document()


@pytest.fixture(scope="module")
def registry(doc) -> Registry:
    return Registry().with_resource(DOC_URI, DRAFT202012.create_resource(doc))


def _api() -> http_api.Api:
    # Api.__init__ only stores sm/raft/proposer; routes and error paths need none of them.
    return http_api.Api(local_cluster(secret=""), "node-0", None, None, None)


def _pointer(*parts: str) -> str:
    return "#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def _validator(registry: Registry, pointer: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": DOC_URI + pointer}, registry=registry)


def _operations(doc: dict):
    for path, item in doc["paths"].items():
        for method in HTTP_METHODS:
            if method in item:
                yield path, method, item[method]


def _walk(node, where=()):
    yield where, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, (*where, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, (*where, str(i)))


def _codes_in(schema, doc: dict) -> set[str]:
    """Error codes a response schema admits (`code` enums and consts, through $refs)."""
    found: set[str] = set()
    for where, node in _walk(schema):
        if not isinstance(node, dict):
            continue
        if "$ref" in node and node["$ref"] != "#/components/schemas/Error":
            found |= _codes_in(_resolve(doc, node["$ref"]), doc)
        if where and where[-1] == "code" and len(where) >= 2 and where[-2] == "properties":
            found |= set(node.get("enum", ()))
            if "const" in node:
                found.add(node["const"])
    return found


def _resolve(doc: dict, ref: str):
    assert ref.startswith("#/"), ref
    node = doc
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


# -- the document itself ------------------------------------------------------------------


def test_valid_openapi_31(doc):
    assert doc["openapi"].startswith("3.1")
    validate(doc, cls=OpenAPIV31SpecValidator)


def test_cached_and_json_serializable(doc):
    assert openapi.document() is doc
    assert json.loads(json.dumps(doc)) == doc


def test_every_ref_resolves(doc):
    refs = [node["$ref"] for _, node in _walk(doc) if isinstance(node, dict) and "$ref" in node]
    assert refs
    for ref in refs:
        _resolve(doc, ref)


def test_component_schemas(doc):
    schemas = doc["components"]["schemas"]
    for name in (
        "KeyValue",
        "Error",
        "Compare",
        "TxnOp",
        "PutRequest",
        "GetRequest",
        "DeleteRequest",
        "RangeRequest",
        "CasRequest",
        "TxnRequest",
        "CompactRequest",
        "BatchRequest",
        "PutResult",
        "GetResult",
        "RangeResult",
        "DeleteResult",
        "CasResult",
        "TxnResult",
        "CompactResult",
        "BatchResult",
        "Status",
        "Expect",
        "AppendRequest",
        "AppendRequestMsgpack",
        "ReadStreamRequest",
        "StreamInfoRequest",
        "ListStreamsRequest",
        "AppendResult",
        "ReadStreamResult",
        "ReadStreamResultMsgpack",
        "StreamEvent",
        "StreamInfoResult",
        "ListStreamsResult",
        "ExpectationFailed",
    ):
        assert name in schemas, name
    event = schemas["StreamEvent"]["properties"]
    assert {"data", "data_b64"} <= set(event) and "data_b64" not in schemas["StreamEventMsgpack"][
        "properties"
    ]
    # JSON carries bytes as text or base64, msgpack as bin.
    assert {"value", "value_b64"} <= set(schemas["KeyValue"]["properties"])
    assert "value_b64" not in schemas["KeyValueMsgpack"]["properties"]
    assert (
        schemas["KeyValueMsgpack"]["properties"]["value"]["contentMediaType"]
        == "application/octet-stream"
    )


# -- routes ---------------------------------------------------------------------------------


def _registered_routes() -> set[tuple[str, str]]:
    routes = set()
    for method, path in _api().routes():
        if path == "/v1/kv/{op}":
            routes |= {(method, f"/v1/kv/{op}") for op in http_api.KV_OPS}
        else:
            assert "{" not in path, f"document the new variable route {path}"
            routes.add((method, path))
    return routes


def test_routes_match_the_app(doc):
    documented = {(method.upper(), path) for path, method, _ in _operations(doc)}
    registered = _registered_routes()
    assert registered - documented == set(), "registered but not documented"
    assert documented - registered == set(), "documented but not registered"


def test_routes_match_protocol_md(doc):
    text = PROTOCOL.read_text()
    in_md = set(re.findall(r"^\| (GET|POST) (/v1/\S+|/metrics) \|", text, re.M))
    assert in_md, "protocol.md's endpoint table was not found"
    documented = {(method.upper(), path) for path, method, _ in _operations(doc)}
    assert in_md == documented


def test_operation_ids_unique(doc):
    ids = [op["operationId"] for _, _, op in _operations(doc)]
    assert len(ids) == len(set(ids))


def test_post_bodies_in_both_encodings(doc):
    for path, method, op in _operations(doc):
        if method != "post":
            continue
        body = op["requestBody"]["content"]
        assert set(body) == {openapi.JSON, *MSGPACK_TYPES}, path
        ok = op["responses"]["200"]["content"]
        # The watch streams its frames: NDJSON for a JSON request.
        json_answer = "application/x-ndjson" if path == "/v1/watch" else openapi.JSON
        assert set(ok) == {json_answer, *MSGPACK_TYPES}, path
        json_ref = body[openapi.JSON]["schema"]["$ref"]
        assert body[openapi.MSGPACK]["schema"]["$ref"] in (json_ref, json_ref + "Msgpack"), path
        for status in ("400", "413", "415", "500"):
            assert status in op["responses"], (path, status)


# -- errors ---------------------------------------------------------------------------------


def test_every_error_code_described(doc):
    assert set(openapi.ERROR_WHEN) == set(errors.STATUS)
    enum = doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"][
        "enum"
    ]
    assert set(enum) == set(openapi.ERROR_WHEN)
    for code, status in errors.STATUS.items():
        assert openapi.error_status(code) == status


def _protocol_errors() -> dict[str, set[int]]:
    section = PROTOCOL.read_text().split("### Errors", 1)[1]
    out: dict[str, set[int]] = {}
    for m in re.finditer(r"^\| (\d{3}) \| ([^|]+) \|", section, re.M):
        alt = {int(s) for s in re.findall(r"\((\d{3})\)", m[2])}
        for code in re.findall(r"`(\w+)`", m[2]):
            out[code] = {int(m[1]), *alt}
    return out


def test_error_codes_match_protocol_md():
    in_md = _protocol_errors()
    assert len(in_md) >= 10, "protocol.md's error table was not found"
    for code, statuses in in_md.items():
        assert code in openapi.ERROR_WHEN, code
        assert openapi.error_status(code) in statuses, code


def test_error_responses_use_their_status(doc):
    seen = set()
    for path, _method, op in _operations(doc):
        for status, response in op["responses"].items():
            if status == "200":
                continue
            for media in response["content"].values():
                codes = _codes_in(media["schema"], doc)
                assert codes, (path, status)
                seen |= codes
                for code in codes:
                    assert str(openapi.error_status(code)) == status, (path, code, status)
    assert {"key_not_found", "compare_failed", "timeout", "not_ready", "too_many_ops"} <= seen


# -- examples -------------------------------------------------------------------------------


def _examples(doc: dict):
    for where, node in _walk(doc["paths"]):
        if isinstance(node, dict) and "examples" in node and "schema" in node:
            for name, example in node["examples"].items():
                yield (
                    "/".join((*where, name)),
                    _pointer("paths", *where, "schema"),
                    example["value"],
                )


def test_stream_routes_and_codes(doc):
    paths = doc["paths"]
    for path in ("/v1/streams/append", "/v1/streams/read", "/v1/streams/info", "/v1/streams/list"):
        assert paths[path]["post"]["tags"] == ["streams"], path
    append = paths["/v1/streams/append"]["post"]["responses"]
    assert {"409", "413", "422"} <= set(append)
    assert "too_many_events" in append["413"]["description"]
    assert "(1000 on this node)" in append["413"]["description"]
    assert "404" in paths["/v1/streams/info"]["post"]["responses"]
    assert append["409"]["content"][openapi.JSON]["examples"]
    txn_ops = doc["components"]["schemas"]["TxnOp"]["oneOf"]
    assert "append" in {v["allOf"][1]["properties"]["op"]["const"] for v in txn_ops}


def test_examples_for_put_get_cas(doc):
    for path in ("/v1/kv/put", "/v1/kv/get", "/v1/kv/cas"):
        op = doc["paths"][path]["post"]
        assert op["requestBody"]["content"][openapi.JSON]["examples"], path
        assert op["responses"]["200"]["content"][openapi.JSON]["examples"], path
    assert doc["paths"]["/v1/kv/get"]["post"]["responses"]["404"]["content"][openapi.JSON][
        "examples"
    ]
    assert doc["paths"]["/v1/kv/cas"]["post"]["responses"]["409"]["content"][openapi.JSON][
        "examples"
    ]


def test_examples_match_their_schemas(doc, registry):
    examples = list(_examples(doc))
    assert len(examples) >= 15
    for where, pointer, value in examples:
        errs = [e.message for e in _validator(registry, pointer).iter_errors(value)]
        assert not errs, (where, errs)


@pytest.mark.parametrize(
    ("schema", "value", "ok"),
    [
        ("PutRequest", {"key": "k", "value": "v"}, True),
        ("PutRequest", {"key": "k", "value_b64": "AAE="}, True),
        ("PutRequest", {"key": "k"}, False),
        ("PutRequest", {"key": "", "value": "v"}, False),
        ("PutRequest", {"key": "a\x00b", "value": "v"}, False),
        ("CasRequest", {"key": "k", "value": "v", "expect": {"exists": False}}, True),
        ("CasRequest", {"key": "k", "value": "v", "expect": {"exists": True}}, False),
        (
            "CasRequest",
            {"key": "k", "value": "v", "expect": {"version": 1, "mod_revision": 2}},
            False,
        ),
        ("Compare", {"key": "k", "target": "exists", "op": "==", "value": True}, True),
        ("Compare", {"key": "k", "target": "exists", "op": "<", "value": True}, False),
        ("Compare", {"key": "k", "target": "version", "op": "<", "value": 3}, True),
        ("Compare", {"key": "k", "target": "version", "op": "<", "value": "3"}, False),
        ("Compare", {"key": "k", "target": "value", "op": "==", "value_b64": "AAE="}, True),
        ("RangeRequest", {"prefix": "a/", "limit": 10}, True),
        ("RangeRequest", {"prefix": "a/", "start": "a"}, False),
        ("RangeRequest", {"start": "a", "end": "b", "consistency": "serializable"}, True),
        ("RangeRequest", {"consistency": "stale"}, False),
        ("TxnOp", {"op": "get", "key": "k"}, True),
        ("TxnOp", {"op": "cas", "key": "k", "value": "v", "expect": {"version": 1}}, False),
        ("BatchOp", {"op": "compact", "revision": 5}, True),
        ("BatchOp", {"op": "read_stream", "stream": "s", "wait_ms": 0}, True),
        ("BatchOp", {"op": "read_stream", "stream": "s", "wait_ms": 100}, False),
        ("BatchOp", {"op": "append", "stream": "s", "events": [{"data": "x"}]}, True),
        ("TxnOp", {"op": "append", "stream": "s", "events": [{"data_b64": "AAE="}]}, True),
        ("TxnOp", {"op": "read_stream", "stream": "s"}, False),
        ("AppendRequest", {"stream": "s", "events": [{"data": "x"}], "expect": 0}, True),
        ("AppendRequest", {"stream": "s", "events": []}, False),
        ("AppendRequest", {"stream": "s", "events": [{"type": "t"}]}, False),
        ("AppendRequest", {"stream": "s", "events": [{"data": "x"}], "expect": "maybe"}, False),
        ("ReadStreamRequest", {"stream": "s", "direction": "backward", "start": 3}, True),
        ("ReadStreamRequest", {"stream": "s", "wait_ms": 60001}, False),
        (
            "ExpectationFailed",
            {
                "error": {
                    "code": "expectation_failed",
                    "message": "m",
                    "last_seq": 2,
                    "exists": True,
                }
            },
            True,
        ),
        ("ExpectationFailed", {"error": {"code": "expectation_failed", "message": "m"}}, False),
        ("BatchResult", {"results": [{"revision": 3, "kvs": [], "more": False}]}, True),
        (
            "BatchResult",
            {
                "results": [
                    {"revision": 3, "stream": "s", "first_seq": 1, "last_seq": 1, "events": []}
                ]
            },
            True,
        ),
        (
            "BatchResult",
            {"results": [{"revision": 3}, {"error": {"code": "compacted", "message": "m"}}]},
            True,
        ),
        (
            "GetResult",
            {
                "revision": 3,
                "kv": {
                    "key": "k",
                    "value_b64": "/w==",
                    "version": 1,
                    "create_revision": 3,
                    "mod_revision": 3,
                },
            },
            True,
        ),
    ],
)
def test_schemas_accept_and_reject(registry, schema, value, ok):
    valid = _validator(registry, _pointer("components", "schemas", schema)).is_valid(value)
    assert valid is ok
