"""The idempotency_status op in the OpenAPI document: its result, the text of its route and
examples (the request comes from node/ops/idempotency.py's declaration, like every op's).
The result carries no bytes, so one schema serves both wires."""

from __future__ import annotations

from typing import Any

from statekeeper.node.ops.fields import Schema
from statekeeper.node.ops.schemas import int_schema, obj, rev_schema
from statekeeper.node.ops.spec import OpenApiFamily


def idempotency_schemas() -> dict[str, Schema]:
    """IdempotencyStatusResult: one of two exact shapes, told apart by `applied`."""
    applied = obj(
        {
            "applied": {"const": True},
            "revision": rev_schema(
                "The revision after the write applied (its own if it changed keys, the "
                "then-current one if it took none)."
            ),
            "expires_ms": int_schema(
                "When the key's record expires (leader time, ms since the epoch); a write "
                "re-sent with the key after that applies again."
            ),
        },
        ("applied", "revision", "expires_ms"),
        "Applied: the cluster holds the key's record.",
    )
    not_applied = obj(
        {
            "applied": {"const": False},
            "revision": rev_schema("Revision the read was served at."),
            "remembered_after_ms": int_schema(
                "Every write applied after this time (leader time, ms since the epoch: the "
                "cluster clock minus idempotency_seconds) still has its record; one applied "
                "at or before it may have had its record expire and be pruned."
            ),
        },
        ("applied", "revision", "remembered_after_ms"),
        "No record: not applied as of `revision`, or applied at or before `remembered_after_ms`.",
    )
    for shape in (applied, not_applied):
        shape["additionalProperties"] = False
    return {"IdempotencyStatusResult": {"oneOf": [applied, not_applied]}}


def idempotency_op_docs(write_errors: tuple[str, ...], read_errors: tuple[str, ...]) -> dict:
    """op -> (summary, description, 200 description, errors), as openapi.py's table."""
    return {
        "idempotency_status": (
            "Was the write sent with this idempotency_key applied?",
            "Served from local RocksDB after the consistency step, like get. For a write "
            "whose outcome is unknown (timeout): answers from the record apply keeps per "
            "(ns, idempotency_key) for idempotency_seconds, without re-sending the write. "
            "`applied: false` is as of `revision`: a write still in flight may apply later "
            "(a re-send with the same key settles it), and one applied at or before "
            "`remembered_after_ms` may have been forgotten.",
            "The key's status.",
            read_errors,
        ),
    }


def _ex(summary: str, value: Any) -> dict:
    return {"summary": summary, "value": value}


def idempotency_examples() -> dict[str, dict]:
    return {
        "idempotency_status": {
            "request": {
                "status": _ex(
                    "Did my timed-out put apply?",
                    {"ns": "agents", "idempotency_key": "4f1c2b7e-put-1"},
                )
            },
            200: {
                "applied": _ex(
                    "Applied at revision 42",
                    {"applied": True, "revision": 42, "expires_ms": 1760086400000},
                ),
                "not_applied": _ex(
                    "No record",
                    {"applied": False, "revision": 57, "remembered_after_ms": 1760000000000},
                ),
            },
        },
    }


FAMILY = OpenApiFamily(
    "idempotency",
    "Idempotency: what became of a write sent with an idempotency_key.",
    idempotency_op_docs,
    idempotency_schemas,
    ("IdempotencyStatusResult",),
    examples=idempotency_examples,
)
