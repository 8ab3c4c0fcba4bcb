"""The CRDT ops' declarations and field kinds: merge, crdt_get (docs/protocol.md, "CRDTs";
applied and read by node/store/crdt.py; the types themselves are client/crdt/model.py).

Like every op they are declared once (`SPECS`, joined into node.ops.core.OPS): the field
kinds below check a field with the protocol's codes and describe it in OpenAPI.

Normalized shapes (raft entries carry `merge`'s, so its msgpack bytes must not change):

    merge     {op, ns, key, type, state, idempotency_key}
              type: one of model.TYPES; state: bytes, model.encode(type, delta or state)
    crdt_get  {op, ns, key, revision, state}       state: bool (also answer the state)

`merge`'s state is decoded and checked here (400 `invalid_crdt_state` before anything is
submitted) and again in apply (an entry is never trusted blindly).
"""

from __future__ import annotations

from statekeeper.client.crdt import model
from statekeeper.node.config import Limits
from statekeeper.node.errors import ErrorCode, OpError, declare
from statekeeper.node.ops.fields import Bytes, Choice, Flag, Revision, Schema
from statekeeper.node.ops.schemas import value_props
from statekeeper.node.ops.shared import IDEMPOTENCY_KEY, KEY, NS
from statekeeper.node.ops.spec import OpSpec

# The error codes of the CRDT ops (node/errors.py has the ones every op shares).
ERRORS = declare(
    ErrorCode(
        "invalid_crdt_state",
        400,
        "a merge's `state` (bytes of the documented size) is not model.encode(type, ...) of its `type`: not msgpack, or not a valid state",
    ),
    ErrorCode(
        "crdt_type_mismatch",
        409,
        "merge or crdt_get of a key that holds a plain value or another CRDT type (`error.found`: its type, or null); nothing changed",
    ),
)

INVALID_CRDT_STATE = "invalid_crdt_state"
TYPE_DOC = (
    "The CRDT type: gcounter (grow-only counter), pncounter (counter), orset (add-wins "
    "observed-remove set), lwwreg (last-writer-wins register), mvreg (multi-value register), "
    "ormap (observed-remove map of CRDTs)."
)


def decode_state(crdt_type: str, data: bytes, what: str = "state") -> object:
    """model.decode (which also runs model.check), its CrdtError as the protocol's OpError."""
    try:
        state = model.decode(crdt_type, data)
    except model.CrdtError as e:
        # The bytes are opaque to the OpenAPI document (msgpack inside bin / base64): a
        # code of its own, so a client (and the schema test) tells it from a bad shape.
        code = INVALID_CRDT_STATE if e.code == "invalid_argument" else e.code
        raise OpError(code, f"{what} is not a valid {crdt_type} state: {e.message}") from None
    return state


class CrdtState(Bytes):
    """merge's `state`: bytes (JSON: `state_b64`, base64), at most limits.max_value_bytes,
    the canonical msgpack encoding of a state of the op's `type` (checked in `merge_post`)."""

    def properties(self, limits, wire):
        n = limits.max_value_bytes
        props = value_props(wire, f"{self.doc}, at most max_value_bytes ({n} on this node)", n)
        out: dict[str, Schema] = {self.name: props["value"]}
        if wire == "json":
            out[f"{self.name}_b64"] = props["value_b64"]
        return out

    def requirement(self, wire):
        if wire == "json":
            return {"anyOf": [{"required": [self.name]}, {"required": [f"{self.name}_b64"]}]}
        return {"required": [self.name]}


def _merge_post(out: dict, limits: Limits) -> None:
    decode_state(out["type"], out["state"])


# The two CRDT ops, with kv's `key` (joined into OPS by node/ops/core.py).
SPECS: tuple[OpSpec, ...] = (
    OpSpec(
        "merge",
        (
            NS,
            KEY,
            Choice("type", model.TYPES, what="type", required=True, doc=TYPE_DOC),
            CrdtState(
                "state",
                "The delta or full state to fold in: model.encode(type, state), canonical "
                "msgpack (client/crdt/model.py)",
                required=True,
            ),
            IDEMPOTENCY_KEY,
        ),
        "merge op: fold a CRDT delta or state into the key's stored state (created as "
        "empty(type) when absent). Never conflicts; merging what the key already "
        "includes answers `changed: false` and takes no revision.",
        write=True,
        in_txn=True,
        post=_merge_post,
        path="/v1/crdt/merge",
    ),
    OpSpec(
        "crdt_get",
        (
            NS,
            KEY,
            Revision("revision", "Read the key as of this revision (default: current)."),
            Flag("state", "Also answer the stored state (`state`: model.encode bytes)."),
        ),
        "crdt_get op: a CRDT key's value (404 `not_found` if absent, 409 "
        "`crdt_type_mismatch` if it holds something else).",
        write=False,
        path="/v1/crdt/get",
    ),
)
