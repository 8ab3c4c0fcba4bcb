"""One POST /v1/batch: :class:`BatchOps` collects the ops, :func:`batch_request` sends
them and parses one result per op."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from .ops import Ops, cas_expect, norm_op, txn_body
from .responses import decode_ok, malformed, op_result
from .wire import Request, check_key, encode_value, new_idempotency_key, post, read_options

__all__ = ["BatchOps", "batch_request"]

_WRITE_OPS: Final = frozenset({"put", "delete", "cas", "txn", "compact"})


def batch_request(
    op_list: Sequence[Mapping[str, Any]], *, ns: str, consistency: str | None = None
) -> Request:
    """POST /v1/batch with already built ops (each with ``op`` and ``ns``). ``parse``
    returns one entry per op: its result, or the StatekeeperError instance for an op that
    failed (a batch is not atomic, so one failure must not hide the other results)."""
    body: dict[str, Any] = {"ops": list(op_list)}
    read_options(body, None, consistency, None)

    def parse(status: int, ctype: str | None, raw: bytes) -> list[Any]:
        data = decode_ok(status, ctype, raw, ns)
        results = data.get("results")
        if not isinstance(results, list) or len(results) != len(body["ops"]):
            raise malformed(status, "batch answer does not have one result per op")
        return [op_result(o, r, o.get("ns", ns)) for o, r in zip(body["ops"], results, strict=True)]

    return post("/v1/batch", body, parse, "batch")


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
            "key": check_key(key),
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
        out = norm_op(op, inner=False)
        return self._add(out, out.pop("ns", None), out.pop("idempotency_key", None))

    def request(self) -> Request:
        """The POST /v1/batch request for the ops collected so far."""
        return batch_request(self.ops, ns=self.ns, consistency=self.consistency)
