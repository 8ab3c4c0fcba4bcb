"""The archive ops in the OpenAPI document: their results and the text of their routes
(requests come from node/ops/archive.py's declarations, like every op's). No result carries
bytes, so each schema serves both wires."""

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


def _skipped() -> Schema:
    return {
        "type": "array",
        "items": {"type": "array", "minItems": 2, "maxItems": 2},
        "description": "[name, reason] of each item not applied: keys 'changed' / "
        "'missing' (seal), 'live' / 'not_archived' / 'other_segment' (restore); streams "
        "'moved' / 'missing' (seal), 'not_archived' / 'other_segment' / 'not_contiguous' / "
        "'missing' / 'bad_events' (restore).",
    }


def _segment() -> Schema:
    props = {
        "ns": str_schema("Its namespace."),
        "id": str_schema("Segment id."),
        "url": str_schema("Where the segment file is."),
        "sha256": str_schema("sha256 of the file bytes."),
        "bytes": int_schema("File size."),
        "sealed_revision": rev_schema("Revision of its first seal."),
        "keys": int_schema("Keys sealed (all its seals)."),
        "events": int_schema("Stream events sealed."),
        "restored_keys": int_schema("Keys restored from it since."),
        "restored_events": int_schema("Events restored from it since."),
    }
    return obj(props, tuple(props), "A sealed archive segment.")


def archive_schemas() -> dict[str, Schema]:
    """Archive results (the same for JSON and msgpack)."""
    triple = {"type": "array", "minItems": 3, "maxItems": 3}
    return {
        "ArchiveSegment": _segment(),
        "ArchivePlanResult": obj(
            {
                "revision": rev_schema("Revision the plan was computed at."),
                "keys": {
                    "type": "array",
                    "items": triple,
                    "description": "[key, mod_revision, value_len] to archive (target keys).",
                },
                "streams": {
                    "type": "array",
                    "items": triple,
                    "description": "[stream, first_seq, before_seq] to archive (at most "
                    "10000 events each; target streams).",
                },
                "more": bool_schema("The selection had more than `limit` items."),
            },
            ("revision", "keys", "streams", "more"),
        ),
        "ArchiveSealResult": obj(
            {
                "revision": rev_schema("Revision of the seal (current one if nothing sealed)."),
                "segment": str_schema("The segment id."),
                "sealed_keys": int_schema("Keys deleted and tombstoned."),
                "sealed_events": int_schema("Stream events removed and tombstoned."),
                "skipped": _skipped(),
                "replayed": replayed_schema(),
            },
            ("revision", "segment", "sealed_keys", "sealed_events", "skipped"),
        ),
        "ArchiveRestoreResult": obj(
            {
                "revision": rev_schema("Revision of the restore (current one if none)."),
                "segment": str_schema("The segment id."),
                "restored_keys": int_schema("Keys written back."),
                "restored_events": int_schema("Events written back."),
                "skipped": _skipped(),
                "replayed": replayed_schema(),
            },
            ("revision", "segment", "restored_keys", "restored_events", "skipped"),
        ),
        "ArchiveListResult": obj(
            {
                "revision": rev_schema("Revision the page was served at."),
                "segments": {"type": "array", "items": _segment()},
                "more": bool_schema("More follow; send `continuation`."),
                "continuation": str_schema("Opaque token for the next page."),
            },
            ("revision", "segments", "more"),
        ),
    }


ARCHIVE_RESULTS = (
    "ArchivePlanResult",
    "ArchiveSealResult",
    "ArchiveRestoreResult",
    "ArchiveListResult",
)

_WRITE_NOTE = "Goes through raft like put and takes one revision (none if nothing applied)."
_READ_NOTE = "Served from local RocksDB after the consistency step, like get."
_LIMITS = " At most 500 keys + streams and 10000 events (413 `too_many_ops`)."


def archive_op_docs(write_errors: tuple[str, ...], read_errors: tuple[str, ...]) -> dict:
    """op -> (summary, description, 200 description, errors), as openapi.py's table."""
    return {
        "archive_plan": (
            "What an archive run with these rules would archive now",
            _READ_NOTE + " The rules are a retention policy's (retention_set), given inline; "
            "stored policies play no part. Evaluated at the replicated clock.",
            "The plan (one page of at most `limit` items).",
            read_errors,
        ),
        "archive_seal": (
            "Seal a durable segment: delete its items, leave tombstones",
            _WRITE_NOTE + " Each item is re-checked: a key only if still live at the "
            "mod_revision named, a stream only if its first_seq is from_seq." + _LIMITS,
            "Sealed (skipped items listed).",
            (*write_errors, "too_many_ops", "idempotency_key_reused"),
        ),
        "archive_restore": (
            "Write archived keys and events back",
            _WRITE_NOTE + " A key only if not live and archived to this segment (it gets a "
            "new revision); events only newest first, byte-identical with their original "
            "revisions." + _LIMITS,
            "Restored (skipped items listed).",
            (*write_errors, "value_too_large", "too_many_ops", "idempotency_key_reused"),
        ),
        "archive_list": (
            "List sealed archive segments, paged",
            _READ_NOTE,
            "One page.",
            read_errors,
        ),
    }


FAMILY = OpenApiFamily(
    "archive",
    "Archival to a cold tier: plan, seal, restore.",
    archive_op_docs,
    archive_schemas,
    ARCHIVE_RESULTS,
)
