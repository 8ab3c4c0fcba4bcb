"""Leaves of the CRDT model (client/crdt/model.py): limits, CrdtError, the canonical msgpack
form and the validation of replica ids, elements, register values and version vectors.

Pure (stdlib + msgpack, no I/O, no clock, no random). Consistency, outcomes, key layout and
chaos coverage: see client/crdt/model.py; this module only validates and encodes. Limits
(each violation: CrdtError("invalid_argument"), 400 on the node) are the MAX_* below.
"""

from __future__ import annotations

import math
from typing import Any, Final

import msgpack

TYPES: Final = ("gcounter", "pncounter", "orset", "lwwreg", "mvreg", "ormap")
MAX_REPLICA_ID_CHARS: Final = 128
MAX_REPLICAS: Final = 4096
MAX_COUNT: Final = (2**63 - 1) // MAX_REPLICAS
MAX_ELEMENTS: Final = 65536
MAX_DOTS: Final = 4 * MAX_ELEMENTS
MAX_ELEM_BYTES: Final = 4096
MAX_MV_VALUES: Final = 128
MAX_DEPTH: Final = 4
MAX_VALUE_DEPTH: Final = 32
MAX_STATE_BYTES: Final = 64 * 1024 * 1024
INT64_MAX: Final = 2**63 - 1
_INT_MIN: Final = -(2**63)
_UINT_MAX: Final = 2**64 - 1
_RANK: Final = {int: 0, str: 1, bytes: 2}

State = Any
Elem = str | int | bytes


class CrdtError(Exception):
    """Bad input to the model: ``code`` is "invalid_argument", ``message`` says what."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def invalid(message: str) -> CrdtError:
    return CrdtError("invalid_argument", message)


def _key(x: Elem) -> tuple[int, Elem]:
    return (_RANK[type(x)], x)


def sorted_keys(d: dict | list) -> list:
    """Keys in canonical order (ints < strs < bytes); one type sorts natively (fast)."""
    try:
        return sorted(d)
    except TypeError:
        return sorted(d, key=_key)


def canonical(x: Any) -> Any:
    """``x`` with every map's keys in canonical order (and tuples as lists)."""
    if isinstance(x, dict):
        return {k: canonical(x[k]) for k in sorted_keys(x)}
    if isinstance(x, list | tuple):
        return [canonical(v) for v in x]
    return x


def pack_canonical(x: Any) -> bytes:
    return msgpack.packb(canonical(x), use_bin_type=True)


def _utf8(s: str, what: str) -> int:
    try:
        return len(s.encode("utf-8"))
    except UnicodeEncodeError:
        raise invalid(f"{what} is not valid unicode") from None


def check_int(x: Any, lo: int, hi: int, what: str) -> int:
    if type(x) is not int or not lo <= x <= hi:
        raise invalid(f"{what} must be an integer in {lo}..{hi}, got {x!r:.60}")
    return x


def check_replica_id(r: Any, what: str = "replica id") -> str:
    if type(r) is not str or not 1 <= len(r) <= MAX_REPLICA_ID_CHARS:
        raise invalid(f"{what} must be a string of 1..{MAX_REPLICA_ID_CHARS} chars, got {r!r:.60}")
    _utf8(r, what)
    return r


def check_elem(e: Any, str_only: bool = False) -> Elem:
    kind = type(e)
    if kind is int and not str_only:
        check_int(e, _INT_MIN, INT64_MAX, "an integer element")
    elif kind is str:
        if _utf8(e, "element") > MAX_ELEM_BYTES:
            raise invalid(f"element longer than {MAX_ELEM_BYTES} bytes")
    elif kind is bytes and not str_only:
        if len(e) > MAX_ELEM_BYTES:
            raise invalid(f"element longer than {MAX_ELEM_BYTES} bytes")
    else:
        allowed = "str" if str_only else "str, int or bytes"
        raise invalid(f"element must be {allowed}, got {kind.__name__}")
    return e


def check_value(v: Any, depth: int = 0, fix: bool = False) -> Any:
    """Validate a register value; with ``fix``, return it with tuples made lists."""
    if depth > MAX_VALUE_DEPTH:
        raise invalid(f"value nested deeper than {MAX_VALUE_DEPTH}")
    kind = type(v)
    if v is None or kind is bool or kind is bytes:
        return v
    if kind is int:
        return check_int(v, _INT_MIN, _UINT_MAX, "an integer value")
    if kind is float:
        if math.isnan(v):
            raise invalid("NaN is not a register value")
        return v
    if kind is str:
        _utf8(v, "value")
        return v
    if kind is list or (fix and kind is tuple):
        if fix:
            return [check_value(x, depth + 1, fix) for x in v]
        for x in v:
            check_value(x, depth + 1)
        return v
    if kind is dict:
        for k in v:
            if type(k) is not str:
                raise invalid(f"value map keys must be str, got {type(k).__name__}")
            _utf8(k, "value map key")
        if fix:
            return {k: check_value(x, depth + 1, fix) for k, x in v.items()}
        for x in v.values():
            check_value(x, depth + 1)
        return v
    raise invalid(f"{kind.__name__} is not a msgpack value")


def check_fields(s: Any, names: tuple[str, ...], t: str) -> None:
    if type(s) is not dict or len(s) != len(names) or any(n not in s for n in names):
        raise invalid(f"{t} state must be a map with exactly the fields {', '.join(names)}")


def check_map(x: Any, limit: int, what: str) -> dict:
    if type(x) is not dict:
        raise invalid(f"{what} must be a map")
    if len(x) > limit:
        raise invalid(f"{what} has {len(x)} entries; the limit is {limit}")
    return x


def check_list(x: Any, limit: int, what: str) -> list:
    if type(x) is not list:
        raise invalid(f"{what} must be a list")
    if len(x) > limit:
        raise invalid(f"{what} has {len(x)} entries; the limit is {limit}")
    return x


def check_version_vector(x: Any, lo: int, hi: int, what: str) -> dict[str, int]:
    for r, n in check_map(x, MAX_REPLICAS, what).items():
        check_replica_id(r, f"{what} replica id")
        check_int(n, lo, hi, f"{what}[{r!r}]")
    return x


def check_merged_size(n: int, limit: int, what: str) -> None:
    if n > limit:
        raise invalid(f"merged {what} would have {n} entries; the limit is {limit}")


def dot_seen(c: dict, cloud: set, r: str, n: int) -> bool:
    """Whether the causal context (version vector ``c``, dots ``cloud``) holds dot (r, n)."""
    return n <= c.get(r, 0) or (r, n) in cloud


def dominated(x: dict, y: dict) -> bool:
    """Version vector ``x`` < ``y``: every entry <= and not equal."""
    return x != y and all(n <= y.get(r, 0) for r, n in x.items())
