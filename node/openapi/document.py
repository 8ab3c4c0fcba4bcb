"""OpenAPI 3.1 description of the HTTP API, served at GET /v1/openapi.json.

`document(limits)` builds it for one node's `[limits]` (cached per value): the request
schemas come from the op declarations that `validate_op` runs (node/ops/core.py, through
node/openapi/requests.py), so every bound in them (key and value sizes, ops per request,
page size) is the one this node enforces. Results and errors are in
node/openapi/schemas.py, examples in node/openapi/examples.py, the streamed watch route in
node/openapi/watch.py; the routes are node/api/routes.py's and the contract is
docs/protocol.md.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata
from typing import Any

from statekeeper.node.config import Limits
from statekeeper.node.errors import CODES, STATUS
from statekeeper.node.openapi.examples import cas_examples, get_examples, put_examples
from statekeeper.node.openapi.locks import FENCE_NOTE
from statekeeper.node.openapi.members import member_paths, member_schemas
from statekeeper.node.openapi.requests import WIRES, request_name, request_schemas
from statekeeper.node.openapi.schemas import FAMILIES, common_schemas, result_schemas
from statekeeper.node.openapi.watch import watch_paths, watch_schemas
from statekeeper.node.ops.core import OPS
from statekeeper.node.ops.crdt import CrdtState
from statekeeper.node.ops.fields import Continuation, IdempotencyKey, Schema
from statekeeper.node.ops.locks import FENCED_OPS
from statekeeper.node.ops.schemas import ref, wire_name
from statekeeper.node.ops.streams import StreamContinuation

JSON = "application/json"
MSGPACK = "application/msgpack"
X_MSGPACK = "application/x-msgpack"
NODE_HEADER = "X-Statekeeper-Node"

# code -> when: every code's declaration (node/errors.py, and the op families' `ERRORS`,
# all registered once node.ops.core is imported); docs/protocol.md "Errors" has the same table.
ERROR_WHEN: dict[str, str] = {c.code: c.when for c in CODES.values()}
# Codes raised against a `Limits` attribute: their description names this node's value.
_LIMIT_OF = {
    "key_too_large": "max_key_bytes",
    "value_too_large": "max_value_bytes",
    "request_too_large": "max_request_bytes",
    "too_many_ops": "max_ops_per_request",
    "too_many_events": "max_events_per_append",
}


def error_status(code: str) -> int:
    """HTTP status the API answers for an error code."""
    return STATUS[code]


def error_when(code: str, limits: Limits) -> str:
    text = ERROR_WHEN[code]
    if code in _LIMIT_OF:
        text += f" ({getattr(limits, _LIMIT_OF[code])} on this node)"
    return text


# Errors every body-carrying POST can answer (the auth ones with [auth] enabled).
_BODY_ERRORS = (
    "malformed_body",
    "unsupported_media_type",
    "invalid_argument",
    "unknown_field",
    "request_too_large",
    "internal",
    "unauthenticated",
    "permission_denied",
)
# insufficient_storage: only writes that add data (node/quota/alarm.py GROWING_OPS, txns with one).
_WRITE_ERRORS = (
    *_BODY_ERRORS, "key_too_large", "unavailable", "timeout", "insufficient_storage",
)  # fmt: skip
_READ_ERRORS = (
    *_BODY_ERRORS,
    "key_too_large",
    "future_revision",
    "compacted",
    "unavailable",
    "timeout",
)
# Error codes whose body has more than `{error}`.
_ERROR_BODIES = {
    "key_not_found": "KeyNotFound",
    "compare_failed": "CompareFailed",
    "not_ready": "NotReady",
    "not_live": "NotLive",
    "expectation_failed": "ExpectationFailed",
    "crdt_type_mismatch": "CrdtTypeMismatch",
}

_WRITE_NOTE = (
    "Goes through raft; a follower forwards it inside raft and answers once it has applied "
    "it locally. Give an idempotency_key and reuse it on retry (timeout, lost connection, "
    "`unavailable`) so the write takes effect once."
)
_READ_NOTE = (
    "Served from local RocksDB after the consistency step; the answer carries its `revision`."
)

# op -> (summary, description, 200 description, errors). Every op of node/ops/core.py has one
# (the stream ops' come from node/openapi/streams.py).
_OP_DOCS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "put": (
        "Write a key",
        _WRITE_NOTE + " With `lease` the key is attached to that lease (deleted with it); "
        "with `ttl_ms` it gets a lease of its own; without either it is detached.",
        "Written.",
        (*_WRITE_ERRORS, "value_too_large", "lease_not_found"),
    ),
    "get": (
        "Read a key",
        _READ_NOTE,
        "Found (`kv` is never null here).",
        (*_READ_ERRORS, "key_not_found", "archived"),
    ),
    "delete": (
        "Delete a key or a prefix",
        _WRITE_NOTE + " Deleting nothing does not advance the revision.",
        "Done (`deleted` may be 0).",
        _WRITE_ERRORS,
    ),
    "range": ("List keys (prefix or [start, end)), paged", _READ_NOTE, "One page.", _READ_ERRORS),
    "cas": (
        "Compare-and-swap one key",
        _WRITE_NOTE + " A failed cas does not advance the revision.",
        "Swapped (`succeeded` is true).",
        (*_WRITE_ERRORS, "value_too_large", "compare_failed"),
    ),
    "txn": (
        "Atomic multi-key transaction with compares",
        _WRITE_NOTE,
        "Done; `succeeded` says which branch ran.",
        (*_WRITE_ERRORS, "value_too_large", "unknown_op", "too_many_ops"),
    ),
    "compact": (
        "Drop history below a revision",
        _WRITE_NOTE,
        "Compacted (a revision at or below compact_revision changes nothing).",
        (*_BODY_ERRORS, "unavailable", "timeout", "future_revision"),
    ),
    **{op: d for f in FAMILIES for op, d in f.op_docs(_WRITE_ERRORS, _READ_ERRORS).items()},
}
for _name in FENCED_OPS:  # every write that takes a `fence` (node/ops/locks.py)
    _summary, _description, _ok, _errors = _OP_DOCS[_name]
    _OP_DOCS[_name] = (_summary, _description + FENCE_NOTE, _ok, (*_errors, "fence_mismatch"))


def _field_errors(spec) -> tuple[str, ...]:
    """Codes an op answers because of the kinds of its fields."""
    codes: list[str] = []
    for f in spec.fields:
        if isinstance(f, IdempotencyKey) and spec.write:  # idempotency_status only reads one
            codes.append("idempotency_key_reused")
        if isinstance(f, Continuation | StreamContinuation):
            codes.append("invalid_token")
        if isinstance(f, CrdtState):
            codes.append("invalid_crdt_state")
    return tuple(codes)


def _with(errors: tuple[str, ...], more: tuple[str, ...]) -> tuple[str, ...]:
    return (*errors, *(c for c in dict.fromkeys(more) if c not in errors))


for _name, _spec in OPS.items():
    _summary, _description, _ok, _errors = _OP_DOCS[_name]
    _OP_DOCS[_name] = (_summary, _description, _ok, _with(_errors, _field_errors(_spec)))
# A txn fails whole with the error of any op in it (a put's lease_not_found, an append's
# expectation_failed, a merge's crdt_type_mismatch, ...).
_TXN_OP_ERRORS = tuple(
    c
    for s in OPS.values()
    if s.in_txn and s.write
    for c in _OP_DOCS[s.name][3]
    if c not in ("idempotency_key_reused", "fence_mismatch")
)
_OP_DOCS["txn"] = (*_OP_DOCS["txn"][:3], _with(_OP_DOCS["txn"][3], _TXN_OP_ERRORS))
# A batch is validated whole (400/413 before anything is submitted): every op's validation codes.
_BATCH_ERRORS = _with(
    (*_WRITE_ERRORS, "value_too_large", "unknown_op", "too_many_ops"),
    tuple(c for s in OPS.values() for c in _field_errors(s) if c != "idempotency_key_reused")
    + ("too_many_events", "future_revision")  # a min_revision ahead
    # The whole batch refused when an op names a lease or token that does not exist (or,
    # for a lease, is outside the caller's grants): schemathesis found these undocumented.
    + ("lease_not_found", "not_found"),
)


class _Builder:
    """Paths and components for one node's limits."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.schemas = {
            **common_schemas(ERROR_WHEN),
            **request_schemas(limits),
            **result_schemas(WIRES),
            **watch_schemas(limits),
            **member_schemas(),
        }

    def schema_for(self, name: str, wire: str) -> Schema:
        wired = wire_name(name, "msgpack") in self.schemas
        return ref(wire_name(name, wire) if wired else name)

    def content(
        self, name: str, *, wires: tuple[str, ...] = WIRES, examples: dict | None = None
    ) -> dict:
        """Media types for one schema: JSON, and msgpack (both spellings) when `wires` has it."""
        content: dict[str, Any] = {}
        if "json" in wires:
            content[JSON] = {"schema": self.schema_for(name, "json")}
            if examples:
                content[JSON]["examples"] = examples
        if "msgpack" in wires:
            msgpack_media = {"schema": self.schema_for(name, "msgpack")}
            content[MSGPACK] = msgpack_media
            content[X_MSGPACK] = dict(msgpack_media)
        return content

    def error_schema(self, codes: list[str], wire: str) -> Schema:
        generic = [c for c in codes if c not in _ERROR_BODIES]
        options = [self.schema_for(_ERROR_BODIES[c], wire) for c in codes if c in _ERROR_BODIES]
        if generic:
            code_enum = {"properties": {"error": {"properties": {"code": {"enum": generic}}}}}
            options.append({"allOf": [ref("Error"), code_enum]})
        return options[0] if len(options) == 1 else {"oneOf": options}

    def error_responses(
        self,
        codes: tuple[str, ...],
        *,
        wires: tuple[str, ...] = WIRES,
        examples: dict | None = None,
    ) -> dict:
        by_status: dict[int, list[str]] = {}
        for code in codes:
            by_status.setdefault(error_status(code), []).append(code)
        out = {}
        for status in sorted(by_status):
            group = by_status[status]
            desc = "; ".join(f"`{c}`: {error_when(c, self.limits)}" for c in group)
            content: dict[str, Any] = {}
            for wire in wires:
                media = {"schema": self.error_schema(group, wire)}
                for t in [JSON] if wire == "json" else [MSGPACK, X_MSGPACK]:
                    content[t] = dict(media)
            ex = (examples or {}).get(status)
            if ex and JSON in content:
                content[JSON]["examples"] = ex
            out[str(status)] = _response(desc, content)
        return out

    def post(
        self,
        op_id: str,
        summary: str,
        description: str,
        request: str,
        result: str,
        ok: str,
        errors: tuple[str, ...],
        *,
        tag: str = "kv",
        examples: dict | None = None,
    ) -> dict:
        """A POST operation taking `request` (schema name) and answering `result` with 200."""
        ex = examples or {}
        body = {
            "required": True,
            "description": summary
            + " JSON or msgpack by Content-Type; the answer uses the same encoding.",
            "content": self.content(request, examples=ex.get("request")),
        }
        return {
            "post": {
                "operationId": op_id,
                "tags": [tag],
                "summary": summary,
                "description": description,
                "requestBody": body,
                "responses": {
                    "200": _response(ok, self.content(result, examples=ex.get(200))),
                    **self.error_responses(errors, examples=ex),
                },
            }
        }

    def get(
        self,
        op_id: str,
        summary: str,
        description: str,
        result: str,
        ok: str,
        errors: tuple[str, ...] = (),
        *,
        tag: str,
        wires: tuple[str, ...] = ("json",),
        node_header: bool = True,
    ) -> dict:
        if result:
            content = self.content(result, wires=wires)
        else:
            content = {JSON: {"schema": {"type": "object"}}}
        return {
            "get": {
                "operationId": op_id,
                "tags": [tag],
                "summary": summary,
                "description": description,
                "responses": {
                    "200": _response(ok, content, node_header=node_header),
                    **self.error_responses(errors, wires=wires),
                },
            }
        }

    def op_paths(self) -> dict:
        """The route of every op: /v1/kv/{op} for the kv ops, /v1/streams/* for streams."""
        examples = {
            "put": put_examples(self.limits),
            "get": get_examples(),
            "cas": cas_examples(),
            **{op: ex for f in FAMILIES if f.examples for op, ex in f.examples().items()},
        }
        paths = {}
        for name, spec in OPS.items():
            summary, description, ok, errors = _OP_DOCS[name]
            request, result = request_name(spec, "json"), f"{spec.title}Result"
            tag = spec.path.split("/")[2]  # /v1/<tag>/...: kv, streams, leases, locks, crdt
            paths[spec.path] = self.post(
                name,
                summary,
                description,
                request,
                result,
                ok,
                errors,
                tag=tag,
                examples=examples.get(name),
            )
        return paths

    def other_paths(self) -> dict:
        return {
            "/v1/batch": self.post(
                "batch",
                "Many ops in one request (not atomic)",
                "Each op carries its `op` field. A batch with one invalid op is rejected whole "
                "(400) and nothing is applied; once accepted, each op answers its own result or "
                "`{error}` and the status is 200.",
                "BatchRequest",
                "BatchResult",
                "One result per op.",
                _BATCH_ERRORS,
                tag="batch",
            ),
            "/v1/status": self.get(
                "status",
                "Raft and store status of this node",
                "Answers msgpack when `Accept` asks for it.",
                "Status",
                "Status.",
                ("internal",),
                tag="ops",
                wires=WIRES,
            ),
            "/v1/health/live": self.get(
                "live",
                "Liveness",
                "200 while the process serves HTTP and its raft loop makes progress; 503 "
                "`not_live` once the raft loop has made none for [raft] live_stall_seconds "
                "(restart the node). Always JSON.",
                "Live",
                "Alive.",
                ("not_live",),
                tag="health",
            ),
            "/v1/health/ready": self.get(
                "ready",
                "Readiness",
                "200 when a leader is known and this node has applied up to the leader's commit "
                "index (within a small lag); else 503 `not_ready`, or `unavailable` once the "
                "node is stopping (SIGTERM). Always JSON.",
                "Ready",
                "Ready.",
                ("not_ready", "unavailable"),
                tag="health",
            ),
            "/v1/openapi.json": self.get(
                "openapi",
                "This document",
                "OpenAPI 3.1, always JSON.",
                "",
                "The OpenAPI document.",
                tag="meta",
                node_header=False,
            ),
            "/v1/admin/backup": {
                "get": {
                    "operationId": "backup",
                    "tags": ["ops"],
                    "summary": "A backup of the whole store at one revision (admin)",
                    "description": "Taken after a read barrier, so it holds every write "
                    "acknowledged before the request; streamed (chunked) in the backup file "
                    "format of node/backup/file.py; header `X-Statekeeper-Revision` names its "
                    "revision. Needs admin on every namespace. One at a time per node. "
                    "`statekeeper backup --out FILE` fetches and checks it.",
                    "responses": {
                        "200": _response(
                            "The backup file; `X-Statekeeper-Revision` (an integer) is its "
                            "revision.",
                            {
                                "application/vnd.statekeeper.backup": {
                                    "schema": {"type": "string", "format": "binary"}
                                }
                            },
                        ),
                        **self.error_responses(
                            ("unauthenticated", "permission_denied", "unavailable", "timeout"),
                            wires=("json",),
                        ),
                    },
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "tags": ["ops"],
                    "summary": "Prometheus metrics of this node",
                    "description": "Prometheus text exposition (OpenMetrics when `Accept` asks "
                    "for it); no token needed even with auth on. docs/protocol.md#metrics "
                    "lists the families.",
                    "responses": {
                        "200": _response(
                            "The metrics.",
                            {"text/plain": {"schema": {"type": "string"}}},
                        )
                    },
                }
            },
        }

    def components(self) -> dict:
        def error_only(code: str, description: str) -> dict:
            return _response(description, {JSON: {"schema": self.error_schema([code], "json")}})

        return {
            "schemas": self.schemas,
            "headers": {
                NODE_HEADER: {
                    "description": "Id of the node that served the request.",
                    "schema": {"type": "string"},
                },
            },
            "responses": {
                "NotFound": error_only("not_found", "`not_found`: unknown path."),
                "MethodNotAllowed": error_only(
                    "method_not_allowed",
                    "`method_not_allowed`: the path exists but not for this method.",
                ),
                "OriginNotAllowed": error_only(
                    "origin_not_allowed",
                    "`origin_not_allowed`: " + ERROR_WHEN["origin_not_allowed"],
                ),
                "HostNotAllowed": error_only(
                    "host_not_allowed", "`host_not_allowed`: " + ERROR_WHEN["host_not_allowed"]
                ),
            },
        }


def _response(description: str, content: dict | None = None, *, node_header: bool = True) -> dict:
    r: dict[str, Any] = {"description": description}
    if node_header:
        r["headers"] = {NODE_HEADER: {"$ref": f"#/components/headers/{NODE_HEADER}"}}
    if content:
        r["content"] = content
    return r


def _info(limits: Limits) -> dict:
    try:
        version = metadata.version("statekeeper")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        version = "0.0.0"
    return {
        "title": "statekeeper",
        "version": version,
        "summary": "Raft-replicated, RocksDB-backed key-value store (etcd's model, namespaced).",
        "description": (
            "Contract: docs/protocol.md. Bodies are JSON (`application/json`) or msgpack "
            "(`application/msgpack`, also `application/x-msgpack`) by Content-Type; the answer "
            "uses the request's encoding. In JSON, values are strings: send `value` as UTF-8 "
            "text or `value_b64` as base64 (`value_b64` wins if both are sent); answers carry "
            "`value` when the bytes are valid UTF-8, else `value_b64`. In msgpack, values are "
            "bin. A field an op does not declare (in the body or an object inside it) is 400 "
            "`unknown_field`, naming it and the known ones; nothing is applied.\n\nEvery error is `{error: {code, message}}` with an HTTP status. An unknown "
            "path answers 404 `not_found`, an unknown op under /v1/kv/ 400 `unknown_op`, a "
            "known path with the wrong method 405 `method_not_allowed`. Any route answers 403 "
            "`origin_not_allowed` to a request with an Origin header not in [http] "
            "allowed_origins, and with auth off 421 `host_not_allowed` to a Host that is a DNS "
            "name naming no node; a POST needs a JSON or msgpack Content-Type (415). Every answer except "
            f"this document carries `{NODE_HEADER}` (the id of the node that served it).\n\n"
            f"Limits of the node that served this document: max_key_bytes "
            f"{limits.max_key_bytes}, max_value_bytes {limits.max_value_bytes}, "
            f"max_request_bytes {limits.max_request_bytes}, max_ops_per_request "
            f"{limits.max_ops_per_request}, max_range_limit {limits.max_range_limit}, "
            f"max_events_per_append {limits.max_events_per_append}, min_lease_ttl_ms "
            f"{limits.min_lease_ttl_ms}."
        ),
        "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
    }


# Routes answered without a token even with [auth] enabled (node/api/routes.py OPEN_ROUTES).
OPEN_PATHS = frozenset(
    {"/v1/health/live", "/v1/health/ready", "/v1/status", "/v1/openapi.json", "/metrics"}
)
BEARER_SCHEME = {
    "bearerAuth": {
        "type": "http",
        "scheme": "bearer",
        "description": '`Authorization: Bearer <token>` (docs/protocol.md "Authentication '
        'and authorization"); declared when the node runs with [auth] enabled.',
    }
}


def document(limits: Limits | None = None, auth: bool = False) -> dict:
    """The OpenAPI 3.1 document for a node with these limits (default: the defaults),
    built once per value; treat it as read-only. `auth`: the node runs with [auth]
    enabled, so every route but OPEN_PATHS declares bearer security (with auth off none
    is needed, and schemathesis rightly flags a declared scheme that is ignored)."""
    limits = Limits() if limits is None else limits
    return _with_bearer(limits) if auth else _document(limits)


@cache
def _with_bearer(limits: Limits) -> dict:
    doc = _document(limits)
    paths = {
        path: item
        if path in OPEN_PATHS
        else {method: {**op, "security": [{"bearerAuth": []}]} for method, op in item.items()}
        for path, item in doc["paths"].items()
    }
    components = {**doc["components"], "securitySchemes": BEARER_SCHEME}
    return {**doc, "paths": paths, "components": components}


@cache
def _document(limits: Limits) -> dict:
    b = _Builder(limits)
    return {
        "openapi": "3.1.0",
        "info": _info(limits),
        "tags": [
            {"name": "kv", "description": "Single-key ops, range, txn, compaction."},
            *({"name": f.tag, "description": f.about} for f in FAMILIES),
            {"name": "watch", "description": "Streams of changes from a revision on."},
            {"name": "batch", "description": "Many ops in one request."},
            {"name": "ops", "description": "Node status."},
            {"name": "cluster", "description": "Membership changes and leader hand-over."},
            {"name": "health", "description": "Liveness and readiness probes."},
            {"name": "meta", "description": "This document."},
        ],
        "paths": {**b.op_paths(), **watch_paths(b), **b.other_paths(), **member_paths(b)},
        "components": b.components(),
    }
