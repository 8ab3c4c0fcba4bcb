"""``cache()`` of both clients (docs/cache.md), defined once like every operation (see
client/commands.py, whose :class:`commands.Commands` inherits it). A transport sets
``_cache_type``: :class:`client.cache.sync.Cache` on Client (loaded when created),
:class:`client.cache.aio.AsyncCache` on AsyncClient (loaded when awaited or entered).
"""

from __future__ import annotations

from typing import Any

from ..base import BaseClient

__all__ = ["CacheCommands"]


class CacheCommands(BaseClient):
    """The cache constructor; a transport's ``_cache_type`` is what it returns."""

    _cache_type: Any

    def cache(
        self,
        prefix: str,
        *,
        ns: str | None = None,
        max_keys: int = 100_000,
        max_bytes: int | None = None,
        mode: str = "write-through",
        flush_ms: float = 100,
        progress: float = 0.1,
    ) -> Any:
        """A local view of the keys starting with ``prefix``, kept fresh by a watch: reads
        are served from memory with the revision they reflect (docs/cache.md).

        On a Client the prefix is loaded now and the cache is a context manager::

            with client.cache("agent-7/") as cache:
                cache.put("agent-7/plan", "step 2")
                cache.get("agent-7/plan").text          # "step 2": read-your-writes
                cache.get("agent-7/notes", max_lag=0.5)   # heard from the cluster <= 0.5 s ago

        On an AsyncClient it is loaded when awaited or entered (``async with``), and its
        methods are coroutines.

        Args:
            prefix: the keys to cache (``""``: the whole namespace).
            ns: namespace; defaults to the client's.
            max_keys: most keys held (least recently read evicted first); a key the view
                no longer holds is read from the cluster when asked for.
            max_bytes: most bytes of keys and values held (None: no byte bound).
            mode: ``"write-through"`` (writes go to the cluster; a later read waits until
                the view shows them) or ``"write-back"`` (writes are acknowledged locally
                and flushed as one txn per batch on ``flush()``, on close, and
                ``flush_ms`` after the oldest unflushed write: a crash loses what was not
                flushed yet).
            flush_ms: the write-back flush interval.
            progress: seconds after which an idle watch hears from the server, so an
                idle view's ``lag.seconds`` stays under it.

        Returns:
            A :class:`client.cache.sync.Cache` (on an AsyncClient a
            :class:`client.cache.aio.AsyncCache`): ``get(key, default=, max_lag=,
            timeout=)``, ``put``, ``delete``, ``flush()``, ``wait(revision)``,
            ``revision``, ``lag``, ``stats()``, ``close()``.
        """
        return self._cache_type(
            self,
            prefix,
            ns=ns,
            max_keys=max_keys,
            max_bytes=max_bytes,
            mode=mode,
            flush_ms=flush_ms,
            progress=progress,
        )
