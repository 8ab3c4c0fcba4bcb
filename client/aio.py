"""asyncio client over aiohttp (one ClientSession, keep-alive connections).

Same methods and arguments as :class:`client.Client`, as coroutines. One AsyncClient
belongs to one event loop; share it between the tasks of that loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

import aiohttp
from yarl import URL

from .errors import StatekeeperError
from .protocol import (
    CONSISTENCY_LEVELS,
    DEFAULT_ENDPOINT,
    MISSING,
    BatchOps,
    CompactResult,
    DeleteResult,
    KeyValue,
    RangeResult,
    Request,
    TxnResult,
    WriteResult,
    cas_request,
    compact_request,
    compare,
    connection_error,
    delete_request,
    get_request,
    ops,
    put_request,
    range_request,
    scan_next,
    status_request,
    txn_request,
)
from .retry import DEFAULT_RETRY, Backoff, Endpoints, Exchange, RetryPolicy, normalize_endpoint

__all__ = ["AsyncBatch", "AsyncClient"]

_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
# ConnectionTimeoutError only exists from aiohttp 3.10 on.
_CONNECT_ERRORS: tuple[type[BaseException], ...] = tuple(
    c
    for c in (aiohttp.ClientConnectorError, getattr(aiohttp, "ConnectionTimeoutError", None))
    if c is not None
)


def _kind(exc: BaseException) -> str:
    if isinstance(exc, _CONNECT_ERRORS):  # refused, DNS, connect timeout: nothing sent
        return "connect"
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "lost"


class AsyncClient:
    """asyncio statekeeper client; same arguments and methods as :class:`client.Client`.

    Args:
        endpoints: one node URL, a list of them, or a comma-separated string. Any node
            serves any request; the client sticks to the node that last answered and
            moves on to the next one when it fails.
        ns: default namespace of every call.
        timeout: seconds to wait for one HTTP answer.
        retry: the RetryPolicy (attempts, backoff, overall deadline).
        consistency: default read consistency, ``"linearizable"`` or ``"serializable"``.
        prefer_leader: ask ``GET /v1/status`` which node leads and talk to it first.
        max_connections: keep-alive connections kept (in total).

    Example::

        async with AsyncClient("http://127.0.0.1:7000", ns="agent-42") as c:
            await c.put("plan", b"step 1")
            kv = await c.get("plan")

    The aiohttp session is created on first use (or by ``async with``); call
    :meth:`close` (or use ``async with``) when done.
    """

    ops = ops
    """Op builders for :meth:`txn` branches: ``client.ops.put(key, value)`` etc."""
    compare = compare
    """Compare builders for :meth:`txn`: ``client.compare.version(key) == 3`` etc."""

    def __init__(
        self,
        endpoints: str | Sequence[str] = DEFAULT_ENDPOINT,
        *,
        ns: str = "default",
        timeout: float = 10.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        consistency: str = "linearizable",
        prefer_leader: bool = False,
        max_connections: int = 32,
    ) -> None:
        if consistency not in CONSISTENCY_LEVELS:
            raise ValueError(f"consistency must be one of {CONSISTENCY_LEVELS}")
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        self.ns = ns
        self.timeout = float(timeout)
        self.retry = retry
        self.consistency = consistency
        self.prefer_leader = prefer_leader
        self._max_connections = max_connections
        self._endpoints = Endpoints(endpoints)
        self._session: aiohttp.ClientSession | None = None
        # Parsed once per (endpoint, path): building a yarl.URL per call costs.
        self._urls: dict[tuple[str, str], URL] = {}
        self._default_timeout = aiohttp.ClientTimeout(total=self.timeout)
        self._leader_stale = prefer_leader
        self._closed = False

    # ------------------------------------------------------------------ plumbing

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The normalized endpoint URLs."""
        return self._endpoints.urls

    @property
    def endpoint(self) -> str:
        """The endpoint the next request goes to."""
        return self._endpoints.current

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("AsyncClient is closed")
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def _url(self, endpoint: str, path: str) -> URL:
        url = self._urls.get((endpoint, path))
        if url is None:
            url = self._urls[(endpoint, path)] = URL(endpoint + path)
        return url

    async def _send(self, url: str, req: Request, timeout: float) -> tuple[int, str | None, bytes]:
        session = self._session or self._open()
        tmo = (
            self._default_timeout
            if timeout == self.timeout
            else aiohttp.ClientTimeout(total=timeout)
        )
        async with session.request(
            req.method,
            self._url(url, req.path),
            data=req.body,
            headers=req.headers,
            timeout=tmo,
            allow_redirects=False,
        ) as resp:
            body = await resp.read()
            return resp.status, resp.headers.get("Content-Type"), body

    async def _once(self, url: str, req: Request, timeout: float) -> Any:
        """One attempt at ``url``, no retry."""
        try:
            status, ctype, body = await self._send(url, req, timeout)
        except _TRANSPORT_ERRORS as exc:
            raise connection_error(_kind(exc), url, exc) from exc
        return req.parse(status, ctype, body)

    async def _call(self, req: Request) -> Any:
        if self._closed:
            raise RuntimeError("AsyncClient is closed")
        if self._leader_stale:
            await self._discover_leader()
        ex = Exchange(req, self._endpoints, self.retry, self.timeout)
        while True:
            url, timeout = ex.next_attempt()
            try:
                status, ctype, body = await self._send(url, req, timeout)
            except _TRANSPORT_ERRORS as exc:
                out = ex.failed(connection_error(_kind(exc), url, exc))
            else:
                out = ex.received(status, ctype, body)
                if type(out) is not Backoff:
                    return out
            await asyncio.sleep(out.delay)
            if self.prefer_leader:
                await self._discover_leader()

    async def _discover_leader(self) -> None:
        self._leader_stale = False
        timeout = min(self.timeout, 1.0)
        for url in self._endpoints.rotation():
            try:
                info = await self._once(url, status_request(), timeout)
            except StatekeeperError:
                continue
            leader = url if info.get("role") == "leader" else info.get("leader_url")
            if isinstance(leader, str) and self._endpoints.prefer(leader):
                return

    def _ns(self, ns: str | None) -> str:
        return self.ns if ns is None else ns

    def _consistency(self, consistency: str | None) -> str:
        return self.consistency if consistency is None else consistency

    # ------------------------------------------------------------------ API

    async def put(
        self,
        key: str,
        value: bytes | str,
        *,
        ns: str | None = None,
        idempotency_key: str | None = None,
        prev_kv: bool = False,
    ) -> WriteResult:
        """Set ``key`` to ``value`` (bytes, or str stored as UTF-8).

        Args:
            key: the key (str, no NUL, at most 4 KiB of UTF-8).
            value: the value (at most 1 MiB).
            ns: namespace; defaults to the client's.
            idempotency_key: reuse a key to make a repeated call apply once (a fresh
                uuid4 is used otherwise; retries inside the call always reuse it).
            prev_kv: also return the key's previous KeyValue.

        Returns:
            WriteResult with the write's ``revision`` (and ``prev_kv``).

        Raises:
            InvalidRequest: bad key/value, too large.
            Unavailable, Timeout: no node could apply it in time (after retries); for a
                Timeout the write may still happen, retry with ``err.idempotency_key``.
        """
        return await self._call(
            put_request(self._ns(ns), key, value, idempotency_key=idempotency_key, prev_kv=prev_kv)
        )

    async def get(
        self,
        key: str,
        *,
        ns: str | None = None,
        revision: int | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
        default: Any = MISSING,
    ) -> KeyValue | Any:
        """Read ``key``.

        Args:
            key: the key.
            ns: namespace; defaults to the client's.
            revision: read the key as it was right after this store revision.
            consistency: ``"linearizable"`` or ``"serializable"``; defaults to the
                client's.
            min_revision: serve only once the node has applied at least this revision.
            default: returned instead of raising NotFound when the key does not exist.

        Returns:
            The KeyValue (``.value`` bytes, ``.text`` str, ``.version``,
            ``.mod_revision``, ``.revision`` = revision the read was served at).

        Raises:
            NotFound: the key does not exist (and no ``default`` was given).
            Compacted: ``revision`` is older than the compaction point.
            InvalidRequest: ``future_revision`` and other bad arguments.
        """
        return await self._call(
            get_request(
                self._ns(ns),
                key,
                revision=revision,
                consistency=self._consistency(consistency),
                min_revision=min_revision,
                default=default,
            )
        )

    async def delete(
        self,
        key: str,
        *,
        ns: str | None = None,
        prefix: bool = False,
        idempotency_key: str | None = None,
        prev_kv: bool = False,
    ) -> DeleteResult:
        """Delete ``key`` (or, with ``prefix=True``, every key starting with ``key``).

        Deleting a missing key is not an error: ``deleted`` is 0.

        Returns:
            DeleteResult(revision, deleted, prev_kvs).
        """
        return await self._call(
            delete_request(
                self._ns(ns), key, prefix=prefix, prev_kv=prev_kv, idempotency_key=idempotency_key
            )
        )

    async def range(
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
            revision: read as of this store revision.
            consistency: ``"linearizable"`` or ``"serializable"``.
            min_revision: see :meth:`get`.
            keys_only: skip values (``KeyValue.value`` is ``b""``).
            continuation: the previous page's ``continuation``.

        Returns:
            RangeResult(kvs, revision, more, continuation). Use :meth:`scan` to iterate
            over all pages.
        """
        return await self._call(
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

    async def scan(
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
    ) -> AsyncIterator[KeyValue]:
        """Iterate (``async for``) over every matching KeyValue, fetching pages lazily.

        Same selection as :meth:`range`; all pages are read at the first page's revision
        (one consistent snapshot).
        """
        ns = self._ns(ns)
        page = await self.range(
            prefix,
            start=start,
            end=end,
            limit=page_size,
            ns=ns,
            revision=revision,
            consistency=consistency,
            keys_only=keys_only,
        )
        while True:
            for kv in page.kvs:
                yield kv
            nxt = scan_next(page)
            if nxt is None:
                return
            page = await self.range(
                prefix, start=start, end=end, limit=page_size, ns=ns, keys_only=keys_only, **nxt
            )

    async def cas(
        self,
        key: str,
        value: bytes | str,
        *,
        expect_version: int | None = None,
        expect_mod_revision: int | None = None,
        must_not_exist: bool = False,
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> WriteResult:
        """Compare-and-swap: write ``value`` only if the key is as expected.

        Give exactly one of ``expect_version=v`` (0 = missing),
        ``expect_mod_revision=r`` or ``must_not_exist=True``.

        Returns:
            WriteResult(revision, ...) when the swap happened.

        Raises:
            Conflict: the expectation did not hold; ``err.current`` is the key's current
                KeyValue (None if it does not exist). Nothing was written.
            InvalidRequest: not exactly one expectation given, or bad arguments.
        """
        return await self._call(
            cas_request(
                self._ns(ns),
                key,
                value,
                expect_version=expect_version,
                expect_mod_revision=expect_mod_revision,
                must_not_exist=must_not_exist,
                idempotency_key=idempotency_key,
            )
        )

    async def txn(
        self,
        compare: Iterable[Mapping[str, Any]],
        success: Iterable[Mapping[str, Any]],
        failure: Iterable[Mapping[str, Any]] = (),
        *,
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> TxnResult:
        """Atomic transaction: if every compare holds run ``success``, else ``failure``.

        ::

            r = await client.txn(
                [client.compare.version("lock") == 0],
                [client.ops.put("lock", "agent-1")],
                [client.ops.get("lock")],
            )

        Branch ops: put, delete, get, range. All writes share one revision.

        Returns:
            TxnResult(succeeded, revision, results), one result per op of the branch run.
        """
        return await self._call(
            txn_request(self._ns(ns), compare, success, failure, idempotency_key=idempotency_key)
        )

    def batch(self, *, ns: str | None = None, consistency: str | None = None) -> AsyncBatch:
        """Collect several ops and send them in one request (POST /v1/batch).

        Not atomic (use :meth:`txn`); ``results`` holds, per op, its result or the
        exception instance (not raised)::

            async with client.batch() as b:
                b.put("a", "1").put("b", "2").get("c")
            a_res, b_res, c_kv = b.results

        Leaving the ``async with`` block sends it; or ``await b.execute()``.
        """
        return AsyncBatch(self, self._ns(ns), consistency)

    async def compact(self, revision: int, *, idempotency_key: str | None = None) -> CompactResult:
        """Drop history older than ``revision`` (reads below it then fail Compacted).

        Args:
            revision: the new compaction point.
            idempotency_key: see :meth:`put`.

        Returns:
            CompactResult(revision, compact_revision).
        """
        return await self._call(compact_request(revision, idempotency_key=idempotency_key))

    async def status(self, endpoint: str | None = None) -> dict[str, Any]:
        """Node status (role, term, leader_url, commit_index, applied_index, revision,
        compact_revision, node id) as a dict.

        Args:
            endpoint: ask this node (one attempt, no retry); by default the current
                endpoint, with retries.
        """
        if endpoint is None:
            return await self._call(status_request())
        if self._closed:
            raise RuntimeError("AsyncClient is closed")
        return await self._once(normalize_endpoint(endpoint), status_request(), self.timeout)

    async def close(self) -> None:
        """Close the session and its connections. The client cannot be used afterwards."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> AsyncClient:
        self._open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncClient({list(self.endpoints)!r}, ns={self.ns!r})"


class AsyncBatch(BatchOps):
    """Ops collected for one POST /v1/batch; see :meth:`AsyncClient.batch`.

    Attributes:
        results: after sending, one entry per op: its result or the StatekeeperError
            instance for an op that failed.
    """

    def __init__(self, client: AsyncClient, ns: str, consistency: str | None = None) -> None:
        super().__init__(ns, consistency)
        self._client = client
        self.results: list[Any] | None = None

    async def execute(self) -> list[Any]:
        """Send the collected ops; returns (and stores in ``results``) the per-op results."""
        self.results = await self._client._call(self.request()) if self.ops else []
        return self.results

    async def __aenter__(self) -> AsyncBatch:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None and self.results is None:
            await self.execute()
