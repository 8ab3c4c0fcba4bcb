"""The stream ops' declarations and field kinds: append, read_stream, stream_info,
list_streams (docs/protocol.md, "Streams"; applied and read by node/store/streams.py).

Like every op they are declared once (`SPECS`, joined into node.ops.core.OPS): the
field kinds below check a field with the protocol's codes and describe it in OpenAPI.

Normalized shapes (raft entries carry `append`'s, so its msgpack bytes must not change):

    append        {op, ns, stream, events: [event], expect, idempotency_key} plus `lease`
                  only when given (an append without it keeps its old bytes)
                  event = {data: bytes, type: str, id: str | None, meta: {str: scalar}}
                  (meta's keys sorted); expect = "any" | "no_stream" | "exists" | int >= 0
    read_stream   {op, ns, stream, start, direction, limit, revision, continuation, wait_ms}
    stream_info   {op, ns, stream}
    list_streams  {op, ns, prefix, limit, continuation}

A read_stream continuation is opaque: base64url of msgpack [revision, next seq, direction];
list_streams uses the kv range token (revision, next stream name).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import msgpack

from statekeeper.node.config import Limits
from statekeeper.node.errors import ErrorCode, OpError, declare
from statekeeper.node.ops.fields import (
    INVALID_TOKEN,
    MAX_REVISION,
    NO_NUL,
    Bytes,
    Choice,
    Continuation,
    Field,
    Key,
    PageLimit,
    Revision,
    Schema,
    continuation_schema,
    invalid,
    is_token,
    utf8,
)
from statekeeper.node.ops.known_fields import refuse_unknown
from statekeeper.node.ops.leases import LeaseId
from statekeeper.node.ops.schemas import int_schema, nullable, obj, str_schema, value_props
from statekeeper.node.ops.shared import IDEMPOTENCY_KEY, NS
from statekeeper.node.ops.spec import OpSpec

# The error codes of the stream ops (node/errors.py has the ones every op shares).
ERRORS = declare(
    ErrorCode(
        "stream_not_found", 404, "stream_info or truncate_stream of a stream that does not exist"
    ),
    ErrorCode(
        "too_many_events", 413, "a stream append carries more events than max_events_per_append"
    ),
    ErrorCode(
        "expectation_failed",
        409,
        "a stream append's `expect` did not hold (`error` has the stream's `last_seq` and `exists`); nothing appended",
    ),
)

MAX_EVENT_TYPE_BYTES = 256
MAX_EVENT_ID_CHARS = 128
MAX_META_ENTRIES = 64
MAX_META_BYTES = 4096
MAX_WAIT_MS = 60_000
EXPECT_WORDS = ("any", "no_stream", "exists")
DIRECTIONS = ("forward", "backward")
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what msgpack can carry
MAX_STREAM_TOKEN_CHARS = 128


def encode_stream_continuation(revision: int, seq: int, direction: str) -> str:
    """Page token of read_stream: the revision pages are served at, the next seq, the way."""
    raw = msgpack.packb([revision, seq, direction], use_bin_type=True)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_stream_continuation(token: Any) -> tuple[int, int, str]:
    """Inverse of encode_stream_continuation: 400 invalid_argument for a value that is not
    a token's shape, 400 invalid_token for one of that shape no read_stream handed out."""
    if not is_token(token, MAX_STREAM_TOKEN_CHARS):
        raise invalid(
            "continuation must be a token returned by a previous read_stream "
            f"(1..{MAX_STREAM_TOKEN_CHARS} chars of [A-Za-z0-9_-])"
        )
    bad = OpError(INVALID_TOKEN, "continuation is not a valid read_stream token")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        rev, seq, direction = msgpack.unpackb(raw, raw=False)
    except (binascii.Error, ValueError, TypeError, msgpack.UnpackException):
        raise bad from None
    for n in (rev, seq):
        if type(n) is not int or not 0 <= n <= MAX_REVISION:
            raise bad
    if direction not in DIRECTIONS:
        raise bad
    return rev, seq, direction


# -- field kinds -----------------------------------------------------------------------------


class StreamName(Key):
    """A stream's name: the rules of a kv key (1..max_key_bytes UTF-8 bytes, no NUL)."""

    def schema(self, limits, wire):
        n = limits.max_key_bytes
        return str_schema(
            f"Stream name: 1..max_key_bytes ({n} on this node) UTF-8 bytes, no NUL.",
            minLength=1,
            maxLength=n,
            pattern=NO_NUL,
        )


def _meta_value(v: Any, where: str) -> Any:
    if v is None or type(v) is bool:
        return v
    if type(v) is float:
        if not v.is_integer():
            return v
        # A whole number is an integer, however it was written (JSON 1e30, msgpack float
        # 1.0: node/api/codec.py): the same range applies (META_VALUE in the schema).
        if not _INT_MIN <= v <= _INT_MAX:
            raise invalid(f"{where} is out of the 64-bit integer range")
        return v
    if type(v) is int:
        if not _INT_MIN <= v <= _INT_MAX:
            raise invalid(f"{where} is out of the 64-bit integer range")
        return v
    if type(v) is str:
        utf8(v, where)
        return v
    raise invalid(f"{where} must be a string, number, boolean or null")


def check_event_meta(v: Any, where: str) -> dict:
    """An event's meta: {str: str|int|float|bool|None}, keys sorted (so equal metas are
    equal bytes), at most MAX_META_ENTRIES entries and MAX_META_BYTES packed."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise invalid(f"{where} must be an object")
    if len(v) > MAX_META_ENTRIES:
        raise invalid(f"{where} has {len(v)} entries, max {MAX_META_ENTRIES}")
    for k in v:
        if type(k) is not str:
            raise invalid(f"{where} keys must be strings")
        utf8(k, f"{where} key")
    out = {k: _meta_value(v[k], f"{where}.{k}") for k in sorted(v)}
    if len(msgpack.packb(out, use_bin_type=True)) > MAX_META_BYTES:
        raise invalid(f"{where} is larger than {MAX_META_BYTES} bytes packed")
    return out


# A meta value: a string, a boolean, null, a number with a fraction, or a whole number
# that msgpack can carry (-2**63..2**64-1; JSON Schema's `integer` is any whole number,
# 1.0 and 1e30 included, and so is the server's).
META_VALUE: Schema = {
    "anyOf": [
        {"type": ["string", "boolean", "null"]},
        {"type": "integer", "minimum": _INT_MIN, "maximum": _INT_MAX},
        {"type": "number", "not": {"type": "integer"}},
    ]
}


def meta_schema() -> Schema:
    return {
        "type": ["object", "null"],
        "maxProperties": MAX_META_ENTRIES,
        "additionalProperties": META_VALUE,
        "description": f"Scalar metadata, at most {MAX_META_ENTRIES} entries and "
        f"{MAX_META_BYTES} bytes packed (null: none).",
    }


# The fields of one event (Events.event below).
EVENT_FIELDS = ("data", "type", "id", "meta")
_EVENT_KNOWN = frozenset(EVENT_FIELDS)


class Events(Field):
    """An append's events: 1..limits.max_events_per_append event objects, ids unique."""

    wired = True
    _data = Bytes("data", "the event's payload")

    def check(self, v, limits, in_txn, out):
        if type(v) is not list:
            raise invalid(f"{self.name} must be a list of events")
        if not v:
            raise invalid(f"{self.name} must hold at least one event")
        most = limits.max_events_per_append
        if len(v) > most:
            raise OpError(
                "too_many_events",
                f"{len(v)} events in one append, max {most} (max_events_per_append)",
            )
        events, seen = [], set()
        for i, raw in enumerate(v):
            ev = self.event(raw, limits, f"{self.name}[{i}]")
            if ev["id"] is not None:
                if ev["id"] in seen:
                    raise invalid(f"{self.name}[{i}].id {ev['id']!r} is given twice in one append")
                seen.add(ev["id"])
            events.append(ev)
        return events

    def refuse_unknown(self, v):
        if type(v) is list:
            for i, raw in enumerate(v):
                if isinstance(raw, dict):
                    refuse_unknown(raw, _EVENT_KNOWN, EVENT_FIELDS, f"{self.name}[{i}]")

    def event(self, raw: Any, limits: Limits, where: str) -> dict:
        if not isinstance(raw, dict):
            raise invalid(f"{where} must be an object with `data`")
        data = raw.get("data")
        if data is None:
            raise invalid(f"{where}.data is required")
        try:
            data = self._data.check(data, limits, False, {})
        except OpError as e:
            raise OpError(e.code, f"{where}.{e.message}") from None
        etype = raw.get("type")
        if etype is None:
            etype = ""
        elif type(etype) is not str or len(utf8(etype, f"{where}.type")) > MAX_EVENT_TYPE_BYTES:
            raise invalid(f"{where}.type must be a string of at most {MAX_EVENT_TYPE_BYTES} bytes")
        eid = raw.get("id")
        if eid is not None:
            if type(eid) is not str or not 1 <= len(eid) <= MAX_EVENT_ID_CHARS:
                raise invalid(f"{where}.id must be a string of 1..{MAX_EVENT_ID_CHARS} chars")
            utf8(eid, f"{where}.id")
        return {
            "data": data,
            "type": etype,
            "id": eid,
            "meta": check_event_meta(raw.get("meta"), f"{where}.meta"),
        }

    def schema(self, limits, wire):
        n = limits.max_value_bytes
        payload = value_props(wire, f"The payload, at most max_value_bytes ({n})", n)
        props = {
            "data": payload["value"],
            **({"data_b64": payload["value_b64"]} if wire == "json" else {}),
            "type": nullable(
                str_schema(
                    f"Event type, at most {MAX_EVENT_TYPE_BYTES} UTF-8 bytes.",
                    default="",
                    maxLength=MAX_EVENT_TYPE_BYTES,
                )
            ),
            "id": {
                "type": ["string", "null"],
                "minLength": 1,
                "maxLength": MAX_EVENT_ID_CHARS,
                "description": "The event's idempotency key: appending an id the stream holds "
                "again is a duplicate (not stored twice; same payload required).",
            },
            "meta": meta_schema(),
        }
        event = obj(props, (), "One event (JSON: `data` as UTF-8 text or `data_b64`).")
        event["additionalProperties"] = False
        if wire == "json":
            event["anyOf"] = [{"required": ["data"]}, {"required": ["data_b64"]}]
        else:
            event["required"] = ["data"]
        return {
            "type": "array",
            "items": event,
            "minItems": 1,
            "maxItems": limits.max_events_per_append,
            "description": f"{self.doc} At most max_events_per_append "
            f"({limits.max_events_per_append} on this node; more: `too_many_events`).",
        }


class Expectation(Field):
    """append's `expect`: "any" (default), "no_stream", "exists", or the last_seq N."""

    MESSAGE = 'expect must be "any", "no_stream", "exists" or a non-negative integer'

    def check(self, v, limits, in_txn, out):
        if v is None:
            return "any"
        if type(v) is str and v in EXPECT_WORDS:
            return v
        if type(v) is int and 0 <= v <= MAX_REVISION:
            return v
        raise invalid(self.MESSAGE)

    def schema(self, limits, wire):
        return {
            "description": self.doc,
            "default": "any",
            "oneOf": [
                {"type": "string", "enum": list(EXPECT_WORDS)},
                int_schema(
                    "The stream's last_seq must be this (0: no events yet).", maximum=MAX_REVISION
                ),
            ],
        }


class Count(Field):
    """A non-negative integer, `default` when absent, at most `maximum`."""

    def __init__(
        self, name, doc="", *, default: int | None = None, maximum: int = MAX_REVISION, **kw
    ):
        super().__init__(name, doc, **kw)
        self.default = default
        self.maximum = maximum

    def check(self, v, limits, in_txn, out):
        if v is None:
            return self.default
        if type(v) is not int or not 0 <= v <= self.maximum:
            raise invalid(f"{self.name} must be an integer in 0..{self.maximum}")
        return v

    def schema(self, limits, wire):
        extra = {} if self.default is None else {"default": self.default}
        return int_schema(self.doc, maximum=self.maximum, **extra)


class StreamContinuation(Field):
    def check(self, v, limits, in_txn, out):
        if v is None:
            return None
        decode_stream_continuation(v)
        return v

    def schema(self, limits, wire):
        return continuation_schema(self.doc, MAX_STREAM_TOKEN_CHARS)


# -- the ops -----------------------------------------------------------------------------------


def _read_stream_post(out: dict, limits: Limits) -> None:
    token = out["continuation"]
    if token is not None and out["revision"] is not None:
        if out["revision"] != decode_stream_continuation(token)[0]:
            raise invalid("revision does not match the continuation's revision")
    if out["wait_ms"] and (
        out["revision"] is not None or token is not None or out["direction"] != "forward"
    ):
        raise invalid(
            "wait_ms is only for forward reads at the current revision (no revision, continuation or backward)"
        )


STREAM = StreamName("stream", required=True, component="StreamName")
# The fields of each op after `ns` (and before append's idempotency_key).
APPEND_FIELDS: tuple[Field, ...] = (
    STREAM,
    Events("events", "The events, appended in order at last_seq + 1, ...", required=True),
    Expectation(
        "expect",
        "Append only if the stream is in this state, else 409 `expectation_failed` "
        "(not checked when every event is a duplicate).",
    ),
)
READ_STREAM_FIELDS: tuple[Field, ...] = (
    STREAM,
    Count("start", "First seq to return (default: 1 forward, last_seq backward)."),
    Choice(
        "direction",
        DIRECTIONS,
        what="direction",
        default="forward",
        doc="forward: seq >= start ascending; backward: seq <= start descending.",
    ),
    PageLimit("limit", "At most this many events per page"),
    Revision("revision", "Read the stream as of this revision (default: current)."),
    StreamContinuation(
        "continuation",
        "Opaque token from the previous page's answer (its start, direction and revision "
        "win); send it with the same ns/stream.",
    ),
    Count(
        "wait_ms",
        "Long poll: when a forward read at the current revision finds nothing, wait up to "
        "this long for events before answering (not in a batch).",
        default=0,
        maximum=MAX_WAIT_MS,
        batch_error="wait_ms is not allowed in a batch (use POST /v1/streams/read)",
    ),
)
APPEND_LEASE = LeaseId(
    "lease",
    "Attach the stream to this lease (same namespace): revoking it, or its expiry, deletes "
    "the stream with all its events. Moves the stream from any other lease; an append "
    "without `lease` leaves the attachment as it is (streams are append-only: no detach). "
    "404 `lease_not_found` if the lease does not exist (nothing appended).",
)


def _append_post(out: dict, limits: Limits) -> None:
    """append: `lease` is left out of the op when absent (an append without it is the same
    op, byte for byte, as before streams could be attached to leases)."""
    lease = out.pop("lease")
    if lease is not None:
        out["lease"] = lease


LIST_STREAMS_FIELDS: tuple[Field, ...] = (
    Key("prefix", "Only streams whose name starts with this.", allow_empty=True),
    PageLimit("limit", "At most this many streams per page"),
    Continuation(
        "continuation",
        "Opaque token from the previous page's answer; send it with the same ns/prefix.",
    ),
)


# The four stream ops (joined into OPS by node/ops/core.py).
SPECS: tuple[OpSpec, ...] = (
    OpSpec(
        "append",
        (NS, *APPEND_FIELDS, APPEND_LEASE, IDEMPOTENCY_KEY),
        "append op: add events to a stream (created by its first append), one revision.",
        write=True,
        in_txn=True,
        post=_append_post,
        path="/v1/streams/append",
    ),
    OpSpec(
        "read_stream",
        (NS, *READ_STREAM_FIELDS),
        "read_stream op: a page of a stream's events; a missing stream reads as empty.",
        write=False,
        post=_read_stream_post,
        path="/v1/streams/read",
    ),
    OpSpec(
        "stream_info",
        (NS, STREAM),
        "stream_info op: a stream's counters (404 `stream_not_found` if it does not exist).",
        write=False,
        path="/v1/streams/info",
    ),
    OpSpec(
        "list_streams",
        (NS, *LIST_STREAMS_FIELDS),
        "list_streams op: the streams of a namespace in name byte order, paged.",
        write=False,
        path="/v1/streams/list",
    ),
)
