"""Request/response bodies: msgpack (values as bin) or JSON (values as text or base64)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Collection
from decimal import Decimal
from typing import Any

import msgpack

from statekeeper.node.errors import OpError

MSGPACK = "application/msgpack"
JSON = "application/json"
_MSGPACK_TYPES = {"application/msgpack", "application/x-msgpack", "application/vnd.msgpack"}


def pick_format(content_type: str | None, accept: str | None = None) -> str:
    """The encoding of a request body (by Content-Type) and hence of its answer."""
    ct = (content_type or "").split(";")[0].strip().lower()
    if ct in _MSGPACK_TYPES:
        return MSGPACK
    if ct in ("application/json", "") or ct.endswith("+json"):
        if not ct and accept and any(t in accept for t in _MSGPACK_TYPES):
            return MSGPACK
        return JSON
    raise OpError(
        "unsupported_media_type",
        f"Content-Type {ct!r} is not supported; use application/json or application/msgpack",
    )


def _json_number(text: str) -> int | float:
    """A JSON number with a fraction or exponent: an int when its value is whole.

    JSON (and the OpenAPI document's `integer`, JSON Schema's) does not tell 5 from 5.0:
    every number in a request is a count, a revision, an id or a duration, so 5.0 is 5.
    Huge exponents stay floats (and fail validation) instead of becoming huge ints."""
    d = Decimal(text)
    if d.is_finite() and d.adjusted() < 40 and d == d.to_integral_value():
        return int(d)
    return float(text)


def decode(
    body: bytes, fmt: str, op: str | None = None, ops_with_values: Collection[str] | None = None
) -> dict:
    """The request body as a dict; in JSON, values sent as base64 (`value_b64`, ...) are
    bytes. With `ops_with_values` (the op names whose fields carry bytes, and "batch" for a
    batch's body), only those objects are translated: the body itself when it is `op`, and
    the items of its ops / success / failure lists by their own "op". Elsewhere a
    `value_b64` is an unknown field like any other (400 unknown_field, naming it), not a
    base64 string that must decode."""
    if not body:
        raise OpError("malformed_body", "the request body is empty; send a JSON or msgpack object")
    try:
        if fmt == MSGPACK:
            obj = msgpack.unpackb(body, raw=False, strict_map_key=True)
            # float 32 / float 64 markers: only then can a float be in there (cheap scan).
            if b"\xca" in body or b"\xcb" in body:
                obj = _msgpack_numbers(obj)
        else:
            obj = json.loads(body, parse_float=_json_number)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        raise OpError("malformed_body", f"the body is not valid {fmt}: {e}") from e
    except Exception as e:  # msgpack raises assorted errors on truncated input
        raise OpError("malformed_body", f"the body is not valid {fmt}: {type(e).__name__}") from e
    if not isinstance(obj, dict):
        raise OpError("malformed_body", "the body must be an object (a map)")
    if fmt == JSON:
        _json_values_in(obj, ops_with_values, top=op)
    return obj


def _whole(f: float) -> int | float:
    """A decoded float: an int when its value is whole (the rule of _json_number)."""
    if f.is_integer() and abs(f) < 1e40:
        return int(f)
    return f


_WALKED = frozenset((float, dict, list))  # the types _msgpack_numbers must look into


def _msgpack_numbers(obj: Any) -> Any:
    """msgpack floats that are whole numbers as ints, in maps and arrays (not in bin);
    iterative, so a deeply nested body costs no recursion.

    The float markers are in nearly every body with binary values (a random byte is 0xca
    or 0xcb one time in 128), so this walk runs on most batches: a map or an array with
    nothing to convert or enter is passed over by one C-level set test (isdisjoint), and
    a value is replaced in place (no copy of the items). A batch of 64 puts of 256 B:
    1.03 -> 0.43 us per put (timeit, best of 5), 1.5 % of the leader's CPU under
    batches of 64 puts at 16 clients before (py-spy --gil)."""
    if type(obj) is float:
        return _whole(obj)
    stack = [obj]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            if _WALKED.isdisjoint(map(type, node.values())):
                continue
            for k, v in node.items():  # replacing a value is not resizing: safe
                t = type(v)
                if t is float:
                    node[k] = _whole(v)
                elif t is dict or t is list:
                    stack.append(v)
        else:
            if _WALKED.isdisjoint(map(type, node)):
                continue
            for i, v in enumerate(node):
                t = type(v)
                if t is float:
                    node[i] = _whole(v)
                elif t is dict or t is list:
                    stack.append(v)
    return obj


def _b64decode(raw: Any, field: str) -> bytes:
    if not isinstance(raw, str):
        raise OpError("invalid_argument", f"{field} must be a base64 string")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as e:
        raise OpError("invalid_argument", f"{field} is not valid base64: {e}") from e


def _json_value(d: dict, name: str = "value", compare: bool = False) -> None:
    b64 = f"{name}_b64"
    # A compare's value is bytes only for target "value" (else an integer or a boolean);
    # a value_b64 beside another target is not used, but the schema still says what it
    # must look like, so a malformed one is refused like anywhere else.
    if compare and d.get("target") not in (None, "value"):
        if b64 in d:
            _b64decode(d.pop(b64), b64)
        return
    if b64 in d:
        d[name] = _b64decode(d.pop(b64), b64)
    elif isinstance(d.get(name), str):
        d[name] = d[name].encode()


def _json_values_in(
    obj: dict, ops_with_values: Collection[str] | None = None, top: str | None = None
) -> None:
    """JSON has no bytes: turn value / value_b64 of ops and compares, state / state_b64 of
    CRDT merges, and data / data_b64 of stream events, into bytes (see decode() for
    `ops_with_values`; `top` is the op `obj` is, if the route says)."""
    if ops_with_values is not None and top not in ops_with_values:
        return
    _json_value(obj)
    _json_value(obj, "state")  # crdt_get's `state` is a bool: only a str is touched
    events = obj.get("events")
    if isinstance(events, list):
        for event in events:
            if isinstance(event, dict):
                _json_value(event, "data")
    for name in ("ops", "success", "failure"):
        items = obj.get(name)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict):
                    op = item.get("op")  # anything a client sent; validation names it
                    _json_values_in(item, ops_with_values, op if isinstance(op, str) else None)
    compares = obj.get("compare")
    if isinstance(compares, list):
        for item in compares:
            if isinstance(item, dict):
                _json_value(item, compare=True)


def _json_ready(obj: Any) -> Any:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(v, bytes | bytearray):
                try:
                    out[k] = v.decode()
                except UnicodeDecodeError:
                    out[f"{k}_b64"] = base64.b64encode(v).decode()
            else:
                out[k] = _json_ready(v)
        return out
    if isinstance(obj, list | tuple):
        return [_json_item(v) for v in obj]
    return obj


def _json_item(v: Any) -> Any:
    """A list item: bytes (CRDT values: set members, register values) as UTF-8 text, or
    {"b64": base64} when they are not UTF-8."""
    if isinstance(v, bytes | bytearray):
        try:
            return v.decode()
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(v).decode()}
    return _json_ready(v)


def encode(obj: Any, fmt: str) -> bytes:
    if fmt == MSGPACK:
        return msgpack.packb(obj, use_bin_type=True)
    return json.dumps(_json_ready(obj), separators=(",", ":")).encode()
