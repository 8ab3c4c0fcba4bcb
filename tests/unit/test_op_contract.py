"""One declaration per op (node/ops.py) drives both validate_op and the OpenAPI request
schemas: the document follows the node's [limits], and what one accepts the other does.
The document a node serves for its cluster.toml: tests/loopback/test_openapi_limits.py."""

from __future__ import annotations

import base64
import json

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from client.crdt import model
from node import codec, openapi
from node.config import Limits
from node.errors import OpError
from node.op_fields import Bytes
from node.ops import OPS, validate_op, validate_ops

SMALL = Limits(
    max_key_bytes=100,
    max_value_bytes=1000,
    max_request_bytes=5000,
    max_ops_per_request=7,
    max_range_limit=50,
)
DOC_URI = "urn:statekeeper:openapi"


def _schemas(limits: Limits) -> dict:
    return openapi.document(limits)["components"]["schemas"]


def _validator(limits: Limits, name: str) -> Draft202012Validator:
    doc = openapi.document(limits)
    registry = Registry().with_resource(DOC_URI, DRAFT202012.create_resource(doc))
    return Draft202012Validator(
        {"$ref": f"{DOC_URI}#/components/schemas/{name}"}, registry=registry
    )


def _code(fn, *args) -> str | None:
    try:
        fn(*args)
    except OpError as e:
        return e.code
    return None


def _validate_json_body(path_op: str, body: dict, limits: Limits) -> str | None:
    """What the node does with a JSON body sent to /v1/kv/{op}: error code or None."""
    raw = codec.decode(json.dumps(body).encode(), codec.JSON)
    raw.pop("consistency", None)
    raw.pop("min_revision", None)
    return _code(validate_op, {**raw, "op": path_op}, limits)


# -- the document follows the limits ------------------------------------------------------


def test_document_states_the_configured_limits():
    s = _schemas(SMALL)
    assert s["Key"]["maxLength"] == 100 and "100" in s["Key"]["description"]
    for name in ("PutRequest", "PutRequestMsgpack", "CasRequest", "CasRequestMsgpack"):
        value = s[name]["properties"]["value"]
        assert value["maxLength"] == 1000 and "1000" in value["description"], name
    assert s["BatchRequest"]["properties"]["ops"]["maxItems"] == 7
    for branch in ("compare", "success", "failure"):
        assert s["TxnRequest"]["properties"][branch]["maxItems"] == 7
    assert "(50 on this node)" in s["RangeRequest"]["properties"]["limit"]["description"]
    put = openapi.document(SMALL)["paths"]["/v1/kv/put"]["post"]["responses"]["413"]
    assert "(5000 on this node)" in put["description"]
    assert "(1000 on this node)" in put["description"]


def test_document_is_built_once_per_limits():
    assert openapi.document(SMALL) is openapi.document(Limits(**vars(SMALL)))
    assert openapi.document(SMALL) != openapi.document(Limits())
    assert openapi.document() is openapi.document(Limits())


def test_example_message_is_the_one_validation_raises():
    put = openapi.document(SMALL)["paths"]["/v1/kv/put"]["post"]
    example = put["responses"]["413"]["content"][openapi.JSON]["examples"]["value_too_large"]
    with pytest.raises(OpError) as ei:
        validate_op({"op": "put", "key": "k", "value": b"x" * 1001}, SMALL)
    assert example["value"]["error"] == {"code": "value_too_large", "message": ei.value.message}


@pytest.mark.parametrize("limits", [Limits(), SMALL], ids=["default", "small"])
def test_bounds_in_schema_and_validation_agree(limits: Limits):
    put = _validator(limits, "PutRequest")
    for key_len, value_len in (
        (limits.max_key_bytes, limits.max_value_bytes),
        (limits.max_key_bytes + 1, 1),
        (1, limits.max_value_bytes + 1),
    ):
        body = {"key": "k" * key_len, "value": "v" * value_len}
        accepted = _validate_json_body("put", body, limits) is None
        assert put.is_valid(body) is accepted, (key_len, value_len)
    batch = _validator(limits, "BatchRequest")
    for n in (limits.max_ops_per_request, limits.max_ops_per_request + 1):
        ops = [{"op": "get", "key": "k"}] * n
        assert batch.is_valid({"ops": ops}) is (_code(validate_ops, ops, limits) is None), n


# -- the schemas are the declarations -------------------------------------------------------


def test_request_properties_are_the_declared_fields():
    s = _schemas(Limits())
    read_options = {"consistency", "min_revision"}
    for spec in OPS.values():
        declared = {f.name for f in spec.fields}
        json_props = set(s[f"{spec.title}Request"]["properties"])
        # JSON carries each bytes field (put's value, merge's state) also as base64.
        b64 = {f"{f.name}_b64" for f in spec.fields if isinstance(f, Bytes)}
        extra = (set() if spec.write else read_options) | b64
        assert json_props == declared | extra, spec.name
    txn_ops = {
        v["allOf"][1]["properties"]["op"]["const"]: v["allOf"][0] for v in s["TxnOp"]["oneOf"]
    }
    assert set(txn_ops) == {name for name, spec in OPS.items() if spec.in_txn}
    for name, schema in txn_ops.items():
        allowed = {f.name for f in OPS[name].fields if not f.txn_error}
        props = {p for p in schema["properties"] if not p.endswith("_b64")}
        assert props == allowed, name
    batch_ops = {v["allOf"][1]["properties"]["op"]["const"] for v in s["BatchOp"]["oneOf"]}
    assert batch_ops == set(OPS)


def test_stream_bounds_in_schema_and_validation_agree():
    limits = Limits(max_events_per_append=3, max_value_bytes=10)
    append = _validator(limits, "AppendRequest")
    for n, size in ((3, 10), (4, 1), (1, 11)):
        body = {"stream": "s", "events": [{"data": "v" * size}] * n}
        accepted = _validate_json_body("append", body, limits) is None
        assert append.is_valid(body) is accepted, (n, size)
    assert _validate_json_body(
        "append", {"stream": "s", "events": [{"data": "v"}] * 4}, limits
    ) == ("too_many_events")
    batch = _validator(limits, "BatchRequest")
    for wait_ms in (0, 5):
        ops = [{"op": "read_stream", "stream": "s", "wait_ms": wait_ms}]
        assert batch.is_valid({"ops": ops}) is (_code(validate_ops, ops, limits) is None), wait_ms


# A gcounter state {"a": 2}, as merge carries it in JSON.
GCOUNTER_B64 = base64.b64encode(model.encode("gcounter", {"a": 2})).decode()
VALID = [
    ("put", {"key": "a", "value": "v", "ns": "n", "prev_kv": True, "idempotency_key": "i"}),
    ("put", {"key": "a", "value_b64": "AAE="}),
    ("delete", {"key": "a", "prefix": True}),
    ("cas", {"key": "a", "value": "v", "expect": {"mod_revision": 4}}),
    ("compact", {"revision": 3}),
    ("get", {"key": "a", "revision": 2, "consistency": "serializable"}),
    ("range", {"start": "a", "end": "b", "limit": 10, "keys_only": True}),
    (
        "txn",
        {
            "compare": [
                {"key": "a", "target": "value", "op": "<", "value": "x"},
                {"key": "b", "target": "exists", "op": "!=", "value": False},
                {"key": "c", "target": "create_revision", "op": ">", "value": 2},
            ],
            "success": [{"op": "put", "key": "a", "value": "1"}, {"op": "range", "prefix": "p"}],
            "failure": [{"op": "get", "key": "a"}, {"op": "delete", "key": "b"}],
        },
    ),
    (
        "append",
        {
            "stream": "s",
            "events": [
                {"data": "x", "type": "t", "id": "e1", "meta": {"a": 1, "b": None}},
                {"data_b64": "AAE="},
            ],
            "expect": 0,
        },
    ),
    ("append", {"stream": "s", "events": [{"data": "x"}], "expect": "no_stream"}),
    ("read_stream", {"stream": "s", "start": 3, "direction": "backward", "limit": 5}),
    ("read_stream", {"stream": "s", "wait_ms": 1000, "consistency": "serializable"}),
    ("stream_info", {"stream": "s"}),
    ("list_streams", {"prefix": "a", "limit": 3}),
    ("txn", {"success": [{"op": "append", "stream": "s", "events": [{"data": "x"}]}]}),
    ("merge", {"key": "c", "type": "gcounter", "state_b64": GCOUNTER_B64, "idempotency_key": "i"}),
    ("txn", {"success": [{"op": "merge", "key": "c", "type": "gcounter", "state_b64": "gA=="}]}),
    ("crdt_get", {"key": "c", "state": True, "revision": 3, "consistency": "serializable"}),
    ("retention_set", {"prefix": "agent/", "keep_last": 3, "within": "ckpt"}),
    ("retention_set", {"prefix": "a/", "target": "keys", "max_age_s": 60, "within": "é" * 128}),
    ("retention_set", {"prefix": "log/", "target": "streams", "keep_last": 3}),
]
INVALID = [
    ("put", {"value": "v"}),
    ("put", {"key": "", "value": "v"}),
    ("put", {"key": "a\u0000b", "value": "v"}),
    ("put", {"key": "k", "value": "v", "prev_kv": "yes"}),
    ("put", {"key": "k", "value": "v", "idempotency_key": ""}),
    ("put", {"key": "k", "value": "v", "ns": ""}),
    ("cas", {"key": "k", "value": "v", "expect": {"exists": True}}),
    ("cas", {"key": "k", "value": "v", "expect": {"version": 1, "mod_revision": 1}}),
    ("compact", {"revision": -1}),
    ("get", {"key": "k", "revision": "3"}),
    ("range", {"prefix": "a", "end": "b"}),
    ("range", {"limit": 0}),
    ("txn", {"compare": [{"key": "k", "target": "exists", "op": "<", "value": True}]}),
    ("txn", {"compare": [{"key": "k", "target": "version", "op": "==", "value": "1"}]}),
    ("txn", {"compare": [{"key": "k", "target": "colour", "op": "==", "value": 1}]}),
    ("txn", {"success": [{"op": "get", "key": "k", "revision": 1}]}),
    ("txn", {"success": [{"op": "put", "key": "k", "value": "v", "idempotency_key": "i"}]}),
    ("txn", {"success": [{"op": "cas", "key": "k", "value": "v", "expect": {"version": 1}}]}),
    ("append", {"stream": "s"}),
    ("append", {"stream": "s", "events": []}),
    ("append", {"stream": "", "events": [{"data": "x"}]}),
    ("append", {"stream": "s", "events": [{"type": "t"}]}),
    ("append", {"stream": "s", "events": [{"data": "x", "id": ""}]}),
    ("append", {"stream": "s", "events": [{"data": "x", "type": "t" * 257}]}),
    ("append", {"stream": "s", "events": [{"data": "x", "meta": {"k": [1]}}]}),
    ("append", {"stream": "s", "events": [{"data": "x"}], "expect": "maybe"}),
    ("append", {"stream": "s", "events": [{"data": "x"}], "expect": -1}),
    ("read_stream", {}),
    ("read_stream", {"stream": "s", "direction": "sideways"}),
    ("read_stream", {"stream": "s", "start": -1}),
    ("read_stream", {"stream": "s", "wait_ms": 60001}),
    ("stream_info", {"stream": "a\u0000b"}),
    ("list_streams", {"limit": 0}),
    ("merge", {"key": "c", "type": "counter", "state_b64": GCOUNTER_B64}),
    ("merge", {"key": "c", "type": "gcounter"}),
    ("merge", {"type": "gcounter", "state_b64": GCOUNTER_B64}),
    ("txn", {"success": [{"op": "crdt_get", "key": "c"}]}),
    ("crdt_get", {"key": "c", "state": "yes"}),
    ("retention_set", {"prefix": "a/", "keep_last": 3, "within": ""}),
    ("retention_set", {"prefix": "a/", "keep_last": 3, "within": "ckpt/x"}),
    ("retention_set", {"prefix": "a/", "keep_last": 3, "within": "a\u0000b"}),
    ("retention_set", {"prefix": "a/", "keep_last": 3, "within": "c" * 257}),
    ("retention_set", {"prefix": "a/", "keep_last": 3, "within": 7}),
    ("retention_set", {"prefix": "a/", "target": "streams", "keep_last": 3, "within": "ckpt"}),
]


@pytest.mark.parametrize(("op", "body"), VALID, ids=[f"{o}-{i}" for i, (o, _) in enumerate(VALID)])
def test_valid_requests_pass_both(op: str, body: dict):
    assert _validate_json_body(op, body, Limits()) is None
    _validator(Limits(), f"{OPS[op].title}Request").validate(body)


@pytest.mark.parametrize(
    ("op", "body"), INVALID, ids=[f"{o}-{i}" for i, (o, _) in enumerate(INVALID)]
)
def test_invalid_requests_fail_both(op: str, body: dict):
    assert _validate_json_body(op, body, Limits()) == "invalid_argument"
    assert not _validator(Limits(), f"{OPS[op].title}Request").is_valid(body)
