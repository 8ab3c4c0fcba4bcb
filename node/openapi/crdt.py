"""The CRDT ops in the OpenAPI document: their results, the `crdt_type_mismatch` body, the
text of their routes, and examples (requests come from node/ops/crdt.py's declarations,
like every op's; the examples' states are encoded by client/crdt/model.py itself, so they
are always valid)."""

from __future__ import annotations

import base64
from typing import Any

from statekeeper.client.crdt import model
from statekeeper.node.ops.fields import Schema
from statekeeper.node.ops.schemas import (
    bool_schema,
    int_schema,
    obj,
    ref,
    replayed_schema,
    rev_schema,
    value_props,
)
from statekeeper.node.ops.spec import OpenApiFamily

_VALUE = {
    "description": "The CRDT's value: gcounter/pncounter an integer, orset the sorted list of "
    "members, lwwreg the value, mvreg the list of concurrent values, ormap an object of the "
    "present keys' values. In JSON, bytes inside it are UTF-8 text, or `{b64: base64}` when "
    "they are not UTF-8 (the msgpack answer keeps them as bin; `state` is exact).",
}


def _type_schema(description: str) -> Schema:
    return {"type": "string", "enum": list(model.TYPES), "description": description}


def _crdt_get_result(w: str) -> Schema:
    state = value_props(w, "The stored state, model.encode(type, state)")
    props: dict[str, Schema] = {
        "revision": rev_schema("Revision the read was served at."),
        "type": _type_schema("The key's CRDT type."),
        "value": _VALUE,
        "state": state["value"],
        **({"state_b64": state["value_b64"]} if w == "json" else {}),
        "mod_revision": rev_schema("Revision of the key's last write (merge or put)."),
        "version": int_schema("Writes of the key since creation.", minimum=1),
    }
    desc = "`state` only when asked for (`state: true`)."
    if w == "json":
        desc += " JSON answers carry it as `state_b64` (a state is never UTF-8 text)."
    return obj(props, ("revision", "type", "value", "mod_revision", "version"), desc)


def crdt_schemas() -> dict[str, Schema]:
    """The schemas that are the same for JSON and msgpack."""
    return {
        "MergeResult": obj(
            {
                "revision": rev_schema(
                    "Revision of the merge (the current one when it changed nothing)."
                ),
                "changed": bool_schema(
                    "The stored state changed (false: it already included the merged state; "
                    "no revision was taken)."
                ),
                "value": _VALUE,
                "replayed": replayed_schema(),
            },
            ("revision", "changed", "value"),
        ),
        "CrdtTypeMismatch": {
            "allOf": [
                ref("Error"),
                obj(
                    {
                        "error": obj(
                            {
                                "code": {"const": "crdt_type_mismatch"},
                                "found": {
                                    "oneOf": [
                                        _type_schema("The CRDT type the key holds."),
                                        {"type": "null"},
                                    ],
                                    "description": "The key's CRDT type; null: a plain value.",
                                },
                            },
                            ("found",),
                        )
                    },
                    ("error",),
                ),
            ],
            "description": "409 of merge/crdt_get: the key holds a plain value or another CRDT "
            "type; nothing changed.",
        },
    }


CRDT_WIRE_SCHEMAS = {"CrdtGetResult": _crdt_get_result}
CRDT_RESULTS = ("MergeResult", "CrdtGetResult")

_WRITE_NOTE = (
    "Goes through raft like put, and never conflicts: concurrent merges fold in any order "
    "to the same state, so there is no CAS loop. Merging a state twice changes nothing, so "
    "an unknown outcome is simply merged again (an idempotency_key also replays the first "
    'result). The key\'s value is the envelope msgpack ["skcrdt" (bin), 1, type, state]: '
    "get/range/watch/txn see it like any value, and put/cas/delete replace it."
)
_READ_NOTE = "Served from local RocksDB after the consistency step, like get."


def crdt_op_docs(write_errors: tuple[str, ...], read_errors: tuple[str, ...]) -> dict:
    """op -> (summary, description, 200 description, errors), as openapi.py's table."""
    return {
        "merge": (
            "Merge a CRDT delta or state into a key",
            _WRITE_NOTE,
            "Merged (`changed: false`: the key already included it).",
            (*write_errors, "value_too_large", "crdt_type_mismatch", "idempotency_key_reused"),
        ),
        "crdt_get": (
            "Read a CRDT key's value (and state)",
            _READ_NOTE + " `state: true` also answers the encoded state, for local replicas.",
            "The key holds a CRDT.",
            (*read_errors, "not_found", "crdt_type_mismatch"),
        ),
    }


def _ex(summary: str, value: Any) -> dict:
    return {"summary": summary, "value": value}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def crdt_examples() -> dict[str, dict]:
    """Examples of merge and crdt_get, by op."""
    delta = model.pncounter_add(model.empty("pncounter"), "agent-7", 3)
    full = model.merge("pncounter", delta, model.pncounter_add(delta, "agent-2", -1))
    mismatch = {
        "error": {
            "code": "crdt_type_mismatch",
            "message": "key 'visits' holds a plain value, not a pncounter; nothing was changed",
            "found": None,
        }
    }
    return {
        "merge": {
            "request": {
                "increment": _ex(
                    "agent-7 adds 3 to a shared counter (JSON: the state as `state_b64`)",
                    {
                        "ns": "agents",
                        "key": "visits",
                        "type": "pncounter",
                        "state_b64": _b64(model.encode("pncounter", delta)),
                        "idempotency_key": "0f8e6d4c-2b1a-4c3d-9e8f-7a6b5c4d3e2f",
                    },
                )
            },
            200: {
                "merged": _ex("The counter is now 2", {"revision": 51, "changed": True, "value": 2})
            },
            409: {"crdt_type_mismatch": _ex("The key holds a plain value", mismatch)},
        },
        "crdt_get": {
            "request": {
                "with_state": _ex(
                    "Value and state, for a local replica",
                    {"ns": "agents", "key": "visits", "state": True},
                )
            },
            200: {
                "counter": _ex(
                    "A pncounter",
                    {
                        "revision": 60,
                        "type": "pncounter",
                        "value": model.value("pncounter", full),
                        "state_b64": _b64(model.encode("pncounter", full)),
                        "mod_revision": 51,
                        "version": 2,
                    },
                )
            },
        },
    }


FAMILY = OpenApiFamily(
    "crdt",
    "CRDTs: counters, sets, registers, maps.",
    crdt_op_docs,
    crdt_schemas,
    CRDT_RESULTS,
    wire_schemas=CRDT_WIRE_SCHEMAS,
    examples=crdt_examples,
)
