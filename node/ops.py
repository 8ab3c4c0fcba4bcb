"""Validation and normalization of protocol ops (docs/protocol.md, "Ops").

`validate_op` checks one op dict and returns a new dict holding only the known
fields, with every default filled in; unknown fields are dropped. It is
idempotent (`validate_op(validate_op(x)) == validate_op(x)`), so the HTTP layer
can validate before submitting and the state machine can validate again inside
apply (entries must never be trusted blindly: a failed check there becomes a
deterministic error result instead of a crash).

Values must already be `bytes` (the HTTP layer decodes JSON strings / base64);
`ns`, `key` and range bounds are `str`.

Normalized shapes (`idempotency_key` is None when absent):

    put     {op, ns, key, value, prev_kv, idempotency_key}
    delete  {op, ns, key, prefix, prev_kv, idempotency_key}
    cas     {op, ns, key, value, expect, idempotency_key}
            expect is exactly one of {version: int} {mod_revision: int} {exists: False}
    txn     {op, ns, compare: [cmp], success: [op], failure: [op], idempotency_key}
            cmp = {ns, key, target, op, value}
    compact {op, revision, idempotency_key}
    get     {op, ns, key, revision}
    range   {op, ns, prefix, start, end, limit, continuation, revision, keys_only}

A range `continuation` is an opaque string that encodes (revision, next key):
the caller passes it back together with the same ns/prefix/start/end, and the
next page is served at the revision of the first page.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

import msgpack

from node.config import Limits
from node.errors import OpError

WRITE_OPS = frozenset({"put", "delete", "cas", "txn", "compact"})
READ_OPS = frozenset({"get", "range"})
ALL_OPS = WRITE_OPS | READ_OPS
TXN_BRANCH_OPS = frozenset({"put", "delete", "get", "range"})
CMP_TARGETS = frozenset({"version", "mod_revision", "create_revision", "value", "exists"})
CMP_OPS = frozenset({"==", "!=", "<", ">"})

DEFAULT_NS = "default"
DEFAULT_RANGE_LIMIT = 1000
MAX_NS_BYTES = 255
MAX_IDEMPOTENCY_KEY_CHARS = 256
MAX_REVISION = 2**63 - 1


def is_write(op: dict) -> bool:
    """True for ops that must go through raft (txn counts even if read-only)."""
    return op.get("op") in WRITE_OPS


def _invalid(message: str) -> OpError:
    return OpError("invalid_argument", message)


def _ns(op: dict, default: str) -> str:
    ns = op.get("ns")
    if ns is None:
        return default
    if type(ns) is not str:
        raise _invalid("ns must be a string")
    if "\x00" in ns:
        raise _invalid("ns must not contain NUL")
    n = len(_utf8(ns, "ns"))
    if not 1 <= n <= MAX_NS_BYTES:
        raise _invalid(f"ns must be 1..{MAX_NS_BYTES} UTF-8 bytes")
    return ns


def _utf8(s: str, name: str) -> bytes:
    try:
        return s.encode()
    except UnicodeEncodeError:
        raise _invalid(f"{name} is not valid unicode (lone surrogate?)") from None


def _key_str(value: Any, limits: Limits, name: str, *, allow_empty: bool = False) -> str:
    if type(value) is not str:
        raise _invalid(f"{name} must be a string")
    if not value and not allow_empty:
        raise _invalid(f"{name} must not be empty")
    if "\x00" in value:
        raise _invalid(f"{name} must not contain NUL")
    # Cheap bound first: a str never has more UTF-8 bytes than 4 per char.
    if len(value) * 4 > limits.max_key_bytes and len(_utf8(value, name)) > limits.max_key_bytes:
        raise OpError("key_too_large", f"{name} is longer than {limits.max_key_bytes} bytes")
    if not value.isascii():
        _utf8(value, name)
    return value


def _key(op: dict, limits: Limits) -> str:
    return _key_str(op.get("key"), limits, "key")


def _value(op: dict, limits: Limits, name: str = "value") -> bytes:
    v = op.get(name)
    if type(v) is not bytes:
        if isinstance(v, bytearray | memoryview):
            v = bytes(v)
        else:
            raise _invalid(f"{name} must be bytes")
    if len(v) > limits.max_value_bytes:
        raise OpError("value_too_large", f"{name} is larger than {limits.max_value_bytes} bytes")
    return v


def _flag(op: dict, name: str) -> bool:
    v = op.get(name)
    if v is None:
        return False
    if type(v) is not bool:
        raise _invalid(f"{name} must be a boolean")
    return v


def _revision(v: Any, name: str = "revision", *, optional: bool = True) -> int | None:
    if v is None and optional:
        return None
    if type(v) is not int or not 0 <= v <= MAX_REVISION:
        raise _invalid(f"{name} must be a non-negative integer")
    return v


def _idempotency_key(op: dict, in_txn: bool) -> str | None:
    ik = op.get("idempotency_key")
    if ik is None:
        return None
    if in_txn:
        raise _invalid("ops inside a txn take no idempotency_key (give it to the txn)")
    if type(ik) is not str or not 1 <= len(ik) <= MAX_IDEMPOTENCY_KEY_CHARS:
        raise _invalid(f"idempotency_key must be a string of 1..{MAX_IDEMPOTENCY_KEY_CHARS} chars")
    _utf8(ik, "idempotency_key")
    return ik


def _put(op: dict, limits: Limits, in_txn: bool, ns_default: str) -> dict:
    return {
        "op": "put",
        "ns": _ns(op, ns_default),
        "key": _key(op, limits),
        "value": _value(op, limits),
        "prev_kv": _flag(op, "prev_kv"),
        "idempotency_key": _idempotency_key(op, in_txn),
    }


def _delete(op: dict, limits: Limits, in_txn: bool, ns_default: str) -> dict:
    return {
        "op": "delete",
        "ns": _ns(op, ns_default),
        "key": _key(op, limits),
        "prefix": _flag(op, "prefix"),
        "prev_kv": _flag(op, "prev_kv"),
        "idempotency_key": _idempotency_key(op, in_txn),
    }


def _expect(raw: Any) -> dict:
    if not isinstance(raw, dict) or len(raw) != 1:
        raise _invalid("expect must be exactly one of {version}, {mod_revision}, {exists: false}")
    ((name, v),) = raw.items()
    if name in ("version", "mod_revision"):
        return {name: _revision(v, f"expect.{name}", optional=False)}
    if name == "exists" and v is False:
        return {"exists": False}
    raise _invalid("expect must be exactly one of {version}, {mod_revision}, {exists: false}")


def _cas(op: dict, limits: Limits, in_txn: bool, ns_default: str) -> dict:
    return {
        "op": "cas",
        "ns": _ns(op, ns_default),
        "key": _key(op, limits),
        "value": _value(op, limits),
        "expect": _expect(op.get("expect")),
        "idempotency_key": _idempotency_key(op, in_txn),
    }


def _compact(op: dict, limits: Limits, in_txn: bool, ns_default: str) -> dict:
    return {
        "op": "compact",
        "revision": _revision(op.get("revision"), optional=False),
        "idempotency_key": _idempotency_key(op, in_txn),
    }


def _get(op: dict, limits: Limits, in_txn: bool, ns_default: str) -> dict:
    revision = _revision(op.get("revision"))
    if in_txn and revision is not None:
        raise _invalid("reads inside a txn see the txn's own revision; revision is not allowed")
    return {"op": "get", "ns": _ns(op, ns_default), "key": _key(op, limits), "revision": revision}


def _optional_bound(op: dict, name: str, limits: Limits) -> str | None:
    v = op.get(name)
    if v is None:
        return None
    return _key_str(v, limits, name, allow_empty=True)


def _range(op: dict, limits: Limits, in_txn: bool, ns_default: str) -> dict:
    prefix = _optional_bound(op, "prefix", limits)
    start = _optional_bound(op, "start", limits)
    end = _optional_bound(op, "end", limits)
    if prefix is not None and (start is not None or end is not None):
        raise _invalid("give either prefix or start/end, not both")
    limit = op.get("limit")
    if limit is None:
        limit = DEFAULT_RANGE_LIMIT
    elif type(limit) is not int or limit < 1:
        raise _invalid("limit must be a positive integer")
    revision = _revision(op.get("revision"))
    continuation = op.get("continuation")
    if continuation is not None:
        if in_txn:
            raise _invalid("continuation is not allowed inside a txn")
        cont_rev, _ = decode_continuation(continuation, limits)
        if revision is not None and revision != cont_rev:
            raise _invalid("revision does not match the continuation's revision")
    if in_txn and revision is not None:
        raise _invalid("reads inside a txn see the txn's own revision; revision is not allowed")
    return {
        "op": "range",
        "ns": _ns(op, ns_default),
        "prefix": prefix,
        "start": start,
        "end": end,
        "limit": min(limit, limits.max_range_limit),
        "continuation": continuation,
        "revision": revision,
        "keys_only": _flag(op, "keys_only"),
    }


def _compare(raw: Any, limits: Limits, ns_default: str) -> dict:
    if not isinstance(raw, dict):
        raise _invalid("each compare must be an object")
    target = raw.get("target")
    cmp_op = raw.get("op")
    if target not in CMP_TARGETS:
        raise _invalid(f"compare target must be one of {sorted(CMP_TARGETS)}")
    if cmp_op not in CMP_OPS:
        raise _invalid(f"compare op must be one of {sorted(CMP_OPS)}")
    value = raw.get("value")
    if target == "value":
        value = _value(raw, limits)
    elif target == "exists":
        if type(value) is not bool or cmp_op not in ("==", "!="):
            raise _invalid("an exists compare takes == or != and a boolean value")
    elif type(value) is not int or not -MAX_REVISION <= value <= MAX_REVISION:
        raise _invalid(f"a {target} compare takes an integer value")
    return {
        "ns": _ns(raw, ns_default),
        "key": _key(raw, limits),
        "target": target,
        "op": cmp_op,
        "value": value,
    }


def _branch(raw: Any, name: str, limits: Limits, ns: str) -> list[dict]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _invalid(f"txn {name} must be a list of ops")
    ops = []
    for i, op in enumerate(raw):
        try:
            ops.append(validate_op(op, limits, in_txn=True, ns_default=ns))
        except OpError as e:
            raise _prefixed(e, f"{name}[{i}]") from None
    _check_disjoint_writes(ops, name)
    return ops


def _check_disjoint_writes(ops: list[dict], name: str) -> None:
    """One txn may not write a key twice (that includes overlapping prefix deletes)."""
    keys: set[tuple[str, str]] = set()
    prefixes: list[tuple[str, str]] = []
    for op in ops:
        if op["op"] == "put" or (op["op"] == "delete" and not op["prefix"]):
            k = (op["ns"], op["key"])
            if k in keys:
                raise _invalid(f"txn {name} writes key {op['key']!r} twice")
            keys.add(k)
        elif op["op"] == "delete":
            prefixes.append((op["ns"], op["key"]))
    for i, (ns, p) in enumerate(prefixes):
        for ns2, p2 in prefixes[i + 1 :]:
            if ns == ns2 and (p.startswith(p2) or p2.startswith(p)):
                raise _invalid(f"txn {name} deletes overlapping prefixes {p!r} and {p2!r}")
        for ns2, k in keys:
            if ns == ns2 and k.startswith(p):
                raise _invalid(f"txn {name} writes {k!r}, also deleted by prefix {p!r}")


def _txn(op: dict, limits: Limits, in_txn: bool, ns_default: str) -> dict:
    if in_txn:
        raise _invalid("txns cannot be nested")
    ns = _ns(op, ns_default)
    compare = op.get("compare")
    if compare is None:
        compare = []
    elif not isinstance(compare, list):
        raise _invalid("txn compare must be a list")
    n = len(compare)
    for name in ("success", "failure"):
        branch = op.get(name)
        n += len(branch) if isinstance(branch, list) else 0
    if n > limits.max_ops_per_request:
        raise OpError(
            "too_many_ops", f"txn has {n} compares and ops, max {limits.max_ops_per_request}"
        )
    cmps = []
    for i, c in enumerate(compare):
        try:
            cmps.append(_compare(c, limits, ns))
        except OpError as e:
            raise _prefixed(e, f"compare[{i}]") from None
    return {
        "op": "txn",
        "ns": ns,
        "compare": cmps,
        "success": _branch(op.get("success"), "success", limits, ns),
        "failure": _branch(op.get("failure"), "failure", limits, ns),
        "idempotency_key": _idempotency_key(op, in_txn),
    }


_VALIDATORS: dict[str, Callable[[dict, Limits, bool, str], dict]] = {
    "put": _put,
    "delete": _delete,
    "cas": _cas,
    "txn": _txn,
    "compact": _compact,
    "get": _get,
    "range": _range,
}


def validate_op(
    op: Any, limits: Limits, *, in_txn: bool = False, ns_default: str = DEFAULT_NS
) -> dict:
    """Check one op and return its normalized form, or raise OpError."""
    if not isinstance(op, dict):
        raise _invalid("an op must be an object")
    name = op.get("op")
    validator = _VALIDATORS.get(name) if type(name) is str else None
    if validator is None:
        raise OpError("unknown_op", f"unknown op {name!r}")
    if in_txn and name not in TXN_BRANCH_OPS:
        if name == "txn":
            raise _invalid("txns cannot be nested")
        raise _invalid(f"{name} is not allowed inside a txn (only put, delete, get, range)")
    return validator(op, limits, in_txn, ns_default)


def validate_ops(ops: Any, limits: Limits) -> list[dict]:
    """Validate a batch: all ops or nothing (the first bad op raises)."""
    if not isinstance(ops, list):
        raise _invalid("ops must be a list")
    if len(ops) > limits.max_ops_per_request:
        raise OpError("too_many_ops", f"{len(ops)} ops, max {limits.max_ops_per_request}")
    out = []
    for i, op in enumerate(ops):
        try:
            out.append(validate_op(op, limits))
        except OpError as e:
            raise _prefixed(e, f"ops[{i}]") from None
    return out


def _prefixed(e: OpError, where: str) -> OpError:
    return OpError(e.code, f"{where}: {e.message}", **e.extra)


def encode_continuation(revision: int, key: str) -> str:
    """Opaque page token: the revision the pages are served at and the next key."""
    raw = msgpack.packb([revision, key], use_bin_type=True)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_continuation(token: Any, limits: Limits) -> tuple[int, str]:
    """Inverse of encode_continuation; raises invalid_argument for anything else."""
    if type(token) is not str or not token or len(token) > 4 * limits.max_key_bytes + 64:
        raise _invalid("continuation must be a token returned by a previous range")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        rev, key = msgpack.unpackb(raw, raw=False)
    except (binascii.Error, ValueError, TypeError, msgpack.UnpackException):
        raise _invalid("continuation is not a valid token") from None
    if type(rev) is not int or not 0 <= rev <= MAX_REVISION:
        raise _invalid("continuation is not a valid token")
    return rev, _key_str(key, limits, "continuation key")
