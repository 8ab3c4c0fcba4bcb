"""The auth ops in the OpenAPI document: their results and the text of their routes (requests
come from node/ops/auth.py's declarations, like every op's). No auth result carries bytes,
so each schema serves both wires."""

from __future__ import annotations

from statekeeper.node.ops.fields import Schema
from statekeeper.node.ops.schemas import int_schema, obj, replayed_schema, rev_schema, str_schema
from statekeeper.node.ops.spec import OpenApiFamily


def _token_props() -> dict[str, Schema]:
    grant = obj(
        {
            "ns": str_schema("Namespace, prefix ending in `*`, or `*`."),
            "prefix": str_schema("Key prefix ('' = the whole namespace)."),
            "role": {"type": "string", "enum": ["reader", "writer", "admin"]},
        },
        ("ns", "prefix", "role"),
    )
    return {
        "id": str_schema("The token's id (public)."),
        "name": str_schema("Its label."),
        "grants": {"type": "array", "items": grant, "description": "What it may do."},
        "created_ms": int_schema("When it was created (leader time, ms since the epoch)."),
        "expires_ms": int_schema("When it expires (leader time, ms since the epoch); 0: never."),
    }


def auth_schemas() -> dict[str, Schema]:
    """Auth results (the same for JSON and msgpack)."""
    token = _token_props()
    return {
        "AuthTokenCreateResult": obj(
            {
                "revision": rev_schema("The current revision: a token takes no revision."),
                "id": token["id"],
                "created_ms": token["created_ms"],
                "expires_ms": token["expires_ms"],
                "replayed": replayed_schema(),
            },
            ("revision", "id", "created_ms", "expires_ms"),
        ),
        "AuthTokenRevokeResult": obj(
            {
                "revision": rev_schema("The current revision."),
                "id": token["id"],
                "replayed": replayed_schema(),
            },
            ("revision", "id"),
        ),
        "AuthTokenListResult": obj(
            {
                "revision": rev_schema("The revision read."),
                "tokens": {
                    "type": "array",
                    "items": obj(token, tuple(token)),
                    "description": "Every token, by id (never a secret or hash).",
                },
            },
            ("revision", "tokens"),
        ),
        "AuthWhoamiResult": obj(
            {
                **token,
                "id": {
                    "type": ["string", "null"],
                    "description": "The caller's token id (`root` for the root token); null "
                    "when auth is disabled.",
                },
                "auth_enabled": {"type": "boolean", "description": "[auth] enabled."},
            },
            ("id", "auth_enabled"),
        ),
    }


AUTH_RESULTS = (
    "AuthTokenCreateResult",
    "AuthTokenRevokeResult",
    "AuthTokenListResult",
    "AuthWhoamiResult",
)

_WRITE_NOTE = (
    "Goes through raft; the record is replicated state, outside every namespace (no "
    "revision, no watch event). Needs an admin grant."
)


def auth_op_docs(write_errors: tuple[str, ...], read_errors: tuple[str, ...]) -> dict:
    """op -> (summary, description, 200 description, errors), as openapi.py's table."""
    return {
        "auth_token_create": (
            "Create a bearer token",
            _WRITE_NOTE + " The client draws the token and sends only its id and the SHA-256 "
            "of its secret. The caller needs admin over every grant it hands out.",
            "Created.",
            (
                *write_errors,
                "token_exists",
                "idempotency_key_reused",
                "too_many_grants",
                "grant_prefix_too_long",
                "token_too_large",
            ),
        ),
        "auth_token_revoke": (
            "Revoke a token",
            _WRITE_NOTE + " Every node refuses the token once it applied the revoke.",
            "Revoked.",
            (*write_errors, "not_found", "idempotency_key_reused"),
        ),
        "auth_token_list": (
            "List every token",
            "Ids, names, grants and expiry; never a secret or hash. Needs admin on `*`.",
            "Every token.",
            read_errors,
        ),
        "auth_whoami": (
            "The caller's token",
            "Its id, name, grants and expiry (any valid token may ask).",
            "The caller.",
            read_errors,
        ),
    }


FAMILY = OpenApiFamily(
    "auth",
    "Bearer tokens: create, revoke, list, whoami.",
    auth_op_docs,
    auth_schemas,
    AUTH_RESULTS,
)
