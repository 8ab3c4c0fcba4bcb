"""The archival ops' declarations: archive_plan, archive_seal, archive_restore, archive_list
(docs/protocol.md, "Archival"; applied and read by node/store/archive.py, driven by the
client's archiver, client/archive/).

Like every op they are declared once (`SPECS`, joined into node.ops.core.OPS): the field
kinds below check a field with the protocol's codes and describe it in OpenAPI. The plan's
selection rules are a retention policy's (node/ops/retention.py's field kinds and checks),
given inline.

Normalized shapes (raft entries carry the writes', so their msgpack bytes must not change):

    archive_plan     {op, ns, target, prefix, keep_last, keep_every, max_age_s, within,
                      limit}                     limit 1..MAX_ARCHIVE_ITEMS (default 500)
    archive_seal     {op, ns, segment: {id, url, sha256, bytes}, keys: [[key, mod_revision]],
                      streams: [[stream, from_seq, before_seq]], idempotency_key}
    archive_restore  {op, ns, segment, keys: [[key, value]], streams: [[stream, [event]]],
                      idempotency_key}
                      event = [seq, data, type, time_ms, revision, id, meta] (type "" and
                      meta {} when sent as null; meta's keys sorted)
    archive_list     {op, ns, limit, continuation}   ns None: every namespace

Limits: a seal or restore names at most MAX_ARCHIVE_ITEMS keys + streams, and at most
MAX_ARCHIVE_EVENTS events (a sealed stream item covers before_seq - from_seq events):
more is 413 `too_many_ops`. A segment id is 1..128 chars of [A-Za-z0-9._-], a url 1..2048
chars of an archive scheme without dot segments (SEGMENT_URL_PATTERN), sha256 64 lowercase hex digits, bytes >= 0 (400 `invalid_argument`). A restored
value or event's data is at most max_value_bytes (413 `value_too_large`), and the request
at most max_request_bytes, like every write. Over JSON a value / data may be a UTF-8
string or {"b64": base64} (msgpack carries bin).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from statekeeper.node.errors import ErrorCode, OpError, declare
from statekeeper.node.ops.fields import (
    MAX_REVISION,
    NO_NUL,
    Field,
    PageLimit,
    Schema,
    invalid,
    key_text,
    utf8,
)
from statekeeper.node.ops.known_fields import refuse_unknown
from statekeeper.node.ops.retention import (
    MAX_AGE_S,
    MAX_TRUNCATE_EVENTS,
    MAX_WITHIN_BYTES,
    PREFIX,
    TARGET,
    OptionalNamespace,
    Rule,
    Token,
    Within,
    check_policy_rules,
)
from statekeeper.node.ops.schemas import BASE64_PATTERN, int_schema, obj, str_schema
from statekeeper.node.ops.shared import IDEMPOTENCY_KEY, NS
from statekeeper.node.ops.spec import OpSpec
from statekeeper.node.ops.streams import (
    MAX_EVENT_ID_CHARS,
    MAX_EVENT_TYPE_BYTES,
    check_event_meta,
    meta_schema,
)

# The error codes of the archive ops (node/errors.py has the ones every op shares).
ERRORS = declare(
    ErrorCode(
        "archived",
        410,
        "get of a key / read_stream from a seq that was archived to a cold-tier segment (`error` has `segment`, `url`, `sha256`, `bytes`, and `key` + `archived_revision` or `stream` + `from_seq` + `before_seq`)",
    ),
)

MAX_ARCHIVE_ITEMS = 500  # keys + streams of one seal / restore, items of one plan page
MAX_ARCHIVE_EVENTS = MAX_TRUNCATE_EVENTS  # events of one seal / restore; a plan item's span
MAX_SEGMENT_ID_CHARS = 128
MAX_URL_CHARS = 2048
_SEGMENT_ID = re.compile(r"[A-Za-z0-9._-]{1,128}\Z")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
SEGMENT_ID_PATTERN = "^[A-Za-z0-9._-]{1,128}$"
# A segment URL is recorded for every reader of the namespace, whose client then reads it
# (issue 27, item 5: an http:// URL made readers' clients fetch internal addresses, a
# file:// one with ".." reached any local file). The node has no archive configuration, so
# it accepts what fsspec's archive backends take: a local absolute path (file:///...) or an
# object store (s3, gs, az/abfs, adl; memory: the client's own process), with no "." or
# ".." path segment (also percent-encoded), no query or fragment, no space or control
# character. Which root a client reads from is the client's setting (client/archive/storage.py).
ARCHIVE_URL_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "memory")
SEGMENT_URL_PATTERN = (
    "^(?:file://(?=/)|(?:" + "|".join(ARCHIVE_URL_SCHEMES) + ")://)"
    "(?!(?:.*/)?(?:[.]|%2[eE])(?:[.]|%2[eE])?(?:/|(?![\\s\\S])))"
    # the end as (?![\s\S]), not "$": Python's "$" (jsonschema's, hypothesis') also
    # matches before a final newline, so the document would admit "file:///a\n"
    "[^\\x00-\\x20\\x7f?#]*(?![\\s\\S])"
)
_SEGMENT_URL = re.compile(SEGMENT_URL_PATTERN)


def check_segment_id(v: Any, name: str) -> str:
    if type(v) is not str or not _SEGMENT_ID.match(v):
        raise invalid(f"{name} must be 1..{MAX_SEGMENT_ID_CHARS} chars of [A-Za-z0-9._-]")
    return v


def _count(v: Any, name: str) -> int:
    if type(v) is not int or not 0 <= v <= MAX_REVISION:
        raise invalid(f"{name} must be a non-negative integer")
    return v


def _pairs(v: Any, name: str, size: int) -> list:
    """A list of at most MAX_ARCHIVE_ITEMS lists of `size` items each."""
    if v is None:
        return []
    if type(v) is not list:
        raise invalid(f"{name} must be a list")
    if len(v) > MAX_ARCHIVE_ITEMS:
        raise OpError("too_many_ops", f"{name} names {len(v)} items, max {MAX_ARCHIVE_ITEMS}")
    for i, item in enumerate(v):
        if type(item) not in (list, tuple) or len(item) != size:
            raise invalid(f"{name}[{i}] must be a list of {size} items")
    return v


def _bytes(v: Any, limits: Any, name: str) -> bytes:
    """bytes (msgpack bin); over JSON a UTF-8 string or {"b64": base64}."""
    if type(v) is str:
        v = v.encode()
    elif isinstance(v, dict) and set(v) == {"b64"} and type(v["b64"]) is str:
        try:
            v = base64.b64decode(v["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise invalid(f"{name}.b64 is not valid base64") from None
    elif isinstance(v, bytearray | memoryview):
        v = bytes(v)
    if type(v) is not bytes:
        raise invalid(f"{name} must be bytes")
    if len(v) > limits.max_value_bytes:
        raise OpError("value_too_large", f"{name} is larger than {limits.max_value_bytes} bytes")
    return v


def _bytes_schema(wire: str, doc: str, max_bytes: int) -> dict:
    if wire == "json":
        b64 = {
            **obj(
                {
                    "b64": str_schema(
                        "base64",
                        pattern=BASE64_PATTERN,
                        maxLength=4 * -(-max_bytes // 3),
                    )
                },
                ("b64",),
            ),
            "additionalProperties": False,
        }
        text = str_schema("UTF-8 text", maxLength=max_bytes)
        return {"anyOf": [text, b64], "description": doc}
    return {
        "type": "string",
        "contentEncoding": "binary",
        "maxLength": max_bytes,
        "description": doc,
    }


def _tuple(*items: Schema) -> Schema:
    """A fixed-length array: these items, in this order, nothing more."""
    return {
        "type": "array",
        "prefixItems": list(items),
        "items": False,
        "minItems": len(items),
        "maxItems": len(items),
    }


def _key_schema(limits: Any, what: str) -> Schema:
    n = limits.max_key_bytes
    return str_schema(
        f"{what}: 1..max_key_bytes ({n}) UTF-8 bytes, no NUL.",
        minLength=1,
        maxLength=n,
        pattern=NO_NUL,
    )


def _count_schema(what: str) -> Schema:
    return int_schema(what, maximum=MAX_REVISION)


_SEGMENT_FIELDS = ("id", "url", "sha256", "bytes")
_SEGMENT_KNOWN = frozenset(_SEGMENT_FIELDS)


class Segment(Field):
    """archive_seal's segment: {id, url, sha256, bytes}."""

    def refuse_unknown(self, v):
        if isinstance(v, dict):
            refuse_unknown(v, _SEGMENT_KNOWN, _SEGMENT_FIELDS, self.name)

    def check(self, v, limits, in_txn, out):
        if not isinstance(v, dict):
            raise invalid(f"{self.name} must be an object {{id, url, sha256, bytes}}")
        url = v.get("url")
        if type(url) is not str or not 1 <= len(url) <= MAX_URL_CHARS:
            raise invalid(f"{self.name}.url must be a string of 1..{MAX_URL_CHARS} chars")
        if not _SEGMENT_URL.match(url):
            raise invalid(
                f"{self.name}.url must be file:///absolute/path or "
                f"{'|'.join(ARCHIVE_URL_SCHEMES)}://..., with no '.' or '..' segment, "
                "query, fragment, space or control character"
            )
        sha = v.get("sha256")
        if type(sha) is not str or not _SHA256.match(sha):
            raise invalid(f"{self.name}.sha256 must be 64 lowercase hex digits")
        return {
            "id": check_segment_id(v.get("id"), f"{self.name}.id"),
            "url": url,
            "sha256": sha,
            "bytes": _count(v.get("bytes"), f"{self.name}.bytes"),
        }

    def schema(self, limits, wire):
        props = {
            "id": str_schema("Segment id.", pattern=SEGMENT_ID_PATTERN),
            "url": str_schema(
                "Where the segment file is: file:///absolute/path or an object store URL, "
                "no '.' or '..' segment, query or control character.",
                minLength=1,
                maxLength=MAX_URL_CHARS,
                pattern=SEGMENT_URL_PATTERN,
            ),
            "sha256": str_schema("sha256 of the file bytes.", pattern="^[0-9a-f]{64}$"),
            "bytes": _count_schema("Size of the file."),
        }
        return {**obj(props, tuple(props), self.doc), "additionalProperties": False}


class SegmentId(Field):
    def check(self, v, limits, in_txn, out):
        return check_segment_id(v, self.name)

    def schema(self, limits, wire):
        return str_schema(self.doc, pattern=SEGMENT_ID_PATTERN)


class SealKeys(Field):
    """[[key, mod_revision], ...]."""

    def check(self, v, limits, in_txn, out):
        items = _pairs(v, self.name, 2)
        return [
            [
                key_text(k, limits.max_key_bytes, f"{self.name}[{i}][0]"),
                _count(m, f"{self.name}[{i}][1]"),
            ]
            for i, (k, m) in enumerate(items)
        ]

    def schema(self, limits, wire):
        pair = _tuple(_key_schema(limits, "Key"), _count_schema("mod_revision"))
        return {
            "type": "array",
            "items": pair,
            "maxItems": MAX_ARCHIVE_ITEMS,
            "description": self.doc,
        }


class SealStreams(Field):
    """[[stream, from_seq, before_seq], ...] with from_seq < before_seq."""

    def check(self, v, limits, in_txn, out):
        out_items = []
        for i, (s, lo, hi) in enumerate(_pairs(v, self.name, 3)):
            where = f"{self.name}[{i}]"
            name = key_text(s, limits.max_key_bytes, f"{where}[0]")
            lo, hi = _count(lo, f"{where}[1]"), _count(hi, f"{where}[2]")
            if not 1 <= lo < hi:
                raise invalid(f"{where} must have 1 <= from_seq < before_seq")
            out_items.append([name, lo, hi])
        return out_items

    def schema(self, limits, wire):
        # from_seq < before_seq, and their differences summed (events covered) at most
        # MAX_ARCHIVE_EVENTS: relations between numbers JSON Schema cannot state.
        item = _tuple(
            _key_schema(limits, "Stream"),
            int_schema("from_seq", minimum=1, maximum=MAX_REVISION),
            int_schema("before_seq (> from_seq)", minimum=2, maximum=MAX_REVISION),
        )
        return {
            "type": "array",
            "items": item,
            "maxItems": MAX_ARCHIVE_ITEMS,
            "description": self.doc,
        }


class RestoreKeys(Field):
    """[[key, value], ...]."""

    wired = True

    def check(self, v, limits, in_txn, out):
        items = _pairs(v, self.name, 2)
        return [
            [
                key_text(k, limits.max_key_bytes, f"{self.name}[{i}][0]"),
                _bytes(val, limits, f"{self.name}[{i}][1]"),
            ]
            for i, (k, val) in enumerate(items)
        ]

    def schema(self, limits, wire):
        value = _bytes_schema(
            wire,
            f"The value, at most max_value_bytes ({limits.max_value_bytes}).",
            limits.max_value_bytes,
        )
        pair = _tuple(_key_schema(limits, "Key"), value)
        return {
            "type": "array",
            "items": pair,
            "maxItems": MAX_ARCHIVE_ITEMS,
            "description": self.doc,
        }


def _event(raw: Any, limits: Any, where: str) -> list:
    if type(raw) not in (list, tuple) or len(raw) != 7:
        raise invalid(f"{where} must be [seq, data, type, time_ms, revision, id, meta]")
    seq, data, etype, time_ms, rev, eid, meta = raw
    if etype is None:
        etype = ""
    elif type(etype) is not str or len(utf8(etype, f"{where} type")) > MAX_EVENT_TYPE_BYTES:
        raise invalid(f"{where} type must be a string of at most {MAX_EVENT_TYPE_BYTES} bytes")
    if eid is not None and (type(eid) is not str or not 1 <= len(eid) <= MAX_EVENT_ID_CHARS):
        raise invalid(f"{where} id must be a string of 1..{MAX_EVENT_ID_CHARS} chars")
    if eid is not None:
        utf8(eid, f"{where} id")
    return [
        _count(seq, f"{where} seq"),
        _bytes(data, limits, f"{where} data"),
        etype,
        _count(time_ms, f"{where} time_ms"),
        _count(rev, f"{where} revision"),
        eid,
        check_event_meta(meta, f"{where} meta"),
    ]


class RestoreStreams(Field):
    """[[stream, [event, ...]], ...], at most MAX_ARCHIVE_EVENTS events in all."""

    wired = True

    def check(self, v, limits, in_txn, out):
        items, total = [], 0
        for i, (s, events) in enumerate(_pairs(v, self.name, 2)):
            where = f"{self.name}[{i}]"
            name = key_text(s, limits.max_key_bytes, f"{where}[0]")
            if type(events) not in (list, tuple) or not events:
                raise invalid(f"{where}[1] must be a non-empty list of events")
            total += len(events)
            if total > MAX_ARCHIVE_EVENTS:
                raise OpError(
                    "too_many_ops", f"{self.name} carries more than {MAX_ARCHIVE_EVENTS} events"
                )
            evs = [_event(e, limits, f"{where}[1][{j}]") for j, e in enumerate(events)]
            items.append([name, evs])
        return items

    def schema(self, limits, wire):
        data = _bytes_schema(wire, "The event's data.", limits.max_value_bytes)
        event = _tuple(
            _count_schema("seq"),
            data,
            {
                "type": ["string", "null"],
                "maxLength": MAX_EVENT_TYPE_BYTES,
                "description": f"type, at most {MAX_EVENT_TYPE_BYTES} UTF-8 bytes",
            },
            _count_schema("time_ms"),
            _count_schema("revision (the original one)"),
            {
                "type": ["string", "null"],
                "minLength": 1,
                "maxLength": MAX_EVENT_ID_CHARS,
                "description": "id",
            },
            meta_schema(),
        )
        item = _tuple(
            _key_schema(limits, "Stream"),
            {
                "type": "array",
                "items": event,
                "minItems": 1,
                "maxItems": MAX_ARCHIVE_EVENTS,
            },
        )
        return {
            "type": "array",
            "items": item,
            "maxItems": MAX_ARCHIVE_ITEMS,
            "description": self.doc,
        }


class PlanLimit(Field):
    def check(self, v, limits, in_txn, out):
        if v is None:
            return MAX_ARCHIVE_ITEMS
        if type(v) is not int or not 1 <= v <= MAX_ARCHIVE_ITEMS:
            raise invalid(f"{self.name} must be an integer in 1..{MAX_ARCHIVE_ITEMS}")
        return v

    def schema(self, limits, wire):
        return int_schema(self.doc, minimum=1, maximum=MAX_ARCHIVE_ITEMS, default=MAX_ARCHIVE_ITEMS)


def _items_post(out: dict, limits: Any) -> None:
    n = len(out["keys"]) + len(out["streams"])
    if n > MAX_ARCHIVE_ITEMS:
        raise OpError("too_many_ops", f"{n} keys and streams, max {MAX_ARCHIVE_ITEMS}")


def _seal_post(out: dict, limits: Any) -> None:
    _items_post(out, limits)
    events = sum(hi - lo for _, lo, hi in out["streams"])
    if events > MAX_ARCHIVE_EVENTS:
        raise OpError(
            "too_many_ops", f"the stream items cover {events} events, max {MAX_ARCHIVE_EVENTS}"
        )


# The retention rules archive_plan takes.
_RULES = (
    Rule("keep_last", "Keep the newest N keys per group / events.", minimum=1),
    Rule(
        "keep_every",
        "Of the older keys of a group also keep those whose key ends in a multiple of K "
        "(only with keep_last, only target keys).",
        minimum=2,
    ),
    Rule(
        "max_age_s",
        "Archive what is older than this many seconds.",
        minimum=1,
        maximum=MAX_AGE_S,
    ),
    Within(
        "within",
        "Only key groups whose directory's last segment is this name: no '/' or NUL, at "
        f"most {MAX_WITHIN_BYTES} UTF-8 bytes; only target keys.",
    ),
)

# The four archive ops (joined into OPS by node/ops/core.py).
SPECS: tuple[OpSpec, ...] = (
    OpSpec(
        "archive_plan",
        (NS, TARGET, PREFIX, *_RULES, PlanLimit("limit", "At most this many items.")),
        "archive_plan op: what a retention policy with these rules would delete now, i.e. "
        "what an archive run archives (no stored policy is considered).",
        write=False,
        post=check_policy_rules,
        path="/v1/archive/plan",
    ),
    OpSpec(
        "archive_seal",
        (
            NS,
            Segment("segment", "The durable segment file the items are in.", required=True),
            SealKeys("keys", "[key, mod_revision]: archived if still live at it."),
            SealStreams(
                "streams", "[stream, from_seq, before_seq]: archived if first_seq == from_seq."
            ),
            IDEMPOTENCY_KEY,
        ),
        "archive_seal op: delete the items that still hold and leave tombstones naming the "
        "segment; one revision.",
        write=True,
        grows=False,
        post=_seal_post,
        path="/v1/archive/seal",
    ),
    OpSpec(
        "archive_restore",
        (
            NS,
            SegmentId("segment", "The segment the items were archived to.", required=True),
            RestoreKeys("keys", "[key, value]: written back if archived to this segment."),
            RestoreStreams(
                "streams",
                "[stream, [[seq, data, type, time_ms, revision, id, meta], ...]]: the "
                "events below the stream's first_seq, written back byte-identical.",
            ),
            IDEMPOTENCY_KEY,
        ),
        "archive_restore op: write archived items back; one revision.",
        write=True,
        post=_items_post,
        path="/v1/archive/restore",
    ),
    OpSpec(
        "archive_list",
        (
            OptionalNamespace("ns"),
            PageLimit("limit", "At most this many segments"),
            Token("continuation", "The `continuation` of the previous page."),
        ),
        "archive_list op: the sealed segments in (ns, id) order, paged.",
        write=False,
        path="/v1/archive/list",
    ),
)
