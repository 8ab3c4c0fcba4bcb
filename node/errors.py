"""Error codes of the statekeeper protocol (docs/protocol.md, "Errors").

`OpError` is raised by op validation and by the state machine's reads; the HTTP
layer turns it into `{"error": err.to_dict()}` with status `err.status`. Inside
raft entries a failed op becomes the result `{"error": err.to_dict()}`.
"""

from __future__ import annotations

from typing import Any

# code -> HTTP status
STATUS: dict[str, int] = {
    "malformed_body": 400,
    "malformed_http": 400,  # not parseable as HTTP/1.1 (the connection is closed)
    "headers_too_large": 431,
    "unsupported_media_type": 415,
    "unknown_op": 400,
    "invalid_argument": 400,
    "invalid_request": 400,  # a raft entry that could not be decoded
    "invalid_token": 400,  # a page token of the right shape that no page handed out
    "invalid_crdt_state": 400,  # a merge's state that is not model.encode(type, ...)
    "future_revision": 400,
    "key_too_large": 413,
    "value_too_large": 413,
    "request_too_large": 413,
    "too_many_ops": 413,
    "too_many_events": 413,  # a stream append with more than max_events_per_append
    "too_many_policies": 413,  # a namespace holds MAX_POLICIES_PER_NS retention policies
    "key_not_found": 404,
    "not_found": 404,
    "stream_not_found": 404,
    "lease_not_found": 404,  # a lease id that was never granted, or is revoked / expired
    "lock_not_held": 404,  # lock_release of a waiter key that is gone
    "fence_mismatch": 409,  # a fenced write whose token is not the lock holder's
    "lock_held": 409,  # lock_acquire with wait=false of a lock someone holds
    "compare_failed": 409,
    "expectation_failed": 409,  # a stream append's `expect` did not hold
    "crdt_type_mismatch": 409,  # a merge/crdt_get of a key holding a plain value or another type
    "idempotency_key_reused": 422,  # the key came with another request before
    "compacted": 410,
    "archived": 410,  # get / read_stream of data archived to a cold-tier segment
    "unavailable": 503,
    "too_many_connections": 503,  # the node serves http.max_connections already
    "too_many_watches": 429,  # the caller's token has MAX_WATCHES_PER_TOKEN open (node/watch.py)
    # A write that would grow the store while the node's NOSPACE alarm is raised (storage
    # quota reached or disk almost full, node/quota.py); this attempt was not proposed.
    "insufficient_storage": 507,
    "request_timeout": 408,  # a request's head or body did not arrive in time (closed)
    "not_ready": 503,  # GET /v1/health/ready
    "not_live": 503,  # GET /v1/health/live: the raft loop is stuck (node/liveness.py)
    "method_not_allowed": 405,
    # [tls] client_auth = "required" and the connection brought no client certificate.
    "client_certificate_required": 401,
    "unauthenticated": 401,  # no, a malformed, unknown, wrong or expired bearer token
    "permission_denied": 403,  # the token's grants do not cover the op
    # A browser's request (node/web_guard.py): an Origin not in [http] allowed_origins, and
    # with auth off a Host naming no node (DNS rebinding).
    "origin_not_allowed": 403,
    "host_not_allowed": 421,
    "token_exists": 409,
    # A token record over its bounds (node/auth_ops.py): grants per token, bytes of a
    # grant's prefix, bytes of the whole record.
    "too_many_grants": 400,
    "grant_prefix_too_long": 400,
    "token_too_large": 400,
    # Membership changes (node/member_api.py); nothing changed.
    "not_leader": 421,  # a change sent to a follower (`error.leader_url`)
    "member_exists": 409,
    "member_not_found": 404,
    "member_change_pending": 409,  # one change at a time
    "member_is_leader": 409,  # the leader removes itself: leadership is moving; retry there
    "member_unreachable": 409,
    "transfer_refused": 409,  # leader transfer to a member not fully caught up: retry  # nothing listens on the new member's raft port  # auth_token_create of an id that exists (draw a new token)
    "timeout": 504,
    "internal": 500,
}


def status_for(code: str) -> int:
    """HTTP status of an error code (500 for a code nobody registered)."""
    return STATUS.get(code, 500)


class OpError(Exception):
    """A protocol-level failure with a machine-readable `code`.

    `extra` fields (e.g. `kv` and `revision` for `compare_failed`) are merged into
    `to_dict()` next to `code` and `message`.
    """

    def __init__(self, code: str, message: str = "", **extra: Any) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message or code
        self.extra = extra

    @property
    def status(self) -> int:
        return status_for(self.code)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.extra}

    def __repr__(self) -> str:
        return f"OpError({self.code!r}, {self.message!r})"
