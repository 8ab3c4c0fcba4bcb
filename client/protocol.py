"""Sans-IO core of the statekeeper client: requests, responses, results. No sockets here.

``Client`` (urllib3) and ``AsyncClient`` (asyncio) both build a :class:`Request` with the
functions below, send ``request.body`` to ``endpoint + request.path`` and hand the
answer's status, Content-Type and body to ``request.parse``, which returns the result or
raises the typed exception. Keeping every wire detail here means the two clients cannot
drift apart, and all of it is testable without a network.

Wire format: msgpack (``application/msgpack``), values as bin. ``str`` values are
encoded as UTF-8 before sending; values always come back as ``bytes``
(:attr:`KeyValue.text` decodes them).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

from .errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    StatekeeperError,
    Timeout,
    Unavailable,
    error_class,
)

__all__ = [
    "MISSING",
    "CompactResult",
    "Compare",
    "DeleteResult",
    "KeyValue",
    "Ops",
    "RangeResult",
    "Request",
    "TxnResult",
    "WriteResult",
    "BatchOps",
    "compare",
    "ops",
]

DEFAULT_ENDPOINT: Final = "http://127.0.0.1:7000"
MSGPACK: Final = "application/msgpack"
_MSGPACK_TYPES: Final = (MSGPACK, "application/x-msgpack")
LINEARIZABLE: Final = "linearizable"
SERIALIZABLE: Final = "serializable"
CONSISTENCY_LEVELS: Final = (LINEARIZABLE, SERIALIZABLE)

# Shared, never mutated: building header dicts per request is measurable overhead.
_POST_HEADERS: Final[Mapping[str, str]] = {"Content-Type": MSGPACK, "Accept": MSGPACK}
_GET_HEADERS: Final[Mapping[str, str]] = {"Accept": MSGPACK}

_WRITE_OPS: Final = frozenset({"put", "delete", "cas", "txn", "compact"})


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final[Any] = _Missing()
"""Sentinel: "no default given" for :meth:`Client.get`."""


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as stored.

    Attributes:
        key: the key (str).
        value: the value (always bytes; empty for ``keys_only`` reads).
        version: writes since the key was (re)created; 1 right after creation.
        create_revision: store revision that created the key.
        mod_revision: store revision of the last write to the key.
        ns: namespace of the key.
        revision: store revision the read was served at (0 when the kv did not come
            from a read). Not part of equality.
    """

    key: str
    value: bytes
    version: int
    create_revision: int
    mod_revision: int
    ns: str = "default"
    revision: int = field(default=0, compare=False)

    @property
    def text(self) -> str:
        """The value decoded as UTF-8 (raises UnicodeDecodeError if it is not)."""
        return self.value.decode("utf-8")


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Result of ``put`` and of a successful ``cas``.

    Attributes:
        revision: store revision of the write.
        prev_kv: the key before the write (only when asked with ``prev_kv=True`` and
            the key existed).
        kv: the key after a ``cas``, when the server returns it.
        replayed: True if this was a retry the server had already applied (the stored
            result of the first application is returned, nothing was written twice).
    """

    revision: int
    prev_kv: KeyValue | None = None
    kv: KeyValue | None = None
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """Result of ``delete``: ``deleted`` keys removed at ``revision`` (the current
    revision when nothing was deleted); ``prev_kvs`` when asked with ``prev_kv=True``."""

    revision: int
    deleted: int
    prev_kvs: list[KeyValue] = field(default_factory=list)
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class RangeResult:
    """One page of a ``range`` read, in key byte order.

    Attributes:
        kvs: the keys of this page.
        revision: store revision the page was read at.
        more: True if keys remain after this page.
        continuation: pass it back as ``range(..., continuation=..., revision=...)`` to
            get the next page (or use ``scan()``, which does that for you).
    """

    kvs: list[KeyValue]
    revision: int
    more: bool = False
    continuation: Any = None

    def __iter__(self) -> Iterator[KeyValue]:
        return iter(self.kvs)

    def __len__(self) -> int:
        return len(self.kvs)


@dataclass(frozen=True, slots=True)
class TxnResult:
    """Result of ``txn``.

    Attributes:
        succeeded: True if every compare held (the ``success`` branch ran), False if the
            ``failure`` branch ran.
        revision: store revision of the txn's writes (the current one if it wrote
            nothing).
        results: one entry per op of the branch that ran: WriteResult for put,
            DeleteResult for delete, KeyValue or None for get, RangeResult for range.
    """

    succeeded: bool
    revision: int
    results: list[Any] = field(default_factory=list)
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class CompactResult:
    """Result of ``compact``: history below ``compact_revision`` is gone."""

    revision: int
    compact_revision: int


# ------------------------------------------------------------------------ requests

Parser = Callable[[int, "str | None", bytes], Any]


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP exchange, ready to send.

    ``body`` is built once, so every retry of a call sends the very same bytes, including
    the same idempotency key: that is what makes a retried write take effect once.
    """

    method: str
    path: str
    body: bytes | None
    headers: Mapping[str, str]
    parse: Parser
    idempotency_key: str | None = None
    op: str = ""


def new_idempotency_key() -> str:
    """A fresh idempotency key: a random (version 4) UUID as 32 hex digits."""
    # Same bits as uuid.uuid4().hex, without building a UUID object (5x faster).
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    return b.hex()


def encode_value(value: Any) -> bytes:
    """Value to wire bytes: bytes-like as is, str as UTF-8."""
    if type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(
        f"value must be bytes or str, not {type(value).__name__} (serialize it first, "
        "e.g. json.dumps or msgpack.packb)"
    )


def _check_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    raise TypeError(f"key must be str, not {type(key).__name__}")


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _post(
    path: str, body: dict[str, Any], parse: Parser, op: str, key: str | None = None
) -> Request:
    return Request("POST", path, _pack(body), _POST_HEADERS, parse, key, op)


def _read_options(
    body: dict[str, Any], revision: int | None, consistency: str | None, min_revision: int | None
) -> None:
    if revision is not None:
        body["revision"] = revision
    # linearizable is the server default: leaving it out keeps the hot path small.
    if consistency is not None and consistency != LINEARIZABLE:
        if consistency not in CONSISTENCY_LEVELS:
            raise InvalidRequest(
                f"consistency must be one of {CONSISTENCY_LEVELS}, not {consistency!r}",
                code="invalid_argument",
            )
        body["consistency"] = consistency
    if min_revision is not None:
        body["min_revision"] = min_revision


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
        "key": _check_key(key),
        "value": encode_value(value),
        "idempotency_key": ik,
    }
    if prev_kv:
        body["prev_kv"] = True

    def parse(status: int, ctype: str | None, raw: bytes) -> WriteResult:
        return _write_result(_decode_ok(status, ctype, raw, ns), ns)

    return _post("/v1/kv/put", body, parse, "put", ik)


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
    body: dict[str, Any] = {"ns": ns, "key": _check_key(key)}
    _read_options(body, revision, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> Any:
        if status == 404 and default is not MISSING:
            err = error_from_response(status, ctype, raw, ns)
            if err.code == "key_not_found":
                return default
            raise err
        data = _decode_ok(status, ctype, raw, ns)
        kv = _kv(data.get("kv"), ns, data.get("revision", 0))
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

    return _post("/v1/kv/get", body, parse, "get")


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
    body: dict[str, Any] = {"ns": ns, "key": _check_key(key), "idempotency_key": ik}
    if prefix:
        body["prefix"] = True
    if prev_kv:
        body["prev_kv"] = True

    def parse(status: int, ctype: str | None, raw: bytes) -> DeleteResult:
        return _delete_result(_decode_ok(status, ctype, raw, ns), ns)

    return _post("/v1/kv/delete", body, parse, "delete", ik)


def range_body(
    ns: str | None,
    prefix: str | None = None,
    *,
    start: str | None = None,
    end: str | None = None,
    limit: int | None = None,
    continuation: Any = None,
    revision: int | None = None,
    keys_only: bool = False,
) -> dict[str, Any]:
    """The range op's fields (shared by range(), txn and batch)."""
    body: dict[str, Any] = {} if ns is None else {"ns": ns}
    if prefix is not None:
        if start is not None or end is not None:
            raise InvalidRequest(
                "give either prefix or start/end, not both", code="invalid_argument"
            )
        body["prefix"] = _check_key(prefix)
    else:
        if start is not None:
            body["start"] = start
        if end is not None:
            body["end"] = end
    if limit is not None:
        body["limit"] = limit
    if continuation is not None:
        body["continuation"] = continuation
    if revision is not None:
        body["revision"] = revision
    if keys_only:
        body["keys_only"] = True
    return body


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
    _read_options(body, revision, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> RangeResult:
        return _range_result(_decode_ok(status, ctype, raw, ns), ns)

    return _post("/v1/kv/range", body, parse, "range")


def cas_expect(
    expect_version: int | None, expect_mod_revision: int | None, must_not_exist: bool
) -> dict[str, Any]:
    """The ``expect`` field of a cas op; exactly one condition must be given."""
    given = (expect_version is not None) + (expect_mod_revision is not None) + bool(must_not_exist)
    if given != 1:
        raise InvalidRequest(
            "cas needs exactly one of expect_version, expect_mod_revision, must_not_exist",
            code="invalid_argument",
        )
    if expect_version is not None:
        return {"version": expect_version}
    if expect_mod_revision is not None:
        return {"mod_revision": expect_mod_revision}
    return {"exists": False}


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
        "key": _check_key(key),
        "value": encode_value(value),
        "expect": cas_expect(expect_version, expect_mod_revision, must_not_exist),
        "idempotency_key": ik,
    }

    def parse(status: int, ctype: str | None, raw: bytes) -> WriteResult:
        out = _cas_result(_decode_ok(status, ctype, raw, ns), ns)
        if isinstance(out, Conflict):
            raise out
        return out

    return _post("/v1/kv/cas", body, parse, "cas", ik)


def txn_body(
    ns: str | None,
    compare: Iterable[Mapping[str, Any]],
    success: Iterable[Mapping[str, Any]],
    failure: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The txn op's fields; compare/ops may be plain dicts or built with
    :data:`compare` / :data:`ops`."""
    body: dict[str, Any] = {} if ns is None else {"ns": ns}
    body["compare"] = [_norm_cmp(c) for c in compare]
    body["success"] = [_norm_op(o, inner=True) for o in success]
    body["failure"] = [_norm_op(o, inner=True) for o in failure]
    return body


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
        return _txn_result(_decode_ok(status, ctype, raw, ns), body, ns)

    return _post("/v1/kv/txn", body, parse, "txn", ik)


def compact_request(revision: int, *, idempotency_key: str | None = None) -> Request:
    """POST /v1/kv/compact. Compact goes through raft like any write, so it carries an
    idempotency key too: a retry after a lost answer then replays the first result."""
    if not isinstance(revision, int) or isinstance(revision, bool):
        raise TypeError("revision must be an int")
    ik = idempotency_key or new_idempotency_key()

    def parse(status: int, ctype: str | None, raw: bytes) -> CompactResult:
        return _compact_result(_decode_ok(status, ctype, raw, None))

    body = {"revision": revision, "idempotency_key": ik}
    return _post("/v1/kv/compact", body, parse, "compact", ik)


def _parse_status(status: int, ctype: str | None, raw: bytes) -> dict[str, Any]:
    return _decode_ok(status, ctype, raw, None)


_STATUS_REQUEST: Final = Request(
    "GET", "/v1/status", None, _GET_HEADERS, _parse_status, None, "status"
)


def status_request() -> Request:
    """GET /v1/status; ``parse`` returns the decoded dict."""
    return _STATUS_REQUEST


def batch_request(
    op_list: Sequence[Mapping[str, Any]], *, ns: str, consistency: str | None = None
) -> Request:
    """POST /v1/batch with already built ops (each with ``op`` and ``ns``). ``parse``
    returns one entry per op: its result, or the StatekeeperError instance for an op that
    failed (a batch is not atomic, so one failure must not hide the other results)."""
    body: dict[str, Any] = {"ops": list(op_list)}
    _read_options(body, None, consistency, None)

    def parse(status: int, ctype: str | None, raw: bytes) -> list[Any]:
        data = _decode_ok(status, ctype, raw, ns)
        results = data.get("results")
        if not isinstance(results, list) or len(results) != len(body["ops"]):
            raise _malformed(status, "batch answer does not have one result per op")
        return [op_result(o, r, o.get("ns", ns)) for o, r in zip(body["ops"], results, strict=True)]

    return _post("/v1/batch", body, parse, "batch")


# ----------------------------------------------------------------- op/compare builders


class Ops:
    """Builders for the ops of a :meth:`Client.txn` branch (or :meth:`Client.batch`).

    Example::

        from client import ops, compare
        client.txn(
            [compare.version("lock") == 0],
            [ops.put("lock", "me"), ops.get("config")],
            [ops.get("lock")],
        )

    ``ns=None`` means the txn's (or batch's) namespace. Plain dicts in the wire shape
    (``{"op": "put", "key": ..., "value": ...}``) are accepted as well.
    """

    @staticmethod
    def put(
        key: str, value: Any, *, ns: str | None = None, prev_kv: bool = False
    ) -> dict[str, Any]:
        """A put op: set ``key`` to ``value`` (bytes or str)."""
        op: dict[str, Any] = {"op": "put", "key": _check_key(key), "value": encode_value(value)}
        if ns is not None:
            op["ns"] = ns
        if prev_kv:
            op["prev_kv"] = True
        return op

    @staticmethod
    def get(key: str, *, ns: str | None = None, revision: int | None = None) -> dict[str, Any]:
        """A get op; its result is a KeyValue, or None if the key is missing.
        ``revision`` is for batch() only: reads inside a txn see the txn's revision."""
        op: dict[str, Any] = {"op": "get", "key": _check_key(key)}
        if ns is not None:
            op["ns"] = ns
        if revision is not None:
            op["revision"] = revision
        return op

    @staticmethod
    def delete(
        key: str, *, ns: str | None = None, prefix: bool = False, prev_kv: bool = False
    ) -> dict[str, Any]:
        """A delete op (``prefix=True``: every key starting with ``key``)."""
        op: dict[str, Any] = {"op": "delete", "key": _check_key(key)}
        if ns is not None:
            op["ns"] = ns
        if prefix:
            op["prefix"] = True
        if prev_kv:
            op["prev_kv"] = True
        return op

    @staticmethod
    def range(
        prefix: str | None = None,
        *,
        start: str | None = None,
        end: str | None = None,
        limit: int | None = None,
        ns: str | None = None,
        revision: int | None = None,
        keys_only: bool = False,
    ) -> dict[str, Any]:
        """A range op; its result is a RangeResult (``revision``: batch() only, as for get)."""
        op = {"op": "range"}
        op.update(
            range_body(
                ns,
                prefix,
                start=start,
                end=end,
                limit=limit,
                revision=revision,
                keys_only=keys_only,
            )
        )
        return op


class _Target:
    """Left side of a comparison; ``==``, ``!=``, ``<``, ``>`` produce the cmp dict."""

    __slots__ = ("_key", "_ns", "_target")

    def __init__(self, target: str, key: str, ns: str | None) -> None:
        self._target = target
        self._key = _check_key(key)
        self._ns = ns

    def _cmp(self, op: str, value: Any) -> dict[str, Any]:
        if self._target == "value":
            value = encode_value(value)
        cmp: dict[str, Any] = {"key": self._key, "target": self._target, "op": op, "value": value}
        if self._ns is not None:
            cmp["ns"] = self._ns
        return cmp

    def __eq__(self, value: Any) -> dict[str, Any]:  # type: ignore[override]
        return self._cmp("==", value)

    def __ne__(self, value: Any) -> dict[str, Any]:  # type: ignore[override]
        return self._cmp("!=", value)

    def __lt__(self, value: Any) -> dict[str, Any]:
        return self._cmp("<", value)

    def __gt__(self, value: Any) -> dict[str, Any]:
        return self._cmp(">", value)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"compare.{self._target}({self._key!r})"


class Compare:
    """Builders for txn compares. A missing key has version 0 and revisions 0.

    Examples::

        compare.version("k") == 3
        compare.mod_revision("k") < 100
        compare.value("k") != b"old"
        compare.exists("k")         # the key exists
        compare.missing("k")        # the key does not exist
    """

    @staticmethod
    def version(key: str, *, ns: str | None = None) -> _Target:
        """Compare the key's version."""
        return _Target("version", key, ns)

    @staticmethod
    def mod_revision(key: str, *, ns: str | None = None) -> _Target:
        """Compare the revision of the key's last write."""
        return _Target("mod_revision", key, ns)

    @staticmethod
    def create_revision(key: str, *, ns: str | None = None) -> _Target:
        """Compare the revision that created the key."""
        return _Target("create_revision", key, ns)

    @staticmethod
    def value(key: str, *, ns: str | None = None) -> _Target:
        """Compare the key's value (bytes or str)."""
        return _Target("value", key, ns)

    @staticmethod
    def exists(key: str, *, ns: str | None = None) -> dict[str, Any]:
        """Holds if the key exists."""
        return _Target("exists", key, ns)._cmp("==", True)

    @staticmethod
    def missing(key: str, *, ns: str | None = None) -> dict[str, Any]:
        """Holds if the key does not exist."""
        return _Target("exists", key, ns)._cmp("==", False)


ops: Final = Ops()
compare: Final = Compare()


def _norm_cmp(c: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(c, _Target):
        raise TypeError(f"{c!r} is not a comparison; write e.g. {c!r} == 1")
    if not isinstance(c, Mapping):
        raise TypeError(f"a compare must be a dict, not {type(c).__name__}")
    out = dict(c)
    if out.get("target") == "value" and isinstance(out.get("value"), str):
        out["value"] = out["value"].encode("utf-8")
    return out


def _norm_op(o: Mapping[str, Any], *, inner: bool) -> dict[str, Any]:
    if not isinstance(o, Mapping) or "op" not in o:
        raise TypeError("an op must be a dict with an 'op' field (use client.ops.put(...) etc.)")
    out = dict(o)
    if "value" in out and out["op"] in ("put", "cas"):
        out["value"] = encode_value(out["value"])
    if out["op"] == "txn":
        if inner:
            raise InvalidRequest("txn ops cannot be nested", code="invalid_argument")
        out.update(
            txn_body(
                out.get("ns"),
                out.get("compare", ()),
                out.get("success", ()),
                out.get("failure", ()),
            )
        )
    return out


# ------------------------------------------------------------------------- batches


class BatchOps:
    """Collects ops for one POST /v1/batch. Not atomic (use txn for that): each op
    succeeds or fails on its own. Every write op gets its own idempotency key when it is
    added, so resending the same batch (retries included) applies each write once.

    The ``put/get/...`` methods return ``self`` so calls can be chained.
    """

    def __init__(self, ns: str, consistency: str | None = None) -> None:
        self.ns = ns
        self.consistency = consistency
        self.ops: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.ops)

    def _add(
        self, op: dict[str, Any], ns: str | None, idempotency_key: str | None = None
    ) -> BatchOps:
        op["ns"] = ns if ns is not None else self.ns
        if op["op"] in _WRITE_OPS:
            op["idempotency_key"] = idempotency_key or new_idempotency_key()
        self.ops.append(op)
        return self

    def put(
        self,
        key: str,
        value: Any,
        *,
        ns: str | None = None,
        idempotency_key: str | None = None,
        prev_kv: bool = False,
    ) -> BatchOps:
        """Add a put; its result is a WriteResult."""
        return self._add(Ops.put(key, value, prev_kv=prev_kv), ns, idempotency_key)

    def get(self, key: str, *, ns: str | None = None, revision: int | None = None) -> BatchOps:
        """Add a get; its result is a KeyValue, or None if the key is missing."""
        return self._add(Ops.get(key, revision=revision), ns)

    def delete(
        self,
        key: str,
        *,
        ns: str | None = None,
        prefix: bool = False,
        idempotency_key: str | None = None,
        prev_kv: bool = False,
    ) -> BatchOps:
        """Add a delete; its result is a DeleteResult."""
        return self._add(Ops.delete(key, prefix=prefix, prev_kv=prev_kv), ns, idempotency_key)

    def range(
        self,
        prefix: str | None = None,
        *,
        start: str | None = None,
        end: str | None = None,
        limit: int | None = None,
        ns: str | None = None,
        revision: int | None = None,
        keys_only: bool = False,
    ) -> BatchOps:
        """Add a range read; its result is a RangeResult."""
        op = Ops.range(
            prefix, start=start, end=end, limit=limit, revision=revision, keys_only=keys_only
        )
        return self._add(op, ns)

    def cas(
        self,
        key: str,
        value: Any,
        *,
        expect_version: int | None = None,
        expect_mod_revision: int | None = None,
        must_not_exist: bool = False,
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> BatchOps:
        """Add a compare-and-swap; its result is a WriteResult, or a Conflict instance
        (not raised) if the expectation did not hold."""
        op = {
            "op": "cas",
            "key": _check_key(key),
            "value": encode_value(value),
            "expect": cas_expect(expect_version, expect_mod_revision, must_not_exist),
        }
        return self._add(op, ns, idempotency_key)

    def txn(
        self,
        compare: Iterable[Mapping[str, Any]],
        success: Iterable[Mapping[str, Any]],
        failure: Iterable[Mapping[str, Any]] = (),
        *,
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> BatchOps:
        """Add a txn; its result is a TxnResult."""
        op = {"op": "txn"}
        op.update(txn_body(None, compare, success, failure))
        return self._add(op, ns, idempotency_key)

    def add(self, op: Mapping[str, Any]) -> BatchOps:
        """Add a raw op dict in the wire shape (``{"op": "put", "key": ..., ...}``)."""
        out = _norm_op(op, inner=False)
        return self._add(out, out.pop("ns", None), out.pop("idempotency_key", None))

    def request(self) -> Request:
        """The POST /v1/batch request for the ops collected so far."""
        return batch_request(self.ops, ns=self.ns, consistency=self.consistency)


# ------------------------------------------------------------------------ decoding


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


def _malformed(status: int | None, why: str) -> StatekeeperError:
    return StatekeeperError(f"malformed response: {why}", code="malformed_response", status=status)


def _decode_ok(status: int, ctype: str | None, raw: bytes, ns: str | None) -> dict[str, Any]:
    """The decoded body of a 200 answer, or raise the error the answer carries."""
    if status != 200:
        raise error_from_response(status, ctype, raw, ns)
    try:
        data = decode_body(ctype, raw)
    except Exception as exc:
        raise _malformed(status, f"cannot decode {ctype!r} body: {exc}") from exc
    if not isinstance(data, dict):
        raise _malformed(status, f"expected a msgpack map, got {type(data).__name__} ({ctype!r})")
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
        current = _kv(details.get("kv"), ns or "default", rev if isinstance(rev, int) else 0)
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
        current = _kv(details.get("kv"), ns or "default", 0)
        return Conflict(message, current=current, code=code, details=details)
    return cls(message, code=code, details=details)


def connection_error(
    kind: str, endpoint: str, cause: BaseException | None = None
) -> StatekeeperError:
    """Client-side failure below HTTP. ``kind``: ``connect`` (request not sent), ``lost``
    (connection broke after sending: outcome unknown) or ``timeout`` (no answer in time)."""
    reason = f"{type(cause).__name__}: {cause}" if cause is not None else ""
    if kind == "connect":
        err: StatekeeperError = Unavailable(
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


def _kv(d: Any, ns: str, revision: int) -> KeyValue | None:
    if d is None:
        return None
    value = d.get("value")
    if value is None:
        b64 = d.get("value_b64")  # JSON answers carry non-UTF-8 values this way
        value = base64.b64decode(b64) if b64 is not None else b""
    elif type(value) is str:
        value = value.encode("utf-8")
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


def _write_result(d: Mapping[str, Any], ns: str) -> WriteResult:
    rev = d.get("revision", 0)
    return WriteResult(
        rev,
        _kv(d.get("prev_kv"), ns, rev),
        _kv(d.get("kv"), ns, rev),
        bool(d.get("replayed", False)),
    )


def _delete_result(d: Mapping[str, Any], ns: str) -> DeleteResult:
    rev = d.get("revision", 0)
    prev = [_kv(kv, ns, rev) for kv in d.get("prev_kvs") or ()]
    return DeleteResult(rev, d.get("deleted", 0), prev, bool(d.get("replayed", False)))  # type: ignore[arg-type]


def _range_result(d: Mapping[str, Any], ns: str) -> RangeResult:
    rev = d.get("revision", 0)
    kvs = [_kv(kv, ns, rev) for kv in d.get("kvs") or ()]
    return RangeResult(kvs, rev, bool(d.get("more", False)), d.get("continuation"))  # type: ignore[arg-type]


def _cas_result(d: Mapping[str, Any], ns: str) -> WriteResult | Conflict:
    rev = d.get("revision", 0)
    if d.get("succeeded", True) is False:
        current = _kv(d.get("kv"), ns, rev)
        return Conflict("compare failed", current=current, details=dict(d))
    return WriteResult(rev, None, _kv(d.get("kv"), ns, rev), bool(d.get("replayed", False)))


def _compact_result(d: Mapping[str, Any]) -> CompactResult:
    return CompactResult(d.get("revision", 0), d.get("compact_revision", 0))


def _txn_result(d: Mapping[str, Any], op: Mapping[str, Any], ns: str) -> TxnResult:
    succeeded = bool(d.get("succeeded", False))
    branch = op.get("success" if succeeded else "failure") or ()
    raw = d.get("results") or ()
    results = [op_result(o, r, o.get("ns") or ns) for o, r in zip(branch, raw, strict=False)]
    return TxnResult(succeeded, d.get("revision", 0), results, bool(d.get("replayed", False)))


def op_result(op: Mapping[str, Any], d: Any, ns: str) -> Any:
    """Parse one op's result inside a txn or batch answer (an error becomes the
    exception instance, returned, not raised)."""
    if not isinstance(d, Mapping):
        return _malformed(None, f"op result is {type(d).__name__}")
    if "error" in d:
        return error_from_dict(d["error"], ns, {k: v for k, v in d.items() if k != "error"})
    name = op.get("op")
    if name == "put":
        return _write_result(d, ns)
    if name == "get":
        return _kv(d.get("kv"), ns, d.get("revision", 0))
    if name == "delete":
        return _delete_result(d, ns)
    if name == "range":
        return _range_result(d, ns)
    if name == "cas":
        return _cas_result(d, ns)
    if name == "txn":
        return _txn_result(d, op, ns)
    if name == "compact":
        return _compact_result(d)
    return dict(d)


def scan_next(page: RangeResult) -> dict[str, Any] | None:
    """Arguments for the page after ``page`` (None when it was the last one).

    Later pages are read at the first page's revision, so a scan is one consistent
    snapshot. They use ``serializable`` + ``min_revision``: a node that has applied that
    revision can serve them locally, without a raft barrier per page.
    """
    if not page.more:
        return None
    if page.continuation is None:
        raise _malformed(200, "range answer has more=true but no continuation")
    return {
        "continuation": page.continuation,
        "revision": page.revision,
        "min_revision": page.revision,
        "consistency": SERIALIZABLE,
    }
