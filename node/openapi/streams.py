"""The stream ops in the OpenAPI document: their results, the `expectation_failed` body,
the text of their routes, and examples (requests come from node/ops/streams.py's
declarations, like every op's)."""

from __future__ import annotations

from typing import Any

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
    wired_ref,
)
from statekeeper.node.ops.spec import OpenApiFamily


def _seq(description: str) -> Schema:
    return int_schema(description)


def _append_result(w: str) -> Schema:
    appended = obj(
        {
            "seq": _seq("The event's seq (for a duplicate: the seq it was stored at before)."),
            "duplicate": bool_schema("The event id was already in the stream: not stored again."),
        },
        ("seq", "duplicate"),
    )
    return obj(
        {
            "revision": rev_schema(
                "Revision of the append (the current one if every event was a duplicate)."
            ),
            "stream": str_schema("The stream."),
            "first_seq": {
                "type": ["integer", "null"],
                "description": "Seq of the first newly stored event (null: all duplicates).",
            },
            "last_seq": _seq("The stream's last seq after the append."),
            "events": {"type": "array", "items": appended, "description": "One per event sent."},
            "replayed": replayed_schema(),
        },
        ("revision", "stream", "first_seq", "last_seq", "events"),
    )


def _stream_event(w: str) -> Schema:
    payload = value_props(w, "the payload")  # value (and, in JSON, value_b64)
    props: dict[str, Schema] = {
        "seq": _seq("Position in the stream (1, 2, ...)."),
        "data": payload["value"],
        **({"data_b64": payload["value_b64"]} if w == "json" else {}),
        "type": str_schema("Event type (may be empty)."),
        "time": int_schema("Leader time of the append, ms since the epoch."),
        "revision": rev_schema("Revision of the append that stored the event."),
        "id": str_schema("The event's id, when it was given one."),
        "meta": {"type": "object", "description": "Its metadata, when it has any."},
    }
    desc = "One stored event."
    if w == "json":
        desc += " `data` when the bytes are valid UTF-8, else `data_b64`."
    return obj(props, ("seq", "type", "time", "revision"), desc)


def _read_stream_result(w: str) -> Schema:
    return obj(
        {
            "revision": rev_schema("Revision the read was served at."),
            "stream": str_schema("The stream."),
            "events": {"type": "array", "items": wired_ref("StreamEvent", w)},
            "first_seq": _seq(
                "The stream's first stored seq (a read from below it starts there: the "
                "events before it were truncated)."
            ),
            "last_seq": _seq("The stream's last seq as of `revision` (0: it did not exist)."),
            "more": bool_schema("More events follow in this direction; send `continuation`."),
            "continuation": str_schema("Opaque token for the next page (same revision)."),
        },
        ("revision", "stream", "events", "last_seq", "more"),
    )


def _info_props() -> dict[str, Schema]:
    return {
        "stream": str_schema("The stream."),
        "first_seq": _seq("Seq of its first event (1)."),
        "last_seq": _seq("Seq of its last event."),
        "count": _seq("Events stored."),
        "bytes": int_schema("Sum of the events' data sizes."),
        "create_revision": rev_schema("Revision of its first append."),
        "mod_revision": rev_schema("Revision of its last append."),
    }


def stream_schemas() -> dict[str, Schema]:
    """The schemas that are the same for JSON and msgpack."""
    info = _info_props()
    return {
        "StreamInfo": obj(info, tuple(info), "A stream's counters."),
        "StreamInfoResult": obj(
            {
                "revision": rev_schema("Revision the read was served at."),
                **info,
                "archived_before": {
                    "type": ["integer", "null"],
                    "description": "Smallest seq archived to a cold-tier segment (null: none); "
                    "events [archived_before, first_seq) that a tombstone covers read as 410 "
                    "`archived`.",
                },
            },
            ("revision", *info, "archived_before"),
        ),
        "ListStreamsResult": obj(
            {
                "revision": rev_schema("Revision the page was served at."),
                "streams": {"type": "array", "items": ref("StreamInfo")},
                "more": bool_schema("More streams follow; send `continuation`."),
                "continuation": str_schema("Opaque token for the next page."),
            },
            ("revision", "streams", "more"),
        ),
        "ExpectationFailed": {
            "allOf": [
                ref("Error"),
                obj(
                    {
                        "error": obj(
                            {
                                "code": {"const": "expectation_failed"},
                                "last_seq": _seq("The stream's last seq (0: missing)."),
                                "exists": bool_schema("Whether the stream exists."),
                            },
                            ("last_seq", "exists"),
                        )
                    },
                    ("error",),
                ),
            ],
            "description": "409 of an append whose `expect` did not hold; nothing appended.",
        },
    }


STREAM_WIRE_SCHEMAS = {
    "AppendResult": _append_result,
    "StreamEvent": _stream_event,
    "ReadStreamResult": _read_stream_result,
}
STREAM_RESULTS = ("AppendResult", "ReadStreamResult", "StreamInfoResult", "ListStreamsResult")

_WRITE_NOTE = (
    "Goes through raft like put; give an idempotency_key and reuse it on retry, and give "
    "events ids so a replayed append stores nothing twice."
)
_READ_NOTE = "Served from local RocksDB after the consistency step, like get and range."


def stream_op_docs(write_errors: tuple[str, ...], read_errors: tuple[str, ...]) -> dict:
    """op -> (summary, description, 200 description, errors), as openapi.py's table."""
    return {
        "append": (
            "Append events to a stream",
            _WRITE_NOTE + " Every event of one append shares one revision. With `lease` the "
            "stream is attached to that lease (moved from any other): the lease's revoke or "
            "expiry deletes the whole stream, after which an append starts it anew at seq 1; "
            "an append without `lease` leaves the attachment as it is.",
            "Appended (or every event was a duplicate).",
            (
                *write_errors,
                "value_too_large",
                "too_many_events",
                "expectation_failed",
                "idempotency_key_reused",
                "lease_not_found",
            ),
        ),
        "read_stream": (
            "Read a page of a stream's events (long poll with wait_ms)",
            _READ_NOTE + " A missing stream reads as empty (last_seq 0). A forward read from "
            "a seq below first_seq that was archived answers 410 `archived`.",
            "One page.",
            (*read_errors, "archived"),
        ),
        "stream_info": (
            "A stream's counters",
            _READ_NOTE,
            "The stream exists.",
            (*read_errors, "stream_not_found"),
        ),
        "list_streams": (
            "List a namespace's streams, paged",
            _READ_NOTE + " Pages are served at the current revision.",
            "One page.",
            read_errors,
        ),
    }


def _ex(summary: str, value: Any) -> dict:
    return {"summary": summary, "value": value}


def stream_examples() -> dict[str, dict]:
    """Examples of append and read_stream, by op."""
    return {"append": _append_examples(), "read_stream": _read_stream_examples()}


def _append_examples() -> dict:
    appended = {
        "revision": 42,
        "stream": "agent-7",
        "first_seq": 4,
        "last_seq": 5,
        "events": [{"seq": 4, "duplicate": False}, {"seq": 5, "duplicate": False}],
    }
    return {
        "request": {
            "events": _ex(
                "Two events, the stream must be at seq 3",
                {
                    "ns": "agents",
                    "stream": "agent-7",
                    "events": [
                        {"data": '{"step":4}', "type": "step", "id": "step-4"},
                        {"data_b64": "AAE=", "type": "blob", "meta": {"source": "tool"}},
                    ],
                    "expect": 3,
                    "idempotency_key": "5b1e0c8e-2f5d-4e61-9a0e-7c2d3b4a5f60",
                },
            )
        },
        200: {"appended": _ex("Stored at seqs 4 and 5", appended)},
        409: {
            "expectation_failed": _ex(
                "Another writer appended first",
                {
                    "error": {
                        "code": "expectation_failed",
                        "message": "stream 'agent-7' has last_seq 5; the append expected 3",
                        "last_seq": 5,
                        "exists": True,
                    }
                },
            )
        },
    }


def _read_stream_examples() -> dict:
    return {
        "request": {
            "tail": _ex(
                "Wait up to 10 s for events after seq 5",
                {"ns": "agents", "stream": "agent-7", "start": 6, "wait_ms": 10000},
            )
        },
        200: {
            "page": _ex(
                "One event",
                {
                    "revision": 43,
                    "stream": "agent-7",
                    "events": [
                        {
                            "seq": 6,
                            "data": '{"step":5}',
                            "type": "step",
                            "time": 1760000000000,
                            "revision": 43,
                            "id": "step-5",
                        }
                    ],
                    "last_seq": 6,
                    "more": False,
                },
            )
        },
    }


FAMILY = OpenApiFamily(
    "streams",
    "Append-only event streams.",
    stream_op_docs,
    stream_schemas,
    STREAM_RESULTS,
    wire_schemas=STREAM_WIRE_SCHEMAS,
    examples=stream_examples,
)
