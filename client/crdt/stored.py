"""A CRDT as a plain range reads it: the stored envelope (msgpack ``[b"skcrdt", 1, type,
state]``, node/store/crdt.py writes it) unwrapped on the client, and the replicas its state
names, so a listing of a prefix (the console's Coordination page) shows each CRDT's value
and replicas from ONE range instead of a crdt_get per key.

The state is checked by model.check (shape, canonical form, limits) before its value is
computed: a value that merely looks like an envelope is reported as not a CRDT (None).
"""

from __future__ import annotations

from typing import Any

import msgpack

from . import model

__all__ = ["MAGIC", "counts_by_replica", "replica_ids", "unwrap"]

MAGIC = b"skcrdt"
VERSION = 1


def unwrap(value: bytes) -> tuple[str, Any] | None:
    """(type, state) of a stored CRDT value; None for any other value."""
    if not value.startswith(b"\x94"):  # a 4-array: cheap refusal of plain values
        return None
    try:
        env = msgpack.unpackb(value, raw=False, strict_map_key=False, use_list=True)
    except Exception:  # msgpack raises several types; a plain value that starts like one
        return None
    if len(env) != 4 or env[0] != MAGIC or env[1] != VERSION or env[2] not in model.TYPES:
        return None
    try:
        model.check(env[2], env[3])
    except model.CrdtError:
        return None
    return env[2], env[3]


def _dots(dots: Any) -> set[str]:
    return {d[0] for d in dots}


def replica_ids(t: str, state: Any) -> tuple[str, ...]:
    """The replica ids that ever changed the state (sorted)."""
    if t == "gcounter":
        found = set(state)
    elif t == "pncounter":
        found = set(state["p"]) | set(state["n"])
    elif t == "orset":
        found = set(state["c"]) | _dots(state["d"])
        for dots in state["e"].values():
            found |= _dots(dots)
    elif t == "lwwreg":
        found = {state["r"]} if state["r"] else set()
    elif t == "mvreg":
        found = {rid for _, vv in state["vals"] for rid in vv}
    else:  # ormap: its key set's replicas and every nested state's
        found = set(replica_ids("orset", state["keys"]))
        for nested_t, nested in state["vals"].values():
            found |= set(replica_ids(nested_t, nested))
    return tuple(sorted(found))


def counts_by_replica(t: str, state: Any) -> dict[str, int] | None:
    """A counter's contribution per replica (pncounter: increments minus decrements);
    None for the other types."""
    if t == "gcounter":
        return dict(sorted(state.items()))
    if t == "pncounter":
        rids = sorted(set(state["p"]) | set(state["n"]))
        return {r: state["p"].get(r, 0) - state["n"].get(r, 0) for r in rids}
    return None
