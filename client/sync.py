"""Blocking client over urllib3 (one PoolManager, keep-alive connections).

Thread-safe: share one ``Client`` between threads rather than creating one per call.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import urllib3
from urllib3.exceptions import ConnectTimeoutError, HTTPError, ReadTimeoutError
from urllib3.util import parse_url

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

__all__ = ["Batch", "Client"]

# Failures below HTTP; anything else is a bug and propagates unchanged.
_TRANSPORT_ERRORS = (HTTPError, OSError)


def _kind(exc: BaseException) -> str:
    if isinstance(exc, ConnectTimeoutError):  # includes NewConnectionError (refused, DNS)
        return "connect"
    if isinstance(exc, ReadTimeoutError | TimeoutError):
        return "timeout"
    return "lost"


class Client:
    """Blocking statekeeper client.

    Args:
        endpoints: one node URL, a list of them, or a comma-separated string
            (``"http://10.0.0.1:7000,http://10.0.0.2:7000"``). Any node serves any request
            (followers forward writes); the client sticks to the node that last answered
            and moves on to the next one when it fails.
        ns: default namespace of every call (each method takes ``ns=`` to override).
        timeout: seconds to wait for one HTTP answer.
        retry: the RetryPolicy (attempts, backoff, overall deadline).
            ``RetryPolicy.disabled()`` turns retries off.
        consistency: default read consistency: ``"linearizable"`` (always up to date) or
            ``"serializable"`` (served from the node's local state, may be stale, cheaper).
        prefer_leader: ask ``GET /v1/status`` which node leads and talk to it first, and
            again after a failure (default). A follower forwards writes and linearizable
            reads to the leader inside raft, which costs a hop and follower CPU; only URLs
            listed in ``endpoints`` are used. False: stick to the order given.
        max_connections: keep-alive connections kept per node.

    Example::

        from client import Client
        with Client(["http://127.0.0.1:7000", "http://127.0.0.1:7001"], ns="agent-42") as c:
            rev = c.put("plan", b"step 1").revision
            kv = c.get("plan")
            c.cas("plan", "step 2", expect_mod_revision=kv.mod_revision)
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
        prefer_leader: bool = True,
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
        self._endpoints = Endpoints(endpoints)
        self._pm = urllib3.PoolManager(
            num_pools=len(self._endpoints) + 8,
            maxsize=max_connections,
            block=False,
            retries=False,
        )
        # Pools looked up once: PoolManager.urlopen would re-parse the URL every call.
        self._pools: dict[str, tuple[urllib3.HTTPConnectionPool, str]] = {}
        for url in self._endpoints.urls:
            self._pool(url)
        self._default_timeout = urllib3.Timeout(connect=self.timeout, read=self.timeout)
        # With one endpoint there is nothing to choose: no status round trip.
        self.prefer_leader = prefer_leader and len(self._endpoints.urls) > 1
        self._leader_stale = self.prefer_leader
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

    def _pool(self, url: str) -> tuple[urllib3.HTTPConnectionPool, str]:
        entry = self._pools.get(url)
        if entry is None:
            pool = self._pm.connection_from_url(url)
            entry = self._pools[url] = (pool, parse_url(url).path or "")
        return entry

    def _send(self, url: str, req: Request, timeout: float) -> tuple[int, str | None, bytes]:
        pool, prefix = self._pool(url)
        tmo = (
            self._default_timeout
            if timeout == self.timeout
            else urllib3.Timeout(connect=timeout, read=timeout)
        )
        resp = pool.urlopen(
            req.method,
            prefix + req.path,
            body=req.body,
            headers=req.headers,
            retries=False,
            redirect=False,
            timeout=tmo,
            preload_content=True,
        )
        return resp.status, resp.headers.get("Content-Type"), resp.data

    def _once(self, url: str, req: Request, timeout: float) -> Any:
        """One attempt at ``url``, no retry."""
        try:
            status, ctype, body = self._send(url, req, timeout)
        except _TRANSPORT_ERRORS as exc:
            raise connection_error(_kind(exc), url, exc) from exc
        return req.parse(status, ctype, body)

    def _call(self, req: Request) -> Any:
        if self._closed:
            raise RuntimeError("Client is closed")
        if self._leader_stale:
            self._discover_leader()
        ex = Exchange(req, self._endpoints, self.retry, self.timeout)
        while True:
            url, timeout = ex.next_attempt()
            try:
                status, ctype, body = self._send(url, req, timeout)
            except _TRANSPORT_ERRORS as exc:
                out = ex.failed(connection_error(_kind(exc), url, exc))
            else:
                out = ex.received(status, ctype, body)
                if type(out) is not Backoff:
                    return out
            time.sleep(out.delay)
            if self.prefer_leader:
                self._discover_leader()

    def _discover_leader(self) -> None:
        self._leader_stale = False
        timeout = min(self.timeout, 1.0)
        for url in self._endpoints.rotation():
            try:
                info = self._once(url, status_request(), timeout)
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

    def put(
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
        return self._call(
            put_request(self._ns(ns), key, value, idempotency_key=idempotency_key, prev_kv=prev_kv)
        )

    def get(
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
            min_revision: serve only once the node has applied at least this revision
                (read-your-writes on a serializable read: pass a write's ``revision``).
            default: returned instead of raising NotFound when the key does not exist.

        Returns:
            The KeyValue (``.value`` bytes, ``.text`` str, ``.version``,
            ``.mod_revision``, ``.revision`` = revision the read was served at).

        Raises:
            NotFound: the key does not exist (and no ``default`` was given).
            Compacted: ``revision`` is older than the compaction point.
            InvalidRequest: ``future_revision`` and other bad arguments.
        """
        return self._call(
            get_request(
                self._ns(ns),
                key,
                revision=revision,
                consistency=self._consistency(consistency),
                min_revision=min_revision,
                default=default,
            )
        )

    def delete(
        self,
        key: str,
        *,
        ns: str | None = None,
        prefix: bool = False,
        idempotency_key: str | None = None,
        prev_kv: bool = False,
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

        Returns:
            DeleteResult(revision, deleted, prev_kvs).
        """
        return self._call(
            delete_request(
                self._ns(ns), key, prefix=prefix, prev_kv=prev_kv, idempotency_key=idempotency_key
            )
        )

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
        return self._call(
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
        """Iterate over every matching KeyValue, fetching pages lazily.

        Same selection as :meth:`range`. All pages are read at the revision of the first
        one, so the scan sees one consistent snapshot (it fails with Compacted if that
        revision is compacted away while scanning).
        """
        ns = self._ns(ns)
        page = self.range(
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
            yield from page.kvs
            nxt = scan_next(page)
            if nxt is None:
                return
            page = self.range(
                prefix, start=start, end=end, limit=page_size, ns=ns, keys_only=keys_only, **nxt
            )

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
    ) -> WriteResult:
        """Compare-and-swap: write ``value`` only if the key is as expected.

        Give exactly one expectation:

        - ``expect_version=v``: the key's version is ``v`` (0 = missing);
        - ``expect_mod_revision=r``: the key was last written at revision ``r``;
        - ``must_not_exist=True``: create only.

        Returns:
            WriteResult(revision, ...) when the swap happened.

        Raises:
            Conflict: the expectation did not hold; ``err.current`` is the key's current
                KeyValue (None if it does not exist). Nothing was written.
            InvalidRequest: not exactly one expectation given, or bad arguments.
        """
        return self._call(
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

    def txn(
        self,
        compare: Iterable[Mapping[str, Any]],
        success: Iterable[Mapping[str, Any]],
        failure: Iterable[Mapping[str, Any]] = (),
        *,
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> TxnResult:
        """Atomic transaction: if every compare holds run ``success``, else ``failure``.

        Build compares with ``client.compare`` and ops with ``client.ops`` (or pass dicts
        in the wire shape)::

            r = client.txn(
                [client.compare.version("lock") == 0],          # nobody holds it
                [client.ops.put("lock", "agent-1")],
                [client.ops.get("lock")],
            )
            if not r.succeeded:
                holder = r.results[0].text

        Branch ops: put, delete, get, range; ``ns=None`` inside them means this txn's
        namespace. All writes share one revision; one txn may not write a key twice.

        Returns:
            TxnResult(succeeded, revision, results), one result per op of the branch run.
        """
        return self._call(
            txn_request(self._ns(ns), compare, success, failure, idempotency_key=idempotency_key)
        )

    def batch(self, *, ns: str | None = None, consistency: str | None = None) -> Batch:
        """Collect several ops and send them in one request (POST /v1/batch).

        Not atomic (use :meth:`txn` for that): each op succeeds or fails on its own, and
        ``results`` holds, per op, its result or the exception instance (not raised)::

            with client.batch() as b:
                b.put("a", "1").put("b", "2").get("c")
            a_res, b_res, c_kv = b.results

        Leaving the ``with`` block sends the batch (unless it raised); or call
        ``b.execute()``. A request-level failure (invalid op, unavailable) is raised.
        """
        return Batch(self, self._ns(ns), consistency)

    def compact(self, revision: int, *, idempotency_key: str | None = None) -> CompactResult:
        """Drop history older than ``revision`` (reads below it then fail Compacted).

        Args:
            revision: the new compaction point.
            idempotency_key: see :meth:`put`.

        Returns:
            CompactResult(revision, compact_revision).
        """
        return self._call(compact_request(revision, idempotency_key=idempotency_key))

    def status(self, endpoint: str | None = None) -> dict[str, Any]:
        """Node status (role, term, leader_url, commit_index, applied_index, revision,
        compact_revision, node id) as a dict.

        Args:
            endpoint: ask this node (one attempt, no retry); by default the current
                endpoint, with retries.
        """
        if endpoint is None:
            return self._call(status_request())
        if self._closed:
            raise RuntimeError("Client is closed")
        return self._once(normalize_endpoint(endpoint), status_request(), self.timeout)

    def close(self) -> None:
        """Close every pooled connection. The client cannot be used afterwards."""
        self._closed = True
        self._pm.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({list(self.endpoints)!r}, ns={self.ns!r})"


class Batch(BatchOps):
    """Ops collected for one POST /v1/batch; see :meth:`Client.batch`.

    Attributes:
        results: after sending, one entry per op: its result (WriteResult,
            DeleteResult, KeyValue or None, RangeResult, TxnResult) or the
            StatekeeperError instance for an op that failed.
    """

    def __init__(self, client: Client, ns: str, consistency: str | None = None) -> None:
        super().__init__(ns, consistency)
        self._client = client
        self.results: list[Any] | None = None

    def execute(self) -> list[Any]:
        """Send the collected ops; returns (and stores in ``results``) the per-op results.
        Sending again resends the same idempotency keys, so writes are not repeated."""
        self.results = self._client._call(self.request()) if self.ops else []
        return self.results

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None and self.results is None:
            self.execute()
