import pytest

from statekeeper.node.config import Limits
from statekeeper.node.errors import STATUS, OpError
from statekeeper.node.ops.core import (
    OPS,
    READ_OPS,
    WRITE_OPS,
    decode_continuation,
    encode_continuation,
    is_write,
    validate_op,
    validate_ops,
)
from statekeeper.node.ops.streams import decode_stream_continuation, encode_stream_continuation

LIM = Limits(max_key_bytes=16, max_value_bytes=8, max_ops_per_request=4, max_range_limit=50)


def code_of(op, limits=LIM, **kw):
    with pytest.raises(OpError) as ei:
        validate_op(op, limits, **kw)
    return ei.value.code


def test_put_defaults_filled():
    op = validate_op({"op": "put", "key": "k", "value": b"v"}, LIM)
    assert op == {
        "op": "put",
        "ns": "default",
        "key": "k",
        "value": b"v",
        "prev_kv": False,
        "idempotency_key": None,
    }


def test_validation_is_idempotent():
    ops = [
        {"op": "put", "ns": "n", "key": "k", "value": bytearray(b"v"), "idempotency_key": "i"},
        {"op": "delete", "key": "k", "prefix": True, "prev_kv": True},
        {"op": "cas", "key": "k", "value": b"", "expect": {"exists": False}},
        {"op": "compact", "revision": 3},
        {"op": "get", "key": "k", "revision": 2},
        {"op": "range", "prefix": "p", "limit": 1000},
        {
            "op": "txn",
            "ns": "t",
            "compare": [{"key": "k", "target": "value", "op": "<", "value": b"x"}],
            "success": [{"op": "put", "key": "a", "value": b"1"}, {"op": "get", "key": "a"}],
            "failure": [{"op": "delete", "key": "a", "ns": "other"}],
        },
    ]
    for raw in ops:
        once = validate_op(raw, LIM)
        assert validate_op(once, LIM) == once


def test_range_defaults_and_limit_cap():
    op = validate_op({"op": "range"}, LIM)
    assert op["limit"] == 50  # default 1000 capped by max_range_limit
    assert op["prefix"] is None and op["start"] is None and op["keys_only"] is False
    assert validate_op({"op": "range", "limit": 7}, LIM)["limit"] == 7
    big = Limits()
    assert validate_op({"op": "range"}, big)["limit"] == 1000


def test_txn_inner_ops_inherit_ns():
    op = validate_op(
        {
            "op": "txn",
            "ns": "t",
            "compare": [{"key": "k", "target": "version", "op": "==", "value": 0}],
            "success": [{"op": "put", "key": "a", "value": b"1"}],
        },
        LIM,
    )
    assert op["compare"][0]["ns"] == "t"
    assert op["success"][0]["ns"] == "t"
    assert op["failure"] == []


@pytest.mark.parametrize(
    "op",
    [
        {"op": "frobnicate"},
        {"op": 3},
        {"key": "k"},
    ],
)
def test_unknown_op(op):
    assert code_of(op) == "unknown_op"


@pytest.mark.parametrize(
    "op",
    [
        "not a dict",
        {"op": "put", "key": "k"},  # no value
        {"op": "put", "key": "k", "value": "str, not bytes"},
        {"op": "put", "value": b"v"},  # no key
        {"op": "put", "key": "", "value": b"v"},
        {"op": "put", "key": "a\x00b", "value": b"v"},
        {"op": "put", "key": 5, "value": b"v"},
        {"op": "put", "key": "k", "ns": "", "value": b"v"},
        {"op": "put", "key": "k", "ns": "n\x00", "value": b"v"},
        {"op": "put", "key": "k", "ns": "x" * 256, "value": b"v"},
        {"op": "put", "key": "k", "ns": 1, "value": b"v"},
        {"op": "put", "key": "\ud800", "value": b"v"},  # lone surrogate
        {"op": "put", "key": "k", "value": b"v", "prev_kv": 1},
        {"op": "put", "key": "k", "value": b"v", "idempotency_key": ""},
        {"op": "put", "key": "k", "value": b"v", "idempotency_key": "x" * 257},
        {"op": "put", "key": "k", "value": b"v", "idempotency_key": 7},
        {"op": "delete", "key": "k", "prefix": "yes"},
        {"op": "cas", "key": "k", "value": b"v"},
        {"op": "cas", "key": "k", "value": b"v", "expect": {}},
        {"op": "cas", "key": "k", "value": b"v", "expect": {"exists": True}},
        {"op": "cas", "key": "k", "value": b"v", "expect": {"version": -1}},
        {"op": "cas", "key": "k", "value": b"v", "expect": {"version": 1, "mod_revision": 1}},
        {"op": "cas", "key": "k", "value": b"v", "expect": {"version": True}},
        {"op": "compact"},
        {"op": "compact", "revision": -1},
        {"op": "get", "key": "k", "revision": "3"},
        {"op": "range", "prefix": "a", "start": "b"},
        {"op": "range", "limit": 0},
        {"op": "range", "limit": "10"},
        {"op": "range", "continuation": "%%%"},
        {"op": "range", "continuation": encode_continuation(5, "k"), "revision": 4},
        {"op": "txn", "compare": "x"},
        {"op": "txn", "success": {"op": "put"}},
        {"op": "txn", "compare": [{"key": "k", "target": "colour", "op": "==", "value": 1}]},
        {"op": "txn", "compare": [{"key": "k", "target": "version", "op": "<=", "value": 1}]},
        {"op": "txn", "compare": [{"key": "k", "target": "version", "op": "==", "value": "1"}]},
        {"op": "txn", "compare": [{"key": "k", "target": "exists", "op": "<", "value": True}]},
        {"op": "txn", "compare": [{"key": "k", "target": "exists", "op": "==", "value": 1}]},
        {"op": "txn", "compare": [{"key": "k", "target": "value", "op": "==", "value": "s"}]},
        {"op": "txn", "compare": [{"target": "version", "op": "==", "value": 1}]},
        # Unhashable target/op: a 400, not a TypeError (500) from the set lookup.
        {"op": "txn", "compare": [{"key": "k", "target": ["version"], "op": "==", "value": 1}]},
        {"op": "txn", "compare": [{"key": "k", "target": "version", "op": {"==": 1}, "value": 1}]},
        {"op": "txn", "success": [{"op": "txn"}]},  # nested
        {"op": "txn", "success": [{"op": "cas", "key": "k", "value": b"", "expect": {}}]},
        {"op": "txn", "success": [{"op": "compact", "revision": 1}]},
        {"op": "txn", "success": [{"op": "put", "key": "k", "value": b"", "idempotency_key": "i"}]},
        {"op": "txn", "success": [{"op": "get", "key": "k", "revision": 1}]},
        {"op": "txn", "success": [{"op": "range", "continuation": encode_continuation(1, "a")}]},
        {"op": "idempotency_status"},  # the key is required
        {"op": "idempotency_status", "idempotency_key": None},
        {"op": "idempotency_status", "idempotency_key": ""},
        {"op": "idempotency_status", "idempotency_key": "x" * 257},
        {"op": "idempotency_status", "idempotency_key": 7},
        {"op": "idempotency_status", "idempotency_key": "\ud800"},
        {"op": "idempotency_status", "idempotency_key": "k", "ns": ""},
        {"op": "txn", "success": [{"op": "idempotency_status", "idempotency_key": "k"}]},
    ],
)
def test_invalid_argument(op):
    assert code_of(op) == "invalid_argument"


def test_idempotency_status_requires_its_key_and_normalizes():
    with pytest.raises(OpError, match="idempotency_key is required"):
        validate_op({"op": "idempotency_status"}, Limits())
    assert validate_op({"op": "idempotency_status", "idempotency_key": "k"}, Limits()) == {
        "op": "idempotency_status",
        "ns": "default",
        "idempotency_key": "k",
    }


@pytest.mark.parametrize(
    "branch",
    [
        [{"op": "put", "key": "k", "value": b"1"}, {"op": "put", "key": "k", "value": b"2"}],
        [{"op": "put", "key": "k", "value": b"1"}, {"op": "delete", "key": "k"}],
        [{"op": "delete", "key": "k", "prefix": True}, {"op": "put", "key": "kx", "value": b""}],
        [
            {"op": "delete", "key": "k", "prefix": True},
            {"op": "delete", "key": "k2", "prefix": True},
        ],
        [
            {"op": "delete", "key": "abc", "prefix": True},
            {"op": "delete", "key": "a", "prefix": True},
        ],
    ],
)
def test_txn_writing_a_key_twice_is_rejected(branch):
    assert code_of({"op": "txn", "success": branch}) == "invalid_argument"
    assert code_of({"op": "txn", "failure": branch}) == "invalid_argument"


def test_txn_same_key_in_other_ns_or_branch_is_fine():
    validate_op(
        {
            "op": "txn",
            "success": [
                {"op": "put", "key": "k", "value": b"1"},
                {"op": "put", "key": "k", "ns": "other", "value": b"2"},
                {"op": "delete", "key": "j", "prefix": True, "ns": "other"},
                {"op": "get", "key": "k"},
            ],
            "failure": [{"op": "put", "key": "k", "value": b"3"}],
        },
        Limits(),
    )


def test_size_limits():
    assert code_of({"op": "put", "key": "k" * 17, "value": b""}) == "key_too_large"
    assert code_of({"op": "put", "key": "é" * 9, "value": b""}) == "key_too_large"  # 18 bytes
    validate_op({"op": "put", "key": "é" * 8, "value": b""}, LIM)  # 16 bytes: fits
    assert code_of({"op": "put", "key": "k", "value": b"x" * 9}) == "value_too_large"
    assert code_of({"op": "range", "prefix": "p" * 17}) == "key_too_large"
    cmp = {"key": "k", "target": "value", "op": "==", "value": b"x" * 9}
    assert code_of({"op": "txn", "compare": [cmp]}) == "value_too_large"
    too_many = [{"op": "get", "key": "k"}] * 5
    assert code_of({"op": "txn", "success": too_many}) == "too_many_ops"


def test_validate_ops_batch():
    ops = [{"op": "put", "key": "k", "value": b"v"}, {"op": "get", "key": "k"}]
    assert [o["op"] for o in validate_ops(ops, LIM)] == ["put", "get"]
    with pytest.raises(OpError) as ei:
        validate_ops([{"op": "get", "key": "k"}] * 5, LIM)
    assert ei.value.code == "too_many_ops"
    with pytest.raises(OpError) as ei:
        validate_ops([{"op": "get", "key": "k"}, {"op": "get", "key": ""}], LIM)
    assert ei.value.code == "invalid_argument" and "ops[1]" in ei.value.message
    with pytest.raises(OpError):
        validate_ops({"op": "get"}, LIM)
    assert validate_ops([], LIM) == []


def test_continuation_round_trip():
    token = encode_continuation(42, "clé/1")
    assert isinstance(token, str)
    assert decode_continuation(token, LIM) == (42, "clé/1")
    op = validate_op({"op": "range", "continuation": token, "revision": 42}, LIM)
    assert op["continuation"] == token
    # Not a token's shape (what the OpenAPI document says): invalid_argument.
    for bad in ["", 17, "%%%", "a=", "a" * (4 * LIM.max_key_bytes + 65)]:
        with pytest.raises(OpError) as ei:
            decode_continuation(bad, LIM)
        assert ei.value.code == "invalid_argument"
    # The shape, but no page handed it out: invalid_token (400), which the document lists.
    for bad in [
        "a",
        "AAAA",
        encode_continuation(1, "a\x00b"),
        encode_stream_continuation(1, 1, "forward"),
    ]:
        with pytest.raises(OpError) as ei:
            decode_continuation(bad, LIM)
        assert (ei.value.code, ei.value.status) == ("invalid_token", 400)
    for bad in ["a", encode_continuation(1, "a")]:
        with pytest.raises(OpError) as ei:
            decode_stream_continuation(bad)
        assert (ei.value.code, ei.value.status) == ("invalid_token", 400)


def test_read_write_sets():
    leases = {"lease_grant", "lease_keepalive", "lease_revoke"}
    locks = {"lock_acquire", "lock_release"}
    crdt = {"merge"}
    retention = {"retention_set", "retention_delete", "truncate_stream"}
    archive = {"archive_seal", "archive_restore"}
    auth = {"auth_token_create", "auth_token_revoke"}
    assert WRITE_OPS == (
        {"put", "delete", "cas", "txn", "compact", "append"}
        | leases
        | locks
        | crdt
        | retention
        | archive
        | auth
    )
    assert READ_OPS == {"get", "range", "read_stream", "stream_info", "list_streams"} | {
        "lease_info",
        "lease_list",
        "lock_list",
        "crdt_get",
        "retention_list",
        "retention_status",
        "archive_plan",
        "archive_list",
        "auth_token_list",
        "auth_whoami",
        "idempotency_status",
    }
    assert "gc" not in WRITE_OPS  # node-internal like lease_expire
    assert "lease_expire" not in WRITE_OPS  # node-internal: no route, not in a batch
    assert is_write({"op": "txn"}) and not is_write({"op": "get"}) and not is_write({})


def test_op_error_shape_and_statuses():
    assert OpError("expectation_failed").status == 409
    assert OpError("stream_not_found").status == 404
    assert OpError("too_many_events").status == 413
    e = OpError("compare_failed", "nope", kv=None, revision=3)
    assert e.status == 409
    assert e.to_dict() == {"code": "compare_failed", "message": "nope", "kv": None, "revision": 3}
    assert OpError("compacted").status == 410
    assert OpError("archived").status == 410
    assert OpError("future_revision").status == 400
    assert OpError("value_too_large").status == 413
    assert OpError("unsupported_media_type").status == 415
    assert OpError("timeout").status == 504
    assert OpError("no-such-code").status == 500
    assert STATUS["unavailable"] == 503


# -- streams ---------------------------------------------------------------------------------

SLIM = Limits(max_key_bytes=16, max_value_bytes=8, max_events_per_append=3, max_range_limit=50)


def _append(events, **kw):
    return {"op": "append", "stream": "s", "events": events, **kw}


def test_append_normalized_shape():
    op = validate_op(
        _append([{"data": bytearray(b"x"), "meta": {"b": 1, "a": None}}, {"data": b""}]),
        SLIM,
    )
    assert op == {
        "op": "append",
        "ns": "default",
        "stream": "s",
        "events": [
            {"data": b"x", "type": "", "id": None, "meta": {"a": None, "b": 1}},
            {"data": b"", "type": "", "id": None, "meta": {}},
        ],
        "expect": "any",
        "idempotency_key": None,
    }
    assert list(op["events"][0]["meta"]) == ["a", "b"]  # sorted: equal metas, equal bytes
    assert validate_op(op, SLIM) == op
    for expect in ("any", "no_stream", "exists", 0, 7):
        assert validate_op(_append([{"data": b""}], expect=expect), SLIM)["expect"] == expect


def test_read_stream_defaults():
    op = validate_op({"op": "read_stream", "stream": "s"}, SLIM)
    assert op == {
        "op": "read_stream",
        "ns": "default",
        "stream": "s",
        "start": None,
        "direction": "forward",
        "limit": 50,
        "revision": None,
        "continuation": None,
        "wait_ms": 0,
    }
    assert validate_op(op, SLIM) == op
    info = validate_op({"op": "stream_info", "stream": "s"}, SLIM)
    assert info == {"op": "stream_info", "ns": "default", "stream": "s"}
    listed = validate_op({"op": "list_streams", "prefix": "a"}, SLIM)
    assert listed == {
        "op": "list_streams",
        "ns": "default",
        "prefix": "a",
        "limit": 50,
        "continuation": None,
    }


TOKEN = encode_stream_continuation(5, 3, "forward")


@pytest.mark.parametrize(
    ("op", "code", "names"),
    [
        (_append(None), "invalid_argument", "events"),
        (_append([]), "invalid_argument", "events"),
        (_append({"data": b"x"}), "invalid_argument", "events"),
        (_append([{"data": b""}] * 4), "too_many_events", "4 events"),
        (_append([b"x"]), "invalid_argument", "events[0]"),
        (_append([{"type": "t"}]), "invalid_argument", "events[0].data"),
        (_append([{"data": b""}, {"data": "text"}]), "invalid_argument", "events[1].data"),
        (_append([{"data": b"x" * 9}]), "value_too_large", "events[0].data"),
        (_append([{"data": b"", "type": 3}]), "invalid_argument", "events[0].type"),
        (_append([{"data": b"", "type": "t" * 257}]), "invalid_argument", "events[0].type"),
        (_append([{"data": b"", "id": ""}]), "invalid_argument", "events[0].id"),
        (_append([{"data": b"", "id": "i" * 129}]), "invalid_argument", "events[0].id"),
        (_append([{"data": b"", "id": 5}]), "invalid_argument", "events[0].id"),
        (
            _append([{"data": b"", "id": "a"}, {"data": b"", "id": "a"}]),
            "invalid_argument",
            "events[1].id",
        ),
        (_append([{"data": b"", "meta": []}]), "invalid_argument", "events[0].meta"),
        (_append([{"data": b"", "meta": {"k": [1]}}]), "invalid_argument", "events[0].meta.k"),
        (_append([{"data": b"", "meta": {"k": 2**64}}]), "invalid_argument", "events[0].meta.k"),
        (
            _append([{"data": b"", "meta": {f"k{i}": 1 for i in range(65)}}]),
            "invalid_argument",
            "65 entries",
        ),
        (_append([{"data": b"", "meta": {"k": "v" * 4100}}]), "invalid_argument", "4096 bytes"),
        (_append([{"data": b""}], expect="maybe"), "invalid_argument", "expect"),
        (_append([{"data": b""}], expect=-1), "invalid_argument", "expect"),
        (_append([{"data": b""}], expect=True), "invalid_argument", "expect"),
        ({"op": "append", "events": [{"data": b""}]}, "invalid_argument", "stream"),
        ({**_append([{"data": b""}]), "stream": "s" * 17}, "key_too_large", "stream"),
        ({**_append([{"data": b""}]), "stream": "a\x00"}, "invalid_argument", "stream"),
        ({"op": "read_stream"}, "invalid_argument", "stream"),
        ({"op": "read_stream", "stream": "s", "direction": "up"}, "invalid_argument", "direction"),
        ({"op": "read_stream", "stream": "s", "start": -1}, "invalid_argument", "start"),
        ({"op": "read_stream", "stream": "s", "wait_ms": 60_001}, "invalid_argument", "wait_ms"),
        (
            {"op": "read_stream", "stream": "s", "wait_ms": 5, "revision": 1},
            "invalid_argument",
            "wait_ms",
        ),
        (
            {"op": "read_stream", "stream": "s", "wait_ms": 5, "direction": "backward"},
            "invalid_argument",
            "wait_ms",
        ),
        (
            {"op": "read_stream", "stream": "s", "wait_ms": 5, "continuation": TOKEN},
            "invalid_argument",
            "wait_ms",
        ),
        (
            {"op": "read_stream", "stream": "s", "continuation": TOKEN, "revision": 4},
            "invalid_argument",
            "revision",
        ),
        (
            {"op": "read_stream", "stream": "s", "continuation": "%%"},
            "invalid_argument",
            "continuation",
        ),
        (
            {"op": "read_stream", "stream": "s", "continuation": encode_continuation(1, "k")},
            "invalid_token",  # a token's shape, not a read_stream token
            "continuation",
        ),
        ({"op": "stream_info"}, "invalid_argument", "stream"),
        ({"op": "list_streams", "limit": 0}, "invalid_argument", "limit"),
        (
            {"op": "txn", "success": [{"op": "read_stream", "stream": "s"}]},
            "invalid_argument",
            "txn",
        ),
        (
            {"op": "txn", "success": [_append([{"data": b""}], idempotency_key="i")]},
            "invalid_argument",
            "idempotency_key",
        ),
    ],
)
def test_stream_validation_errors(op, code, names):
    with pytest.raises(OpError) as ei:
        validate_op(op, SLIM)
    assert ei.value.code == code
    assert names in ei.value.message, ei.value.message


def test_wait_ms_is_refused_in_a_batch_only():
    read = {"op": "read_stream", "stream": "s", "wait_ms": 100}
    assert validate_op(read, SLIM)["wait_ms"] == 100
    with pytest.raises(OpError) as ei:
        validate_ops([{"op": "get", "key": "k"}, read], SLIM)
    assert ei.value.code == "invalid_argument" and "ops[1]" in ei.value.message
    assert validate_ops([{**read, "wait_ms": 0}], SLIM)[0]["wait_ms"] == 0


def test_stream_continuation_round_trip():
    assert decode_stream_continuation(TOKEN) == (5, 3, "forward")
    op = validate_op(
        {"op": "read_stream", "stream": "s", "continuation": TOKEN, "revision": 5}, SLIM
    )
    assert op["continuation"] == TOKEN


@pytest.mark.parametrize(
    "op_name,field",
    [(s.name, f) for s in OPS.values() for f in s.fields if f.required],
    ids=lambda v: getattr(v, "name", v),
)
def test_every_required_field_refuses_absence(op_name, field):
    """A required field that let None through reached apply: truncate_stream without
    before_seq answered 500 "TypeError: '<' not supported" (schemathesis, issue 27)."""
    with pytest.raises(OpError) as ei:
        field.check(None, LIM, False, {"op": op_name, "ns": "default"})
    assert ei.value.code == "invalid_argument"


def test_truncate_stream_without_before_seq_is_invalid():
    assert code_of({"op": "truncate_stream", "stream": "s"}) == "invalid_argument"
