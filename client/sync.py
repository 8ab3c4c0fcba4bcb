"""Blocking client: requests over client/sync_transport.py (keep-alive sockets, httptools),
watch streams over urllib3.

The operations are defined once, in client/commands.py; this module is the transport:
it sends a call's attempts over urllib3 and sleeps between them (``_drive``).

Thread-safe: share one ``Client`` between threads rather than creating one per call.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import urllib3
from urllib3.exceptions import ConnectTimeoutError, HTTPError, ReadTimeoutError
from urllib3.util import parse_url

from .aio_connection import CannotConnect
from .base import Answer, Pages, Plan
from .batch_ops import ClientBatch
from .cache.sync import Cache
from .commands import Commands
from .effects.ledger import Effects
from .errors import StatekeeperError
from .leases.keeper import Lease, ThreadKeeper
from .locks.lock import Lock
from .responses import connection_error, error_from_response
from .retry import Backoff
from .sync_transport import SyncPool
from .watch.core import WatchSession
from .wire import BACKUP_PATH, Request

__all__ = ["Batch", "Client"]

# Failures below HTTP; anything else is a bug and propagates unchanged.
_TRANSPORT_ERRORS = (HTTPError, OSError)


def _kind(exc: BaseException) -> str:
    # ConnectTimeoutError includes NewConnectionError (refused, DNS); CannotConnect is
    # sync_transport's (nothing was sent).
    if isinstance(exc, ConnectTimeoutError | CannotConnect):
        return "connect"
    if isinstance(exc, ReadTimeoutError | TimeoutError):
        return "timeout"
    return "lost"


class Batch(ClientBatch):
    """Ops collected for one POST /v1/batch, sent when the ``with`` block ends or by
    :meth:`execute`; see :meth:`Client.batch`. ``results``: see :class:`ClientBatch`."""

    def execute(self) -> list[Any]:
        """Send the collected ops; returns (and stores in ``results``) the per-op results.
        Sending again resends the same idempotency keys, so writes are not repeated."""
        self.results = self._client._execute(self.request()) if self.ops else []
        return self.results

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None and self.results is None:
            self.execute()


class Client(Commands[Batch]):
    """Blocking statekeeper client.

    Args:
        endpoints: one node URL, a list of them, or a comma-separated string
            (``"http://10.0.0.1:7000,http://10.0.0.2:7000"``). Any node serves any request
            (followers forward writes); the client sticks to the node that last answered
            and moves on to the next one when it fails. None (the default): the URLs in
            $STATEKEEPER_ENDPOINTS (comma-separated, what the CLI reads too), else the nodes
            of ./cluster.toml (the file ``make up`` writes in a checkout), else
            :class:`~client.errors.NoEndpoints` (``no_endpoints``): no guessed default.
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
        token: the bearer token sent with every request (``Authorization: Bearer``);
            default: $STATEKEEPER_TOKEN, else the file named by $STATEKEEPER_TOKEN_FILE,
            else none (a cluster with ``[auth] enabled`` then answers 401).
        archive_roots: the archive roots (URLs or directories) segment files may be read
            from by ``get(..., archived="fetch" | "restore")``, ``read_stream(...,
            archived="fetch")`` and ``archive_restore``; default: $STATEKEEPER_ARCHIVE_ROOTS
            (comma-separated), else none (those reads then raise ArchiveUrlRefused). The
            cluster's segment URL is whatever a writer sealed: docs/archive.md.

    Example::

        from statekeeper import Client
        with Client(["http://127.0.0.1:7000", "http://127.0.0.1:7001"], ns="agent-42") as c:
            rev = c.put("plan", b"step 1").revision
            kv = c.get("plan")
            c.cas("plan", "step 2", expect_mod_revision=kv.mod_revision)
    """

    _batch_type = Batch
    _lease_type = Lease
    _keeper_type = ThreadKeeper
    _lock_type = Lock
    _cache_type = Cache
    _effects_type = Effects

    def _init_transport(self, max_connections: int) -> None:
        # Requests go over sync_transport (a third of urllib3's CPU per request, see
        # there); watch streams over urllib3.
        self._conns = SyncPool(max_connections, self._tls, self._authorization)
        self._pm = urllib3.PoolManager(
            num_pools=len(self._endpoints) + 8,
            maxsize=max_connections,
            block=False,
            retries=False,
            ssl_context=self._tls,
        )
        # Pools looked up once: PoolManager.urlopen would re-parse the URL every call.
        self._pools: dict[str, tuple[urllib3.HTTPConnectionPool, str]] = {}
        for url in self._endpoints.urls:
            self._pool(url)
        self._streams: set[urllib3.BaseHTTPResponse] = set()  # watches being read
        # id(headers) -> (headers, headers + Authorization): see _headers.
        self._with_auth: dict[int, tuple[Any, dict[str, str]]] = {}

    def _pool(self, url: str) -> tuple[urllib3.HTTPConnectionPool, str]:
        entry = self._pools.get(url)
        if entry is None:
            pool = self._pm.connection_from_url(url)
            entry = self._pools[url] = (pool, parse_url(url).path or "")
        return entry

    def _send(self, url: str, req: Request, timeout: float) -> tuple[int, str | None, bytes]:
        return self._conns.send(url, req, timeout)

    def _headers(self, headers: Any) -> Any:
        """A request's headers plus Authorization, merged once per headers mapping."""
        entry = self._with_auth.get(id(headers))
        if entry is not None and entry[0] is headers:
            return entry[1]
        merged = {**headers, "Authorization": self._authorization}
        if len(self._with_auth) < 256:
            self._with_auth[id(headers)] = (headers, merged)
        return merged

    def _attempt(self, url: str, req: Request, timeout: float) -> Answer:
        try:
            return self._send(url, req, timeout)
        except _TRANSPORT_ERRORS as exc:
            return connection_error(_kind(exc), url, exc)

    def _drive(self, plan: Plan) -> Any:
        """Run ``plan`` (see client/base.py): send its attempts, sleep its backoffs."""
        try:
            step = next(plan)
            while True:
                if isinstance(step, Backoff):
                    time.sleep(step.delay)
                    step = next(plan)
                else:
                    step = plan.send(self._attempt(*step))
        except StopIteration as done:
            return done.value

    def _iterate(self, pages: Pages) -> Iterator[Any]:
        for request in pages:
            yield from pages.items(self._execute(request))

    def _watch(self, session: WatchSession) -> Iterator[Any]:
        """Run a watch (client/watch/core.py): stream, resume after failures, end when closed."""
        while not self._closed:
            url, request, timeout = session.attempt()
            try:
                yield from self._watch_stream(session, url, request, timeout)
                err = session.ended()
            except StatekeeperError as e:
                err = e
            except _TRANSPORT_ERRORS as exc:
                err = connection_error(_kind(exc), url, exc)
            if self._closed:
                return
            time.sleep(session.retry_after(err))

    def _watch_stream(
        self, session: WatchSession, url: str, req: Request, timeout: float | None
    ) -> Iterator[Any]:
        pool, prefix = self._pool(url)
        resp = pool.urlopen(
            req.method,
            prefix + req.path,
            body=req.body,
            headers=self._headers(req.headers) if self._authorization else req.headers,
            retries=False,
            redirect=False,
            timeout=urllib3.Timeout(connect=self.timeout, read=timeout),
            preload_content=False,
        )
        self._streams.add(resp)
        try:
            ctype = resp.headers.get("Content-Type")
            if resp.status != 200:
                raise session.refused(resp.status, ctype, resp.read())
            session.start(ctype)
            for data in resp.stream(1 << 16):
                yield from session.feed(data)
        finally:
            self._streams.discard(resp)
            resp.close()  # never reused: the stream may have ended anywhere
            resp.release_conn()

    def backup(self, *, read_timeout: float = 120.0) -> Iterator[bytes]:
        """GET /v1/admin/backup as it arrives: the pieces of the file `statekeeper backup`
        writes (node/backup/file.py; restore it with `statekeeper restore`), as
        AsyncClient.backup. The token must hold admin on every namespace (else
        PermissionDenied, raised before any piece). Memory stays bounded: pieces of 64 KiB
        are read as they are taken. The first endpoint that accepts the connection
        answers (no retry once bytes have flowed: a backup cut short must be taken
        again); ``read_timeout``: seconds without a byte before the read fails."""
        urls = self._endpoints.urls
        start = urls.index(self.endpoint) if self.endpoint in urls else 0
        failures: list[StatekeeperError] = []
        for url in urls[start:] + urls[:start]:
            pool, prefix = self._pool(url)
            headers = {"Accept": "*/*"}
            try:
                resp = pool.urlopen(
                    "GET",
                    prefix + BACKUP_PATH,
                    headers=self._headers(headers) if self._authorization else headers,
                    retries=False,
                    redirect=False,
                    timeout=urllib3.Timeout(connect=self.timeout, read=read_timeout),
                    preload_content=False,
                )
            except _TRANSPORT_ERRORS as exc:
                failures.append(connection_error(_kind(exc), url, exc))
                continue
            self._streams.add(resp)
            try:
                if resp.status != 200:
                    raise error_from_response(
                        resp.status, resp.headers.get("Content-Type"), resp.read()
                    )
                yield from resp.stream(1 << 16)
                return
            finally:
                self._streams.discard(resp)
                resp.close()
                resp.release_conn()
        raise failures[-1]

    def close(self) -> None:
        """Stop keeping leases alive (they expire after their TTL) and close every pooled
        connection. The client cannot be used afterwards."""
        if self._lease_keeper is not None:
            self._lease_keeper.stop()
        self._closed = True
        for resp in list(self._streams):  # wakes a watch blocked in another thread
            with contextlib.suppress(Exception):
                resp.shutdown()
        self._conns.close()
        self._pm.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
