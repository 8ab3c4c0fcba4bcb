"""OpenAPI component schemas other than requests: errors, read options, results, status.

Request schemas are generated from the op declarations (node/openapi/requests.py). Every
schema that carries a value exists twice: once for ``application/json`` (``value`` is UTF-8
text or ``value_b64`` is base64) and once, suffixed ``Msgpack``, for
``application/msgpack`` (``value`` is bin). The rest are shared.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from statekeeper.node.openapi import (
    archive as openapi_archive,
)
from statekeeper.node.openapi import (
    auth as openapi_auth,
)
from statekeeper.node.openapi import (
    crdt as openapi_crdt,
)
from statekeeper.node.openapi import (
    idempotency as openapi_idempotency,
)
from statekeeper.node.openapi import (
    leases as openapi_leases,
)
from statekeeper.node.openapi import (
    locks as openapi_locks,
)
from statekeeper.node.openapi import (
    retention as openapi_retention,
)
from statekeeper.node.openapi import (
    streams as openapi_streams,
)
from statekeeper.node.openapi.members import members_list_schema
from statekeeper.node.ops.fields import Schema
from statekeeper.node.ops.schemas import (
    bool_schema,
    int_schema,
    obj,
    ref,
    replayed_schema,
    rev_schema,
    str_schema,
    value_props,
    wire_name,
    wired_ref,
)

# The op families' parts of the document (each its node/openapi/FAMILY.py's FAMILY), in the
# order of their tags, schemas and op docs.
FAMILIES = (
    openapi_streams.FAMILY,
    openapi_leases.FAMILY,
    openapi_locks.FAMILY,
    openapi_crdt.FAMILY,
    openapi_retention.FAMILY,
    openapi_archive.FAMILY,
    openapi_auth.FAMILY,
    openapi_idempotency.FAMILY,
)


def _nullable(schema: Schema) -> Schema:
    return {"oneOf": [schema, {"type": "null"}]}


def _array(items: Schema, description: str, **extra: Any) -> Schema:
    return {"type": "array", "items": items, "description": description, **extra}


# GET /v1/health/live's raft-loop progress fields (node/api/liveness.py), in 200 and 503 alike.
_LIVE_FIELDS: dict[str, Schema] = {
    "raft_loop_age_seconds": {
        "type": "number",
        "minimum": 0,
        "description": "Seconds since the raft loop last ticked or applied an entry.",
    },
    "raft_loop_max_gap_seconds": {
        "type": "number",
        "minimum": 0,
        "description": "Longest such gap since the node started.",
    },
    "restoring_snapshot": {
        "type": "boolean",
        "description": "The state machine is being restored from a snapshot (off the raft loop: live, not ready).",
    },
}


def _error_with(code: str, description: str, props: dict[str, Schema], required) -> Schema:
    """`Error` whose code is `code`, with more fields beside `error`."""
    return {
        "allOf": [ref("Error"), obj({"error": obj({"code": {"const": code}}), **props}, required)],
        "description": description,
    }


def common_schemas(error_codes: Iterable[str]) -> dict[str, Schema]:
    """Schemas that are the same for JSON and msgpack."""
    return {
        "Consistency": {
            "type": "string",
            "enum": ["linearizable", "serializable"],
            "default": "linearizable",
            "description": "linearizable: served after a raft barrier entry submitted after the "
            "request arrived has been applied locally. serializable: local state, any node, "
            "possibly stale.",
        },
        "MinRevision": rev_schema(
            "Wait (up to the request timeout) until the local revision is at least this before serving."
        ),
        "Error": obj(
            {
                "error": obj(
                    {
                        "code": {
                            "type": "string",
                            "enum": sorted(error_codes),
                            "description": "Machine-readable code.",
                        },
                        "message": str_schema("Human-readable explanation."),
                        "revision": rev_schema("`future_revision`: the current revision."),
                        "compact_revision": rev_schema("`compacted`: the compaction point."),
                    },
                    ("code", "message"),
                )
            },
            ("error",),
            "Every error: `{error: {code, message, ...}}`; some codes add fields beside `error`.",
        ),
        "KeyNotFound": _error_with(
            "key_not_found",
            "404 of POST /v1/kv/get.",
            {"revision": rev_schema("Revision the read was served at.")},
            ("revision",),
        ),
        "NotReady": _error_with(
            "not_ready", "503 of GET /v1/health/ready.", {"ready": {"const": False}}, ("ready",)
        ),
        "NotLive": _error_with(
            "not_live",
            "503 of GET /v1/health/live: the raft loop is stuck.",
            {"ok": {"const": False}, "node_id": str_schema("Id of this node."), **_LIVE_FIELDS},
            ("ok", "node_id", *_LIVE_FIELDS),
        ),
        "CompactResult": obj(
            {
                "revision": rev_schema("Current revision (compaction does not advance it)."),
                "compact_revision": rev_schema(
                    "Reads below this revision now fail with `compacted`."
                ),
            },
            ("revision", "compact_revision"),
        ),
        **{name: schema for f in FAMILIES for name, schema in f.schemas().items()},
        "Status": _status_schema(),
        "Live": obj(
            {"ok": {"const": True}, "node_id": str_schema("Id of this node."), **_LIVE_FIELDS},
            ("ok", "node_id", *_LIVE_FIELDS),
        ),
        "Ready": obj(
            {"ready": {"const": True}, "node_id": str_schema("Id of this node.")},
            ("ready", "node_id"),
        ),
    }


def _status_schema() -> Schema:
    idx = "Raft log index."
    props = {
        "node_id": str_schema("Id of the node that answered."),
        "role": {"type": "string", "enum": ["leader", "follower", "candidate"]},
        "term": int_schema("Current raft term."),
        "leader": {"type": ["string", "null"], "description": "Leader's node id, if known."},
        "leader_url": {
            "type": ["string", "null"],
            "description": "Leader's HTTP base URL, if known.",
        },
        "commit_index": int_schema(f"{idx} Commit index known to this node."),
        "applied_index": int_schema(f"{idx} Last entry applied by raft on this node."),
        "leader_commit_index": {
            "type": ["integer", "null"],
            "description": f"{idx} The leader's commit index, if known.",
        },
        "has_quorum": bool_schema("This node (as leader) hears from a majority."),
        "ready": bool_schema("Same condition as GET /v1/health/ready."),
        "revision": rev_schema("Store revision on this node."),
        "compact_revision": rev_schema("History below this revision is dropped."),
        "sm_applied_index": int_schema(
            f"{idx} Last entry recorded by the state machine (RocksDB)."
        ),
        "fsync": {"type": "string", "enum": ["always", "never"]},
        "entries_proposed": int_schema("Raft entries this node proposed."),
        "ops_proposed": int_schema("Ops carried by those entries."),
        "auth": obj(
            {
                "enabled": bool_schema("[auth] enabled: requests need a bearer token."),
                "warning": str_schema("Present when auth is disabled: what is open."),
            },
            ("enabled",),
            "Whether the client port checks bearer tokens (docs/protocol.md).",
        ),
        "storage": _storage_schema(),
        "members": members_list_schema(),
        "member_change_pending": bool_schema("A membership change is not committed yet."),
    }
    return obj(props, tuple(props))


def _storage_schema() -> Schema:
    size = "Bytes."
    nullable_int = {"type": ["integer", "null"], "description": f"{size} Null: never measured."}
    props = {
        "alarm": {
            "type": ["string", "null"],
            "enum": ["nospace", None],
            "description": "nospace while writes that add data get 507 insufficient_storage.",
        },
        "reason": {"type": ["string", "null"], "description": "Why the alarm is raised."},
        "usage_bytes": int_schema(f"{size} This node's data dir on disk (last measurement)."),
        "quota_bytes": int_schema(
            f"{size} The quota in force: min(quota, usage + free - reserve)."
        ),
        "free_bytes": nullable_int,
        "reserve_bytes": int_schema(f"{size} Free space the filesystem must keep."),
        "refused_writes": int_schema("Writes refused with 507 since this node started."),
        "last_stop": {
            "type": ["object", "null"],
            "description": "Why the previous run of this node stopped, if it stopped on a "
            "fatal error (time, message, exit_code, disk_full, free_bytes); else null.",
        },
        "peer_alarms": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Peers (node id -> reason) whose NOSPACE alarm is raised: writes "
            "that add data get 507 here too.",
        },
    }
    return obj(
        props, tuple(props), "The storage quota and its NOSPACE alarm (node/quota/alarm.py)."
    )


# -- value-carrying results (one per wire) ------------------------------------------------


def _kv(w: str) -> Schema:
    props: dict[str, Schema] = {
        "ns": ref("Namespace"),
        "key": ref("Key"),
        **value_props(w, "the value (absent with keys_only)"),
        "version": int_schema("Writes since creation (1 on create, reset by delete).", minimum=1),
        "create_revision": rev_schema("Revision that created the key."),
        "mod_revision": rev_schema("Revision of the last write to the key."),
    }
    desc = "A key and its metadata. `ns` appears only when it is not the request's."
    if w == "json":
        desc += " `value` when the bytes are valid UTF-8, else `value_b64`."
    return obj(props, ("key", "version", "create_revision", "mod_revision"), desc)


def _put_result(w: str) -> Schema:
    return obj(
        {
            "revision": rev_schema("Revision of this write."),
            "prev_kv": _nullable(wired_ref("KeyValue", w)),
            "lease": int_schema("The lease a put with `ttl_ms` granted the key.", minimum=1),
            "replayed": replayed_schema(),
        },
        ("revision",),
        "`prev_kv` only when asked for (null if the key did not exist); `lease` only for a "
        "put with `ttl_ms`.",
    )


def _delete_result(w: str) -> Schema:
    return obj(
        {
            "revision": rev_schema(
                "Revision of this delete (the current one if nothing was deleted)."
            ),
            "deleted": int_schema("Number of keys deleted."),
            "prev_kvs": _array(
                wired_ref("KeyValue", w), "Deleted kvs, when `prev_kv` was asked for."
            ),
            "replayed": replayed_schema(),
        },
        ("revision", "deleted"),
    )


def _get_result(w: str) -> Schema:
    return obj(
        {
            "revision": rev_schema("Revision the read was served at."),
            "kv": _nullable(wired_ref("KeyValue", w)),
        },
        ("revision", "kv"),
        "POST /v1/kv/get answers 404 `key_not_found` instead of `kv: null`; inside batch/txn "
        "results a missing key is `kv: null`.",
    )


def _range_result(w: str) -> Schema:
    return obj(
        {
            "revision": rev_schema("Revision the read was served at."),
            "kvs": _array(wired_ref("KeyValue", w), "Keys in byte order."),
            "more": bool_schema("More keys follow; pass `continuation` back to get them."),
            "continuation": str_schema("Opaque token for the next page (same revision)."),
        },
        ("revision", "kvs", "more"),
    )


def _cas_result(w: str) -> Schema:
    return obj(
        {
            "revision": rev_schema(
                "Revision of the write, or the current one if it did not succeed."
            ),
            "succeeded": bool_schema("POST /v1/kv/cas answers 409 `compare_failed` when false."),
            "kv": _nullable(wired_ref("KeyValue", w)),
            "replayed": replayed_schema(),
        },
        ("revision", "succeeded"),
        "On failure `kv` is the current kv, or null if the key does not exist.",
    )


def _compare_failed(w: str) -> Schema:
    return _error_with(
        "compare_failed",
        "409 of POST /v1/kv/cas: `kv` is the current kv (null: the key does not exist).",
        {
            "revision": rev_schema("Current revision."),
            "succeeded": {"const": False},
            "kv": _nullable(wired_ref("KeyValue", w)),
            "replayed": replayed_schema(),
        },
        ("revision", "kv"),
    )


def _txn_result(w: str) -> Schema:
    return obj(
        {
            "revision": rev_schema(
                "Revision of the txn's writes (the current one if it wrote nothing)."
            ),
            "succeeded": bool_schema("Whether every compare held (and `success` ran)."),
            "results": _array(
                wired_ref("TxnOpResult", w), "One result per op of the chosen branch."
            ),
            "replayed": replayed_schema(),
        },
        ("revision", "succeeded", "results"),
    )


def _txn_op_result(w: str) -> Schema:
    ops = ("Put", "Delete", "Get", "Range", "Append")
    # anyOf: results are not tagged and PutResult's shape ({revision}) fits every result.
    return {"anyOf": [*(wired_ref(f"{op}Result", w) for op in ops), ref("MergeResult")]}


def _batch_result(w: str) -> Schema:
    results = [
        wired_ref(f"{op}Result", w) for op in ("Put", "Get", "Delete", "Range", "Cas", "Txn")
    ]
    wired = [wired_ref(n, w) for f in FAMILIES for n in f.wire_schemas if n in f.results]
    shared = [ref(n) for f in FAMILIES for n in f.results if n not in f.wire_schemas]
    return obj(
        {
            "results": _array(
                {
                    "anyOf": [
                        *results,
                        *wired,
                        ref("CompactResult"),
                        *shared,
                        ref("Error"),
                    ]
                },
                "One per op, in order: its result, or `{error}` if that op failed.",
            )
        },
        ("results",),
    )


WIRE_SCHEMAS = {
    "KeyValue": _kv,
    "PutResult": _put_result,
    "DeleteResult": _delete_result,
    "GetResult": _get_result,
    "RangeResult": _range_result,
    "CasResult": _cas_result,
    "CompareFailed": _compare_failed,
    "TxnResult": _txn_result,
    "TxnOpResult": _txn_op_result,
    "BatchResult": _batch_result,
    **{name: build for f in FAMILIES for name, build in f.wire_schemas.items()},
}


def result_schemas(wires: Iterable[str]) -> dict[str, Schema]:
    return {wire_name(name, w): build(w) for w in wires for name, build in WIRE_SCHEMAS.items()}
