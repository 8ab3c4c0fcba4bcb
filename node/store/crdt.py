"""CRDTs in the store: op `merge` (a write, also inside a txn branch) and the read
`crdt_get` (docs/protocol.md, "CRDTs"). The types, their states and merge are
client/crdt/model.py's (pure: no clock, no random, no I/O), so apply stays deterministic.

A CRDT lives in an ordinary kv key: its value is the envelope

    msgpack [b"skcrdt", 1, type, state]        (state: the type's canonical msgpack object)

so get, range, watch, history, leases, txn compares and compaction all treat it as any
value, and put/cas/delete over it simply replace or remove it. `merge` reads the key's
envelope (empty(type) when the key is absent), folds the op's state in with model.merge
and writes the result back through kv.write_put (the same "c"/"h"/"r" records as a
put, so watches and history see merges). When the merged envelope is byte-identical to
the stored one (canonical encoding: equal states, equal bytes) nothing is written and no
revision is taken: `changed: false`. A merge keeps the key's lease attachment (a put
without `lease` would detach it; a merge is an update of the same value, not a
replacement).

The five things (docs/protocol.md has them for users):

1. Consistency. merge is one raft write, linearizable like put, one revision when it
   changed the state (inside a txn, the txn's); crdt_get is served like get: linearizable
   by default, serializable on request, `min_revision`, and at a past `revision`.
   Concurrent merges never conflict: apply folds them in log order and the result is the
   same in any order (merge is commutative, associative, idempotent).
2. ok / failed / unknown. ok: the state is folded in (or already was: `changed: false`),
   `value` is the merged value. failed (4xx): nothing was stored. unknown (timeout, lost
   connection): send the same merge again: merging a state twice changes nothing (the
   idempotency_key also replays the first result within retention.idempotency_seconds).
3. Limits. state <= max_value_bytes (413 `value_too_large`), and so is the merged
   envelope (413 `value_too_large`, nothing stored); key like put's (413 `key_too_large`,
   400); a type not in model.TYPES, a state that does not decode or check, or a merged
   state beyond one of the model's limits (400 `invalid_argument`, nothing stored); a key
   holding a plain value or another type (409 `crdt_type_mismatch`, `error.found` = the
   stored type or null); crdt_get of a missing key (404 `not_found`, `error.revision`: the
   revision read).
4. Key layout: none of its own: the kv records of the key (node/store/keys.py), whose
   value is the envelope above.
5. Chaos coverage: chaos/crdt_workload.py (counter increments through faults) checked by
   chaos/checker/crdt.py; tests/integration/test_crdt.py heals a partition.
"""

from __future__ import annotations

from typing import Any

import msgpack

from statekeeper.client.crdt import model
from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.crdt import decode_state
from statekeeper.node.store import lease_state
from statekeeper.node.store.apply import EntryTx, handles, read_op
from statekeeper.node.store.keys import SEP, cur_key, cur_lease, unpack
from statekeeper.node.store.kv import write_put
from statekeeper.node.store.reads import Source, check_revision

MAGIC = b"skcrdt"
VERSION = 1
# The envelope's first bytes: a 4-array, then MAGIC as msgpack bin.
_HEAD = b"\x94" + msgpack.packb(MAGIC, use_bin_type=True)


def envelope(crdt_type: str, encoded_state: bytes) -> bytes:
    """msgpack [MAGIC, VERSION, type, state] from model.encode's bytes (packed in place:
    the state's canonical bytes are the envelope's tail)."""
    return _HEAD + msgpack.packb(VERSION) + msgpack.packb(crdt_type) + encoded_state


def split_envelope(value: bytes) -> tuple[Any, Any, bytes] | None:
    """(version, type, encoded state) of a value that starts like an envelope; None for a
    value that does not (a plain value). The caller checks version and type."""
    if not value.startswith(_HEAD):
        return None
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(value)
    try:
        unpacker.read_array_header()
        unpacker.skip()  # MAGIC
        version, crdt_type = unpacker.unpack(), unpacker.unpack()
        offset = unpacker.tell()
    except (msgpack.UnpackException, ValueError, TypeError):
        return None
    return version, crdt_type, value[offset:]


def _mismatch(key: str, found: str | None, wanted: str | None) -> OpError:
    # "holds a plain value, not a CRDT" / "..., not a pncounter" / "holds a gcounter, not a
    # pncounter": each said once (it read "a plain value (not a CRDT), not a CRDT").
    what = "a plain value" if found is None else f"a {found}"
    want = "a CRDT" if wanted is None else f"a {wanted}"
    return OpError(
        "crdt_type_mismatch",
        f"key {key!r} holds {what}, not {want}; nothing was changed",
        found=found,
    )


def stored_state(key: str, value: bytes, wanted: str | None) -> tuple[str, bytes, Any]:
    """(type, encoded state, state) of a key's value; crdt_type_mismatch when it is not a
    CRDT (of type `wanted`, when given) or its state is corrupt."""
    parts = split_envelope(value)
    if parts is None:
        raise _mismatch(key, None, wanted)
    version, crdt_type, encoded = parts
    if version != VERSION or type(crdt_type) is not str or crdt_type not in model.TYPES:
        raise OpError(
            "crdt_type_mismatch",
            f"key {key!r} holds a CRDT envelope this node cannot read (version {version!r:.20}, "
            f"type {crdt_type!r:.40}); nothing was changed",
            found=None,
        )
    if wanted is not None and crdt_type != wanted:
        raise _mismatch(key, crdt_type, wanted)
    try:
        state = decode_state(crdt_type, encoded, "the stored state")
    except OpError as e:
        raise OpError("crdt_type_mismatch", f"key {key!r}: {e.message}", found=crdt_type) from None
    return crdt_type, encoded, state


# -- merge ---------------------------------------------------------------------------------


@handles("merge")
def merge(tx: EntryTx, op: dict) -> dict:
    """Fold op["state"] into the key's CRDT: {revision, changed, value}."""
    crdt_type, key = op["type"], op["key"]
    delta = decode_state(crdt_type, op["state"])
    ns_b, key_b = op["ns"].encode(), key.encode()
    cur = tx.point(cur_key(ns_b, key_b))
    if cur is None:
        old_value, stored = None, model.empty(crdt_type)
    else:
        old_value = tx.kv_from_meta(ns_b, key_b, key, unpack(cur))["value"]
        stored = stored_state(key, old_value, crdt_type)[2]
    try:
        merged = model.merge(crdt_type, stored, delta)
    except model.CrdtError as e:  # the merged state would exceed one of the model's limits
        raise OpError(
            e.code, f"merging into key {key!r}: {e.message}; nothing was changed"
        ) from None
    new_value = envelope(crdt_type, model.encode(crdt_type, merged))
    result: dict[str, Any] = {"revision": tx.revision, "changed": False}
    if new_value != old_value:
        if len(new_value) > tx.limits.max_value_bytes:
            raise OpError(
                "value_too_large",
                f"the merged state of key {key!r} would be {len(new_value)} bytes, more than "
                f"max_value_bytes ({tx.limits.max_value_bytes}); nothing was changed",
            )
        lease = 0
        if cur is not None:
            lease = lease_state.key_lease(tx, ns_b + SEP + key_b, cur_lease(unpack(cur)))
        write_put(tx, ns_b, key_b, key, new_value, False, lease)
        result = {"revision": tx.revision + 1, "changed": True}
    result["value"] = model.value(crdt_type, merged)
    return result


# -- crdt_get -------------------------------------------------------------------------------




@read_op("crdt_get")
def crdt_get(src: Source, limits: Limits, op: dict) -> dict:
    """{revision, type, value, state?, mod_revision, version} of the key's CRDT."""
    r = check_revision(op.get("revision"), src.revision, src.compact_revision)
    key = op["key"]
    kv = src.kv_at(op["ns"].encode(), key, r, r == src.revision)
    if kv is None:
        raise OpError(
            "not_found",
            f"key {key!r} does not exist in namespace {op['ns']!r} at revision {r}",
            revision=r,
        )
    crdt_type, _, state = stored_state(key, kv["value"], None)
    out: dict[str, Any] = {"revision": r, "type": crdt_type, "value": model.value(crdt_type, state)}
    if op.get("state"):
        out["state"] = model.encode(crdt_type, state)  # canonical, whoever wrote the value
    out["mod_revision"] = kv["mod_revision"]
    out["version"] = kv["version"]
    return out
