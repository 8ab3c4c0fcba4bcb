"""The operations of both clients, each defined once (redis-py's ``redis/commands`` model:
one definition of a command, two transports).

An operation is a method of :class:`Commands` that builds its request with the builders of
client/kv_requests.py and hands it to ``self._execute(request)``, returning whatever that
returns::

    @command
    def compact(self, revision: int, *, idempotency_key: str | None = None) -> CompactResult:
        return self._execute(compact_request(revision, idempotency_key=idempotency_key))

A write that a batch also takes (put, delete, cas, txn) builds its op (client/ops.py) and
hands it to ``self._write(op, ns, idempotency_key)`` instead: a client sends it, a batch
(client/batch_ops.py) adds it and returns itself, so the batch's method is this one too,
with the same parameters (as a pipeline and a client share each command in redis-py).

:class:`client.Client` runs the call in ``_execute`` and returns the result: its
``compact`` is the method above. :class:`AsyncCommands` (the base of
:class:`client.AsyncClient`) has, for every ``@command``, a coroutine function that awaits
what the method returns (``await client.compact(...)``), and for every ``@paged``
operation an async generator function (``async for kv in client.scan(...)``); the
signature, docstring and annotations stay the method's. Adding an operation is one method
here (or in client/streams/commands.py for streams, inherited by :class:`Commands`);
``tests/unit/test_client_api.py`` checks that both clients keep the same API.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .archive.commands import ArchiveCommands
from .auth.commands import AuthCommands
from .base import Pages, ScanPages, command, paged
from .cache.commands import CacheCommands
from .crdt.commands import CrdtCommands
from .effects.ledger import EffectCommands
from .idempotency.commands import IdempotencyCommands
from .kv_requests import (
    MISSING,
    compact_request,
    get_request,
    metrics_request,
    range_request,
    status_request,
    write_request,
)
from .leases.commands import LeaseCommands
from .locks.commands import LockCommands
from .ops import Ops, cas_op, compare, ops, txn_op, with_fence
from .results import CompactResult, DeleteResult, KeyValue, RangeResult, TxnResult, WriteResult
from .retention.commands import RetentionCommands
from .streams.commands import StreamCommands
from .watch.commands import WatchCommands
from .wire import check_archived_mode

if TYPE_CHECKING:
    from .batch_ops import BatchOps

__all__ = ["AsyncCommands", "Commands", "ScanPages"]

BatchT = TypeVar("BatchT", bound="BatchOps")


class Commands(
    StreamCommands,
    LeaseCommands,
    LockCommands,
    WatchCommands,
    CacheCommands,
    EffectCommands,
    CrdtCommands,
    RetentionCommands,
    ArchiveCommands,
    AuthCommands,
    IdempotencyCommands,
    Generic[BatchT],
):
    """The operations of both clients (the stream ones come from
    :class:`stream_commands.StreamCommands`, the lease ones from
    :class:`lease_commands.LeaseCommands`, the lock ones from
    :class:`lock_commands.LockCommands`, ``watch`` from
    :class:`watch_commands.WatchCommands`, ``cache`` from
    :class:`cache_commands.CacheCommands`, the ``effects`` ledger from
    :class:`effects.EffectCommands`, ``crdt_merge``, ``crdt_get`` and ``crdt`` from
    :class:`crdt_commands.CrdtCommands`, the retention ones and ``truncate_stream`` from
    :class:`retention_commands.RetentionCommands`, the archival ones from
    :class:`archive_commands.ArchiveCommands`, the token ones from
    :class:`auth_commands.AuthCommands`). Each builds its request and returns
    ``self._execute(request)`` (see :class:`base.BaseClient`). A transport subclass
    implements what BaseClient asks for, ``_iterate(pages)`` (run a :class:`base.Pages`,
    yielding the items of its pages) and sets ``_batch_type`` (what :meth:`batch`
    returns)."""

    ops = ops
    """Op builders for :meth:`txn` branches: ``client.ops.put(key, value)`` etc."""
    compare = compare
    """Compare builders for :meth:`txn`: ``client.compare.version(key) == 3`` etc."""

    _batch_type: Callable[[Any, str, str | None], BatchT]

    def _iterate(self, pages: Pages) -> Any:
        raise NotImplementedError

    def _drive_archive(
        self, plan: Any, store: Any = None, progress: Callable[..., Any] | None = None
    ) -> Any:
        """Run an archiver plan (client/archive/archiver.py) over this client."""
        from .archive.archiver import Driver
        from .plan import run

        return run(Driver(self, store, progress), plan)

    def _write(self, op: dict[str, Any], ns: str | None, idempotency_key: str | None) -> Any:
        """Send the write ``op`` (the result, or an awaitable of it on an AsyncClient)."""
        return self._execute(write_request(op, self._ns(ns), idempotency_key))

    @command
    def put(
        self,
        key: str,
        value: bytes | str,
        *,
        ns: str | None = None,
        idempotency_key: str | None = None,
        prev_kv: bool = False,
        lease: Any = None,
        ttl: float | None = None,
        fence: Any = None,
    ) -> WriteResult:
        """Set ``key`` to ``value`` (bytes, or str stored as UTF-8).

        Args:
            key: the key (str, no NUL, at most 4 KiB of UTF-8).
            value: the value (at most 1 MiB).
            ns: namespace; defaults to the client's.
            idempotency_key: reuse a key to make a repeated call apply once (a fresh
                uuid4 is used otherwise; retries inside the call always reuse it).
            prev_kv: also return the key's previous KeyValue.
            lease: attach the key to this lease (a :class:`client.Lease` or a lease id):
                it is deleted when the lease is revoked or expires. A put without
                ``lease`` detaches the key from its lease.
            ttl: seconds: give the key a lease of its own (``result.lease``); the key is
                deleted ``ttl`` seconds from now (not with ``lease``).
            fence: apply the write only while this lock is held: a
                :class:`client.Lock` (or a ``(name, token)`` pair) of the write's
                namespace; else FenceMismatch and nothing is written.

        Returns:
            WriteResult with the write's ``revision`` (and ``prev_kv``; ``lease`` with
            ``ttl``).

        Raises:
            InvalidRequest: bad key/value, too large.
            Unavailable, Timeout: no node could apply it in time (after retries); for a
                Timeout the write may still happen, retry with ``err.idempotency_key``.
            LeaseNotFound: ``lease`` does not exist (revoked or expired); nothing written.
            FenceMismatch: ``fence`` is not the lock holder's (any more); nothing written.
        """
        op = Ops.put(key, value, prev_kv=prev_kv, lease=lease, ttl=ttl)
        return self._write(with_fence(op, fence), ns, idempotency_key)

    @command
    def get(
        self,
        key: str,
        *,
        ns: str | None = None,
        revision: int | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
        default: Any = MISSING,
        archived: str = "error",
    ) -> KeyValue | Any:
        """Read ``key``.

        Args:
            key: the key.
            ns: namespace; defaults to the client's.
            revision: read the key as it was right after this store revision.
            consistency: ``"linearizable"`` or ``"serializable"``; defaults to the
                client's.
            min_revision: serve only once the node has applied at least this revision
                (read-your-writes on a serializable read: pass a write's ``revision``).
            default: returned instead of raising NotFound when the key does not exist
                (not for an archived key: see ``archived``).
            archived: what a key moved to the archive (docs/archive.md) gives:
                ``"error"`` raises Archived (with ``.segment``, ``.url``, ``.sha256``);
                ``"fetch"`` reads its value from the archive segment (the result is an
                ArchivedKeyValue: ``.archived`` True, the version and revisions it had);
                ``"restore"`` restores it into the store (a new revision, version 1) and
                returns the live KeyValue. Fetch and restore need the ``archive`` extra.

        Returns:
            The KeyValue (``.value`` bytes, ``.text`` str, ``.version``,
            ``.mod_revision``, ``.revision`` = revision the read was served at).

        Raises:
            NotFound: the key does not exist (and no ``default`` was given).
            Archived: the key was archived (a NotFound; ``archived="error"``).
            ArchiveCorrupt: ``archived="fetch"``/``"restore"`` found the segment file
                damaged (its sha256 is not the recorded one).
            Compacted: ``revision`` is older than the compaction point.
            InvalidRequest: ``future_revision`` and other bad arguments.
        """
        if check_archived_mode(archived) != "error":
            from .archive.restore import fetch_key

            read = {
                "revision": revision,
                "consistency": consistency,
                "min_revision": min_revision,
                "default": default,
            }
            read = {k: v for k, v in read.items() if v is not None and v is not MISSING}
            return self._drive_archive(fetch_key(key, self._ns(ns), archived, read))
        return self._execute(
            get_request(
                self._ns(ns),
                key,
                revision=revision,
                consistency=self._consistency(consistency),
                min_revision=min_revision,
                default=default,
            )
        )

    @command
    def delete(
        self,
        key: str,
        *,
        ns: str | None = None,
        prefix: bool = False,
        idempotency_key: str | None = None,
        prev_kv: bool = False,
        fence: Any = None,
    ) -> DeleteResult:
        """Delete ``key`` (or, with ``prefix=True``, every key starting with ``key``).

        Deleting a missing key is not an error: ``deleted`` is 0 and the revision does not
        advance.

        Args:
            key: the key, or the prefix.
            ns: namespace; defaults to the client's.
            prefix: treat ``key`` as a prefix.
            idempotency_key: see :meth:`put`.
            prev_kv: also return the deleted KeyValues (``prev_kvs``).
            fence: see :meth:`put`.

        Returns:
            DeleteResult(revision, deleted, prev_kvs).
        """
        op = Ops.delete(key, prefix=prefix, prev_kv=prev_kv)
        return self._write(with_fence(op, fence), ns, idempotency_key)

    @command
    def range(
        self,
        prefix: str | None = None,
        *,
        start: str | None = None,
        end: str | None = None,
        limit: int | None = None,
        ns: str | None = None,
        revision: int | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
        keys_only: bool = False,
        continuation: Any = None,
    ) -> RangeResult:
        """Read one page of keys in byte order: keys starting with ``prefix``, or keys in
        ``[start, end)``, or (neither given) the whole namespace.

        Args:
            prefix: key prefix (exclusive with start/end).
            start: first key (inclusive).
            end: stop before this key (exclusive); open-ended if omitted.
            limit: page size (server default 1000).
            ns: namespace; defaults to the client's.
            revision: read as of this store revision (pass the first page's revision
                with ``continuation`` to page through one snapshot).
            consistency: ``"linearizable"`` or ``"serializable"``.
            min_revision: see :meth:`get`.
            keys_only: skip values (``KeyValue.value`` is ``b""``).
            continuation: the previous page's ``continuation``.

        Returns:
            RangeResult(kvs, revision, more, continuation); iterate it for the kvs.
            Use :meth:`scan` to iterate over all pages.
        """
        return self._execute(
            range_request(
                self._ns(ns),
                prefix,
                start=start,
                end=end,
                limit=limit,
                continuation=continuation,
                revision=revision,
                consistency=self._consistency(consistency),
                min_revision=min_revision,
                keys_only=keys_only,
            )
        )

    @paged
    def scan(
        self,
        prefix: str | None = None,
        *,
        start: str | None = None,
        end: str | None = None,
        ns: str | None = None,
        revision: int | None = None,
        consistency: str | None = None,
        keys_only: bool = False,
        page_size: int | None = None,
    ) -> Iterator[KeyValue]:
        """Iterate over every matching KeyValue, fetching pages lazily (``async for`` on
        an AsyncClient).

        Same selection as :meth:`range`. All pages are read at the revision of the first
        one, so the scan sees one consistent snapshot (it fails with Compacted if that
        revision is compacted away while scanning).
        """
        make = functools.partial(
            range_request,
            self._ns(ns),
            prefix,
            start=start,
            end=end,
            limit=page_size,
            keys_only=keys_only,
        )
        read = {"revision": revision, "consistency": self._consistency(consistency)}
        return self._iterate(ScanPages(make, read))

    @command
    def cas(
        self,
        key: str,
        value: bytes | str,
        *,
        expect_version: int | None = None,
        expect_mod_revision: int | None = None,
        must_not_exist: bool = False,
        ns: str | None = None,
        idempotency_key: str | None = None,
        fence: Any = None,
    ) -> WriteResult:
        """Compare-and-swap: write ``value`` only if the key is as expected.

        Give exactly one expectation:

        - ``expect_version=v``: the key's version is ``v`` (0 = missing);
        - ``expect_mod_revision=r``: the key was last written at revision ``r``;
        - ``must_not_exist=True``: create only.

        ``fence``: see :meth:`put` (checked first: FenceMismatch, also a Conflict).

        Returns:
            WriteResult(revision, ...) when the swap happened.

        Raises:
            Conflict: the expectation did not hold; ``err.current`` is the key's current
                KeyValue (None if it does not exist). Nothing was written.
            InvalidRequest: not exactly one expectation given, or bad arguments.
        """
        op = cas_op(key, value, expect_version, expect_mod_revision, must_not_exist)
        return self._write(with_fence(op, fence), ns, idempotency_key)

    @command
    def txn(
        self,
        compare: Iterable[Mapping[str, Any]],
        success: Iterable[Mapping[str, Any]],
        failure: Iterable[Mapping[str, Any]] = (),
        *,
        ns: str | None = None,
        idempotency_key: str | None = None,
        fence: Any = None,
    ) -> TxnResult:
        """Atomic transaction: if every compare holds run ``success``, else ``failure``.

        Build compares with ``client.compare`` and ops with ``client.ops`` (or pass dicts
        in the wire shape)::

            r = client.txn(                                    # await it, on an AsyncClient
                [client.compare.version("lock") == 0],          # nobody holds it
                [client.ops.put("lock", "agent-1")],
                [client.ops.get("lock")],
            )
            if not r.succeeded:
                holder = r.results[0].text

        Branch ops: put, delete, get, range; ``ns=None`` inside them means this txn's
        namespace. All writes share one revision; one txn may not write a key twice.
        ``fence`` (see :meth:`put`) covers the whole txn (its ops take none); a fenced
        txn may release its own lock atomically with its writes:
        ``client.ops.delete(lock.key)``.

        Returns:
            TxnResult(succeeded, revision, results), one result per op of the branch run.
        """
        op = txn_op(compare, success, failure)
        return self._write(with_fence(op, fence), ns, idempotency_key)

    def batch(self, *, ns: str | None = None, consistency: str | None = None) -> BatchT:
        """Collect several ops and send them in one request (POST /v1/batch).

        Not atomic (use :meth:`txn` for that): each op succeeds or fails on its own, and
        ``results`` holds, per op, its result or the exception instance (not raised)::

            with client.batch() as b:                 # async with, on an AsyncClient
                b.put("a", "1").put("b", "2").get("c")
            a_res, b_res, c_kv = b.results

        Leaving the ``with`` block sends the batch (unless it raised); or call
        ``b.execute()`` (awaited, on an AsyncClient). A request-level failure (invalid
        op, unavailable) is raised.

        Returns:
            A :class:`client.Batch` (on an AsyncClient, a :class:`client.AsyncBatch`).
        """
        return self._batch_type(self, self._ns(ns), consistency)

    @command
    def compact(self, revision: int, *, idempotency_key: str | None = None) -> CompactResult:
        """Drop history older than ``revision`` (reads below it then fail Compacted).

        Args:
            revision: the new compaction point.
            idempotency_key: see :meth:`put`.

        Returns:
            CompactResult(revision, compact_revision).
        """
        return self._execute(compact_request(revision, idempotency_key=idempotency_key))

    @command
    def status(self, endpoint: str | None = None) -> dict[str, Any]:
        """Node status (role, term, leader_url, commit_index, applied_index, revision,
        compact_revision, node id) as a dict.

        Args:
            endpoint: ask this node (one attempt, no retry); by default the current
                endpoint, with retries.
        """
        return self._execute(status_request(), endpoint)

    @command
    def metrics(self, endpoint: str | None = None) -> str:
        """The node's Prometheus metrics (GET /metrics, the text exposition;
        docs/protocol.md#metrics), e.g. for a dashboard that has the client at hand
        (the web console's Cluster page).

        Args:
            endpoint: ask this node (one attempt, no retry); by default the current
                endpoint, with retries.
        """
        return self._execute(metrics_request(), endpoint)


def _awaited(cls: type[AsyncCommands[Any]]) -> type[AsyncCommands[Any]]:
    """Give ``cls`` the async form of every operation of :class:`Commands`."""
    for klass in reversed(Commands.__mro__):  # StreamCommands' and LeaseCommands' too
        for name, op in vars(klass).items():
            if isinstance(op, command | paged):
                setattr(cls, name, op.awaited())
    return cls


@_awaited
class AsyncCommands(Commands[BatchT]):
    """:class:`Commands` for an asyncio transport: every ``@command`` operation is a
    coroutine function and every ``@paged`` one an async generator function (see the
    module docstring); ``_execute`` returns an awaitable and ``_iterate`` an async
    iterator."""

    def _drive_archive(
        self, plan: Any, store: Any = None, progress: Callable[..., Any] | None = None
    ) -> Any:
        """Run an archiver plan over this AsyncClient (an awaitable of its result)."""
        from .archive.archiver import AsyncDriver
        from .plan import arun

        return arun(AsyncDriver(self, store, progress), plan)
