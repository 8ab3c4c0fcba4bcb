"""Field kinds of protocol ops: each kind checks a field AND describes it in OpenAPI.

A field is declared once (its family's `SPECS`, joined into node/ops/core.py's `OPS`) as an
instance of one of these classes. Its constraints are the instance's attributes (`required`,
`allow_empty`, `choices`, `txn_error`, ...) and the kind's bounds (`Key`:
limits.max_key_bytes, `Bytes`: limits.max_value_bytes, `PageLimit`: limits.max_range_limit,
...): `check` enforces them with the protocol's exact error codes and messages,
`properties`/`requirement`/`conditions` turn the same attributes and bounds into JSON Schema
for the node's own `Limits` (node/openapi/requests.py). Change a constraint here and both
the validation and the served document follow.

`check(v, limits, in_txn, out)` gets the raw value (None when absent), the node's limits,
whether the op sits in a txn branch, and the normalized dict built so far (`out["ns"]` is
the namespace default while the `ns` field has not been checked yet). It returns the
normalized value or raises OpError.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import msgpack

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError

# JSON Schema building blocks (node/ops/schemas.py).
from statekeeper.node.ops.schemas import (
    MAX_REVISION,
    Schema,
    bool_schema,
    bytes_schema,
    int_schema,
    obj,
    ref,
    rev_schema,
    str_schema,
    value_props,
    value_required,
)

DEFAULT_NS = "default"
DEFAULT_RANGE_LIMIT = 1000
MAX_NS_BYTES = 255
MAX_IDEMPOTENCY_KEY_CHARS = 256
NO_NUL = "^[^\\u0000]+$"
NO_NUL_OR_EMPTY = "^[^\\u0000]*$"
# A namespace has no control characters (C0, DEL, C1): a newline or an ANSI escape in one
# forged audit lines in node.log (issue 27, item 13).
NO_CONTROL = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"
_CONTROL_CHAR = re.compile("[\x00-\x1f\x7f-\x9f]")
# The alphabet of every page token: URL-safe base64 without padding.
TOKEN_PATTERN = "^[A-Za-z0-9_-]+$"
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
# Error code of a token or CRDT state whose shape is right (what the document can say)
# but whose content does not decode: the document cannot tell those apart.
INVALID_TOKEN = "invalid_token"


def invalid(message: str) -> OpError:
    return OpError("invalid_argument", message)


def utf8(s: str, name: str) -> bytes:
    try:
        return s.encode()
    except UnicodeEncodeError:
        raise invalid(f"{name} is not valid unicode (lone surrogate?)") from None


def key_text(value: Any, max_bytes: int, name: str, *, allow_empty: bool = False) -> str:
    """A key-like string: no NUL, valid UTF-8, at most `max_bytes` bytes."""
    if type(value) is not str:
        raise invalid(f"{name} must be a string")
    if not value and not allow_empty:
        raise invalid(f"{name} must not be empty")
    if "\x00" in value:
        raise invalid(f"{name} must not contain NUL")
    # Cheap bound first: a str never has more UTF-8 bytes than 4 per char.
    if len(value) * 4 > max_bytes and len(utf8(value, name)) > max_bytes:
        raise OpError("key_too_large", f"{name} is longer than {max_bytes} bytes")
    if not value.isascii():
        utf8(value, name)
    return value


def revision(v: Any, name: str) -> int:
    if type(v) is not int or not 0 <= v <= MAX_REVISION:
        raise invalid(f"{name} must be a non-negative integer")
    return v


def is_token(v: Any, max_chars: int) -> bool:
    """The shape of a page token: 1..max_chars chars of TOKEN_PATTERN's alphabet."""
    return type(v) is str and 0 < len(v) <= max_chars and _TOKEN_CHARS.issuperset(v)


def max_continuation_chars(limits: Limits) -> int:
    return 4 * limits.max_key_bytes + 64


def encode_continuation(rev: int, key: str) -> str:
    """Opaque page token: the revision the pages are served at and the next key."""
    raw = msgpack.packb([rev, key], use_bin_type=True)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_continuation(token: Any, limits: Limits) -> tuple[int, str]:
    """Inverse of encode_continuation: 400 invalid_argument for a value that is not a
    token's shape (TOKEN_PATTERN, at most max_continuation_chars), 400 invalid_token for
    one of that shape that the server did not hand out."""
    if not is_token(token, max_continuation_chars(limits)):
        raise invalid(
            f"continuation must be a token returned by a previous range (1.."
            f"{max_continuation_chars(limits)} chars of [A-Za-z0-9_-])"
        )
    bad = OpError(INVALID_TOKEN, "continuation is not a valid token")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        rev, key = msgpack.unpackb(raw, raw=False)
    except (binascii.Error, ValueError, TypeError, msgpack.UnpackException):
        raise bad from None
    if type(rev) is not int or not 0 <= rev <= MAX_REVISION:
        raise bad
    try:
        return rev, key_text(key, limits.max_key_bytes, "continuation key")
    except OpError:
        raise bad from None


# -- JSON Schema helpers (also used by node/openapi*.py) -----------------------------------


# Field.absent() of a field whose check must run even when the field is absent.
CHECK_ABSENT: Any = object()


class Field:
    """One named field of an op (or of a compare). Subclasses check and describe it."""

    # Name of a shared schema under components/schemas (the property is then a $ref).
    component: str | None = None
    # The schema differs between JSON and msgpack (it carries bytes).
    wired = False
    # When not required: null reads as absent (check(None) returns the default), and the
    # schema says so (the property also allows null).
    nullable = True
    # A request may carry it (False: the node sets it, as auth_token_create's parent; a
    # request carrying it is refused as unknown_field, node/ops/known_fields.py).
    requested = True

    def __init__(
        self,
        name: str,
        doc: str = "",
        *,
        required: bool = False,
        txn_error: str | None = None,
        batch_error: str | None = None,
    ) -> None:
        self.name = name
        self.doc = doc
        self.required = required
        # Set: the field must be absent inside a txn branch (this message otherwise), and
        # the txn variant of the op's schema leaves it out.
        self.txn_error = txn_error
        # Set: a batch refuses the op when the field is set (truthy) with this message.
        self.batch_error = batch_error

    def check(self, v: Any, limits: Limits, in_txn: bool, out: dict) -> Any:
        raise NotImplementedError

    def absent(self) -> Any:
        """What check(None, ...) returns whatever the limits, in_txn and out, when that is
        a constant; CHECK_ABSENT otherwise. validate_op stores it for an absent field
        instead of calling check (op_spec.plan_checks): a put carries 4 of its 7 fields
        rarely, and the calls were most of its validation (py-spy: the loop in
        validate_op, 43 % of validate_ops under batches of 64 puts). Declared next to the
        check it answers for: a subclass overriding check() alone is called as before."""
        return CHECK_ABSENT

    def refuse_unknown(self, v: Any) -> None:
        """A request's check of the objects inside the field (a txn's compares, an append's
        events): 400 unknown_field for a key they do not know. Runs before check(), only
        for requests; anything that is not the right shape is left to check()."""

    def schema(self, limits: Limits, wire: str) -> Schema:
        """The field's own schema (the component's, when `component` is set)."""
        raise NotImplementedError

    def properties(self, limits: Limits, wire: str) -> dict[str, Schema]:
        prop = ref(self.component) if self.component else self.schema(limits, wire)
        return {self.name: prop}

    def requirement(self, wire: str) -> Schema | None:
        """How a required field is required: None for the object's plain `required` list."""
        return None

    def conditions(self, limits: Limits, wire: str) -> list[Schema]:
        """Extra `allOf` clauses of the enclosing object."""
        return []


class Namespace(Field):
    component = "Namespace"

    def check(self, v, limits, in_txn, out):
        if type(v) is str and 0 < len(v) <= MAX_NS_BYTES and v.isascii() and v.isprintable():
            return v  # the common case, cheaply (ASCII: one byte per char, no control char)
        if v is None:
            return out["ns"]  # the default: "default", or the txn's ns inside a txn
        if type(v) is not str:
            raise invalid(f"{self.name} must be a string")
        if not 1 <= len(utf8(v, self.name)) <= MAX_NS_BYTES:
            raise invalid(f"{self.name} must be 1..{MAX_NS_BYTES} UTF-8 bytes")
        if bad := _CONTROL_CHAR.search(v):
            raise invalid(
                f"{self.name} must not contain control characters (NUL, newline, escape...): "
                f"found U+{ord(bad.group()):04X} at character {bad.start()}"
            )
        return v

    def schema(self, limits, wire):
        return str_schema(
            f"Namespace of the key: 1..{MAX_NS_BYTES} UTF-8 bytes, no control characters "
            "(U+0000..U+001F, U+007F..U+009F).",
            minLength=1,
            maxLength=MAX_NS_BYTES,
            pattern=NO_CONTROL,
            default=DEFAULT_NS,
        )


class Key(Field):
    """A key or a range bound: at most limits.max_key_bytes UTF-8 bytes, no NUL."""

    def __init__(self, name, doc="", *, allow_empty=False, component=None, **kw) -> None:
        super().__init__(name, doc, **kw)
        self.allow_empty = allow_empty
        self.component = component

    def check(self, v, limits, in_txn, out):
        if (
            type(v) is str
            and 0 < len(v) <= limits.max_key_bytes
            and v.isascii()
            and "\x00" not in v
        ):
            return v  # the common case, cheaply (ASCII: one byte per char)
        if v is None and not self.required:
            return None
        return key_text(v, limits.max_key_bytes, self.name, allow_empty=self.allow_empty)

    def absent(self):
        return CHECK_ABSENT if self.required else None

    def schema(self, limits, wire):
        n = limits.max_key_bytes
        if self.allow_empty:
            return str_schema(self.doc, maxLength=n, pattern=NO_NUL_OR_EMPTY)
        return str_schema(
            f"Key: 1..max_key_bytes ({n} on this node) UTF-8 bytes, no NUL.",
            minLength=1,
            maxLength=n,
            pattern=NO_NUL,
        )


class IdempotencyKey(Field):
    component = "IdempotencyKey"

    def check(self, v, limits, in_txn, out):
        if v is None:
            if self.required:  # idempotency_status names the key it asks about
                raise invalid(f"{self.name} is required")
            return None
        if in_txn:
            raise invalid(self.txn_error)
        if type(v) is str and 0 < len(v) <= MAX_IDEMPOTENCY_KEY_CHARS and v.isascii():
            return v  # the common case, cheaply
        if type(v) is not str or not 1 <= len(v) <= MAX_IDEMPOTENCY_KEY_CHARS:
            raise invalid(f"{self.name} must be a string of 1..{MAX_IDEMPOTENCY_KEY_CHARS} chars")
        utf8(v, self.name)
        return v

    def absent(self):
        return CHECK_ABSENT if self.required else None

    def schema(self, limits, wire):
        return str_schema(self.doc, minLength=1, maxLength=MAX_IDEMPOTENCY_KEY_CHARS)


class Bytes(Field):
    """A value: bytes (JSON: text or base64), at most limits.max_value_bytes."""

    wired = True

    def check(self, v, limits, in_txn, out):
        if type(v) is bytes and len(v) <= limits.max_value_bytes:
            return v  # the common case, cheaply
        if type(v) is not bytes:
            if isinstance(v, bytearray | memoryview):
                v = bytes(v)
            else:
                raise invalid(f"{self.name} must be bytes")
        if len(v) > limits.max_value_bytes:
            raise OpError("value_too_large", self.too_large(limits))
        return v

    def too_large(self, limits: Limits) -> str:
        return f"{self.name} is larger than {limits.max_value_bytes} bytes"

    def properties(self, limits, wire):
        n = limits.max_value_bytes
        return value_props(wire, f"{self.doc}, at most max_value_bytes ({n} on this node)", n)

    def requirement(self, wire):
        return value_required(wire)


class Flag(Field):
    def check(self, v, limits, in_txn, out):
        if v is None:
            return False
        if type(v) is not bool:
            raise invalid(f"{self.name} must be a boolean")
        return v

    def absent(self):
        return False

    def schema(self, limits, wire):
        return bool_schema(self.doc, default=False)


class Revision(Field):
    def check(self, v, limits, in_txn, out):
        if v is None and not self.required:
            return None
        revision(v, self.name)
        if in_txn and self.txn_error:
            raise invalid(self.txn_error)
        return v

    def absent(self):
        return CHECK_ABSENT if self.required else None

    def schema(self, limits, wire):
        return rev_schema(self.doc)


class PageLimit(Field):
    """Kvs per page: a positive integer, DEFAULT_RANGE_LIMIT if absent, clamped to
    limits.max_range_limit."""

    def check(self, v, limits, in_txn, out):
        if v is None:
            v = DEFAULT_RANGE_LIMIT
        elif type(v) is not int or v < 1:
            raise invalid(f"{self.name} must be a positive integer")
        return min(v, limits.max_range_limit)

    def schema(self, limits, wire):
        return int_schema(
            f"{self.doc}; larger values are clamped to max_range_limit "
            f"({limits.max_range_limit} on this node).",
            minimum=1,
            default=DEFAULT_RANGE_LIMIT,
        )


class Continuation(Field):
    def check(self, v, limits, in_txn, out):
        if v is None:
            return None
        if in_txn:
            raise invalid(self.txn_error)
        decode_continuation(v, limits)
        return v

    def schema(self, limits, wire):
        return continuation_schema(self.doc, max_continuation_chars(limits))


def continuation_schema(doc: str, max_chars: int) -> Schema:
    return str_schema(
        f"{doc} URL-safe base64 without padding, at most {max_chars} chars; a string of that "
        f"shape that no previous page returned is refused with 400 `{INVALID_TOKEN}`.",
        minLength=1,
        maxLength=max_chars,
        pattern=TOKEN_PATTERN,
    )


class Expect(Field):
    """cas expectation: exactly one of {version: int}, {mod_revision: int}, {exists: false}."""

    component = "Expect"
    COUNTERS = {
        "version": "The key's version (0: missing).",
        "mod_revision": "The key's mod_revision (0: missing).",
    }
    MESSAGE = "expect must be exactly one of {version}, {mod_revision}, {exists: false}"

    def check(self, v, limits, in_txn, out):
        if not isinstance(v, dict) or len(v) != 1:
            raise invalid(self.MESSAGE)
        ((name, x),) = v.items()
        if name in self.COUNTERS:
            return {name: revision(x, f"{self.name}.{name}")}
        if name == "exists" and x is False:
            return {"exists": False}
        raise invalid(self.MESSAGE)

    def schema(self, limits, wire):
        def one(name: str, schema: Schema) -> Schema:
            return {**obj({name: schema}, (name,)), "additionalProperties": False}

        forms = [one(name, rev_schema(doc)) for name, doc in self.COUNTERS.items()]
        forms.append(one("exists", {"const": False, "description": "The key must not exist."}))
        return {"description": "cas expectation: exactly one of these.", "oneOf": forms}


class Choice(Field):
    """One of a fixed set of strings."""

    def __init__(
        self, name, choices: tuple[str, ...], *, what: str, default: str | None = None, **kw
    ) -> None:
        super().__init__(name, **kw)
        self.choices = choices
        self._set = frozenset(choices)
        self.what = what  # how the error message names the field
        self.default = default  # taken when absent (None: the field must be given)

    def check(self, v, limits, in_txn, out):
        if v is None and self.default is not None:
            return self.default
        if type(v) is not str or v not in self._set:
            raise invalid(f"{self.what} must be one of {sorted(self._set)}")
        return v

    def schema(self, limits, wire):
        s: Schema = {"type": "string", "enum": list(self.choices)}
        if self.doc:
            s["description"] = self.doc
        if self.default is not None:
            s["default"] = self.default
        return s


class CompareValue(Field):
    """A compare's operand, typed by the compare's `target` (checked before it)."""

    wired = True
    nullable = False  # required by the conditions, whatever the target
    COUNTERS = ("version", "mod_revision", "create_revision")
    EXISTS_OPS = ("==", "!=")

    def __init__(self, name, doc="", **kw) -> None:
        super().__init__(name, doc, **kw)
        self.as_bytes = Bytes(name, "the bytes to compare with")

    def check(self, v, limits, in_txn, out):
        target = out["target"]
        if target == "value":
            return self.as_bytes.check(v, limits, in_txn, out)
        if target == "exists":
            if type(v) is not bool or out["op"] not in self.EXISTS_OPS:
                raise invalid("an exists compare takes == or != and a boolean value")
        elif type(v) is not int or not -MAX_REVISION <= v <= MAX_REVISION:
            raise invalid(f"a {target} compare takes an integer value")
        return v

    def properties(self, limits, wire):
        # `value` is any of the three; the conditions below type it by `target`.
        props = value_props(wire, "the operand")
        props["value"] = {"description": self.doc}
        return props

    def conditions(self, limits, wire):
        def when(target: Schema, then: Schema) -> Schema:
            return {"if": {"properties": {"target": target}}, "then": then}

        bounds = {"minimum": -MAX_REVISION, "maximum": MAX_REVISION}
        as_bytes = bytes_schema(wire, self.as_bytes.doc, maxLength=limits.max_value_bytes)
        return [
            when(
                {"const": "exists"},
                {
                    "properties": {
                        "op": {"enum": list(self.EXISTS_OPS)},
                        "value": {"type": "boolean"},
                    },
                    "required": [self.name],
                },
            ),
            when(
                {"enum": list(self.COUNTERS)},
                {"properties": {"value": {"type": "integer", **bounds}}, "required": [self.name]},
            ),
            when({"const": "value"}, {"properties": {"value": as_bytes}, **value_required(wire)}),
        ]
