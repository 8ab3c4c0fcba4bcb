"""Error codes of the statekeeper protocol (docs/protocol.md, "Errors").

`OpError` is raised by op validation and by the state machine's reads; the HTTP
layer turns it into `{"error": err.to_dict()}` with status `err.status`. Inside
raft entries a failed op becomes the result `{"error": err.to_dict()}`.

Each code is one `ErrorCode` (code, HTTP status, when it is answered: the text of GET
/v1/openapi.json), declared with `declare`: the codes every route or op can answer and the
membership routes' here, an op family's own codes next to its ops (node/ops/streams.py's
`ERRORS` holds the stream ops'). `declare` refuses a code declared twice, so two families
cannot give one code two statuses. The table is complete once node.ops.core is imported (it
imports every family): the HTTP layer, the state machine and node/openapi/document.py all import it.
The client maps codes to its exceptions in client/errors.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ErrorCode:
    """One error code: its HTTP status and when the node answers it (the API document)."""

    code: str
    status: int
    when: str


# code -> its declaration, and code -> HTTP status (the same table, for status_for).
CODES: dict[str, ErrorCode] = {}
STATUS: dict[str, int] = {}


def declare(*codes: ErrorCode) -> tuple[ErrorCode, ...]:
    """Register error codes; a code declared before raises ValueError (at import)."""
    for c in codes:
        if c.code in CODES:
            raise ValueError(f"error code {c.code!r} is declared twice")
        if not 100 <= c.status <= 599:
            raise ValueError(f"error code {c.code!r}: {c.status} is not an HTTP status")
    for c in codes:
        CODES[c.code] = c
        STATUS[c.code] = c.status
    return codes


# Codes any route or op can answer (HTTP, validation, kv, raft, storage quota, auth checks).
CORE_ERRORS = declare(
    ErrorCode(
        "malformed_body",
        400,
        "the body is not valid JSON/msgpack, is truncated or empty, or is not an object",
    ),
    ErrorCode(
        "malformed_http",
        400,
        "the bytes are not an HTTP/1.1 request (the node answers, then closes the connection)",
    ),
    ErrorCode("headers_too_large", 431, "the request line and headers exceed 64 KiB"),
    ErrorCode(
        "unsupported_media_type",
        415,
        "the Content-Type is neither JSON nor msgpack (a POST without one too)",
    ),
    ErrorCode(
        "unknown_op", 400, "the op name is not known (batch/txn, or /v1/kv/{op} with an unknown op)"
    ),
    ErrorCode(
        "invalid_argument",
        400,
        "wrong type, missing field, bad ns/key, bad compare, txn writes a key twice",
    ),
    ErrorCode(
        "unknown_field",
        400,
        "a request (or an object in it: a txn's compare or op, a batch entry, an event) has a "
        "field its op does not know; `unknown` and `known` list them, nothing is applied",
    ),
    ErrorCode(
        "invalid_request",
        400,
        "a raft entry could not be decoded (per-op result; not expected over HTTP)",
    ),
    ErrorCode(
        "invalid_token",
        400,
        "a `continuation` of the documented shape that no previous page returned (it does not decode)",
    ),
    ErrorCode(
        "future_revision",
        400,
        "the read revision, or a read's min_revision, is above the current revision (a serializable read catches up once before it says so)",
    ),
    ErrorCode("key_too_large", 413, "a key exceeds max_key_bytes"),
    ErrorCode("value_too_large", 413, "a value exceeds max_value_bytes"),
    ErrorCode("request_too_large", 413, "the body exceeds max_request_bytes"),
    ErrorCode("too_many_ops", 413, "more ops (txn: compares + ops) than max_ops_per_request"),
    ErrorCode("key_not_found", 404, "get of a missing key (the body still has `revision`)"),
    ErrorCode(
        "not_found",
        404,
        "unknown path; crdt_get of a missing key (`error.revision`: the revision read)",
    ),
    ErrorCode(
        "compare_failed",
        409,
        "the cas expectation was not met (the body has the current `kv` and `revision`)",
    ),
    ErrorCode(
        "idempotency_key_reused",
        422,
        "the idempotency_key was already used in this namespace for a different request (nothing applied)",
    ),
    ErrorCode("compacted", 410, "the read revision is below compact_revision (history dropped)"),
    ErrorCode(
        "unavailable", 503, "no leader / no quorum / shutting down: retry, possibly on another node"
    ),
    ErrorCode(
        "too_many_connections",
        503,
        "the node already serves [http] max_connections connections (the node answers, then closes the connection; retry later)",
    ),
    ErrorCode(
        "too_many_watches",
        429,
        "the caller's token has the most watches open one token may have (100): close one first",
    ),
    ErrorCode(
        "insufficient_storage",
        507,
        "the node's NOSPACE alarm is raised ([storage] quota_bytes reached, or the disk's free space under the reserve) and the write adds data (put, cas, append, merge, lease_grant, lock_acquire, retention_set, archive_restore, a txn with a put); this attempt was not proposed (an earlier attempt with the same idempotency_key may have been: one that was applied gets its recorded answer instead of the 507). Reads, deletes and compaction still work; the alarm clears once space is freed",
    ),
    ErrorCode(
        "request_timeout",
        408,
        "the request's head or body did not arrive within [http] header_timeout / body_timeout (the node answers, then closes the connection)",
    ),
    ErrorCode(
        "not_ready", 503, "no leader known, or this node lags behind the leader's commit index"
    ),
    ErrorCode(
        "not_live",
        503,
        "this node's raft loop has made no progress for [raft] live_stall_seconds (a stuck raft thread: restart the node)",
    ),
    ErrorCode("method_not_allowed", 405, "the path exists but not for this method"),
    ErrorCode(
        "client_certificate_required",
        401,
        '[tls] client_auth is "required" and the connection brought no client certificate (answered, then closed)',
    ),
    ErrorCode(
        "unauthenticated",
        401,
        "[auth] enabled and no, a malformed, unknown (or revoked), wrong or expired bearer token (header `WWW-Authenticate: Bearer`)",
    ),
    ErrorCode(
        "permission_denied",
        403,
        "[auth] enabled and the token's grants do not cover the op (`error` has `op` and `ns`); nothing applied",
    ),
    ErrorCode(
        "origin_not_allowed",
        403,
        "the request carries an Origin header (a web page's request) that is not in [http] allowed_origins; any route",
    ),
    ErrorCode(
        "host_not_allowed",
        421,
        "auth is off and the Host header is a DNS name that names no node (DNS rebinding); any route",
    ),
    ErrorCode(
        "timeout",
        504,
        "a write whose outcome is unknown (it may still commit: retry with the same idempotency_key)",
    ),
    ErrorCode("internal", 500, "a bug; never expected"),
)


# The membership routes' (node/api/members.py): nothing changed when one is answered.
MEMBER_ERRORS = declare(
    ErrorCode(
        "not_leader",
        421,
        "a membership change or leader transfer sent to a follower (`error.leader`, `error.leader_url`: where to send it); nothing changed",
    ),
    ErrorCode(
        "member_exists",
        409,
        "member_add of an id or raft address that is a member already; nothing changed",
    ),
    ErrorCode(
        "member_not_found", 404, "member_remove / leader_transfer naming no member; nothing changed"
    ),
    ErrorCode(
        "member_change_pending",
        409,
        "the previous membership change is not committed yet (one change at a time); nothing changed",
    ),
    ErrorCode(
        "member_is_leader",
        409,
        "member_remove of the leader itself: it hands leadership over; send the removal to the new leader",
    ),
    ErrorCode(
        "member_unreachable",
        409,
        "member_add of a node nothing listens for on its raft port (start it first); nothing changed",
    ),
    ErrorCode(
        "transfer_refused",
        409,
        "leader_transfer to a member that has not replicated the whole log yet (or the leader stepped down): retry",
    ),
)


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
