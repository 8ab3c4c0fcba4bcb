"""The client cache of one prefix (docs/cache.md): ``client.cache(prefix)``, a local view
kept fresh by a watch, serving reads in microseconds.

:class:`Cache` is the :class:`client.Client` one: a daemon thread runs the watch (on a
private Client of its own, so closing the cache ends its stream) and, in write-back mode,
a second one flushes. :class:`client.cache.aio.AsyncCache` is the AsyncClient one (asyncio
tasks). Both drive the sans-IO core of client/cache/core.py; :class:`CacheBase` holds what
they share
(client/cache/base.py).

Consistency (docs/cache.md says it for users):

- A read is served from the view at its revision V (``kv.revision``): every key the view
  holds is as the store had it at V, so two reads at the same V are mutually consistent. V
  only grows.
- Read-your-writes: a read after this cache's own write waits until V reaches that write's
  revision (in write-back mode the buffer answers for the keys it holds, at once).
- ``max_lag=s``: the read waits (up to ``timeout``) for a watch frame received at most ``s``
  seconds before it is served, else raises :class:`client.errors.CacheStale`. A frame
  tells what the serving node had applied when it sent it, so this bounds staleness by
  ``s`` plus the frame's trip and that node's own lag behind the leader.
- Without ``max_lag`` a read never waits for the network, except read-your-writes and a
  key an incomplete view does not hold (fetched from the cluster at V).
- Write-back: writes are acknowledged when buffered; a process that dies loses what was
  not flushed yet (RPO: ``flush_ms`` + one flush's round trip while the cluster is
  reachable; unbounded while it is not). Each batch is one txn: all or nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..errors import Compacted, InvalidRequest, NotFound, StatekeeperError
from ..kv_requests import MISSING
from ..results import DeleteResult, KeyValue, WriteResult
from ..wire import encode_value
from .base import CacheBase, load_steps
from .core import MISS

__all__ = ["Cache"]

log = logging.getLogger("statekeeper.client.cache")


class Cache(CacheBase):
    """The cache of a :class:`client.Client` (see ``Client.cache`` and the module
    docstring). Loaded when created; thread-safe; close it (or use ``with``)."""

    def __init__(self, client: Any, prefix: str, **options: Any) -> None:
        super().__init__(client, prefix, **options)
        self._lock = threading.Lock()  # guards the core; the fast path takes only this
        self._cond = threading.Condition(self._lock)
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._flush_wake = threading.Event()
        self._reload = False
        self._load()
        self._watcher = self._open_watcher()
        self._threads = [
            threading.Thread(target=self._watch_loop, name="statekeeper-cache", daemon=True)
        ]
        if self._wb is not None:
            self._threads.append(
                threading.Thread(
                    target=self._flush_loop, name="statekeeper-cache-flush", daemon=True
                )
            )
        for t in self._threads:
            t.start()

    # ---- the view's upkeep (thread)
    def _open_watcher(self) -> Any:
        """The client the watch streams on: one of its own, so that closing it wakes the
        watch thread out of its read (the user's client stays open), with the user's
        client's configuration (its TLS and token included: with_options)."""
        return self._client.with_options(
            ns=self.ns, timeout=self.watch_timeout, prefer_leader=False, max_connections=2
        )

    def _load(self) -> None:
        steps = load_steps(self.prefix, self.ns, self._view.max_keys)
        try:
            args = next(steps)
            while True:
                args = steps.send(self._client.range(**args))
        except StopIteration as done:
            kvs, rev, complete = done.value
        with self._cond:
            self._view.load(kvs, rev, complete)
            if self._wb is not None:
                self._wb.view_reached(rev)
            self._cond.notify_all()

    def _watch_loop(self) -> None:
        delay = 0.05
        while not self._stop.is_set():
            try:
                if self._reload:
                    self._load()
                    self._reload = False
                    self.reloads += 1
                for frame in self._watcher._watch(self._session(self._view.revision + 1)):
                    with self._cond:
                        self._view.apply(frame)
                        if self._wb is not None:
                            self._wb.view_reached(self._view.revision)
                        self._cond.notify_all()
                    delay = 0.05
            except Compacted as e:  # fell behind compaction: read the prefix again
                self._reload, self.last_error = True, e
            except Exception as e:  # the view must not stop keeping up, whatever failed
                if self._stop.is_set():
                    return
                self.last_error = e if isinstance(e, StatekeeperError) else None
                if not isinstance(e, StatekeeperError | RuntimeError):
                    log.exception("cache of %r: unexpected error in the watch", self.prefix)
                log.warning(
                    "cache of %r: watch failed (%s); retrying in %.2f s", self.prefix, e, delay
                )
                self._stop.wait(delay)
                delay = min(delay * 2, 1.0)

    # ---- reads
    def get(
        self,
        key: str,
        *,
        default: Any = MISSING,
        max_lag: float | None = None,
        timeout: float | None = None,
    ) -> KeyValue | Any:
        """``key`` from the view: a KeyValue whose ``revision`` is the view's revision it
        was served at (like ``Client.get``).

        Args:
            key: a key under the cache's prefix.
            default: returned instead of raising NotFound when the key does not exist.
            max_lag: seconds: serve only from a view that heard from the cluster at most
                this long ago (waiting up to ``timeout`` for a watch frame).
            timeout: seconds to wait for read-your-writes or ``max_lag`` (default: the
                client's timeout).

        Raises:
            NotFound: the key does not exist (and no ``default``).
            CacheStale: the view did not get fresh enough within ``timeout``.
        """
        self._check(key)
        fresh_after = self._fresh_after(max_lag)
        with self._lock:
            if not self._view.readable(fresh_after):
                self._wait(lambda: self._view.readable(fresh_after), timeout, "catch up")
            found = self._local(key)
            if found is not MISS:
                return self._answer(key, *found, default)
            at = self._view.begin_fetch(key)
        return self._answer(key, *self._fetch(key, at), default)

    def _fetch(self, key: str, at: int) -> tuple[KeyValue | None, int]:
        """Read ``key`` from the cluster at the view's revision ``at`` (the latest, if that
        was compacted away) and give the answer to the view."""
        kv: KeyValue | None = None
        rev: int | None = None
        self.fetches += 1
        try:
            kv = self._client.get(key, ns=self.ns, revision=at, min_revision=at,
                                  consistency="serializable", default=None)  # fmt: skip
            rev = at
        except Compacted:
            try:
                kv = self._client.get(key, ns=self.ns, consistency="linearizable")
                rev = kv.revision
            except NotFound as e:
                rev = e.revision
        finally:
            with self._cond:
                kv, rev = self._view.end_fetch(key, kv, rev)
        return kv, rev

    def _wait(self, ready: Callable[[], bool], timeout: float | None, what: str) -> None:
        """Wait (holding the condition) until ``ready()``; CacheStale after ``timeout``."""
        ok = self._cond.wait_for(lambda: ready() or self._closed, timeout or self.timeout)
        if self._closed:
            raise RuntimeError("Cache is closed")
        if not ok:
            raise self._stale(what)

    def wait(self, revision: int, timeout: float | None = None) -> int:
        """Wait until the view reaches ``revision`` (e.g. a write another client told you
        about); returns the view's revision. Raises CacheStale after ``timeout``."""
        with self._cond:
            self._view.heard(revision)
            if self._view.revision < revision:
                self._wait(lambda: self._view.revision >= revision, timeout, f"reach {revision}")
            return self._view.revision

    # ---- writes
    def put(
        self,
        key: str,
        value: bytes | str,
        *,
        lease: Any = None,
        ttl: float | None = None,
        idempotency_key: str | None = None,
    ) -> WriteResult | None:
        """Write ``key``. Write-through: sent now, returns the WriteResult; later reads
        wait for the view to show it. Write-back: buffered (returns None) and flushed
        within ``flush_ms``; ``lease``, ``ttl``, ``idempotency_key`` are refused."""
        self._check(key)
        if self._wb is not None:
            self._write_back_only(lease=lease, ttl=ttl, idempotency_key=idempotency_key)
            self._stage(key, encode_value(value))
            return None
        res: WriteResult = self._client.put(key, value, ns=self.ns, lease=lease, ttl=ttl,
                                            idempotency_key=idempotency_key)  # fmt: skip
        with self._cond:
            self._view.wrote(res.revision)
        return res

    def delete(self, key: str, *, idempotency_key: str | None = None) -> DeleteResult | None:
        """Delete ``key`` (not a prefix). Write-through: returns the DeleteResult;
        write-back: buffered, returns None."""
        self._check(key)
        if self._wb is not None:
            self._write_back_only(idempotency_key=idempotency_key)
            self._stage(key, None)
            return None
        res: DeleteResult = self._client.delete(key, ns=self.ns, idempotency_key=idempotency_key)
        if res.deleted:
            with self._cond:
                self._view.wrote(res.revision)
        return res

    def _stage(self, key: str, value: bytes | None) -> None:
        assert self._wb is not None
        with self._cond:
            self._wb.stage(key, value)
        self._flush_wake.set()

    # ---- write-back flushing
    def flush(self) -> None:
        """Send every write buffered before this call (write-back; nothing to do in
        write-through) and wait until they are committed.

        Raises:
            StatekeeperError: a batch could not be sent (it stays buffered and is retried,
                unless the cluster refused it as invalid: then it is dropped).
        """
        if self._wb is None:
            return
        with self._cond:
            target = self._wb.seq
        with self._flush_lock:
            while self._wb.flushed_seq < target:
                self._flush_one()

    def _flush_one(self) -> None:
        """Send one batch (the flush lock held)."""
        assert self._wb is not None
        with self._cond:
            batch = self._wb.take()
        if batch is None:
            return
        try:
            res = self._client.txn([], self._batch_ops(batch), ns=self.ns,
                                   idempotency_key=batch.idempotency_key)  # fmt: skip
        except Exception as e:  # RuntimeError too (the client closed): sent again later
            self.last_error = e if isinstance(e, StatekeeperError) else None
            with self._cond:
                self._wb.failed(batch, final=isinstance(e, InvalidRequest))
            self._flush_wake.set()
            raise
        with self._cond:
            self._wb.landed(batch, res.revision)
            self._view.heard(res.revision)
            self._wb.view_reached(self._view.revision)

    def _flush_loop(self) -> None:
        assert self._wb is not None
        while not self._stop.is_set():
            self._flush_wake.clear()
            with self._cond:
                wait = self._wb.wait_time()
            if wait is None or wait > 0:
                self._flush_wake.wait(wait)
                continue
            try:
                with self._flush_lock:
                    with self._cond:
                        due = self._wb.wait_time() == 0
                    if due:
                        self._flush_one()
            except (StatekeeperError, RuntimeError) as e:
                log.warning("cache of %r: flush failed (%s); retrying", self.prefix, e)

    # ---- closing
    def close(self) -> None:
        """Flush (write-back), stop the watch and the threads. A failed final flush is
        raised after everything is stopped (its writes are then lost)."""
        if self._closed:
            return
        error: Exception | None = None
        try:
            self.flush()
        except (StatekeeperError, RuntimeError) as e:  # RuntimeError: the client is closed
            error = e
        self._closed = True
        self._stop.set()
        self._flush_wake.set()
        self._watcher.close()
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(5)
        if error is not None:
            raise error

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
