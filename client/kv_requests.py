"""The request of each single operation (put, get, delete, range, cas, txn, compact,
status, and append): its body, built once from the op's fields (client/ops.py), and the
``parse`` that turns the answer into the result. The stream reads' requests are in
client/streams/requests.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .errors import NotFound, StatekeeperError
from .ops import Ops
from .responses import (
    compact_result,
    decode_ok,
    error_from_response,
    malformed,
    op_result,
    parse_kv,
    range_result,
)
from .results import CompactResult, RangeResult
from .wire import (
    GET_HEADERS,
    SERIALIZABLE,
    Request,
    new_idempotency_key,
    post,
    read_options,
)

__all__ = [
    "MISSING",
    "compact_request",
    "get_request",
    "op_body",
    "range_request",
    "metrics_request",
    "scan_next",
    "status_request",
    "write_request",
]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final[Any] = _Missing()
"""Sentinel: "no default given" for :meth:`Client.get`."""


def op_body(op: Mapping[str, Any], ns: str) -> dict[str, Any]:
    """A single-op request's body: the op's fields (its name is in the path) in ``ns``."""
    body = {k: v for k, v in op.items() if k != "op"}
    body["ns"] = ns
    return body


# Writes whose route is not /v1/kv/<op>.
_WRITE_PATHS: Final = {"append": "/v1/streams/append"}


def write_request(op: Mapping[str, Any], ns: str, idempotency_key: str | None = None) -> Request:
    """POST /v1/kv/<op> for a put, delete, cas or txn op, POST /v1/streams/append for an
    append (built by client/ops.py), in namespace ``ns``, with ``idempotency_key`` (a fresh
    one if None). ``parse`` returns the op's result; a cas whose compare failed raises
    Conflict (with ``.current``)."""
    name = op["op"]
    ik = idempotency_key or new_idempotency_key()
    body = op_body(op, ns)
    body["idempotency_key"] = ik

    def parse(status: int, ctype: str | None, raw: bytes) -> Any:
        out = op_result(op, decode_ok(status, ctype, raw, ns), ns)
        if isinstance(out, StatekeeperError):
            raise out
        return out

    return post(_WRITE_PATHS.get(name) or f"/v1/kv/{name}", body, parse, name, ik)


def get_request(
    ns: str,
    key: str,
    *,
    revision: int | None = None,
    consistency: str | None = None,
    min_revision: int | None = None,
    default: Any = MISSING,
) -> Request:
    """POST /v1/kv/get; ``parse`` returns a KeyValue, or ``default`` if the key is missing
    and a default was given, else raises NotFound."""
    body = op_body(Ops.get(key, revision=revision), ns)
    read_options(body, None, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> Any:
        if status == 404 and default is not MISSING:
            err = error_from_response(status, ctype, raw, ns)
            if err.code == "key_not_found":
                return default
            raise err
        data = decode_ok(status, ctype, raw, ns)
        kv = parse_kv(data.get("kv"), ns, data.get("revision", 0))
        if kv is None:
            if default is not MISSING:
                return default
            raise NotFound(
                f"key {key!r} not found in namespace {ns!r}",
                code="key_not_found",
                status=404,
                details={"revision": data.get("revision")},
            )
        return kv

    return post("/v1/kv/get", body, parse, "get")


def range_request(
    ns: str,
    prefix: str | None = None,
    *,
    continuation: Any = None,
    consistency: str | None = None,
    min_revision: int | None = None,
    **fields: Any,
) -> Request:
    """POST /v1/kv/range; ``fields`` are those of :meth:`Ops.range` (start, end, limit,
    revision, keys_only)."""
    body = op_body(Ops.range(prefix, **fields), ns)
    if continuation is not None:
        body["continuation"] = continuation
    read_options(body, None, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> RangeResult:
        return range_result(decode_ok(status, ctype, raw, ns), ns)

    return post("/v1/kv/range", body, parse, "range")


def compact_request(revision: int, *, idempotency_key: str | None = None) -> Request:
    """POST /v1/kv/compact. Compact goes through raft like any write, so it carries an
    idempotency key too: a retry after a lost answer then replays the first result."""
    if not isinstance(revision, int) or isinstance(revision, bool):
        raise TypeError("revision must be an int")
    ik = idempotency_key or new_idempotency_key()

    def parse(status: int, ctype: str | None, raw: bytes) -> CompactResult:
        return compact_result(decode_ok(status, ctype, raw, None))

    body = {"revision": revision, "idempotency_key": ik}
    return post("/v1/kv/compact", body, parse, "compact", ik)


def _parse_status(status: int, ctype: str | None, raw: bytes) -> dict[str, Any]:
    return decode_ok(status, ctype, raw, None)


_STATUS_REQUEST: Final = Request(
    "GET", "/v1/status", None, GET_HEADERS, _parse_status, None, "status"
)


def status_request() -> Request:
    """GET /v1/status; ``parse`` returns the decoded dict."""
    return _STATUS_REQUEST


def _parse_metrics(status: int, ctype: str | None, raw: bytes) -> str:
    if status != 200:
        raise error_from_response(status, ctype, raw, None)
    return raw.decode("utf-8", "replace")


_METRICS_REQUEST: Final = Request(
    "GET", "/metrics", None, {"Accept": "text/plain"}, _parse_metrics, None, "metrics"
)


def metrics_request() -> Request:
    """GET /metrics (Prometheus text); ``parse`` returns the text."""
    return _METRICS_REQUEST


def scan_next(page: Any) -> dict[str, Any] | None:
    """Arguments for the page after ``page`` (a RangeResult or a StreamPage; None when it
    was the last one).

    Later pages are read at the first page's revision, so a scan is one consistent
    snapshot. They use ``serializable`` + ``min_revision``: a node that has applied that
    revision can serve them locally, without a raft barrier per page.
    """
    if not page.more:
        return None
    if page.continuation is None:
        raise malformed(200, "page answer has more=true but no continuation")
    return {
        "continuation": page.continuation,
        "revision": page.revision,
        "min_revision": page.revision,
        "consistency": SERIALIZABLE,
    }
