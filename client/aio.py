"""asyncio client over a small HTTP/1.1 keep-alive connection pool.

Same methods and arguments as :class:`client.Client`, as coroutines: the operations are
defined once, in client/commands.py. This module runs a call's attempts over the
transport of client/aio_transport.py (an ``asyncio.Protocol`` per connection with
httptools parsing the answers) and sleeps between them. One AsyncClient belongs to one
event loop; share it between the tasks of that loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from .aio_connection import Endpoint
from .aio_stream import StreamConnection, open_stream
from .aio_transport import TRANSPORT_ERRORS, Pool, failure_kind
from .base import Pages, Plan
from .batch_ops import ClientBatch
from .cache.aio import AsyncCache
from .commands import AsyncCommands
from .effects.ledger import AsyncEffects
from .errors import StatekeeperError
from .leases.keeper import AsyncLease, TaskKeeper
from .locks.lock import AsyncLock
from .responses import connection_error, error_from_response
from .retry import Backoff
from .watch.core import WatchSession
from .wire import BACKUP_PATH, Request

__all__ = ["AsyncBatch", "AsyncClient"]


class AsyncBatch(ClientBatch):
    """Ops collected for one POST /v1/batch, sent when the ``async with`` block ends or by
    ``await`` :meth:`execute`; see :meth:`AsyncClient.batch`. ``results``: see
    :class:`ClientBatch`."""

    async def execute(self) -> list[Any]:
        """Send the collected ops; returns (and stores in ``results``) the per-op results."""
        self.results = await self._client._execute(self.request()) if self.ops else []
        return self.results

    async def __aenter__(self) -> AsyncBatch:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None and self.results is None:
            await self.execute()


class AsyncClient(AsyncCommands[AsyncBatch]):
    """asyncio statekeeper client; same arguments and methods as :class:`client.Client`.

    Args:
        endpoints: one node URL, a list of them, or a comma-separated string. Any node
            serves any request; the client sticks to the node that last answered and
            moves on to the next one when it fails. None (the default): as for Client,
            $STATEKEEPER_ENDPOINTS, else ./cluster.toml's nodes, else NoEndpoints.
        ns: default namespace of every call.
        timeout: seconds to wait for one HTTP answer.
        retry: the RetryPolicy (attempts, backoff, overall deadline).
        consistency: default read consistency, ``"linearizable"`` or ``"serializable"``.
        prefer_leader: ask ``GET /v1/status`` which node leads and talk to it first, and
            again after a failure (default; saves the follower-to-leader hop). False:
            stick to the order given.
        max_connections: keep-alive connections kept (in total).
        token: the bearer token sent with every request; default: $STATEKEEPER_TOKEN,
            else the file named by $STATEKEEPER_TOKEN_FILE, else none.
        archive_roots: the archive roots (URLs or directories) segment files may be read
            from by ``get(..., archived="fetch" | "restore")``, ``read_stream(...,
            archived="fetch")`` and ``archive_restore``; default: $STATEKEEPER_ARCHIVE_ROOTS
            (comma-separated), else none (those reads then raise ArchiveUrlRefused). The
            cluster's segment URL is whatever a writer sealed: docs/archive.md.

    Example::

        async with AsyncClient("http://127.0.0.1:7000", ns="agent-42") as c:
            await c.put("plan", b"step 1")
            kv = await c.get("plan")

    Connections are opened on first use; call :meth:`close` (or use ``async with``)
    when done.
    """

    _batch_type = AsyncBatch
    _lease_type = AsyncLease
    _keeper_type = TaskKeeper
    _lock_type = AsyncLock
    _cache_type = AsyncCache
    _effects_type = AsyncEffects

    def _init_transport(self, max_connections: int) -> None:
        self._max_connections = max_connections
        # Parsed here so a bad endpoint fails now, not at the first request.
        self._eps = {url: Endpoint(url, self._authorization) for url in self._endpoints.urls}
        self._pool: Pool | None = None  # created on first use, in the loop that uses it
        self._streams: set[StreamConnection] = set()  # watches being read

    def _open(self) -> Pool:
        if self._closed:
            raise RuntimeError("AsyncClient is closed")
        if self._pool is None:
            self._pool = Pool(
                asyncio.get_running_loop(),
                self._max_connections,
                self._eps,
                self._tls,
                self._authorization,
            )
        return self._pool

    async def _drive(self, plan: Plan) -> Any:
        """Run ``plan`` (see client/base.py): send its attempts, sleep its backoffs."""
        try:
            step = next(plan)
            while True:
                if isinstance(step, Backoff):
                    await asyncio.sleep(step.delay)
                    step = next(plan)
                else:
                    step = plan.send(await (self._pool or self._open()).attempt(*step))
        except StopIteration as done:
            return done.value

    async def _iterate(self, pages: Pages) -> AsyncIterator[Any]:
        for request in pages:
            for item in pages.items(await self._execute(request)):
                yield item

    async def _watch(self, session: WatchSession) -> AsyncIterator[Any]:
        """Run a watch (client/watch/core.py): stream, resume after failures, end when closed."""
        while not self._closed:
            url, request, timeout = session.attempt()
            conn: StreamConnection | None = None
            try:
                ep = self._eps.get(url) or Endpoint(url, self._authorization)
                conn = await open_stream(ep, request, self.timeout, self._tls)
                self._streams.add(conn)
                status, ctype = conn.head.result()
                if status != 200:
                    raise session.refused(status, ctype, await conn.read_all(self.timeout))
                session.start(ctype)
                while (data := await conn.read(timeout)) is not None:
                    for item in session.feed(data):
                        yield item
                err = session.ended()
            except StatekeeperError as e:
                err = e
            except TRANSPORT_ERRORS as exc:
                err = connection_error(failure_kind(exc), url, exc)
            finally:
                if conn is not None:
                    self._streams.discard(conn)
                    conn.close()
            if self._closed:
                return
            await asyncio.sleep(session.retry_after(err))

    async def backup(self, *, read_timeout: float = 120.0) -> AsyncIterator[bytes]:
        """GET /v1/admin/backup as it arrives: the pieces of the file `statekeeper backup`
        writes (node/backup/file.py; restore it with `statekeeper restore`). The token must
        hold admin on every namespace (else PermissionDenied, raised before any piece).

        Memory stays bounded whatever the backup's size: the stream's connection stops
        reading the socket above 1 MiB unread (client/aio_stream.py), so a slow consumer
        slows the node's sender. The first endpoint that accepts the connection answers
        (no retry once bytes have flowed: a backup cut short must be taken again).
        ``read_timeout``: seconds without a byte before TimeoutError (the node packs the
        backup while it sends it)."""
        request = Request("GET", BACKUP_PATH, None, {"Accept": "*/*"}, lambda *a: None)
        urls = self._endpoints.urls
        start = urls.index(self.endpoint) if self.endpoint in urls else 0
        conn: StreamConnection | None = None
        failures = []
        for url in urls[start:] + urls[:start]:
            ep = self._eps.get(url) or Endpoint(url, self._authorization)
            try:
                conn = await open_stream(ep, request, self.timeout, self._tls)
                break
            except TRANSPORT_ERRORS as exc:
                failures.append(connection_error(failure_kind(exc), url, exc))
        if conn is None:
            raise failures[-1]
        self._streams.add(conn)
        try:
            status, ctype = conn.head.result()
            if status != 200:
                raise error_from_response(status, ctype, await conn.read_all(self.timeout))
            while (data := await conn.read(read_timeout)) is not None:
                yield data
        finally:
            self._streams.discard(conn)
            conn.close()

    async def close(self) -> None:
        """Stop keeping leases alive (they expire after their TTL) and close the
        connections. The client cannot be used afterwards."""
        if self._lease_keeper is not None:
            await self._lease_keeper.stop()
        self._closed = True
        for conn in list(self._streams):  # a watch reading it ends
            conn.close()
        pool, self._pool = self._pool, None
        if pool is not None and pool.close():
            await asyncio.sleep(0)  # let the transports finish closing their sockets

    async def __aenter__(self) -> AsyncClient:
        self._open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
