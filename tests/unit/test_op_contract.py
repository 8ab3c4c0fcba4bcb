"""One declaration per op (node/ops/core.py) drives both validate_op and the OpenAPI request
schemas: the document follows the node's [limits], and what one accepts the other does.
The document a node serves for its cluster.toml: tests/loopback/test_openapi_limits.py."""

from __future__ import annotations

import base64
import json

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from statekeeper.client.crdt import model
from statekeeper.node.api import codec
from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.openapi import document as openapi
from statekeeper.node.ops.core import OPS, validate_op, validate_ops
from statekeeper.node.ops.fields import Bytes
from statekeeper.node.reads import read_options

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
        # A field the node sets itself (auth_token_create's parent) has no properties.
        declared = {f.name for f in spec.fields if f.properties(Limits(), "json") != {}}
        json_props = set(s[f"{spec.title}Request"]["properties"])
        # JSON carries each bytes field (put's value, merge's state) also as base64.
        b64 = {f"{f.name}_b64" for f in spec.fields if isinstance(f, Bytes)}
        extra = (set() if spec.write else read_options) | b64 | {"op"}  # op: the path's
        assert json_props == declared | extra, spec.name
    txn_ops = {
        v["allOf"][1]["properties"]["op"]["const"]: v["allOf"][0] for v in s["TxnOp"]["oneOf"]
    }
    assert set(txn_ops) == {name for name, spec in OPS.items() if spec.in_txn}
    for name, schema in txn_ops.items():
        allowed = {"op"} | {f.name for f in OPS[name].fields if not f.txn_error}
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
    # Null reads as absent for an optional field, and the document says so (issue 15).
    (
        "put",
        {"key": "a", "value": "v", "ns": None, "prev_kv": None, "idempotency_key": None},
    ),
    ("put", {"key": "a", "value": "v", "lease": 5, "ttl_ms": None, "fence": None}),
    ("range", {"prefix": None, "start": "a", "limit": None, "continuation": None}),
    ("read_stream", {"stream": "s", "wait_ms": 5, "revision": None, "continuation": None}),
    ("retention_set", {"prefix": "l/", "target": "streams", "keep_last": 3, "within": None}),
    ("append", {"stream": "s", "events": [{"data": "x", "type": None, "meta": None}]}),
    # A compare's value_b64 is an unknown field unless the target is "value".
    ("txn", {"compare": [{"key": "k", "target": "version", "op": "==", "value": 1, "value_b64": "AAE="}]}),
    ("txn", {"compare": [{"key": "k", "target": "exists", "op": "!=", "value": True, "value_b64": "AAE="}]}),
    # Meta numbers: a fraction, or a whole number msgpack carries.
    ("append", {"stream": "s", "events": [{"data": "x", "meta": {"a": 1.5, "b": 2**64 - 1, "c": -(2**63)}}]}),
    ("lock_list", {"prefix": ""}),  # an empty prefix: every lock
    # Page tokens of retention_list / archive_list: any unpadded URL-safe base64 is a position.
    ("retention_list", {"continuation": "YWJj"}),
    ("archive_list", {"continuation": "YWJjZA"}),
    (
        "archive_seal",
        {
            "segment": {"id": "seg-1", "url": "file:///s", "sha256": "a" * 64, "bytes": 3},
            "keys": [["k", 3]],
            "streams": [["s", 1, 5]],
        },
    ),
    (
        "archive_restore",
        {
            "segment": "seg-1",
            "keys": [["k", "v"], ["k2", {"b64": "AAE="}]],
            "streams": [["s", [[1, "x", None, 0, 3, None, None], [2, "y", "t", 1, 4, "i", {"a": 1}]]]],
        },
    ),
]  # fmt: skip
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
    # Tokens: not their shape is invalid_argument (a shape that does not decode: below).
    ("range", {"continuation": "%%%"}),
    ("range", {"continuation": ""}),
    ("read_stream", {"stream": "s", "continuation": "a=="}),
    ("retention_list", {"continuation": "abcde"}),
    ("retention_list", {"continuation": "ab+/"}),
    ("archive_list", {"continuation": ""}),
    ("retention_list", {"ns": "a\u0000b"}),
    # A long poll reads forward at the current revision.
    ("read_stream", {"stream": "s", "wait_ms": 5, "revision": 3}),
    ("read_stream", {"stream": "s", "wait_ms": 5, "direction": "backward"}),
    # Meta: whole numbers beyond what msgpack carries, however they are written.
    ("append", {"stream": "s", "events": [{"data": "x", "meta": {"a": 2**64}}]}),
    ("append", {"stream": "s", "events": [{"data": "x", "meta": {"a": 1e50}}]}),
    ("append", {"stream": "s", "events": [{"data": "x", "meta": {"a": -(2**63) - 1}}]}),
    # Archive: the segment is required; items are tuples of exactly these types.
    ("archive_seal", {"keys": [["k", 3]]}),
    ("archive_restore", {"keys": [["k", "v"]]}),
    ("archive_seal", {"segment": {"id": "s", "url": "u", "sha256": "a" * 64, "bytes": 1}, "keys": [["k"]]}),
    ("archive_seal", {"segment": {"id": "s", "url": "u", "sha256": "a" * 64, "bytes": 1}, "keys": [[1, 2]]}),
    ("archive_seal", {"segment": {"id": "s", "url": "u", "sha256": "a" * 64, "bytes": 1}, "keys": [["k", 1, 2]]}),
    ("archive_seal", {"segment": {"id": "s", "url": "u", "sha256": "a" * 64, "bytes": 1}, "streams": [["s", 1]]}),
    ("archive_seal", {"segment": {"id": "s", "url": "u", "sha256": "a" * 64, "bytes": 1}, "streams": [["", 1, 2]]}),
    ("archive_restore", {"segment": "s", "keys": [["k", {"b64": "!!"}]]}),
    ("archive_restore", {"segment": "s", "keys": [["k", {"b64": "AA==", "x": 1}]]}),
    ("archive_restore", {"segment": "s", "streams": [["s", []]]}),
    ("archive_restore", {"segment": "s", "streams": [["s", [[1, "x", None, 0, 3, None]]]]}),
    ("archive_restore", {"segment": "s", "streams": [["s", [[1, "x", None, 0, 3, "", None]]]]}),
]  # fmt: skip


@pytest.mark.parametrize(("op", "body"), VALID, ids=[f"{o}-{i}" for i, (o, _) in enumerate(VALID)])
def test_valid_requests_pass_both(op: str, body: dict):
    assert _validate_json_body(op, body, Limits()) is None
    _validator(Limits(), f"{OPS[op].title}Request").validate(body)


@pytest.mark.parametrize(("op", "body"), VALID, ids=[f"{o}-{i}" for i, (o, _) in enumerate(VALID)])
def test_null_reads_as_absent_in_both(op: str, body: dict):
    """One rule for every optional field: null is the same as leaving it out, for the
    server (the same normalized op) and for the document (the property allows null)."""
    validator = _validator(Limits(), f"{OPS[op].title}Request")
    raw = codec.decode(json.dumps(body).encode(), codec.JSON)
    read_options(raw)  # as the route does before validate_op
    expected = validate_op({**raw, "op": op}, Limits())
    for f in OPS[op].fields:
        if f.required or not f.nullable or not f.requested or f.name in body:
            continue
        with_null = {**body, f.name: None}
        raw = codec.decode(json.dumps(with_null).encode(), codec.JSON)
        read_options(raw)
        assert validate_op({**raw, "op": op}, Limits()) == expected, f.name
        assert validator.is_valid(with_null), f.name


# Values whose shape the document states but whose content it cannot (a page token no page
# handed out, CRDT state bytes that are not model.encode(type, ...)): schema-valid, and
# refused with a 400 code of their own that the document lists for the op.
OPAQUE = [
    ("range", {"continuation": "AAAA"}, "invalid_token"),
    ("range", {"continuation": "a"}, "invalid_token"),
    ("list_streams", {"continuation": "AAAA"}, "invalid_token"),
    ("read_stream", {"stream": "s", "continuation": "AAAA"}, "invalid_token"),
    ("merge", {"key": "c", "type": "gcounter", "state": "not msgpack \u00c1"}, "invalid_crdt_state"),
    ("merge", {"key": "c", "type": "orset", "state_b64": GCOUNTER_B64}, "invalid_crdt_state"),
]  # fmt: skip


@pytest.mark.parametrize(("op", "body", "code"), OPAQUE)
def test_opaque_values_get_their_own_documented_code(op: str, body: dict, code: str):
    assert _validate_json_body(op, body, Limits()) == code
    assert _validator(Limits(), f"{OPS[op].title}Request").is_valid(body)
    assert OpError(code).status == 400
    responses = openapi.document()["paths"][OPS[op].path]["post"]["responses"]
    assert f"`{code}`" in responses["400"]["description"]


def test_msgpack_whole_numbers_are_integers_as_in_json():
    """JSON's 5.0 is 5 (node/api/codec.py _json_number); a msgpack float 5.0 is too, so the two
    encodings validate alike. Fractions stay floats; bin values are never touched."""
    import msgpack

    body = {"ttl_ms": 86400000.0, "x": [1.0, {"y": -2.0, "z": 2.5}], "v": b"\xcb\xca", "n": 3}
    out = codec.decode(msgpack.packb(body, use_bin_type=True), codec.MSGPACK)
    assert out == {"ttl_ms": 86400000, "x": [1, {"y": -2, "z": 2.5}], "v": b"\xcb\xca", "n": 3}
    assert type(out["ttl_ms"]) is int and type(out["x"][1]["z"]) is float
    huge = codec.decode(msgpack.packb({"m": 1e300}), codec.MSGPACK)
    assert type(huge["m"]) is float  # like JSON: huge exponents stay floats (and fail)
    as_json = codec.decode(b'{"ttl_ms": 86400000.0, "x": [1.0, {"y": -2.0, "z": 2.5}]}', codec.JSON)
    assert as_json == {k: out[k] for k in ("ttl_ms", "x")}
    put = {"op": "put", "key": "k", "value": b"v", "ttl_ms": 5000.0}
    raw = codec.decode(msgpack.packb(put, use_bin_type=True), codec.MSGPACK)
    assert validate_op(raw, Limits())["ttl_ms"] == 5000


def test_msgpack_whole_numbers_deep_in_a_batch_next_to_maps_without_floats():
    """The walk passes over maps and arrays with nothing to convert or enter, and still
    finds a float several levels down, after them (a batch body with binary values)."""
    import msgpack

    body = {
        "ops": [
            {"op": "put", "key": "a", "value": b"\xca\xcb"},
            {"op": "put", "key": "b", "value": b"v", "ttl_ms": 5000.0},
            [[2.0, "s"], {"x": [3.0, 0.5]}],
        ],
        "n": 1.0,
    }
    out = codec.decode(msgpack.packb(body, use_bin_type=True), codec.MSGPACK)
    assert out == {
        "ops": [
            {"op": "put", "key": "a", "value": b"\xca\xcb"},
            {"op": "put", "key": "b", "value": b"v", "ttl_ms": 5000},
            [[2, "s"], {"x": [3, 0.5]}],
        ],
        "n": 1,
    }
    assert type(out["ops"][1]["ttl_ms"]) is int and type(out["ops"][2][1]["x"][1]) is float


def test_read_options_null_is_absent_and_empty_is_refused():
    from statekeeper.node.reads import read_options

    assert read_options({"consistency": None, "min_revision": None}) == ("linearizable", None)
    for bad in ("", 0, False, [], "LINEARIZABLE"):
        with pytest.raises(OpError) as ei:
            read_options({"consistency": bad})
        assert ei.value.code == "invalid_argument", bad


@pytest.mark.parametrize(
    ("op", "body"), INVALID, ids=[f"{o}-{i}" for i, (o, _) in enumerate(INVALID)]
)
def test_invalid_requests_fail_both(op: str, body: dict):
    assert _validate_json_body(op, body, Limits()) == "invalid_argument"
    assert not _validator(Limits(), f"{OPS[op].title}Request").is_valid(body)


def test_codes_an_op_can_answer_are_documented():
    """The codes schemathesis found undocumented: a txn fails with the error of any op in
    it; every write with an idempotency_key may answer idempotency_key_reused (a read of one,
    idempotency_status, never does); a batch is
    validated whole (and its min_revision may be ahead)."""
    paths = openapi.document()["paths"]

    def described(path: str) -> str:
        responses = paths[path]["post"]["responses"]
        return " ".join(r["description"] for r in responses.values())

    txn = described("/v1/kv/txn")
    for code in ("lease_not_found", "expectation_failed", "crdt_type_mismatch", "too_many_events"):
        assert f"`{code}`" in txn, code
    batch = described("/v1/batch")
    for code in ("future_revision", "invalid_token", "invalid_crdt_state", "too_many_events"):
        assert f"`{code}`" in batch, code
    for spec in OPS.values():
        if spec.write and any(f.name == "idempotency_key" for f in spec.fields):
            assert "`idempotency_key_reused`" in described(spec.path), spec.name


@pytest.mark.parametrize("op", ["retention_list", "archive_list", "get", "lease_grant"])
def test_value_b64_is_an_unknown_field_of_ops_without_values(op: str) -> None:
    """schemathesis drew `value_b64: "a"` for /v1/retention/list and /v1/archive/list: a
    field their schemas allow as unknown, refused with 400 because the codec decoded it as
    base64 for every body. Only ops with byte fields (and a batch's ops) decode it now."""
    carry = {"batch", "put", "txn"}
    body = json.dumps({"key": "k", "value_b64": "not base64!"}).encode()
    assert "value" not in codec.decode(body, codec.JSON, op, carry)
    with pytest.raises(OpError, match="value_b64 is not valid base64"):
        codec.decode(body, codec.JSON, "put", carry)
    batch = {"ops": [{"op": op, "value_b64": "!"}, {"op": "put", "key": "k", "value_b64": "AQ=="}]}
    out = codec.decode(json.dumps(batch).encode(), codec.JSON, "batch", carry)
    assert out["ops"][0]["value_b64"] == "!" and out["ops"][1]["value"] == b"\x01"
    # Without the op names (tests, tools): every body is translated, as before.
    with pytest.raises(OpError):
        codec.decode(body, codec.JSON)


def test_codec_survives_an_op_name_that_is_not_a_string() -> None:
    """schemathesis: a batch item whose "op" was an object made the codec's lookup raise
    TypeError (500 internal). Validation refuses it with a code instead."""
    body = json.dumps({"ops": [{"op": {"x": 1}, "value_b64": "!"}]}).encode()
    out = codec.decode(body, codec.JSON, "batch", {"batch", "put"})
    with pytest.raises(OpError) as e:
        validate_ops(out["ops"], Limits())
    assert e.value.status == 400


def test_a_malformed_value_b64_beside_another_compare_target_is_refused() -> None:
    """schemathesis: the schema gives a compare's value_b64 a base64 pattern whatever the
    target; a txn whose `exists` compare carried a malformed one was accepted (200)."""
    compare = {"key": "k", "target": "exists", "op": "==", "value": True}
    bad = {"compare": [{**compare, "value_b64": "RkmN*"}], "success": [], "failure": []}
    with pytest.raises(OpError, match="value_b64 is not valid base64"):
        codec.decode(json.dumps(bad).encode(), codec.JSON, "txn", {"txn"})
    good = {**bad, "compare": [{**compare, "value_b64": "AQ=="}]}
    out = codec.decode(json.dumps(good).encode(), codec.JSON, "txn", {"txn"})
    assert out["compare"][0] == compare  # unused beside `exists`: dropped
