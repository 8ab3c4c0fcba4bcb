"""Validation of CRDT states (client/crdt/model.py's check and decode): shape, field
types, canonical form (sorted dots, compacted orset context, sorted mvreg entries),
invariants (every live dot is in the causal context, no dominated mvreg entry, every
present ormap key has a value) and the limits of client/crdt/leaves.py.

Pure (no I/O, no clock, no random). Consistency, outcomes, key layout and chaos coverage:
see client/crdt/model.py. Every violation raises CrdtError("invalid_argument", what is
wrong), a 400 on the node, before anything is merged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from statekeeper.client.crdt.leaves import (
    INT64_MAX,
    MAX_COUNT,
    MAX_DEPTH,
    MAX_DOTS,
    MAX_ELEMENTS,
    MAX_MV_VALUES,
    TYPES,
    check_elem,
    check_fields,
    check_int,
    check_list,
    check_map,
    check_replica_id,
    check_value,
    check_version_vector,
    dominated,
    dot_seen,
    invalid,
    pack_canonical,
)


def _g_check(s: Any, depth: int) -> None:
    check_version_vector(s, 1, MAX_COUNT, "gcounter")


def _pn_check(s: Any, depth: int) -> None:
    check_fields(s, ("p", "n"), "pncounter")
    check_version_vector(s["p"], 1, MAX_COUNT, "pncounter p")
    check_version_vector(s["n"], 1, MAX_COUNT, "pncounter n")


def _sorted_dots(x: Any, what: str, rids: set[str]) -> list:
    """A strictly sorted list of dots [rid, n]; ``rids`` caches the ids already valid."""
    dots = check_list(x, MAX_DOTS, what)
    prev = None
    for d in dots:
        if type(d) is not list or len(d) != 2:
            raise invalid(f"{what}: a dot must be [replica_id, n]")
        r, n = d
        if type(r) is not str or r not in rids:
            rids.add(check_replica_id(r, f"{what}: dot replica id"))
        if type(n) is not int or not 1 <= n <= INT64_MAX:
            check_int(n, 1, INT64_MAX, f"{what}: dot counter")
        if prev is not None and not prev < d:
            raise invalid(f"{what} must be sorted and without duplicates")
        prev = d
    return dots


def _os_check(s: Any, depth: int, str_only: bool = False) -> None:
    check_fields(s, ("e", "c", "d"), "orset")
    c = check_version_vector(s["c"], 1, INT64_MAX, "orset context c")
    rids = set(c)
    cloud = set()
    for r, n in _sorted_dots(s["d"], "orset context d", rids):
        if n <= c.get(r, 0) + 1:
            raise invalid("orset context d holds a dot not beyond c + 1 (not compacted)")
        cloud.add((r, n))
    total = len(cloud)
    for e, dots in check_map(s["e"], MAX_ELEMENTS, "orset elements").items():
        check_elem(e, str_only)
        _sorted_dots(dots, "orset element dots", rids)
        if not dots:
            raise invalid(f"orset element {e!r:.60} has no dots")
        total += len(dots)
        if total > MAX_DOTS:
            raise invalid(f"orset has more than {MAX_DOTS} dots")
        for r, n in dots:
            if not dot_seen(c, cloud, r, n):
                raise invalid(f"orset element {e!r:.60}: dot {[r, n]} is not in the context")


def _lww_check(s: Any, depth: int) -> None:
    check_fields(s, ("v", "t", "r"), "lwwreg")
    check_int(s["t"], 0, INT64_MAX, "lwwreg t")
    check_value(s["v"])
    if s["r"] == "":
        if s["t"] != 0 or s["v"] is not None:
            raise invalid('lwwreg with r "" (never set) must have t 0 and v None')
    else:
        check_replica_id(s["r"], "lwwreg r")


def _mv_check(s: Any, depth: int) -> None:
    check_fields(s, ("vals",), "mvreg")
    vals = check_list(s["vals"], MAX_MV_VALUES, "mvreg vals")
    prev = b""
    for e in vals:
        if type(e) is not list or len(e) != 2:
            raise invalid("mvreg entry must be [value, version_vector]")
        check_value(e[0])
        if not check_version_vector(e[1], 1, INT64_MAX, "mvreg version vector"):
            raise invalid("mvreg version vector must not be empty")
        packed = pack_canonical(e)
        if packed <= prev:
            raise invalid("mvreg entries must be sorted by encoding and without duplicates")
        prev = packed
    for e in vals:
        if any(dominated(e[1], o[1]) for o in vals):
            raise invalid("mvreg holds an entry dominated by another (not merged)")


def _om_check(s: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise invalid(f"ormap nested deeper than {MAX_DEPTH} levels")
    check_fields(s, ("keys", "vals"), "ormap")
    _os_check(s["keys"], depth, str_only=True)
    vals = check_map(s["vals"], MAX_ELEMENTS, "ormap vals")
    for k, entry in vals.items():
        check_elem(k, str_only=True)
        if type(entry) is not list or len(entry) != 2 or entry[0] not in TYPES:
            raise invalid(f"ormap value of {k!r:.60} must be [type, state], type one of {TYPES}")
        _CHECK[entry[0]](entry[1], depth + 1)
    for k in s["keys"]["e"]:
        if k not in vals:
            raise invalid(f"ormap key {k!r:.60} is present without a value")


_CHECK: Final[dict[str, Callable[[Any, int], None]]] = {
    "gcounter": _g_check, "pncounter": _pn_check, "orset": _os_check,
    "lwwreg": _lww_check, "mvreg": _mv_check, "ormap": _om_check,
}  # fmt: skip


def check_state(t: str, state: Any, depth: int = 1) -> None:
    """Validate a state of the known type ``t`` nested ``depth`` ormaps deep (1: top)."""
    _CHECK[t](state, depth)
