"""The retention ops and truncate_stream in the OpenAPI document: their results and the
text of their routes (requests come from node/ops/retention.py's declarations, like every
op's). No result carries bytes, so each schema serves both wires."""

from __future__ import annotations

from statekeeper.node.ops.fields import Schema
from statekeeper.node.ops.schemas import (
    bool_schema,
    int_schema,
    obj,
    replayed_schema,
    rev_schema,
    str_schema,
)
from statekeeper.node.ops.spec import OpenApiFamily


def _rule(doc: str) -> Schema:
    return {"type": ["integer", "null"], "description": doc}


def _policy() -> Schema:
    props = {
        "ns": str_schema("Its namespace."),
        "target": {"type": "string", "enum": ["keys", "streams"]},
        "prefix": str_schema("Key or stream-name prefix (empty: the whole namespace)."),
        "keep_last": _rule("Keep the newest N (per key group / per stream)."),
        "keep_every": _rule("Of the older keys also keep those ending in a multiple of K."),
        "max_age_s": _rule("Drop what is older than this (keep_last protects the newest N)."),
        "create_revision": rev_schema("Revision that created the policy."),
        "mod_revision": rev_schema("Revision that last set it."),
        "within": {
            "type": ["string", "null"],
            "description": "Only key groups whose directory's last segment is this (null: all).",
        },
    }
    return obj(props, tuple(props), "A retention policy.")


def _amounts(unit_doc: str) -> Schema:
    return obj(
        {
            "groups": int_schema("Key groups (last '/') or streams."),
            "keys": int_schema(f"Keys {unit_doc} (target keys)."),
            "events": int_schema(f"Events {unit_doc} (target streams)."),
            "bytes": int_schema(f"Value / event bytes {unit_doc} (streams freed: estimated)."),
        }
    )


def retention_schemas() -> dict[str, Schema]:
    """Retention results (the same for JSON and msgpack)."""
    status_item = {
        "allOf": [
            _policy(),
            obj({"holds": _amounts("held"), "frees": _amounts("a gc would free now")}),
        ]
    }
    return {
        "RetentionPolicy": _policy(),
        "RetentionSetResult": obj(
            {
                "revision": rev_schema("Revision of the write."),
                "policy": _policy(),
                "created": bool_schema("It is new (false: an existing policy was replaced)."),
                "replayed": replayed_schema(),
            },
            ("revision", "policy", "created"),
        ),
        "RetentionDeleteResult": obj(
            {
                "revision": rev_schema("Revision of the delete (current one if none)."),
                "deleted": int_schema("1 if the policy existed, else 0."),
                "replayed": replayed_schema(),
            },
            ("revision", "deleted"),
        ),
        "RetentionListResult": obj(
            {
                "revision": rev_schema("Revision the page was served at."),
                "policies": {"type": "array", "items": _policy()},
                "more": bool_schema("More follow; send `continuation`."),
                "continuation": str_schema("Opaque token for the next page."),
            },
            ("revision", "policies", "more"),
        ),
        "RetentionStatusResult": obj(
            {
                "revision": rev_schema("Revision the status was computed at."),
                "clock": int_schema("The replicated clock (ms) the policies were evaluated at."),
                "policies": {"type": "array", "items": status_item},
                "last_gc": {
                    "type": "object",
                    "description": "ns -> the last applied gc op ({revision, time, deleted, "
                    "removed}) or null.",
                },
                "history": obj(
                    {
                        "compact_revision": rev_schema("MVCC history below this is dropped."),
                        "history_revisions": int_schema("Revisions of history kept."),
                    }
                ),
                "idempotency": obj(
                    {"idempotency_seconds": int_schema("How long idempotency keys are kept.")}
                ),
            },
            ("revision", "clock", "policies", "last_gc", "history", "idempotency"),
        ),
        "TruncateStreamResult": obj(
            {
                "revision": rev_schema("Revision of the truncation (current one if none)."),
                "stream": str_schema("The stream."),
                "first_seq": int_schema("The stream's first stored seq now."),
                "last_seq": int_schema("The stream's last seq."),
                "removed": int_schema("Events removed."),
                "more": bool_schema("More events below before_seq remain: send it again."),
                "replayed": replayed_schema(),
            },
            ("revision", "stream", "first_seq", "last_seq", "removed", "more"),
        ),
    }


RETENTION_RESULTS = (
    "RetentionSetResult",
    "RetentionDeleteResult",
    "RetentionListResult",
    "RetentionStatusResult",
    "TruncateStreamResult",
)

_WRITE_NOTE = "Goes through raft like put and takes a revision."
_READ_NOTE = "Served from local RocksDB after the consistency step, like get."
_ENFORCED = (
    " The leader enforces policies itself every [retention] gc_interval_seconds by proposing "
    'node-internal gc ops (docs/protocol.md, "Retention").'
)


def retention_op_docs(write_errors: tuple[str, ...], read_errors: tuple[str, ...]) -> dict:
    """op -> (summary, description, 200 description, errors), as openapi.py's table."""
    return {
        "retention_set": (
            "Create or replace a retention policy",
            _WRITE_NOTE + _ENFORCED,
            "Set.",
            (*write_errors, "too_many_policies", "idempotency_key_reused"),
        ),
        "retention_delete": (
            "Remove a retention policy",
            _WRITE_NOTE,
            "Removed (or there was none).",
            (*write_errors, "idempotency_key_reused"),
        ),
        "retention_list": ("List retention policies, paged", _READ_NOTE, "One page.", read_errors),
        "retention_status": (
            "What each policy holds and frees, and the store-wide retention",
            _READ_NOTE + " Scans every key and stream a policy covers.",
            "The status.",
            read_errors,
        ),
        "truncate_stream": (
            "Remove a stream's oldest events",
            _WRITE_NOTE + " Removes events with seq < before_seq and their id dedup records "
            "(at most 10000 per op: `more`).",
            "Truncated (removed may be 0).",
            (*write_errors, "stream_not_found", "idempotency_key_reused"),
        ),
    }


FAMILY = OpenApiFamily(
    "retention",
    "Retention policies the cluster enforces.",
    retention_op_docs,
    retention_schemas,
    RETENTION_RESULTS,
)
