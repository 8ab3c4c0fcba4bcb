"""The pure CRDT model: each type's state, update operations, merge, value and codec.

Used by the node's ``merge`` op (node/store/crdt.py folds a delta or a full state into the
stored one in apply) and by the client's local replicas. Stdlib + msgpack only: no I/O, no
clock, no random; replica ids and timestamps are passed in. States are plain data (dict,
list, str, int, bytes), immutable by convention: no function mutates its arguments, and
merge may return one of them unchanged. Update operations return a DELTA, a small state
that ``merge`` folds in (locally: ``state = merge(T, state, delta)``; the delta is also
what a replica ships).

Consistency: strong eventual consistency. merge is a join (commutative, associative,
idempotent), so replicas that have merged the same deltas/states, in any order and any
number of times, hold the same state (byte for byte) and the same value. Outcomes: the
model has no ok/failed/unknown of its own; a retried or repeated merge of the same delta
changes nothing, so a write whose outcome is unknown is retried by merging again.

Types (wire names in ``TYPES``) and their canonical state shapes:

- ``gcounter`` ``{rid: count}`` (count >= 1; absent = 0). merge: max per replica. value:
  the sum. Grows with the number of replicas that ever incremented.
- ``pncounter`` ``{"p": gcounter, "n": gcounter}``. value: sum(p) - sum(n).
- ``orset`` ``{"e": {elem: [dot, ...]}, "c": {rid: n}, "d": [dot, ...]}``, a delta-state
  add-wins observed-remove set (Almeida et al., "Delta state replicated data types").
  A dot is ``[rid, n]``, the n-th event of replica rid. ``"e"`` maps each present
  element to its live dots (sorted). The causal context (every dot this state has seen)
  is ``"c"`` (rid -> n: dots 1..n all seen) plus ``"d"``, the sorted dots seen beyond
  a gap (always compacted: a dot n <= c[rid] + 1 is folded into ``"c"``). add(e) makes a
  new dot and its delta's context holds the dots of e it observed, so they are replaced;
  remove(e) is a delta of an empty store whose context holds exactly the dots of e
  observed, so it removes only those: an add concurrent with a remove (a dot the remover
  had not seen) survives: add wins. Removing an element never added is a no-op. merge
  keeps a dot if both sides hold it or the other side has not seen it, and unions the
  contexts. No tombstone per removed element: removed elements leave only their dots in
  the context, which stays one counter per replica (plus gaps while deltas arrive out of
  order). Grows with the live elements and the replicas that ever added.
  elem: str | bytes (<= MAX_ELEM_BYTES) or int (64-bit); bool is not an element.
- ``lwwreg`` ``{"v": value, "t": t, "r": rid}``; empty: ``{"v": None, "t": 0, "r": ""}``.
  merge keeps the write with the larger (t, rid): equal timestamps are broken by replica
  id (then, for identical (t, rid) from a misbehaving replica, by the value's encoding).
  ``lwwreg_set`` bumps t to (observed t) + 1 when the given t is not later, so a write
  always beats what its replica had seen. LWW needs roughly synchronized clocks.
- ``mvreg`` ``{"vals": [[value, vv], ...]}``, a multi-value register: each write carries a
  version vector ``vv`` ({rid: n}) that dominates every vv it observed; merge keeps the
  entries not strictly dominated by another, so concurrent writes are all kept and the
  next write (which observed them) replaces them. value: the sorted distinct values.
  Entries are sorted by their canonical encoding. Grows with concurrent writers.
- ``ormap`` ``{"keys": orset of str keys, "vals": {key: [T, state]}}``. value: ``{key:
  value(T, state)}`` for present keys. ``ormap_update`` adds the key (a fresh dot, so an
  update concurrent with a remove wins) and folds the nested delta; ``ormap_remove``
  removes the key's observed dots. Removal hides the key; its nested state stays in
  ``"vals"`` (a tombstone the size of that state) so that concurrent nested updates still
  merge correctly: there is NO reset, an update after a remove resumes from the merged
  nested state (a counter continues from its old count). A key's type is fixed: updating
  it with another type is an error; if two replicas concurrently create a key with
  different types, merge keeps the type whose name sorts first (the other is dropped).
  Nested ormaps: at most MAX_DEPTH levels. Grows with every key ever updated.

Register values (lwwreg, mvreg): msgpack data only, i.e. None, bool, int (64-bit), float
(not NaN), str, bytes, lists and maps with str keys, nested at most MAX_VALUE_DEPTH deep
(tuples are turned into lists by the setters).

Canonical encoding: msgpack (bin type for bytes) of the state with every map's keys
sorted (ints < strs < bytes, each by natural order) and every list in its canonical order
(dots sorted, orset context compacted, mvreg entries sorted by their encoding). check()
enforces canonical form, merge produces it, so equal states encode to equal bytes. Compare
states by encode() bytes: Python's == conflates 1, 1.0 and True.

Limits (every violation: CrdtError code "invalid_argument", 400 on the node): replica id
1..MAX_REPLICA_ID_CHARS (128) chars; MAX_REPLICAS (4096) entries per counter / version
vector / context; count per replica <= MAX_COUNT (2**51 - 1, so any counter's value fits
in 64 bits); dot counters and timestamps < 2**63; MAX_ELEMENTS (65536) elements or map
keys; MAX_DOTS dots per orset; MAX_MV_VALUES (128) concurrent mvreg values; ormap nesting
MAX_DEPTH (4) levels; register values MAX_VALUE_DEPTH (32) deep; decode input at most
MAX_STATE_BYTES (the node's max_value_bytes, 1 MiB by default, is lower). merge raises
the same error when its result would exceed a limit (the node then stores nothing).
Costs (CPython 3.11, a 2-core test VM): merge is O(|a| + |b|): a pncounter of 1,000
replicas ~0.05-0.1 ms; a delta into an orset of 10,000 elements ~2-10 ms; decode (which
checks) is linear, ~20-80 ms for that orset (167 kB).

A replica id must not be reused with a state older than what it already shipped (e.g. a
replica file restored from a backup): its new dots / counts would collide with the old.

Layout: this module holds the types and the API; client/crdt/leaves.py the limits,
CrdtError, canonical packing and leaf validation; client/crdt/checks.py the validation
of whole states. Import everything from here. Key layout: none (pure data; the node
stores the encoded state as the key's kv value). Chaos coverage: the CRDT workload
(chaos/crdt_workload.py) drives this model through the client's replicas and the node's
merge; tests/unit/test_crdt_laws.py checks the laws with hypothesis.
"""

from __future__ import annotations

from typing import Any, Final

import msgpack

from statekeeper.client.crdt.checks import check_state
from statekeeper.client.crdt.leaves import (
    INT64_MAX,
    MAX_COUNT,
    MAX_DEPTH,
    MAX_DOTS,
    MAX_ELEM_BYTES,
    MAX_ELEMENTS,
    MAX_MV_VALUES,
    MAX_REPLICA_ID_CHARS,
    MAX_REPLICAS,
    MAX_STATE_BYTES,
    MAX_VALUE_DEPTH,
    TYPES,
    CrdtError,
    Elem,
    State,
    canonical,
    check_elem,
    check_int,
    check_merged_size,
    check_replica_id,
    check_value,
    dominated,
    dot_seen,
    invalid,
    pack_canonical,
    sorted_keys,
)

__all__ = [
    "MAX_COUNT", "MAX_DEPTH", "MAX_DOTS", "MAX_ELEMENTS", "MAX_ELEM_BYTES", "MAX_MV_VALUES",
    "MAX_REPLICAS", "MAX_REPLICA_ID_CHARS", "MAX_STATE_BYTES", "MAX_VALUE_DEPTH", "TYPES",
    "CrdtError", "check", "decode", "empty", "encode", "gcounter_inc", "lwwreg_set",
    "merge", "mvreg_set", "ormap_get", "ormap_remove", "ormap_update", "orset_add",
    "orset_remove", "pncounter_add", "value",
]  # fmt: skip


# ---- counters ----------------------------------------------------------------------


def _g_merge(a: dict, b: dict) -> dict:
    if len(b) > len(a):
        a, b = b, a
    out = None
    for r, n in b.items():
        if n > a.get(r, 0):
            if out is None:
                out = dict(a)
            out[r] = n
    if out is None:
        return a
    check_merged_size(len(out), MAX_REPLICAS, "gcounter")
    return out


def _pn_merge(a: dict, b: dict) -> dict:
    p, n = _g_merge(a["p"], b["p"]), _g_merge(a["n"], b["n"])
    if p is a["p"] and n is a["n"]:
        return a
    return {"p": p, "n": n}


def gcounter_inc(state: State, rid: str, n: int = 1) -> State:
    """Delta adding ``n`` >= 1 at replica ``rid``."""
    check_replica_id(rid)
    check_int(n, 1, MAX_COUNT, "increment")
    total = state.get(rid, 0) + n
    if total > MAX_COUNT:
        raise invalid(f"replica {rid!r}'s count would exceed {MAX_COUNT}")
    return {rid: total}


def pncounter_add(state: State, rid: str, n: int) -> State:
    """Delta adding ``n`` != 0 (negative: a decrement) at replica ``rid``."""
    check_int(n, -MAX_COUNT, MAX_COUNT, "amount")
    if n == 0:
        raise invalid("amount must not be 0")
    side = "p" if n > 0 else "n"
    out = {"p": {}, "n": {}}
    out[side] = gcounter_inc(state[side], rid, abs(n))
    return out


# ---- orset -------------------------------------------------------------------------


def _compact(c: dict, dots: list) -> tuple[dict, list]:
    """Fold ``dots`` (tuples or lists) into the version vector ``c`` (a copy is made)."""
    c = dict(c)
    rest = []
    for r, n in sorted({(r, n) for r, n in dots}):
        m = c.get(r, 0)
        if n == m + 1:
            c[r] = n
        elif n > m:
            rest.append([r, n])
    return c, rest


def _survivors(dots: list, other: list | None, c: dict, cloud: set) -> list:
    """``dots`` of one side kept against the other side (its dots of the element, its
    context): those the other also holds, or has not seen."""
    held = {(r, n) for r, n in other} if other else set()
    return [d for d in dots if (d[0], d[1]) in held or not dot_seen(c, cloud, d[0], d[1])]


def _unseen(mine: dict, skip: dict, c: dict, cloud: set, out: dict) -> None:
    """Copy into ``out`` the elements of ``mine`` not in ``skip`` with the dots that the
    context (``c``, ``cloud``) of the other side has not seen (it holds none of them)."""
    if not c and not cloud:
        out.update((e, dots) for e, dots in mine.items() if e not in skip)
        return
    get = c.get
    for e, dots in mine.items():
        if e in skip:
            continue
        for r, n in dots:
            if n <= get(r, 0) or (r, n) in cloud:
                break
        else:
            out[e] = dots
            continue
        keep = [d for d in dots if not dot_seen(c, cloud, d[0], d[1])]
        if keep:
            out[e] = keep


def _os_merge(a: dict, b: dict) -> dict:
    ea, eb = a["e"], b["e"]
    ca, cb = a["c"], b["c"]
    cla = {(r, n) for r, n in a["d"]}
    clb = {(r, n) for r, n in b["d"]}
    out: dict = {}
    _unseen(ea, eb, cb, clb, out)
    _unseen(eb, ea, ca, cla, out)
    for e, dots in eb.items():
        mine = ea.get(e)
        if mine is None:
            continue
        if mine == dots:  # both hold exactly these dots: all live
            out[e] = mine
            continue
        kept = _survivors(mine, dots, cb, clb)
        have = {(r, n) for r, n in kept}
        kept += [d for d in _survivors(dots, mine, ca, cla) if (d[0], d[1]) not in have]
        if kept:
            kept.sort()
            out[e] = mine if kept == mine else kept
    c = _g_merge(ca, cb)
    d: list = []
    if a["d"] or b["d"]:
        c, d = _compact(c, a["d"] + b["d"])
    check_merged_size(len(out), MAX_ELEMENTS, "orset")
    check_merged_size(len(c), MAX_REPLICAS, "orset context")
    check_merged_size(len(d), MAX_DOTS, "orset context d")
    return {"e": out, "c": c, "d": d}


def _next_dot(state: dict, rid: str) -> int:
    n = max([state["c"].get(rid, 0)] + [m for r, m in state["d"] if r == rid]) + 1
    return check_int(n, 1, INT64_MAX, "dot counter")


def orset_add(state: State, rid: str, elem: Elem) -> State:
    """Delta adding ``elem`` with a fresh dot of ``rid``; it replaces the observed dots."""
    check_replica_id(rid)
    check_elem(elem)
    dot = [rid, _next_dot(state, rid)]
    c, d = _compact({}, state["e"].get(elem, []) + [dot])
    return {"e": {elem: [dot]}, "c": c, "d": d}


def orset_remove(state: State, elem: Elem) -> State:
    """Delta removing the dots of ``elem`` observed in ``state`` (a no-op when absent)."""
    check_elem(elem)
    c, d = _compact({}, state["e"].get(elem, []))
    return {"e": {}, "c": c, "d": d}


# ---- registers ---------------------------------------------------------------------


def _lww_merge(a: dict, b: dict) -> dict:
    ka, kb = (a["t"], a["r"]), (b["t"], b["r"])
    if ka == kb:
        return a if pack_canonical(a["v"]) >= pack_canonical(b["v"]) else b
    return a if ka > kb else b


def lwwreg_set(state: State, rid: str, value: Any, t: int) -> State:
    """Delta writing ``value`` at time ``t`` (ms); t is bumped to the observed t + 1 when
    not later, so a replica's write always beats what it has seen."""
    check_replica_id(rid)
    check_int(t, 0, INT64_MAX, "timestamp")
    if state["r"] and t <= state["t"]:
        t = check_int(state["t"] + 1, 0, INT64_MAX, "timestamp")
    return {"v": check_value(value, fix=True), "t": t, "r": rid}


def _mv_merge(a: dict, b: dict) -> dict:
    if not b["vals"]:
        return a
    if not a["vals"]:
        return b
    keyed = {pack_canonical(e): e for e in a["vals"] + b["vals"]}
    vals = [e for k, e in sorted(keyed.items())]
    vals = [e for e in vals if not any(dominated(e[1], o[1]) for o in vals)]
    check_merged_size(len(vals), MAX_MV_VALUES, "mvreg")
    return {"vals": vals}


def mvreg_set(state: State, rid: str, value: Any) -> State:
    """Delta writing ``value``; its version vector supersedes every observed value."""
    check_replica_id(rid)
    vv: dict[str, int] = {}
    for _, seen in state["vals"]:
        vv = _g_merge(vv, seen)
    vv = dict(vv)
    vv[rid] = check_int(vv.get(rid, 0) + 1, 1, INT64_MAX, "version counter")
    check_merged_size(len(vv), MAX_REPLICAS, "mvreg version vector")
    return {"vals": [[check_value(value, fix=True), vv]]}


# ---- ormap -------------------------------------------------------------------------


def _entry_merge(x: list, y: list) -> list:
    if x[0] != y[0]:
        return x if x[0] < y[0] else y
    s = _MERGE[x[0]](x[1], y[1])
    return x if s is x[1] else y if s is y[1] else [x[0], s]


def _om_merge(a: dict, b: dict) -> dict:
    va, vb = a["vals"], b["vals"]
    if len(vb) > len(va):
        va, vb = vb, va
    vals = dict(va)
    for k, entry in vb.items():
        vals[k] = _entry_merge(va[k], entry) if k in va else entry
    check_merged_size(len(vals), MAX_ELEMENTS, "ormap vals")
    return {"keys": _os_merge(a["keys"], b["keys"]), "vals": vals}


def ormap_get(state: State, key: str, t: str) -> State:
    """The nested state of ``key`` (empty(t) if it has none), present or removed: the
    state to give the nested operation whose delta goes to ormap_update."""
    _type(t)
    entry = state["vals"].get(check_elem(key, str_only=True))
    if entry is None:
        return empty(t)
    if entry[0] != t:
        raise invalid(f"ormap key {key!r} holds a {entry[0]}, not a {t}")
    return entry[1]


def ormap_update(state: State, rid: str, key: str, t: str, delta: State) -> State:
    """Delta adding ``key`` (a fresh dot: wins over a concurrent remove) and folding the
    nested ``delta`` of type ``t`` into its value."""
    ormap_get(state, key, t)
    _check(t, delta, 2)
    return {"keys": orset_add(state["keys"], rid, key), "vals": {key: [t, delta]}}


def ormap_remove(state: State, key: str) -> State:
    """Delta removing ``key`` as observed in ``state`` (its nested state stays hidden)."""
    check_elem(key, str_only=True)
    return {"keys": orset_remove(state["keys"], key), "vals": {}}


# ---- the generic API -----------------------------------------------------------------

_EMPTY: Final = {
    "gcounter": lambda: {},
    "pncounter": lambda: {"p": {}, "n": {}},
    "orset": lambda: {"e": {}, "c": {}, "d": []},
    "lwwreg": lambda: {"v": None, "t": 0, "r": ""},
    "mvreg": lambda: {"vals": []},
    "ormap": lambda: {"keys": _EMPTY["orset"](), "vals": {}},
}
_MERGE: Final = {
    "gcounter": _g_merge, "pncounter": _pn_merge, "orset": _os_merge,
    "lwwreg": _lww_merge, "mvreg": _mv_merge, "ormap": _om_merge,
}  # fmt: skip


def _type(t: Any) -> str:
    if t not in TYPES:
        raise invalid(f"unknown CRDT type {t!r:.60}; one of {', '.join(TYPES)}")
    return t


def empty(t: str) -> State:
    """The bottom state of type ``t`` (merge's identity)."""
    return _EMPTY[_type(t)]()


def merge(t: str, a: State, b: State) -> State:
    """The join of two valid states of type ``t``: commutative, associative, idempotent.
    May return ``a`` or ``b`` itself; raises CrdtError only if the result would exceed a
    limit."""
    return _MERGE[_type(t)](a, b)


def value(t: str, state: State) -> Any:
    """gcounter / pncounter: int; orset: the sorted elements; lwwreg: the value (None when
    never set); mvreg: the sorted distinct concurrent values; ormap: {key: value}."""
    _type(t)
    if t == "gcounter":
        return sum(state.values())
    if t == "pncounter":
        return sum(state["p"].values()) - sum(state["n"].values())
    if t == "orset":
        return sorted_keys(state["e"])
    if t == "lwwreg":
        return state["v"]
    if t == "mvreg":
        return [v for _, v in sorted({pack_canonical(v): v for v, _ in state["vals"]}.items())]
    vals = state["vals"]
    return {k: value(vals[k][0], vals[k][1]) for k in sorted(state["keys"]["e"])}


def _canon_state(t: str, s: State) -> Any:
    """``s`` with its maps in canonical key order (its lists already are canonical)."""
    if t == "gcounter":
        return {r: s[r] for r in sorted(s)}
    if t == "pncounter":
        return {"n": _canon_state("gcounter", s["n"]), "p": _canon_state("gcounter", s["p"])}
    if t == "orset":
        e = s["e"]
        return {"c": _canon_state("gcounter", s["c"]), "d": s["d"],
                "e": {k: e[k] for k in sorted_keys(e)}}  # fmt: skip
    if t in ("lwwreg", "mvreg"):
        return canonical(s)
    vals = s["vals"]
    return {
        "keys": _canon_state("orset", s["keys"]),
        "vals": {k: [vals[k][0], _canon_state(vals[k][0], vals[k][1])] for k in sorted(vals)},
    }


def encode(t: str, state: State) -> bytes:
    """The canonical msgpack bytes of a valid state: equal states give equal bytes."""
    _type(t)
    try:
        return msgpack.packb(_canon_state(t, state), use_bin_type=True)
    except (TypeError, ValueError, OverflowError, KeyError, AttributeError, IndexError) as exc:
        raise invalid(f"{t} state cannot be encoded: {exc}") from None


def _check(t: str, state: State, depth: int) -> None:
    check_state(_type(t), state, depth)


def check(t: str, state: State) -> None:
    """Validate shape, field types, canonical form, invariants and limits; raises
    CrdtError("invalid_argument", ...) saying what is wrong."""
    _check(t, state, 1)


def decode(t: str, data: bytes) -> State:
    """Unpack a state and check() it; anything else raises CrdtError("invalid_argument")."""
    _type(t)
    if not isinstance(data, bytes | bytearray | memoryview):
        raise invalid(f"{t} state must be bytes, got {type(data).__name__}")
    if len(data) > MAX_STATE_BYTES:
        raise invalid(f"{t} state is larger than {MAX_STATE_BYTES} bytes")
    try:
        state = msgpack.unpackb(bytes(data), raw=False, strict_map_key=False, use_list=True)
    except Exception as exc:  # msgpack raises several types (ValueError, TypeError, ...)
        raise invalid(f"{t} state is not valid msgpack: {type(exc).__name__}") from None
    _check(t, state, 1)
    return state
