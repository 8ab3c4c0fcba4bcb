"""The request of each single operation (put, get, delete, range, cas, txn, compact,
status): its body, built once, and the ``parse`` that turns the answer into the result."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from .errors import Conflict, NotFound
from .ops import cas_expect, range_body, txn_body
from .responses import (
    cas_result,
    compact_result,
    decode_ok,
    delete_result,
    error_from_response,
    malformed,
    parse_kv,
    range_result,
    txn_result,
    write_result,
)
from .results import CompactResult, DeleteResult, RangeResult, TxnResult, WriteResult
from .wire import (
    GET_HEADERS,
    SERIALIZABLE,
    Request,
    check_key,
    encode_value,
    new_idempotency_key,
    post,
    read_options,
)

__all__ = [
    "MISSING",
    "cas_request",
    "compact_request",
    "delete_request",
    "get_request",
    "put_request",
    "range_request",
    "scan_next",
    "status_request",
    "txn_request",
]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final[Any] = _Missing()
"""Sentinel: "no default given" for :meth:`Client.get`."""


def put_request(
    ns: str,
    key: str,
    value: Any,
    *,
    idempotency_key: str | None = None,
    prev_kv: bool = False,
) -> Request:
    """POST /v1/kv/put."""
    ik = idempotency_key or new_idempotency_key()
    body: dict[str, Any] = {
        "ns": ns,
        "key": check_key(key),
        "value": encode_value(value),
        "idempotency_key": ik,
    }
    if prev_kv:
        body["prev_kv"] = True

    def parse(status: int, ctype: str | None, raw: bytes) -> WriteResult:
        return write_result(decode_ok(status, ctype, raw, ns), ns)

    return post("/v1/kv/put", body, parse, "put", ik)


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
    body: dict[str, Any] = {"ns": ns, "key": check_key(key)}
    read_options(body, revision, consistency, min_revision)

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


def delete_request(
    ns: str,
    key: str,
    *,
    prefix: bool = False,
    prev_kv: bool = False,
    idempotency_key: str | None = None,
) -> Request:
    """POST /v1/kv/delete."""
    ik = idempotency_key or new_idempotency_key()
    body: dict[str, Any] = {"ns": ns, "key": check_key(key), "idempotency_key": ik}
    if prefix:
        body["prefix"] = True
    if prev_kv:
        body["prev_kv"] = True

    def parse(status: int, ctype: str | None, raw: bytes) -> DeleteResult:
        return delete_result(decode_ok(status, ctype, raw, ns), ns)

    return post("/v1/kv/delete", body, parse, "delete", ik)


def range_request(
    ns: str,
    prefix: str | None = None,
    *,
    start: str | None = None,
    end: str | None = None,
    limit: int | None = None,
    continuation: Any = None,
    revision: int | None = None,
    consistency: str | None = None,
    min_revision: int | None = None,
    keys_only: bool = False,
) -> Request:
    """POST /v1/kv/range."""
    body = range_body(
        ns,
        prefix,
        start=start,
        end=end,
        limit=limit,
        continuation=continuation,
        keys_only=keys_only,
    )
    read_options(body, revision, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> RangeResult:
        return range_result(decode_ok(status, ctype, raw, ns), ns)

    return post("/v1/kv/range", body, parse, "range")


def cas_request(
    ns: str,
    key: str,
    value: Any,
    *,
    expect_version: int | None = None,
    expect_mod_revision: int | None = None,
    must_not_exist: bool = False,
    idempotency_key: str | None = None,
) -> Request:
    """POST /v1/kv/cas; ``parse`` raises Conflict (with ``.current``) if the compare fails."""
    ik = idempotency_key or new_idempotency_key()
    body: dict[str, Any] = {
        "ns": ns,
        "key": check_key(key),
        "value": encode_value(value),
        "expect": cas_expect(expect_version, expect_mod_revision, must_not_exist),
        "idempotency_key": ik,
    }

    def parse(status: int, ctype: str | None, raw: bytes) -> WriteResult:
        out = cas_result(decode_ok(status, ctype, raw, ns), ns)
        if isinstance(out, Conflict):
            raise out
        return out

    return post("/v1/kv/cas", body, parse, "cas", ik)


def txn_request(
    ns: str,
    compare: Iterable[Mapping[str, Any]],
    success: Iterable[Mapping[str, Any]],
    failure: Iterable[Mapping[str, Any]] = (),
    *,
    idempotency_key: str | None = None,
) -> Request:
    """POST /v1/kv/txn."""
    ik = idempotency_key or new_idempotency_key()
    body = txn_body(ns, compare, success, failure)
    body["idempotency_key"] = ik

    def parse(status: int, ctype: str | None, raw: bytes) -> TxnResult:
        return txn_result(decode_ok(status, ctype, raw, ns), body, ns)

    return post("/v1/kv/txn", body, parse, "txn", ik)


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


def scan_next(page: RangeResult) -> dict[str, Any] | None:
    """Arguments for the page after ``page`` (None when it was the last one).

    Later pages are read at the first page's revision, so a scan is one consistent
    snapshot. They use ``serializable`` + ``min_revision``: a node that has applied that
    revision can serve them locally, without a raft barrier per page.
    """
    if not page.more:
        return None
    if page.continuation is None:
        raise malformed(200, "range answer has more=true but no continuation")
    return {
        "continuation": page.continuation,
        "revision": page.revision,
        "min_revision": page.revision,
        "consistency": SERIALIZABLE,
    }
