"""OpenAPI 3.1 description of the HTTP API, served at GET /v1/openapi.json.

Built from small helpers so each part can be read against docs/protocol.md (the contract)
and node/http_api.py (the routes). Every schema that carries a value exists twice: once for
``application/json`` (``value`` is UTF-8 text or ``value_b64`` is base64) and once, suffixed
``Msgpack``, for ``application/msgpack`` (``value`` is bin). The rest are shared.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata
from typing import Any

from node.config import Limits
from node.errors import STATUS
from node.ops import (
    DEFAULT_NS,
    DEFAULT_RANGE_LIMIT,
    MAX_IDEMPOTENCY_KEY_CHARS,
    MAX_NS_BYTES,
    MAX_REVISION,
)

Schema = dict[str, Any]

JSON = "application/json"
MSGPACK = "application/msgpack"
X_MSGPACK = "application/x-msgpack"
WIRES = ("json", "msgpack")
NODE_HEADER = "X-Statekeeper-Node"

_LIMITS = Limits()

# Codes the HTTP layer answers that node.errors.STATUS does not map (http_api.py).
HTTP_ONLY_STATUS = {"method_not_allowed": 405, "not_ready": 503}

# code -> when. docs/protocol.md "Errors" plus the codes node/errors.py and node/http_api.py
# add; the HTTP status comes from node.errors.STATUS (or HTTP_ONLY_STATUS).
ERROR_WHEN: dict[str, str] = {
    "malformed_body": "the body is not valid JSON/msgpack, is truncated or empty, or is not an object",
    "malformed_http": "the bytes are not an HTTP/1.1 request (the node answers, then closes the connection)",
    "headers_too_large": "the request line and headers exceed 64 KiB",
    "unsupported_media_type": "the Content-Type is neither JSON nor msgpack",
    "unknown_op": "the op name is not known (batch/txn, or /v1/kv/{op} with an unknown op)",
    "invalid_argument": "wrong type, missing field, bad ns/key, bad compare, txn writes a key twice",
    "invalid_request": "a raft entry could not be decoded (per-op result; not expected over HTTP)",
    "future_revision": "the read revision is above the current revision",
    "key_too_large": f"a key exceeds max_key_bytes ({_LIMITS.max_key_bytes} by default)",
    "value_too_large": f"a value exceeds max_value_bytes ({_LIMITS.max_value_bytes} by default)",
    "request_too_large": f"the body exceeds max_request_bytes ({_LIMITS.max_request_bytes} by default)",
    "too_many_ops": f"more ops (txn: compares + ops) than max_ops_per_request ({_LIMITS.max_ops_per_request} by default)",
    "key_not_found": "get of a missing key (the body still has `revision`)",
    "not_found": "unknown path",
    "method_not_allowed": "the path exists but not for this method",
    "compare_failed": "the cas expectation was not met (the body has the current `kv` and `revision`)",
    "idempotency_key_reused": "the idempotency_key was already used in this namespace for a different request (nothing applied)",
    "compacted": "the read revision is below compact_revision (history dropped)",
    "unavailable": "no leader / no quorum / shutting down: retry, possibly on another node",
    "not_ready": "no leader known, or this node lags behind the leader's commit index",
    "timeout": "the write's outcome is unknown (it may still commit): retry with the same idempotency_key",
    "internal": "a bug; never expected",
}


def error_status(code: str) -> int:
    """HTTP status the API answers for an error code."""
    return STATUS[code] if code in STATUS else HTTP_ONLY_STATUS[code]


# Errors every body-carrying POST can answer.
_BODY_ERRORS = (
    "malformed_body",
    "unsupported_media_type",
    "invalid_argument",
    "request_too_large",
    "internal",
)
_WRITE_ERRORS = (*_BODY_ERRORS, "key_too_large", "unavailable", "timeout")
_READ_ERRORS = (*_BODY_ERRORS, "key_too_large", "future_revision", "compacted", "unavailable")


# -- schema helpers ---------------------------------------------------------------------


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _name(name: str, wire: str) -> str:
    """Component name of a value-carrying schema for one wire encoding."""
    return name if wire == "json" else f"{name}Msgpack"


def _w(name: str, wire: str) -> Schema:
    return _ref(_name(name, wire))


def _nullable(schema: Schema) -> Schema:
    return {"oneOf": [schema, {"type": "null"}]}


def _int(description: str, minimum: int | None = 0, **extra: Any) -> Schema:
    s: Schema = {"type": "integer", "description": description, **extra}
    if minimum is not None:
        s["minimum"] = minimum
    return s


def _bool(description: str, **extra: Any) -> Schema:
    return {"type": "boolean", "description": description, **extra}


def _str(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def _obj(
    properties: dict[str, Schema],
    required: tuple[str, ...] | list[str] = (),
    description: str | None = None,
    *,
    closed: bool = False,
    **extra: Any,
) -> Schema:
    s: Schema = {"type": "object", "properties": properties}
    if required:
        s["required"] = list(required)
    if description:
        s["description"] = description
    if closed:
        s["additionalProperties"] = False
    s.update(extra)
    return s


def _array(items: Schema, description: str, **extra: Any) -> Schema:
    return {"type": "array", "items": items, "description": description, **extra}


def _const(value: Any, description: str) -> Schema:
    return {"const": value, "description": description}


def _bytes(wire: str, description: str) -> Schema:
    if wire == "json":
        return _str(f"{description} (UTF-8 text)")
    return _str(f"{description} (msgpack bin)", contentMediaType="application/octet-stream")


def _value_props(wire: str, what: str = "the value") -> dict[str, Schema]:
    props = {"value": _bytes(wire, what)}
    if wire == "json":
        props["value_b64"] = _str(
            f"{what}, base64 (for bytes that are not UTF-8)", contentEncoding="base64"
        )
    return props


def _value_required(wire: str) -> Schema:
    """A request must carry the value: `value` (or, in JSON, `value_b64`)."""
    if wire == "json":
        return {"anyOf": [{"required": ["value"]}, {"required": ["value_b64"]}]}
    return {"required": ["value"]}


def _ns() -> Schema:
    return _ref("Namespace")


def _key() -> Schema:
    return _ref("Key")


def _rev(description: str) -> Schema:
    return _int(description, maximum=MAX_REVISION)


def _idem() -> Schema:
    return _ref("IdempotencyKey")


# -- shared (wire-independent) schemas --------------------------------------------------


def _common_schemas() -> dict[str, Schema]:
    no_nul = "^[^\\u0000]+$"
    return {
        "Namespace": _str(
            f"Namespace of the key: 1..{MAX_NS_BYTES} UTF-8 bytes, no NUL.",
            minLength=1,
            maxLength=MAX_NS_BYTES,
            pattern=no_nul,
            default=DEFAULT_NS,
        ),
        "Key": _str(
            f"Key: 1..max_key_bytes ({_LIMITS.max_key_bytes} by default) UTF-8 bytes, no NUL.",
            minLength=1,
            maxLength=_LIMITS.max_key_bytes,
            pattern=no_nul,
        ),
        "IdempotencyKey": _str(
            "Client-chosen unique id of this write (the client uses a uuid4). A write retried "
            "with the same key within the retention window returns the stored result with "
            "`replayed: true` and applies nothing.",
            minLength=1,
            maxLength=MAX_IDEMPOTENCY_KEY_CHARS,
        ),
        "Consistency": {
            "type": "string",
            "enum": ["linearizable", "serializable"],
            "default": "linearizable",
            "description": "linearizable: served after a raft barrier entry submitted after the "
            "request arrived has been applied locally. serializable: local state, any node, "
            "possibly stale.",
        },
        "MinRevision": _rev(
            "Wait (up to the request timeout) until the local revision is at least this before serving."
        ),
        "Error": _obj(
            {
                "error": _obj(
                    {
                        "code": {
                            "type": "string",
                            "enum": sorted(ERROR_WHEN),
                            "description": "Machine-readable code.",
                        },
                        "message": _str("Human-readable explanation."),
                        "revision": _rev("`future_revision`: the current revision."),
                        "compact_revision": _rev("`compacted`: the compaction point."),
                    },
                    ("code", "message"),
                )
            },
            ("error",),
            "Every error: `{error: {code, message, ...}}`; some codes add fields beside `error`.",
        ),
        "KeyNotFound": {
            "allOf": [
                _ref("Error"),
                _obj(
                    {
                        "error": _obj({"code": {"const": "key_not_found"}}),
                        "revision": _rev("Revision the read was served at."),
                    },
                    ("revision",),
                ),
            ],
            "description": "404 of POST /v1/kv/get.",
        },
        "NotReady": {
            "allOf": [
                _ref("Error"),
                _obj(
                    {"error": _obj({"code": {"const": "not_ready"}}), "ready": {"const": False}},
                    ("ready",),
                ),
            ],
            "description": "503 of GET /v1/health/ready.",
        },
        "Expect": {
            "description": "cas expectation: exactly one of these.",
            "oneOf": [
                _obj(
                    {"version": _int("The key's version (0: missing).")}, ("version",), closed=True
                ),
                _obj(
                    {"mod_revision": _int("The key's mod_revision (0: missing).")},
                    ("mod_revision",),
                    closed=True,
                ),
                _obj(
                    {"exists": {"const": False, "description": "The key must not exist."}},
                    ("exists",),
                    closed=True,
                ),
            ],
        },
        **_read_request_schemas(),
        "CompactRequest": _obj(
            {
                "revision": _rev(
                    "Drop history below this revision (at most the current revision, else `future_revision`)."
                ),
                "idempotency_key": _idem(),
            },
            ("revision",),
            "compact op.",
        ),
        "CompactResult": _obj(
            {
                "revision": _rev("Current revision (compaction does not advance it)."),
                "compact_revision": _rev("Reads below this revision now fail with `compacted`."),
            },
            ("revision", "compact_revision"),
        ),
        "Status": _status_schema(),
        "Live": _obj(
            {"ok": {"const": True}, "node_id": _str("Id of this node.")},
            ("ok", "node_id"),
        ),
        "Ready": _obj(
            {"ready": {"const": True}, "node_id": _str("Id of this node.")},
            ("ready", "node_id"),
        ),
    }


def _get_props(*, in_txn: bool = False) -> dict[str, Schema]:
    props = {"ns": _ns(), "key": _key()}
    if not in_txn:  # reads inside a txn see the txn's own revision
        props["revision"] = _rev(
            "Read the store as it was right after this revision (default: current)."
        )
    return props


def _range_props(*, in_txn: bool = False) -> dict[str, Schema]:
    bound = {"maxLength": _LIMITS.max_key_bytes, "pattern": "^[^\\u0000]*$"}
    props = {
        "ns": _ns(),
        "prefix": _str("Only keys starting with this prefix (not with start/end).", **bound),
        "start": _str("First key (inclusive).", **bound),
        "end": _str("Stop before this key (exclusive); default: end of the namespace.", **bound),
        "limit": _int(
            f"At most this many kvs per page; larger values are clamped to max_range_limit "
            f"({_LIMITS.max_range_limit} by default).",
            minimum=1,
            default=DEFAULT_RANGE_LIMIT,
        ),
        "keys_only": _bool("Omit values.", default=False),
    }
    if not in_txn:  # no paging and no past revision inside a txn
        props["continuation"] = _str(
            "Opaque token from the previous page's answer; send it with the same ns/prefix/start/end."
        )
        props["revision"] = _rev(
            "Read at this revision (default: current). With `continuation`, it must equal the "
            "first page's revision (or be omitted)."
        )
    return props


def _delete_props() -> dict[str, Schema]:
    return {
        "ns": _ns(),
        "key": _key(),
        "prefix": _bool(
            "Treat `key` as a prefix: delete every key starting with it.", default=False
        ),
        "prev_kv": _bool("Return the deleted kvs in `prev_kvs`.", default=False),
    }


def _range_exclusive() -> Schema:
    """`prefix` excludes `start`/`end`."""
    return {
        "not": {"required": ["prefix"], "anyOf": [{"required": ["start"]}, {"required": ["end"]}]}
    }


def _read_options() -> dict[str, Schema]:
    return {"consistency": _ref("Consistency"), "min_revision": _ref("MinRevision")}


def _read_request_schemas() -> dict[str, Schema]:
    return {
        "GetRequest": _obj({**_get_props(), **_read_options()}, ("key",), "get op."),
        "RangeRequest": _obj(
            {**_range_props(), **_read_options()},
            (),
            "range op: `prefix`, or `start` and/or `end`, or neither (the whole namespace); "
            "keys come in byte order.",
            **_range_exclusive(),
        ),
        "DeleteRequest": _obj(
            {**_delete_props(), "idempotency_key": _idem()}, ("key",), "delete op."
        ),
    }


def _status_schema() -> Schema:
    idx = "Raft log index."
    return _obj(
        {
            "node_id": _str("Id of the node that answered."),
            "role": {"type": "string", "enum": ["leader", "follower", "candidate"]},
            "term": _int("Current raft term."),
            "leader": {"type": ["string", "null"], "description": "Leader's node id, if known."},
            "leader_url": {
                "type": ["string", "null"],
                "description": "Leader's HTTP base URL, if known.",
            },
            "commit_index": _int(f"{idx} Commit index known to this node."),
            "applied_index": _int(f"{idx} Last entry applied by raft on this node."),
            "leader_commit_index": {
                "type": ["integer", "null"],
                "description": f"{idx} The leader's commit index, if known.",
            },
            "has_quorum": _bool("This node (as leader) hears from a majority."),
            "ready": _bool("Same condition as GET /v1/health/ready."),
            "revision": _rev("Store revision on this node."),
            "compact_revision": _rev("History below this revision is dropped."),
            "sm_applied_index": _int(f"{idx} Last entry recorded by the state machine (RocksDB)."),
            "fsync": {"type": "string", "enum": ["always", "never"]},
            "entries_proposed": _int("Raft entries this node proposed."),
            "ops_proposed": _int("Ops carried by those entries."),
        },
        (
            "node_id",
            "role",
            "term",
            "leader",
            "leader_url",
            "commit_index",
            "applied_index",
            "leader_commit_index",
            "has_quorum",
            "ready",
            "revision",
            "compact_revision",
            "sm_applied_index",
            "fsync",
            "entries_proposed",
            "ops_proposed",
        ),
    )


# -- value-carrying schemas (one per wire) ----------------------------------------------


def _kv(w: str) -> Schema:
    props: dict[str, Schema] = {
        "ns": _ns(),
        "key": _key(),
        **_value_props(w, "the value (absent with keys_only)"),
        "version": _int("Writes since creation (1 on create, reset by delete).", minimum=1),
        "create_revision": _rev("Revision that created the key."),
        "mod_revision": _rev("Revision of the last write to the key."),
    }
    desc = "A key and its metadata. `ns` appears only when it is not the request's."
    if w == "json":
        desc += " `value` when the bytes are valid UTF-8, else `value_b64`."
    return _obj(props, ("key", "version", "create_revision", "mod_revision"), desc)


def _put_props(w: str) -> dict[str, Schema]:
    return {
        "ns": _ns(),
        "key": _key(),
        **_value_props(
            w, f"the value, at most max_value_bytes ({_LIMITS.max_value_bytes} by default)"
        ),
        "prev_kv": _bool("Return the previous kv in `prev_kv`.", default=False),
    }


def _put_request(w: str) -> Schema:
    return _obj(
        {**_put_props(w), "idempotency_key": _idem()},
        ("key",),
        "put op.",
        allOf=[_value_required(w)],
    )


def _cas_request(w: str) -> Schema:
    return _obj(
        {
            "ns": _ns(),
            "key": _key(),
            **_value_props(w, "the value to write when the expectation holds"),
            "expect": _ref("Expect"),
            "idempotency_key": _idem(),
        },
        ("key", "expect"),
        "cas op: write `value` if the key matches `expect`.",
        allOf=[_value_required(w)],
    )


def _compare(w: str) -> Schema:
    counters = ["version", "mod_revision", "create_revision"]
    return _obj(
        {
            "key": _key(),
            "ns": _ns(),
            "target": {"type": "string", "enum": [*counters, "value", "exists"]},
            "op": {"type": "string", "enum": ["==", "!=", "<", ">"]},
            **_value_props(w, "the operand"),
            "value": {"description": "The operand: integer, bytes or bool, by `target`."},
        },
        ("key", "target", "op"),
        "A txn compare. A missing key has version 0, revisions 0, no value. "
        "`value` is an integer for version/revisions, bytes for value, a bool for exists "
        "(only == and !=).",
        allOf=[
            {
                "if": {"properties": {"target": {"const": "exists"}}},
                "then": {
                    "properties": {"op": {"enum": ["==", "!="]}, "value": {"type": "boolean"}},
                    "required": ["value"],
                },
            },
            {
                "if": {"properties": {"target": {"enum": counters}}},
                "then": {
                    "properties": {
                        "value": {
                            "type": "integer",
                            "minimum": -MAX_REVISION,
                            "maximum": MAX_REVISION,
                        }
                    },
                    "required": ["value"],
                },
            },
            {
                "if": {"properties": {"target": {"const": "value"}}},
                "then": {
                    "properties": {"value": _bytes(w, "the bytes to compare with")},
                    **_value_required(w),
                },
            },
        ],
    )


def _tagged(op: str, base: Schema) -> Schema:
    """`base` plus a required `op: <name>` field."""
    return {
        "allOf": [base, _obj({"op": {"const": op, "description": "Op name."}}, ("op",))],
    }


def _txn_op(w: str) -> Schema:
    return {
        "description": "An op inside a txn branch: put, delete, get or range "
        "(no idempotency_key, no nested txn). `ns` defaults to the txn's.",
        "oneOf": [
            _tagged("put", _obj(_put_props(w), ("key",), allOf=[_value_required(w)])),
            _tagged("delete", _obj(_delete_props(), ("key",))),
            _tagged("get", _obj(_get_props(in_txn=True), ("key",))),
            _tagged("range", _obj(_range_props(in_txn=True), **_range_exclusive())),
        ],
    }


def _txn_request(w: str) -> Schema:
    return _obj(
        {
            "ns": _ns(),
            "compare": _array(_w("Compare", w), "All must hold for `success` to run.", default=[]),
            "success": _array(_w("TxnOp", w), "Ops run when every compare holds.", default=[]),
            "failure": _array(_w("TxnOp", w), "Ops run otherwise.", default=[]),
            "idempotency_key": _idem(),
        },
        (),
        "txn op: atomic; all writes share one revision. One txn may not write the same key "
        "twice (`invalid_argument`).",
    )


def _batch_op(w: str) -> Schema:
    return {
        "description": "One op of a batch, with its `op` field.",
        "oneOf": [
            _tagged("put", _w("PutRequest", w)),
            _tagged("get", _obj(_get_props(), ("key",))),
            _tagged("delete", _ref("DeleteRequest")),
            _tagged("range", _obj(_range_props(), **_range_exclusive())),
            _tagged("cas", _w("CasRequest", w)),
            _tagged("txn", _w("TxnRequest", w)),
            _tagged("compact", _ref("CompactRequest")),
        ],
    }


def _batch_request(w: str) -> Schema:
    return _obj(
        {
            "ops": _array(
                _w("BatchOp", w),
                f"At most max_ops_per_request ({_LIMITS.max_ops_per_request} by default).",
            ),
            **_read_options(),
        },
        ("ops",),
        "Many independent ops in one request: not atomic (use txn). Validated whole before "
        "anything is submitted. Reads are served after the batch's writes.",
    )


def _replayed() -> Schema:
    return _bool("Present (true) when an idempotency_key replay returned the stored result.")


def _put_result(w: str) -> Schema:
    return _obj(
        {
            "revision": _rev("Revision of this write."),
            "prev_kv": _nullable(_w("KeyValue", w)),
            "replayed": _replayed(),
        },
        ("revision",),
        "`prev_kv` only when asked for (null if the key did not exist).",
    )


def _delete_result(w: str) -> Schema:
    return _obj(
        {
            "revision": _rev("Revision of this delete (the current one if nothing was deleted)."),
            "deleted": _int("Number of keys deleted."),
            "prev_kvs": _array(_w("KeyValue", w), "Deleted kvs, when `prev_kv` was asked for."),
            "replayed": _replayed(),
        },
        ("revision", "deleted"),
    )


def _get_result(w: str) -> Schema:
    return _obj(
        {"revision": _rev("Revision the read was served at."), "kv": _nullable(_w("KeyValue", w))},
        ("revision", "kv"),
        "POST /v1/kv/get answers 404 `key_not_found` instead of `kv: null`; inside batch/txn "
        "results a missing key is `kv: null`.",
    )


def _range_result(w: str) -> Schema:
    return _obj(
        {
            "revision": _rev("Revision the read was served at."),
            "kvs": _array(_w("KeyValue", w), "Keys in byte order."),
            "more": _bool("More keys follow; pass `continuation` back to get them."),
            "continuation": _str("Opaque token for the next page (same revision)."),
        },
        ("revision", "kvs", "more"),
    )


def _cas_result(w: str) -> Schema:
    return _obj(
        {
            "revision": _rev("Revision of the write, or the current one if it did not succeed."),
            "succeeded": _bool("POST /v1/kv/cas answers 409 `compare_failed` when false."),
            "kv": _nullable(_w("KeyValue", w)),
            "replayed": _replayed(),
        },
        ("revision", "succeeded"),
        "On failure `kv` is the current kv, or null if the key does not exist.",
    )


def _compare_failed(w: str) -> Schema:
    return {
        "allOf": [
            _ref("Error"),
            _obj(
                {
                    "error": _obj({"code": {"const": "compare_failed"}}),
                    "revision": _rev("Current revision."),
                    "succeeded": {"const": False},
                    "kv": _nullable(_w("KeyValue", w)),
                    "replayed": _replayed(),
                },
                ("revision", "kv"),
            ),
        ],
        "description": "409 of POST /v1/kv/cas: `kv` is the current kv (null: the key does not exist).",
    }


def _txn_result(w: str) -> Schema:
    return _obj(
        {
            "revision": _rev("Revision of the txn's writes (the current one if it wrote nothing)."),
            "succeeded": _bool("Whether every compare held (and `success` ran)."),
            "results": _array(_w("TxnOpResult", w), "One result per op of the chosen branch."),
            "replayed": _replayed(),
        },
        ("revision", "succeeded", "results"),
    )


def _txn_op_result(w: str) -> Schema:
    return {
        "oneOf": [
            _w("PutResult", w),
            _w("DeleteResult", w),
            _w("GetResult", w),
            _w("RangeResult", w),
        ]
    }


def _batch_result(w: str) -> Schema:
    return _obj(
        {
            "results": _array(
                {
                    "oneOf": [
                        _w("PutResult", w),
                        _w("GetResult", w),
                        _w("DeleteResult", w),
                        _w("RangeResult", w),
                        _w("CasResult", w),
                        _w("TxnResult", w),
                        _ref("CompactResult"),
                        _ref("Error"),
                    ]
                },
                "One per op, in order: its result, or `{error}` if that op failed.",
            )
        },
        ("results",),
    )


_WIRE_SCHEMAS = {
    "KeyValue": _kv,
    "PutRequest": _put_request,
    "CasRequest": _cas_request,
    "Compare": _compare,
    "TxnOp": _txn_op,
    "TxnRequest": _txn_request,
    "BatchOp": _batch_op,
    "BatchRequest": _batch_request,
    "PutResult": _put_result,
    "DeleteResult": _delete_result,
    "GetResult": _get_result,
    "RangeResult": _range_result,
    "CasResult": _cas_result,
    "CompareFailed": _compare_failed,
    "TxnResult": _txn_result,
    "TxnOpResult": _txn_op_result,
    "BatchResult": _batch_result,
}


def _schemas() -> dict[str, Schema]:
    out = _common_schemas()
    for wire in WIRES:
        for name, build in _WIRE_SCHEMAS.items():
            out[_name(name, wire)] = build(wire)
    return out


# -- responses and operations ------------------------------------------------------------


def _schema_for(name: str, wire: str) -> Schema:
    return _w(name, wire) if name in _WIRE_SCHEMAS else _ref(name)


def _content(name: str, *, wires: tuple[str, ...] = WIRES, examples: dict | None = None) -> dict:
    """Media types for one schema: JSON, and msgpack (both spellings) when `wires` has it."""
    content: dict[str, Any] = {}
    if "json" in wires:
        content[JSON] = {"schema": _schema_for(name, "json")}
        if examples:
            content[JSON]["examples"] = examples
    if "msgpack" in wires:
        msgpack_media = {"schema": _schema_for(name, "msgpack")}
        content[MSGPACK] = msgpack_media
        content[X_MSGPACK] = dict(msgpack_media)
    return content


def _headers() -> dict:
    return {NODE_HEADER: {"$ref": f"#/components/headers/{NODE_HEADER}"}}


def _response(description: str, content: dict | None = None, *, node_header: bool = True) -> dict:
    r: dict[str, Any] = {"description": description}
    if node_header:
        r["headers"] = _headers()
    if content:
        r["content"] = content
    return r


# Error codes whose body has more than `{error}`.
_ERROR_BODIES = {
    "key_not_found": "KeyNotFound",
    "compare_failed": "CompareFailed",
    "not_ready": "NotReady",
}


def _error_schema(codes: list[str], wire: str) -> Schema:
    generic = [c for c in codes if c not in _ERROR_BODIES]
    options = [_schema_for(_ERROR_BODIES[c], wire) for c in codes if c in _ERROR_BODIES]
    if generic:
        options.append(
            {
                "allOf": [
                    _ref("Error"),
                    {"properties": {"error": {"properties": {"code": {"enum": generic}}}}},
                ]
            }
        )
    return options[0] if len(options) == 1 else {"oneOf": options}


def _error_responses(
    codes: tuple[str, ...], *, wires: tuple[str, ...] = WIRES, examples: dict | None = None
) -> dict:
    by_status: dict[int, list[str]] = {}
    for code in codes:
        by_status.setdefault(error_status(code), []).append(code)
    out = {}
    for status in sorted(by_status):
        group = by_status[status]
        desc = "; ".join(f"`{c}`: {ERROR_WHEN[c]}" for c in group)
        content: dict[str, Any] = {}
        for wire in wires:
            media = {"schema": _error_schema(group, wire)}
            types = [JSON] if wire == "json" else [MSGPACK, X_MSGPACK]
            for t in types:
                content[t] = dict(media)
        ex = (examples or {}).get(status)
        if ex and JSON in content:
            content[JSON]["examples"] = ex
        out[str(status)] = _response(desc, content)
    return out


def _request_body(name: str, description: str, examples: dict | None = None) -> dict:
    return {
        "required": True,
        "description": description
        + " JSON or msgpack by Content-Type; the answer uses the same encoding.",
        "content": _content(name, examples=examples),
    }


def _post(
    op_id: str,
    summary: str,
    description: str,
    request: str,
    result: str,
    ok: str,
    errors: tuple[str, ...],
    *,
    tag: str = "kv",
    examples: dict | None = None,
) -> dict:
    """A POST operation taking `request` (schema name) and answering `result` with 200."""
    ex = examples or {}
    return {
        "post": {
            "operationId": op_id,
            "tags": [tag],
            "summary": summary,
            "description": description,
            "requestBody": _request_body(request, summary, ex.get("request")),
            "responses": {
                "200": _response(ok, _content(result, examples=ex.get(200))),
                **_error_responses(errors, examples=ex),
            },
        }
    }


def _get(
    op_id: str,
    summary: str,
    description: str,
    result: str,
    ok: str,
    errors: tuple[str, ...] = (),
    *,
    tag: str,
    wires: tuple[str, ...] = ("json",),
    node_header: bool = True,
) -> dict:
    content = _content(result, wires=wires) if result else {JSON: {"schema": {"type": "object"}}}
    return {
        "get": {
            "operationId": op_id,
            "tags": [tag],
            "summary": summary,
            "description": description,
            "responses": {
                "200": _response(ok, content, node_header=node_header),
                **_error_responses(errors, wires=wires),
            },
        }
    }


# -- examples --------------------------------------------------------------------------


def _ex(summary: str, value: Any) -> dict:
    return {"summary": summary, "value": value}


def _kv_example(value: str, version: int, create: int, mod: int) -> dict:
    return {
        "key": "agent-7/state",
        "value": value,
        "version": version,
        "create_revision": create,
        "mod_revision": mod,
    }


def _put_examples() -> dict:
    return {
        "request": {
            "text": _ex(
                "UTF-8 value",
                {
                    "ns": "agents",
                    "key": "agent-7/state",
                    "value": '{"step":3}',
                    "idempotency_key": "6f1c2b0e-4a55-4b7e-9d8f-0c3e2a1b9d44",
                },
            ),
            "binary": _ex(
                "Binary value as base64",
                {"ns": "agents", "key": "agent-7/blob", "value_b64": "AAECA/8="},
            ),
            "prev_kv": _ex(
                "Return the previous kv",
                {"ns": "agents", "key": "agent-7/state", "value": '{"step":4}', "prev_kv": True},
            ),
        },
        200: {
            "written": _ex("Written at revision 42", {"revision": 42}),
            "replayed": _ex(
                "Retry with a seen idempotency_key", {"revision": 42, "replayed": True}
            ),
            "prev_kv": _ex(
                "With prev_kv", {"revision": 43, "prev_kv": _kv_example('{"step":3}', 3, 12, 42)}
            ),
        },
        413: {
            "value_too_large": _ex(
                "Value too large",
                {
                    "error": {
                        "code": "value_too_large",
                        "message": "value is 2097152 bytes; the limit is 1048576",
                    }
                },
            )
        },
        504: {
            "timeout": _ex(
                "Outcome unknown",
                {
                    "error": {
                        "code": "timeout",
                        "message": "no commit within 5 s; the write may still be applied: retry with the same idempotency_key",
                    }
                },
            )
        },
    }


def _get_examples() -> dict:
    return {
        "request": {
            "linearizable": _ex(
                "Linearizable read (default)", {"ns": "agents", "key": "agent-7/state"}
            ),
            "serializable": _ex(
                "Local read on any node",
                {
                    "ns": "agents",
                    "key": "agent-7/state",
                    "consistency": "serializable",
                    "min_revision": 42,
                },
            ),
            "past": _ex(
                "Read at a past revision", {"ns": "agents", "key": "agent-7/state", "revision": 30}
            ),
        },
        200: {"found": _ex("Found", {"revision": 42, "kv": _kv_example('{"step":3}', 3, 12, 42)})},
        404: {
            "missing": _ex(
                "No such key",
                {"error": {"code": "key_not_found", "message": "no such key"}, "revision": 42},
            )
        },
        410: {
            "compacted": _ex(
                "Below compact_revision",
                {
                    "error": {
                        "code": "compacted",
                        "message": "revision 3 is compacted (compact_revision 100)",
                    }
                },
            )
        },
    }


def _cas_examples() -> dict:
    return {
        "request": {
            "version": _ex(
                "Replace version 3",
                {
                    "ns": "agents",
                    "key": "agent-7/state",
                    "value": '{"step":4}',
                    "expect": {"version": 3},
                    "idempotency_key": "0b8e7f52-0d4c-4a8b-8a9e-3f7d0e6c5a21",
                },
            ),
            "create": _ex(
                "Create only if absent",
                {
                    "ns": "agents",
                    "key": "agent-7/lock",
                    "value": "owner-1",
                    "expect": {"exists": False},
                },
            ),
            "mod_revision": _ex(
                "Replace if unchanged since revision 42",
                {
                    "ns": "agents",
                    "key": "agent-7/state",
                    "value": '{"step":4}',
                    "expect": {"mod_revision": 42},
                },
            ),
        },
        200: {"succeeded": _ex("Swapped", {"revision": 43, "succeeded": True})},
        409: {
            "conflict": _ex(
                "Someone else wrote first",
                {
                    "error": {
                        "code": "compare_failed",
                        "message": "the key does not match the expectation",
                    },
                    "revision": 44,
                    "succeeded": False,
                    "kv": _kv_example('{"step":9}', 5, 12, 44),
                },
            ),
            "missing": _ex(
                "Expected version 3 but the key does not exist",
                {
                    "error": {
                        "code": "compare_failed",
                        "message": "the key does not match the expectation",
                    },
                    "revision": 44,
                    "succeeded": False,
                    "kv": None,
                },
            ),
        },
    }


# -- paths -----------------------------------------------------------------------------

_WRITE_NOTE = (
    "Goes through raft; a follower forwards it inside raft and answers once it has applied "
    "it locally. Give an idempotency_key and reuse it on retry (timeout, lost connection, "
    "`unavailable`) so the write takes effect once."
)
_READ_NOTE = (
    "Served from local RocksDB after the consistency step; the answer carries its `revision`."
)


def _kv_paths() -> dict:
    return {
        "/v1/kv/put": _post(
            "put",
            "Write a key",
            _WRITE_NOTE,
            "PutRequest",
            "PutResult",
            "Written.",
            (*_WRITE_ERRORS, "value_too_large"),
            examples=_put_examples(),
        ),
        "/v1/kv/get": _post(
            "get",
            "Read a key",
            _READ_NOTE,
            "GetRequest",
            "GetResult",
            "Found (`kv` is never null here).",
            (*_READ_ERRORS, "key_not_found"),
            examples=_get_examples(),
        ),
        "/v1/kv/delete": _post(
            "delete",
            "Delete a key or a prefix",
            _WRITE_NOTE + " Deleting nothing does not advance the revision.",
            "DeleteRequest",
            "DeleteResult",
            "Done (`deleted` may be 0).",
            _WRITE_ERRORS,
        ),
        "/v1/kv/range": _post(
            "range",
            "List keys (prefix or [start, end)), paged",
            _READ_NOTE,
            "RangeRequest",
            "RangeResult",
            "One page.",
            _READ_ERRORS,
        ),
        "/v1/kv/cas": _post(
            "cas",
            "Compare-and-swap one key",
            _WRITE_NOTE + " A failed cas does not advance the revision.",
            "CasRequest",
            "CasResult",
            "Swapped (`succeeded` is true).",
            (*_WRITE_ERRORS, "value_too_large", "compare_failed"),
            examples=_cas_examples(),
        ),
        "/v1/kv/txn": _post(
            "txn",
            "Atomic multi-key transaction with compares",
            _WRITE_NOTE,
            "TxnRequest",
            "TxnResult",
            "Done; `succeeded` says which branch ran.",
            (
                *_WRITE_ERRORS,
                "value_too_large",
                "unknown_op",
                "too_many_ops",
            ),
        ),
        "/v1/kv/compact": _post(
            "compact",
            "Drop history below a revision",
            _WRITE_NOTE,
            "CompactRequest",
            "CompactResult",
            "Compacted (a revision at or below compact_revision changes nothing).",
            (*_BODY_ERRORS, "unavailable", "timeout", "future_revision"),
        ),
    }


def _other_paths() -> dict:
    return {
        "/v1/batch": _post(
            "batch",
            "Many ops in one request (not atomic)",
            "Each op carries its `op` field. A batch with one invalid op is rejected whole "
            "(400) and nothing is applied; once accepted, each op answers its own result or "
            "`{error}` and the status is 200.",
            "BatchRequest",
            "BatchResult",
            "One result per op.",
            (*_WRITE_ERRORS, "value_too_large", "unknown_op", "too_many_ops"),
            tag="batch",
        ),
        "/v1/status": _get(
            "status",
            "Raft and store status of this node",
            "Answers msgpack when `Accept` asks for it.",
            "Status",
            "Status.",
            ("internal",),
            tag="ops",
            wires=WIRES,
        ),
        "/v1/health/live": _get(
            "live",
            "Liveness",
            "200 while the process serves HTTP. Always JSON.",
            "Live",
            "Alive.",
            tag="health",
        ),
        "/v1/health/ready": _get(
            "ready",
            "Readiness",
            "200 when a leader is known and this node has applied up to the leader's commit "
            "index (within a small lag); else 503 `not_ready`. Always JSON.",
            "Ready",
            "Ready.",
            ("not_ready",),
            tag="health",
        ),
        "/v1/openapi.json": _get(
            "openapi",
            "This document",
            "OpenAPI 3.1, always JSON.",
            "",
            "The OpenAPI document.",
            tag="meta",
            node_header=False,
        ),
    }


def _info() -> dict:
    try:
        version = metadata.version("statekeeper")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        version = "0.0.0"
    return {
        "title": "statekeeper",
        "version": version,
        "summary": "Raft-replicated, RocksDB-backed key-value store (etcd's model, namespaced).",
        "description": (
            "Contract: docs/protocol.md. Bodies are JSON (`application/json`) or msgpack "
            "(`application/msgpack`, also `application/x-msgpack`) by Content-Type; the answer "
            "uses the request's encoding. In JSON, values are strings: send `value` as UTF-8 "
            "text or `value_b64` as base64 (`value_b64` wins if both are sent); answers carry "
            "`value` when the bytes are valid UTF-8, else `value_b64`. In msgpack, values are "
            "bin. Unknown fields are ignored.\n\nEvery error is `{error: {code, message}}` with an HTTP status. An unknown "
            "path answers 404 `not_found`, an unknown op under /v1/kv/ 400 `unknown_op`, a "
            "known path with the wrong method 405 `method_not_allowed`. Every answer except "
            f"this document carries `{NODE_HEADER}` (the id of the node that served it)."
        ),
        "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
    }


def _components() -> dict:
    return {
        "schemas": _schemas(),
        "headers": {
            NODE_HEADER: {
                "description": "Id of the node that served the request.",
                "schema": {"type": "string"},
            },
        },
        "responses": {
            "NotFound": _response(
                "`not_found`: unknown path.",
                {JSON: {"schema": _error_schema(["not_found"], "json")}},
            ),
            "MethodNotAllowed": _response(
                "`method_not_allowed`: the path exists but not for this method.",
                {JSON: {"schema": _error_schema(["method_not_allowed"], "json")}},
            ),
        },
    }


@cache
def document() -> dict:
    """The OpenAPI 3.1 document (built once; treat it as read-only)."""
    return {
        "openapi": "3.1.0",
        "info": _info(),
        "tags": [
            {"name": "kv", "description": "Single-key ops, range, txn, compaction."},
            {"name": "batch", "description": "Many ops in one request."},
            {"name": "ops", "description": "Node status."},
            {"name": "health", "description": "Liveness and readiness probes."},
            {"name": "meta", "description": "This document."},
        ],
        "paths": {**_kv_paths(), **_other_paths()},
        "components": _components(),
    }
