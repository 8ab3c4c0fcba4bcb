"""The fields of each op, as the wire wants them, each built in one place: :data:`ops`
and :data:`compare` (the builders for txn branches, also used by batches and the single-op
requests), :func:`cas_op` and :func:`txn_op` (the ops txn branches do not take), and
:func:`stream_events` (what an append's ``events`` may be, as the wire wants them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from .errors import InvalidRequest
from .results import Event
from .wire import check_key, encode_value

__all__ = [
    "Compare",
    "Ops",
    "cas_expect",
    "cas_op",
    "compare",
    "fence_field",
    "with_fence",
    "lease_id",
    "norm_op",
    "ops",
    "stream_events",
    "txn_body",
    "ttl_ms",
    "txn_op",
]


def lease_id(lease: Any) -> int:
    """The id of ``lease``: a lease id (int), a :class:`client.Lease`, or a result naming one
    lease (LeaseGrant, LeaseState, LeaseInfo): their ``id``."""
    value = getattr(lease, "id", lease)
    if value is None:
        raise InvalidRequest(
            "the lease is not granted yet (await it, or use `async with`)", code="invalid_argument"
        )
    if type(value) is not int or value < 1:
        raise TypeError(
            f"a lease must be a lease id (int > 0), a Lease or a LeaseGrant, not {lease!r}"
        )
    return value


def ttl_ms(ttl: Any) -> int:
    """A TTL in seconds (int or float > 0) as the wire's milliseconds."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0:
        raise InvalidRequest(
            f"ttl must be a positive number of seconds, not {ttl!r}", code="invalid_argument"
        )
    return max(1, round(ttl * 1000))


def fence_field(fence: Any) -> dict[str, Any]:
    """A write's ``fence``: a :class:`client.Lock` (its ``name`` and ``fence``), a
    ``(name, token)`` pair or a ``{"name", "token"}`` dict, as the wire's ``{name, token}``.
    The server applies the write only while that lock (of the write's namespace) is held
    by the waiter with that token (else ``FenceMismatch``)."""
    if isinstance(fence, Mapping):
        name, token = fence.get("name"), fence.get("token")
    elif isinstance(fence, tuple) and len(fence) == 2:
        name, token = fence
    else:
        name, token = getattr(fence, "name", None), getattr(fence, "fence", None)
    if type(name) is not str or not name:
        raise TypeError(
            f"a fence is a Lock, a (name, token) pair or {{name, token}}, not {fence!r}"
        )
    if type(token) is not int or token < 1:
        raise InvalidRequest(
            f"fence of lock {name!r} has no token (not acquired yet?): {token!r}",
            code="invalid_argument",
        )
    return {"name": name, "token": token}


def with_fence(op: dict[str, Any], fence: Any) -> dict[str, Any]:
    """``op`` with its ``fence`` (see :func:`fence_field`) when one is given."""
    if fence is not None:
        op["fence"] = fence_field(fence)
    return op


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


def cas_op(
    key: str,
    value: Any,
    expect_version: int | None = None,
    expect_mod_revision: int | None = None,
    must_not_exist: bool = False,
) -> dict[str, Any]:
    """A cas op (for :meth:`Client.cas` and batches; a txn branch has no cas)."""
    return {
        "op": "cas",
        "key": check_key(key),
        "value": encode_value(value),
        "expect": cas_expect(expect_version, expect_mod_revision, must_not_exist),
    }


def txn_op(
    compare: Iterable[Mapping[str, Any]],
    success: Iterable[Mapping[str, Any]],
    failure: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A txn op (for :meth:`Client.txn` and batches); see :func:`txn_body`."""
    op: dict[str, Any] = {"op": "txn"}
    op.update(txn_body(None, compare, success, failure))
    return op


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
    body["success"] = [norm_op(o, inner=True) for o in success]
    body["failure"] = [norm_op(o, inner=True) for o in failure]
    return body


def _event(e: Any) -> dict[str, Any]:
    if isinstance(e, Event):
        data, etype, eid, meta = e.data, e.type, e.id, e.meta
    elif isinstance(e, Mapping):
        if "data" not in e:
            raise InvalidRequest("an event dict needs `data`", code="invalid_argument")
        data, etype, eid, meta = e["data"], e.get("type", ""), e.get("id"), e.get("meta")
    else:
        data, etype, eid, meta = e, "", None, None
    out: dict[str, Any] = {"data": encode_value(data)}
    if etype:
        out["type"] = etype
    if eid is not None:
        out["id"] = eid
    if meta:
        out["meta"] = dict(meta)
    return out


def stream_events(events: Any) -> list[dict[str, Any]]:
    """An append's ``events`` field: each of bytes | str | :class:`Event` | dict(data,
    type, id, meta) becomes ``{data, type?, id?, meta?}``; one such value alone is one
    event."""
    if isinstance(events, bytes | bytearray | memoryview | str | Event | Mapping):
        events = [events]
    out = [_event(e) for e in events]
    if not out:
        raise InvalidRequest("an append needs at least one event", code="invalid_argument")
    return out


def append_op(stream: str, events: Any, expect: str | int = "any") -> dict[str, Any]:
    """An append op (``expect`` left out when it is the default, "any")."""
    op: dict[str, Any] = {"op": "append", "stream": check_key(stream)}
    op["events"] = stream_events(events)
    if expect != "any":
        op["expect"] = expect
    return op


# ----------------------------------------------------------------- op/compare builders


class Ops:
    """Builders for the ops of a :meth:`Client.txn` branch (or :meth:`Client.batch`).

    Example::

        from statekeeper import ops, compare
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
        key: str,
        value: Any,
        *,
        ns: str | None = None,
        prev_kv: bool = False,
        lease: Any = None,
        ttl: float | None = None,
    ) -> dict[str, Any]:
        """A put op: set ``key`` to ``value`` (bytes or str); ``lease`` (an id or a Lease)
        attaches the key to that lease, ``ttl`` (seconds) gives it a lease of its own."""
        op: dict[str, Any] = {"op": "put", "key": check_key(key), "value": encode_value(value)}
        if ns is not None:
            op["ns"] = ns
        if prev_kv:
            op["prev_kv"] = True
        if lease is not None and ttl is not None:
            raise InvalidRequest("give either lease or ttl, not both", code="invalid_argument")
        if lease is not None:
            op["lease"] = lease_id(lease)
        elif ttl is not None:
            op["ttl_ms"] = ttl_ms(ttl)
        return op

    @staticmethod
    def get(key: str, *, ns: str | None = None, revision: int | None = None) -> dict[str, Any]:
        """A get op; its result is a KeyValue, or None if the key is missing.
        ``revision`` is for batch() only: reads inside a txn see the txn's revision."""
        op: dict[str, Any] = {"op": "get", "key": check_key(key)}
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
        op: dict[str, Any] = {"op": "delete", "key": check_key(key)}
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
        op: dict[str, Any] = {"op": "range"}
        if ns is not None:
            op["ns"] = ns
        if prefix is not None:
            if start is not None or end is not None:
                raise InvalidRequest(
                    "give either prefix or start/end, not both", code="invalid_argument"
                )
            op["prefix"] = check_key(prefix)
        else:
            if start is not None:
                op["start"] = start
            if end is not None:
                op["end"] = end
        if limit is not None:
            op["limit"] = limit
        if revision is not None:
            op["revision"] = revision
        if keys_only:
            op["keys_only"] = True
        return op

    @staticmethod
    def append(
        stream: str, events: Any, *, ns: str | None = None, expect: str | int = "any"
    ) -> dict[str, Any]:
        """An append op (see :meth:`Client.append`); its result is an AppendResult. In a
        txn it takes the txn's revision, and a failed ``expect`` fails the whole txn."""
        op = append_op(stream, events, expect)
        if ns is not None:
            op["ns"] = ns
        return op

    @staticmethod
    def read_stream(
        stream: str,
        *,
        start: int | None = None,
        direction: str = "forward",
        limit: int | None = None,
        ns: str | None = None,
        revision: int | None = None,
        continuation: Any = None,
    ) -> dict[str, Any]:
        """A read_stream op, for batch() only (not in a txn); its result is a StreamPage."""
        op: dict[str, Any] = {"op": "read_stream", "stream": check_key(stream)}
        fields = {"ns": ns, "start": start, "limit": limit, "revision": revision}
        op.update((k, v) for k, v in fields.items() if v is not None)
        if direction != "forward":
            op["direction"] = direction
        if continuation is not None:
            op["continuation"] = continuation
        return op

    @staticmethod
    def stream_info(stream: str, *, ns: str | None = None) -> dict[str, Any]:
        """A stream_info op, for batch() only; its result is a StreamInfo (or a
        StreamNotFound instance)."""
        op: dict[str, Any] = {"op": "stream_info", "stream": check_key(stream)}
        if ns is not None:
            op["ns"] = ns
        return op

    @staticmethod
    def list_streams(
        prefix: str | None = None,
        *,
        ns: str | None = None,
        limit: int | None = None,
        continuation: Any = None,
    ) -> dict[str, Any]:
        """A list_streams op, for batch() only; its result is a StreamList."""
        op: dict[str, Any] = {"op": "list_streams"}
        fields = {"ns": ns, "prefix": prefix, "limit": limit, "continuation": continuation}
        op.update((k, v) for k, v in fields.items() if v is not None)
        return op


class _Target:
    """Left side of a comparison; ``==``, ``!=``, ``<``, ``>`` produce the cmp dict."""

    __slots__ = ("_key", "_ns", "_target")

    def __init__(self, target: str, key: str, ns: str | None) -> None:
        self._target = target
        self._key = check_key(key)
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


def norm_op(o: Mapping[str, Any], *, inner: bool) -> dict[str, Any]:
    if not isinstance(o, Mapping) or "op" not in o:
        raise TypeError("an op must be a dict with an 'op' field (use client.ops.put(...) etc.)")
    out = dict(o)
    if "value" in out and out["op"] in ("put", "cas"):
        out["value"] = encode_value(out["value"])
    if out["op"] == "append" and "events" in out:
        out["events"] = stream_events(out["events"])
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
