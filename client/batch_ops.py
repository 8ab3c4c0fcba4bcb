"""One POST /v1/batch: :class:`BatchOps` collects the ops, :func:`batch_request` sends
them and parses one result per op.

A batch declares none of its ops' parameters: its writes (put, delete, cas, txn, append)
are the clients' own operations (:class:`commands.Commands`, whose ``self._write`` adds the
op here instead of sending it), and its reads (get, range, read_stream, stream_info,
list_streams) take the parameters of the op builders (:class:`ops.Ops`), as a batch sets
the read consistency once for all.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, Final, ParamSpec

from .commands import Commands
from .ops import Ops, norm_op
from .responses import decode_ok, malformed, op_result
from .wire import Request, new_idempotency_key, post, read_options

__all__ = ["BatchOps", "ClientBatch", "batch_request"]

_WRITE_OPS: Final = frozenset({"put", "delete", "cas", "txn", "compact", "append"})

P = ParamSpec("P")


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


def _method(add: Callable[..., BatchOps], source: Callable[..., Any], doc: str) -> Any:
    """``add`` as the batch method named like ``source``, with ``source``'s parameters
    (``self`` first), returning the batch, documented by ``doc``."""
    params = list(inspect.signature(source).parameters.values())
    if not params or params[0].name != "self":
        params.insert(0, inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD))
    add.__name__ = source.__name__
    add.__qualname__ = f"BatchOps.{source.__name__}"
    add.__doc__ = doc
    add.__annotations__ = {**source.__annotations__, "return": "BatchOps"}
    add.__signature__ = inspect.Signature(params, return_annotation="BatchOps")  # type: ignore[attr-defined]
    return add


def _from_client(
    operation: Callable[Concatenate[Any, P], Any], doc: str
) -> Callable[Concatenate[BatchOps, P], BatchOps]:
    """The batch method of a client write ``operation``: the operation itself, whose
    ``self._write(op, ns, idempotency_key)`` adds the op to the batch."""

    def add(self: BatchOps, *args: P.args, **kwargs: P.kwargs) -> BatchOps:
        return operation(self, *args, **kwargs)

    return _method(add, operation, doc)


def _from_ops(
    build: Callable[P, dict[str, Any]], doc: str
) -> Callable[Concatenate[BatchOps, P], BatchOps]:
    """The batch method adding the read op ``build`` (an :class:`Ops` builder) makes."""

    def add(self: BatchOps, *args: P.args, **kwargs: P.kwargs) -> BatchOps:
        op = build(*args, **kwargs)
        return self._add(op, op.pop("ns", None))

    return _method(add, build, doc)


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

    _write = _add  # what the clients' write operations call with their op

    put = _from_client(Commands.put, "Add a put; its result is a WriteResult.")
    get = _from_ops(Ops.get, "Add a get; its result is a KeyValue, or None if the key is missing.")
    delete = _from_client(Commands.delete, "Add a delete; its result is a DeleteResult.")
    range = _from_ops(Ops.range, "Add a range read; its result is a RangeResult.")
    cas = _from_client(
        Commands.cas,
        "Add a compare-and-swap; its result is a WriteResult, or a Conflict instance\n"
        "(not raised) if the expectation did not hold.",
    )
    txn = _from_client(Commands.txn, "Add a txn; its result is a TxnResult.")
    append = _from_client(
        Commands.append,
        "Add a stream append; its result is an AppendResult, or an ExpectationFailed\n"
        "instance (not raised) if ``expect`` did not hold.",
    )
    read_stream = _from_ops(
        Ops.read_stream, "Add a stream read (no long poll); its result is a StreamPage."
    )
    stream_info = _from_ops(
        Ops.stream_info,
        "Add a stream_info; its result is a StreamInfo, or a StreamNotFound instance.",
    )
    list_streams = _from_ops(Ops.list_streams, "Add a list_streams; its result is a StreamList.")

    def add(self, op: Mapping[str, Any]) -> BatchOps:
        """Add a raw op dict in the wire shape (``{"op": "put", "key": ..., ...}``)."""
        out = norm_op(op, inner=False)
        return self._add(out, out.pop("ns", None), out.pop("idempotency_key", None))

    def request(self) -> Request:
        """The POST /v1/batch request for the ops collected so far."""
        return batch_request(self.ops, ns=self.ns, consistency=self.consistency)


class ClientBatch(BatchOps):
    """Ops collected for one POST /v1/batch; see :meth:`Commands.batch`.

    Attributes:
        results: after sending, one entry per op: its result (WriteResult,
            DeleteResult, KeyValue or None, RangeResult, TxnResult, AppendResult,
            StreamPage, StreamInfo, StreamList) or the StatekeeperError instance for an
            op that failed.
    """

    def __init__(self, client: Any, ns: str, consistency: str | None = None) -> None:
        super().__init__(ns, consistency)
        self._client = client
        self.results: list[Any] | None = None
