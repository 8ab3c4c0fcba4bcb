"""POST /v1/watch in the OpenAPI document: the request schema (generated from
node/ops/watch.py's declaration, like every op's), the frame schemas and the route.

OpenAPI 3.1 has no way to say "a sequence of these": the 200 answer's schema is one frame,
and its description says how frames follow each other (NDJSON lines, or length-prefixed
msgpack); docs/protocol.md ("Watch") is the contract.
"""

from __future__ import annotations

from typing import Any

from statekeeper.node.config import Limits
from statekeeper.node.openapi.requests import WIRES, op_object
from statekeeper.node.ops.fields import Schema
from statekeeper.node.ops.schemas import obj, ref, rev_schema, str_schema, wired_ref
from statekeeper.node.ops.watch import NDJSON, WATCH_PATH, WATCH_SPEC

NODE_HEADER = "X-Statekeeper-Node"
MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack")
# Errors answered before the stream starts (with their HTTP status).
WATCH_ERRORS = (
    "malformed_body",
    "unsupported_media_type",
    "invalid_argument",
    "unknown_field",
    "key_too_large",
    "request_too_large",
    "future_revision",
    "too_many_watches",
    "unavailable",
    "internal",
)
FRAME_ERRORS = ("compacted", "watch_overflow", "unavailable", "unauthenticated")

_DESCRIPTION = (
    "Streams every change of a key, a prefix or a range (or the whole namespace) from "
    "`start_revision` on, in revision order, then each new one as it is applied, until the "
    "client goes away. The node first passes the barrier of a linearizable read (so it "
    "misses no revision the cluster had committed), then answers 200 with "
    "`Transfer-Encoding: chunked` and sends frames: all changes of one revision in one "
    "`events` frame (each revision exactly once), a `progress` frame after `progress_ms` "
    "without one, and an `error` frame (`compacted`, `watch_overflow`, `unavailable`, "
    "`unauthenticated`: the token was revoked or expired) as the last. Resume from the last revision received (events or progress) + 1, on any "
    "node: no gap, no duplicate. Invalid requests, `future_revision` (start above the "
    "current revision + 1) and a failed barrier (`unavailable`) are answered as usual, "
    "before any frame."
)
_OK = (
    "The stream. JSON request: NDJSON (`application/x-ndjson`), one frame per line. msgpack "
    "request: `application/msgpack; framing=length-prefixed`, each frame a 4-byte "
    "big-endian length then that many bytes of msgpack. The schema is one frame."
)


def _event(w: str) -> Schema:
    return obj(
        {
            "type": {"type": "string", "enum": ["put", "delete"]},
            "kv": wired_ref("KeyValue", w),
            "prev_kv": wired_ref("KeyValue", w),
        },
        ("type", "kv"),
        "One change. A delete's `kv` has no value, version 0, create_revision 0 and "
        "mod_revision = the delete's revision; `prev_kv` only when asked, and the key existed.",
    )


def _frame(w: str) -> Schema:
    events = obj(
        {
            "events": {"type": "array", "items": wired_ref("WatchEvent", w), "minItems": 1},
            "revision": rev_schema("The revision of every event of the frame."),
        },
        ("events", "revision"),
        "All watched changes of one revision, in key byte order.",
    )
    progress = obj(
        {
            "progress": {"const": True},
            "revision": rev_schema("Every watched change up to here has been sent."),
        },
        ("progress", "revision"),
    )
    error = obj(
        {
            "error": obj(
                {
                    "code": {"type": "string", "enum": list(FRAME_ERRORS)},
                    "message": str_schema("Human-readable explanation."),
                    "revision": rev_schema("Every watched change up to here was sent."),
                    "compact_revision": rev_schema("`compacted`: the compaction point."),
                },
                ("code", "message"),
            )
        },
        ("error",),
        "The last frame. `compacted`: watch again from above compact_revision after reading "
        "the state; `watch_overflow` (read too slowly) and `unavailable` (node shutting "
        "down or without leader): resume from the last revision received + 1.",
    )
    return {"description": "One frame of a watch stream.", "oneOf": [events, progress, error]}


def watch_schemas(limits: Limits) -> dict[str, Schema]:
    out: dict[str, Schema] = {
        "WatchRequest": op_object(WATCH_SPEC, limits, "json", description=WATCH_SPEC.doc)
    }
    # op_object's `not` excludes prefix with start/end; `key` excludes all three.
    key_alone = {
        "required": ["key"],
        "anyOf": [{"required": [n]} for n in ("prefix", "start", "end")],
    }
    out["WatchRequest"].setdefault("allOf", []).append({"not": key_alone})
    for w in WIRES:
        suffix = "" if w == "json" else "Msgpack"
        out[f"WatchEvent{suffix}"] = _event(w)
        out[f"WatchFrame{suffix}"] = _frame(w)
    return out


def _examples() -> dict[str, Any]:
    return {
        "request": {
            "prefix": {"value": {"ns": "agents", "prefix": "agent-7/", "start_revision": 42}},
        },
        200: {
            "events": {
                "value": {
                    "events": [
                        {
                            "type": "put",
                            "kv": {
                                "key": "agent-7/plan",
                                "value": "step 2",
                                "version": 2,
                                "create_revision": 40,
                                "mod_revision": 42,
                            },
                        }
                    ],
                    "revision": 42,
                }
            },
            "progress": {"value": {"progress": True, "revision": 57}},
        },
    }


def watch_paths(builder: Any) -> dict:
    """The /v1/watch path item; `builder` is node/openapi/document.py's _Builder."""
    ex = _examples()
    header = {NODE_HEADER: {"$ref": f"#/components/headers/{NODE_HEADER}"}}
    frames = {NDJSON: {"schema": ref("WatchFrame"), "examples": ex[200]}}
    for media in MSGPACK_TYPES:
        frames[media] = {"schema": ref("WatchFrameMsgpack")}
    request = builder.content("WatchRequest", examples=ex["request"])
    return {
        WATCH_PATH: {
            "post": {
                "operationId": "watch",
                "tags": ["watch"],
                "summary": "Watch a key, a prefix or a range from a revision (streamed)",
                "description": _DESCRIPTION,
                "requestBody": {
                    "required": True,
                    "description": "The watch, JSON or msgpack by Content-Type; the frames "
                    "use the same encoding.",
                    "content": request,
                },
                "responses": {
                    "200": {"description": _OK, "headers": header, "content": frames},
                    **builder.error_responses(WATCH_ERRORS),
                },
            }
        }
    }
