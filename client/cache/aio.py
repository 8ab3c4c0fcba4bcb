"""The cache of an :class:`client.AsyncClient` (docs/cache.md): the same view, guarantees
and arguments as :class:`client.cache.sync.Cache` (whose module docstring states them), driven
by asyncio tasks in the loop that starts it: one reads the watch, one flushes (write-back).

``cache = await client.cache(prefix)`` (or ``async with client.cache(prefix) as cache``)
loads the prefix and starts the tasks; the reads, writes, ``flush`` and ``close`` are
coroutines. A read the view can answer costs no await on the network: it is served before
the coroutine first suspends. Waiting (read-your-writes, ``max_lag``) uses a generation
event that the watch task replaces and sets after every frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from ..errors import Compacted, InvalidRequest, NotFound, StatekeeperError
from ..kv_requests import MISSING
from ..results import DeleteResult, KeyValue, WriteResult
from ..wire import encode_value
from .base import CacheBase, load_steps
from .core import MISS

__all__ = ["AsyncCache"]

log = logging.getLogger("statekeeper.client.cache")


class AsyncCache(CacheBase):
    """The cache of an AsyncClient (see ``AsyncClient.cache`` and client/cache/sync.py)."""

    def __init__(self, client: Any, prefix: str, **options: Any) -> None:
        super().__init__(client, prefix, **options)
        self._starting: asyncio.Future[AsyncCache] | None = None
        self._changed = asyncio.Event()  # replaced and set after every frame
        self._flush_wake = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._reload = False

    # ---- starting
    def __await__(self) -> Any:
        return self._start().__await__()

    async def _start(self) -> AsyncCache:
        if self._starting is None:  # one start, however many await it
            self._starting = asyncio.ensure_future(self._do_start())
        return await asyncio.shield(self._starting)

    async def _do_start(self) -> AsyncCache:
        await self._load()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._watch_loop()))
        if self._wb is not None:
            self._tasks.append(loop.create_task(self._flush_loop()))
        return self

    def _started(self) -> None:
        if self._starting is None or not self._starting.done():
            raise RuntimeError("await the cache (or enter it with `async with`) first")

    # ---- the view's upkeep (task)
    async def _load(self) -> None:
        steps = load_steps(self.prefix, self.ns, self._view.max_keys)
        try:
            args = next(steps)
            while True:
                args = steps.send(await self._client.range(**args))
        except StopIteration as done:
            kvs, rev, complete = done.value
        self._view.load(kvs, rev, complete)
        if self._wb is not None:
            self._wb.view_reached(rev)
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _watch_loop(self) -> None:
        delay = 0.05
        while not self._closed:
            try:
                if self._reload:
                    await self._load()
                    self._reload = False
                    self.reloads += 1
                async for frame in self._client._watch(self._session(self._view.revision + 1)):
                    self._view.apply(frame)
                    if self._wb is not None:
                        self._wb.view_reached(self._view.revision)
                    self._notify()
                    delay = 0.05
                if self._client._closed:
                    return
            except Compacted as e:  # fell behind compaction: read the prefix again
                self._reload, self.last_error = True, e
            except Exception as e:  # the view must not stop keeping up, whatever failed
                if self._closed or self._client._closed:
                    return
                self.last_error = e if isinstance(e, StatekeeperError) else None
                if not isinstance(e, StatekeeperError | RuntimeError):
                    log.exception("cache of %r: unexpected error in the watch", self.prefix)
                log.warning(
                    "cache of %r: watch failed (%s); retrying in %.2f s", self.prefix, e, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _wait(self, ready: Callable[[], bool], timeout: float | None, what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout or self.timeout)
        while not ready():
            if self._closed:
                raise RuntimeError("AsyncCache is closed")
            left = deadline - loop.time()
            if left <= 0:
                raise self._stale(what)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    # ---- reads
    async def get(
        self,
        key: str,
        *,
        default: Any = MISSING,
        max_lag: float | None = None,
        timeout: float | None = None,
    ) -> KeyValue | Any:
        """``key`` from the view (see :meth:`client.cache.sync.Cache.get`)."""
        self._check(key)
        self._started()
        fresh_after = self._fresh_after(max_lag)
        if not self._view.readable(fresh_after):
            await self._wait(lambda: self._view.readable(fresh_after), timeout, "catch up")
        found = self._local(key)
        if found is not MISS:
            return self._answer(key, *found, default)
        return self._answer(key, *await self._fetch(key, self._view.begin_fetch(key)), default)

    async def _fetch(self, key: str, at: int) -> tuple[KeyValue | None, int]:
        kv: KeyValue | None = None
        rev: int | None = None
        self.fetches += 1
        try:
            kv = await self._client.get(key, ns=self.ns, revision=at, min_revision=at,
                                        consistency="serializable", default=None)  # fmt: skip
            rev = at
        except Compacted:
            try:
                kv = await self._client.get(key, ns=self.ns, consistency="linearizable")
                rev = kv.revision
            except NotFound as e:
                rev = e.revision
        finally:
            kv, rev = self._view.end_fetch(key, kv, rev)
        return kv, rev

    async def wait(self, revision: int, timeout: float | None = None) -> int:
        """Wait until the view reaches ``revision``; returns the view's revision. Raises
        CacheStale after ``timeout``."""
        self._started()
        self._view.heard(revision)
        await self._wait(lambda: self._view.revision >= revision, timeout, f"reach {revision}")
        return self._view.revision

    # ---- writes
    async def put(
        self,
        key: str,
        value: bytes | str,
        *,
        lease: Any = None,
        ttl: float | None = None,
        idempotency_key: str | None = None,
    ) -> WriteResult | None:
        """Write ``key`` (see :meth:`client.cache.sync.Cache.put`)."""
        self._check(key)
        self._started()
        if self._wb is not None:
            self._write_back_only(lease=lease, ttl=ttl, idempotency_key=idempotency_key)
            self._stage(key, encode_value(value))
            return None
        res: WriteResult = await self._client.put(key, value, ns=self.ns, lease=lease, ttl=ttl,
                                                  idempotency_key=idempotency_key)  # fmt: skip
        self._view.wrote(res.revision)
        return res

    async def delete(self, key: str, *, idempotency_key: str | None = None) -> DeleteResult | None:
        """Delete ``key`` (see :meth:`client.cache.sync.Cache.delete`)."""
        self._check(key)
        self._started()
        if self._wb is not None:
            self._write_back_only(idempotency_key=idempotency_key)
            self._stage(key, None)
            return None
        res: DeleteResult = await self._client.delete(
            key, ns=self.ns, idempotency_key=idempotency_key
        )
        if res.deleted:
            self._view.wrote(res.revision)
        return res

    def _stage(self, key: str, value: bytes | None) -> None:
        assert self._wb is not None
        self._wb.stage(key, value)
        self._flush_wake.set()

    # ---- write-back flushing
    async def flush(self) -> None:
        """Send every write buffered before this call and wait until they are committed
        (see :meth:`client.cache.sync.Cache.flush`)."""
        if self._wb is None:
            return
        target = self._wb.seq
        async with self._flush_lock:
            while self._wb.flushed_seq < target:
                await self._flush_one()

    async def _flush_one(self) -> None:
        assert self._wb is not None
        batch = self._wb.take()
        if batch is None:
            return
        try:
            res = await self._client.txn([], self._batch_ops(batch), ns=self.ns,
                                         idempotency_key=batch.idempotency_key)  # fmt: skip
        except Exception as e:  # RuntimeError too (the client closed): sent again later
            self.last_error = e if isinstance(e, StatekeeperError) else None
            self._wb.failed(batch, final=isinstance(e, InvalidRequest))
            self._flush_wake.set()
            raise
        self._wb.landed(batch, res.revision)
        self._view.heard(res.revision)
        self._wb.view_reached(self._view.revision)

    async def _flush_loop(self) -> None:
        assert self._wb is not None
        while not self._closed:
            self._flush_wake.clear()
            wait = self._wb.wait_time()
            if wait is None or wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._flush_wake.wait(), wait)
                continue
            try:
                async with self._flush_lock:
                    if self._wb.wait_time() == 0:
                        await self._flush_one()
            except (StatekeeperError, RuntimeError) as e:
                log.warning("cache of %r: flush failed (%s); retrying", self.prefix, e)

    # ---- closing
    async def close(self) -> None:
        """Flush (write-back), then stop the tasks; a failed final flush is raised after
        they are stopped (its writes are then lost)."""
        if self._closed:
            return
        error: Exception | None = None
        if self._starting is not None and self._starting.done():
            try:
                await self.flush()
            except (StatekeeperError, RuntimeError) as e:  # RuntimeError: the client closed
                error = e
        self._closed = True
        self._notify()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if error is not None:
            raise error

    async def __aenter__(self) -> AsyncCache:
        return await self._start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
