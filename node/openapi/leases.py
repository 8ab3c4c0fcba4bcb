"""The lease ops in the OpenAPI document: their results, the text of their routes, and
examples (requests come from node/ops/leases.py's declarations, like every op's). No lease
result carries bytes, so each schema serves both wires."""

from __future__ import annotations

from typing import Any

from statekeeper.node.ops.fields import Schema
from statekeeper.node.ops.schemas import (
    bool_schema,
    int_schema,
    obj,
    replayed_schema,
    rev_schema,
    str_schema,
)
from statekeeper.node.ops.spec import OpenApiFamily


def _lease_id(description: str = "The lease's id.") -> Schema:
    return int_schema(description, minimum=1)


def _ms(description: str) -> Schema:
    return int_schema(description)


def _state_props() -> dict[str, Schema]:
    return {
        "lease": _lease_id(),
        "ttl_ms": _ms("Its time to live."),
        "expires_ms": _ms("When it expires unless renewed: leader time, ms since the epoch."),
    }


def lease_schemas() -> dict[str, Schema]:
    """Lease results (the same for JSON and msgpack)."""
    state = _state_props()
    listed = {**state, "ns": str_schema("Its namespace (its keys are in it).")}
    return {
        "LeaseGrantResult": obj(
            {
                "revision": rev_schema(
                    "The current revision: a grant changes no key and takes no revision."
                ),
                **state,
                "replayed": replayed_schema(),
            },
            ("revision", *state),
        ),
        "LeaseKeepaliveResult": obj(
            {
                "revision": rev_schema("The current revision: a keepalive takes no revision."),
                "leases": {
                    "type": "array",
                    "description": "One per id sent, in order.",
                    "items": {
                        "oneOf": [
                            obj(state, tuple(state), "Renewed."),
                            obj(
                                {"lease": _lease_id(), "error": {"const": "lease_not_found"}},
                                ("lease", "error"),
                                "Not renewed: it does not exist (revoked or expired).",
                            ),
                        ]
                    },
                },
            },
            ("revision", "leases"),
        ),
        "LeaseRevokeResult": obj(
            {
                "revision": rev_schema(
                    "Revision at which the lease, its keys and its streams were deleted."
                ),
                "deleted": int_schema("Keys deleted with it."),
                "deleted_streams": int_schema(
                    "Streams deleted with it (each with all its events, dedup records and "
                    "archive tombstones)."
                ),
                "replayed": replayed_schema(),
            },
            ("revision", "deleted", "deleted_streams"),
        ),
        "LeaseInfoResult": obj(
            {
                "revision": rev_schema("Revision the read was served at."),
                **listed,
                "remaining_ms": _ms(
                    "expires_ms minus the store's clock (0: due, the leader expires it soon)."
                ),
                "keys": {
                    "type": "array",
                    "items": str_schema("An attached key."),
                    "description": "The first 1000 attached keys, in byte order.",
                },
                "more_keys": bool_schema("More than 1000 keys are attached."),
                "streams": {
                    "type": "array",
                    "items": str_schema("An attached stream (appended to with this lease)."),
                    "description": "The first 1000 attached streams, in byte order.",
                },
                "more_streams": bool_schema("More than 1000 streams are attached."),
            },
            (
                "revision",
                *listed,
                "remaining_ms",
                "keys",
                "more_keys",
                "streams",
                "more_streams",
            ),
        ),
        "LeaseListResult": obj(
            {
                "revision": rev_schema("Revision the page was served at."),
                "leases": {"type": "array", "items": obj(listed, tuple(listed))},
                "more": bool_schema("More leases follow: send `after` = the last id."),
            },
            ("revision", "leases", "more"),
        ),
    }


LEASE_RESULTS = (
    "LeaseGrantResult",
    "LeaseKeepaliveResult",
    "LeaseRevokeResult",
    "LeaseInfoResult",
    "LeaseListResult",
)

_WRITE_NOTE = (
    "Goes through raft like put and takes a revision. A lease expires `ttl_ms` after the "
    "grant or its last keepalive (leader time); the leader then deletes its keys and "
    "streams."
)
_READ_NOTE = "Served from local RocksDB after the consistency step, like get."


def lease_op_docs(write_errors: tuple[str, ...], read_errors: tuple[str, ...]) -> dict:
    """op -> (summary, description, 200 description, errors), as openapi.py's table."""
    return {
        "lease_grant": (
            "Grant a lease",
            _WRITE_NOTE + " Give an idempotency_key: a retry then gets the same lease.",
            "Granted.",
            (*write_errors, "idempotency_key_reused"),
        ),
        "lease_keepalive": (
            "Renew many leases at once",
            _WRITE_NOTE + " One op renews every lease it names; an unknown one is answered "
            "in its place (`error: lease_not_found`), the others are still renewed. No "
            "idempotency_key: resending is harmless.",
            "Renewed (per lease).",
            write_errors,
        ),
        "lease_revoke": (
            "Revoke a lease and delete its keys and streams",
            _WRITE_NOTE + " Every attached key and every attached stream (with all its "
            "events) is deleted at one revision.",
            "Revoked.",
            (*write_errors, "lease_not_found", "idempotency_key_reused"),
        ),
        "lease_info": (
            "A lease's TTL, expiry, keys and streams",
            _READ_NOTE,
            "The lease exists.",
            (*read_errors, "lease_not_found"),
        ),
        "lease_list": (
            "List every lease, paged by id",
            _READ_NOTE,
            "One page.",
            read_errors,
        ),
    }


def _ex(summary: str, value: Any) -> dict:
    return {"summary": summary, "value": value}


def lease_examples() -> dict[str, dict]:
    """Examples of lease_grant, lease_keepalive and lease_revoke, by op."""
    state = {"lease": 7, "ttl_ms": 10000, "expires_ms": 1760000010000}
    return {
        "lease_grant": {
            "request": {"grant": _ex("A 10 s lease", {"ns": "agents", "ttl_ms": 10000})},
            200: {"granted": _ex("Lease 7", {"revision": 42, **state})},
        },
        "lease_keepalive": {
            "request": {"renew": _ex("Renew two leases", {"leases": [7, 8]})},
            200: {
                "renewed": _ex(
                    "7 renewed, 8 gone",
                    {"revision": 43, "leases": [state, {"lease": 8, "error": "lease_not_found"}]},
                )
            },
        },
        "lease_revoke": {
            "request": {"revoke": _ex("Revoke lease 7", {"lease": 7})},
            200: {
                "revoked": _ex(
                    "Its 3 keys and 1 stream deleted",
                    {"revision": 44, "deleted": 3, "deleted_streams": 1},
                )
            },
            404: {
                "lease_not_found": _ex(
                    "Already gone",
                    {
                        "error": {
                            "code": "lease_not_found",
                            "message": "lease 7 does not exist (never granted, revoked, or "
                            "expired)",
                            "lease": 7,
                        }
                    },
                )
            },
        },
    }


FAMILY = OpenApiFamily(
    "leases",
    "Leases: TTLs that delete their keys.",
    lease_op_docs,
    lease_schemas,
    LEASE_RESULTS,
    examples=lease_examples,
)
