"""Answers to results and exceptions: decoding a body, mapping an error answer (or a
failure below HTTP) to the typed exception, and parsing each op's result."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Mapping
from typing import Any, Final

import msgpack

from .errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    StatekeeperError,
    Timeout,
    TlsError,
    Unavailable,
    error_class,
)
from .results import (
    AppendedEvent,
    AppendResult,
    CompactResult,
    DeleteResult,
    KeyValue,
    RangeResult,
    StreamEvent,
    StreamInfo,
    StreamList,
    StreamPage,
    TxnResult,
    WriteResult,
)
from .wire import MSGPACK

__all__ = [
    "append_result",
    "cas_result",
    "compact_result",
    "connection_error",
    "decode_body",
    "decode_ok",
    "delete_result",
    "error_from_dict",
    "error_from_response",
    "malformed",
    "op_result",
    "parse_kv",
    "range_result",
    "stream_info",
    "stream_list",
    "stream_page",
    "txn_result",
    "write_result",
]

_MSGPACK_TYPES: Final = (MSGPACK, "application/x-msgpack")


def decode_body(content_type: str | None, body: bytes) -> Any:
    """Decode a msgpack or JSON body; None for an empty or unknown-type body."""
    if not body:
        return None
    ctype = (content_type or "").partition(";")[0].strip().lower()
    if ctype in _MSGPACK_TYPES:
        return msgpack.unpackb(body, raw=False)
    if ctype == "application/json" or ctype.endswith("+json"):
        return json.loads(body)
    return None


def malformed(status: int | None, why: str) -> StatekeeperError:
    return StatekeeperError(f"malformed response: {why}", code="malformed_response", status=status)


def decode_ok(status: int, ctype: str | None, raw: bytes, ns: str | None) -> dict[str, Any]:
    """The decoded body of a 200 answer, or raise the error the answer carries."""
    if status != 200:
        raise error_from_response(status, ctype, raw, ns)
    try:
        data = decode_body(ctype, raw)
    except Exception as exc:
        raise malformed(status, f"cannot decode {ctype!r} body: {exc}") from exc
    if not isinstance(data, dict):
        raise malformed(status, f"expected a msgpack map, got {type(data).__name__} ({ctype!r})")
    return data


def error_from_response(
    status: int, content_type: str | None, body: bytes, ns: str | None = None
) -> StatekeeperError:
    """The typed exception for an error answer (also for bodies that are not ours)."""
    try:
        data = decode_body(content_type, body)
    except Exception:
        data = None
    code: str | None = None
    message = ""
    details: dict[str, Any] = {}
    if isinstance(data, dict):
        err = data.get("error")
        details = {k: v for k, v in data.items() if k != "error"}
        if isinstance(err, Mapping):
            code = err.get("code") if isinstance(err.get("code"), str) else None
            message = str(err.get("message", ""))
            details.update((k, v) for k, v in err.items() if k not in ("code", "message"))
        elif isinstance(err, str):
            code = err
    if not message:
        text = body[:200].decode("utf-8", "replace").strip() if body else ""
        message = text or f"HTTP {status}"
    cls = error_class(code, status)
    if code is None:
        code = _DEFAULT_CODE.get(cls, f"http_{status}")
    if cls is Conflict:
        rev = details.get("revision", 0)
        current = parse_kv(details.get("kv"), ns or "default", rev if isinstance(rev, int) else 0)
        return Conflict(message, current=current, code=code, status=status, details=details)
    return cls(message, code=code, status=status, details=details)


_DEFAULT_CODE: Final[dict[type[StatekeeperError], str]] = {
    NotFound: "not_found",
    Conflict: "compare_failed",
    Unavailable: "unavailable",
    Timeout: "timeout",
    InvalidRequest: "invalid_argument",
}


def error_from_dict(
    err: Any, ns: str | None = None, extra: Mapping[str, Any] | None = None
) -> StatekeeperError:
    """The exception for a per-op ``{"error": {...}}`` result (batch, txn)."""
    if not isinstance(err, Mapping):
        err = {"code": str(err)}
    code = err.get("code") if isinstance(err.get("code"), str) else "error"
    details = {k: v for k, v in err.items() if k not in ("code", "message")}
    if extra:
        details.update(extra)
    cls = error_class(code)
    message = str(err.get("message", code))
    if cls is Conflict:
        current = parse_kv(details.get("kv"), ns or "default", 0)
        return Conflict(message, current=current, code=code, details=details)
    return cls(message, code=code, details=details)


def _tls_failure(cause: BaseException | None) -> ssl.SSLError | None:
    """The TLS error somewhere in ``cause``'s chain (urllib3 and asyncio both wrap it)."""
    seen = 0
    while cause is not None and seen < 8:
        if isinstance(cause, ssl.SSLError) and not isinstance(cause, ssl.SSLEOFError):
            return cause
        nested = [a for a in getattr(cause, "args", ()) if isinstance(a, BaseException)]
        cause = cause.__cause__ or cause.__context__ or (nested[0] if nested else None)
        seen += 1
    return None


def connection_error(
    kind: str, endpoint: str, cause: BaseException | None = None
) -> StatekeeperError:
    """Client-side failure below HTTP. ``kind``: ``connect`` (request not sent), ``lost``
    (connection broke after sending: outcome unknown) or ``timeout`` (no answer in time)."""
    reason = f"{type(cause).__name__}: {cause}" if cause is not None else ""
    tls = _tls_failure(cause)
    if tls is not None:
        err: StatekeeperError = TlsError(
            f"TLS with {endpoint} failed, the request was not delivered: {tls}",
            code="tls_failed",
            endpoint=endpoint,
        )
    elif kind == "connect":
        err = Unavailable(
            f"cannot connect to {endpoint} ({reason})", code="connection_failed", endpoint=endpoint
        )
    elif kind == "timeout":
        err = Timeout(
            f"no answer from {endpoint} in time; the outcome is unknown ({reason})",
            code="client_timeout",
            endpoint=endpoint,
        )
    else:
        err = Unavailable(
            f"connection to {endpoint} lost; the outcome is unknown ({reason})",
            code="connection_lost",
            endpoint=endpoint,
        )
    err.__cause__ = cause
    return err


def _payload(d: Mapping[str, Any], name: str) -> bytes:
    """The bytes of field ``name`` (msgpack bin, JSON text, or JSON ``<name>_b64``)."""
    value = d.get(name)
    if value is None:
        b64 = d.get(f"{name}_b64")  # JSON answers carry non-UTF-8 bytes this way
        return base64.b64decode(b64) if b64 is not None else b""
    if type(value) is str:
        return value.encode("utf-8")
    return value


def parse_kv(d: Any, ns: str, revision: int) -> KeyValue | None:
    if d is None:
        return None
    value = _payload(d, "value")
    key = d.get("key")
    if type(key) is bytes:
        key = key.decode("utf-8", "replace")
    return KeyValue(
        key,
        value,
        d.get("version", 0),
        d.get("create_revision", 0),
        d.get("mod_revision", 0),
        d.get("ns") or ns,
        revision,
    )


def write_result(d: Mapping[str, Any], ns: str) -> WriteResult:
    rev = d.get("revision", 0)
    return WriteResult(
        rev,
        parse_kv(d.get("prev_kv"), ns, rev),
        parse_kv(d.get("kv"), ns, rev),
        bool(d.get("replayed", False)),
        d.get("lease"),
    )


def delete_result(d: Mapping[str, Any], ns: str) -> DeleteResult:
    rev = d.get("revision", 0)
    prev = [parse_kv(kv, ns, rev) for kv in d.get("prev_kvs") or ()]
    return DeleteResult(rev, d.get("deleted", 0), prev, bool(d.get("replayed", False)))  # type: ignore[arg-type]


def range_result(d: Mapping[str, Any], ns: str) -> RangeResult:
    rev = d.get("revision", 0)
    kvs = [parse_kv(kv, ns, rev) for kv in d.get("kvs") or ()]
    return RangeResult(kvs, rev, bool(d.get("more", False)), d.get("continuation"))  # type: ignore[arg-type]


def cas_result(d: Mapping[str, Any], ns: str) -> WriteResult | Conflict:
    rev = d.get("revision", 0)
    if d.get("succeeded", True) is False:
        current = parse_kv(d.get("kv"), ns, rev)
        return Conflict("compare failed", current=current, details=dict(d))
    return WriteResult(rev, None, parse_kv(d.get("kv"), ns, rev), bool(d.get("replayed", False)))


def compact_result(d: Mapping[str, Any]) -> CompactResult:
    return CompactResult(d.get("revision", 0), d.get("compact_revision", 0))


def txn_result(d: Mapping[str, Any], op: Mapping[str, Any], ns: str) -> TxnResult:
    succeeded = bool(d.get("succeeded", False))
    branch = op.get("success" if succeeded else "failure") or ()
    raw = d.get("results") or ()
    results = [op_result(o, r, o.get("ns") or ns) for o, r in zip(branch, raw, strict=False)]
    return TxnResult(succeeded, d.get("revision", 0), results, bool(d.get("replayed", False)))


def append_result(d: Mapping[str, Any]) -> AppendResult:
    events = [
        AppendedEvent(e.get("seq", 0), bool(e.get("duplicate"))) for e in d.get("events") or ()
    ]
    return AppendResult(
        d.get("revision", 0),
        d.get("stream", ""),
        d.get("first_seq"),
        d.get("last_seq", 0),
        events,
        bool(d.get("replayed", False)),
    )


def _stream_event(e: Mapping[str, Any]) -> StreamEvent:
    return StreamEvent(
        e.get("seq", 0),
        _payload(e, "data"),
        e.get("type", ""),
        e.get("time", 0),
        e.get("revision", 0),
        e.get("id"),
        e.get("meta") or {},
    )


def stream_page(d: Mapping[str, Any]) -> StreamPage:
    events = [_stream_event(e) for e in d.get("events") or ()]
    return StreamPage(
        events,
        d.get("revision", 0),
        d.get("last_seq", 0),
        bool(d.get("more", False)),
        d.get("continuation"),
        d.get("first_seq", 1),
    )


def stream_info(d: Mapping[str, Any], revision: int | None = None) -> StreamInfo:
    return StreamInfo(
        d.get("stream", ""),
        d.get("first_seq", 0),
        d.get("last_seq", 0),
        d.get("count", 0),
        d.get("bytes", 0),
        d.get("create_revision", 0),
        d.get("mod_revision", 0),
        d.get("revision", 0) if revision is None else revision,
        d.get("archived_before"),
    )


def stream_list(d: Mapping[str, Any]) -> StreamList:
    streams = [stream_info(s, 0) for s in d.get("streams") or ()]
    return StreamList(
        streams, d.get("revision", 0), bool(d.get("more", False)), d.get("continuation")
    )


_STREAM_RESULTS: Final = {
    "append": append_result,
    "read_stream": stream_page,
    "stream_info": stream_info,
    "list_streams": stream_list,
}


def op_result(op: Mapping[str, Any], d: Any, ns: str) -> Any:
    """Parse one op's result inside a txn or batch answer (an error becomes the
    exception instance, returned, not raised)."""
    if not isinstance(d, Mapping):
        return malformed(None, f"op result is {type(d).__name__}")
    if "error" in d:
        return error_from_dict(d["error"], ns, {k: v for k, v in d.items() if k != "error"})
    name = op.get("op")
    if name == "put":
        return write_result(d, ns)
    if name == "get":
        return parse_kv(d.get("kv"), ns, d.get("revision", 0))
    if name == "delete":
        return delete_result(d, ns)
    if name == "range":
        return range_result(d, ns)
    if name == "cas":
        return cas_result(d, ns)
    if name == "txn":
        return txn_result(d, op, ns)
    if name == "compact":
        return compact_result(d)
    if name in _STREAM_RESULTS:
        return _STREAM_RESULTS[name](d)
    return dict(d)
