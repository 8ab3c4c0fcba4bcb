"""What the caches of both clients share (client/cache/sync.py, client/cache/aio.py): the
arguments, the sans-IO core (client/cache/core.py) they drive, how a read is answered,
the load's range pages and the watch session (one list per frame). No IO here; the
consistency guarantees are stated in client/cache/sync.py and docs/cache.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any

from ..errors import CacheStale, InvalidRequest, NotFound, StatekeeperError
from ..kv_requests import MISSING
from ..ops import Ops
from ..results import KeyValue, RangeResult
from ..watch.core import WatchSession, watch_request
from .core import Batch, CacheLag, CacheView, WriteBuffer, check_cache_key

__all__ = ["MODES", "CacheBase", "FrameSession", "load_steps"]

MODES = ("write-through", "write-back")
LOAD_PAGE = 1000
WATCH_TIMEOUT = 2.0  # at most: a frozen node's stream is given up after this + progress
Clock = Callable[[], float]


class FrameSession(WatchSession):
    """A :class:`watch.WatchSession` that yields one list per frame (the events of one
    revision, or ``[WatchProgress]``), so the view never shows half a revision."""

    def _frame(self, frame: dict[str, Any]) -> Any:
        items = list(super()._frame(frame))
        if items:
            yield items


def load_steps(
    prefix: str, ns: str, max_keys: int
) -> Generator[dict[str, Any], RangeResult, tuple[list[KeyValue], int, bool]]:
    """The range pages that load a view, sans-IO: yields ``client.range`` arguments, is
    sent each answer; returns ``(kvs, revision, complete)``: at most ``max_keys`` keys, all
    read at the first page's (linearizable) revision."""
    kvs: list[KeyValue] = []
    read: dict[str, Any] = {"consistency": "linearizable"}
    while True:
        limit = min(LOAD_PAGE, max_keys + 1 - len(kvs))  # one more than fits: "incomplete"
        page = yield {"prefix": prefix, "ns": ns, "limit": limit, **read}
        kvs.extend(page.kvs)
        if len(kvs) > max_keys:
            return kvs[:max_keys], page.revision, False
        if not page.more:
            return kvs, page.revision, True
        read = {
            "continuation": page.continuation,
            "revision": page.revision,
            "min_revision": page.revision,
            "consistency": "serializable",
        }


class CacheBase:
    """What both caches share: arguments, the core, answers, stats (no IO)."""

    def __init__(
        self,
        client: Any,
        prefix: str,
        *,
        ns: str | None = None,
        max_keys: int = 100_000,
        max_bytes: int | None = None,
        mode: str = "write-through",
        flush_ms: float = 100,
        progress: float = 0.1,
        clock: Clock = time.monotonic,
    ) -> None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be str, not {type(prefix).__name__}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if not 0 < progress <= 60:
            raise ValueError("progress must be within (0, 60] seconds")
        self._client = client
        self.prefix = prefix
        self.ns = client._ns(ns)
        self.mode = mode
        self.progress = progress
        self.timeout = client.timeout
        self.watch_timeout = min(client.timeout, WATCH_TIMEOUT)
        self._clock = clock
        self._view = CacheView(prefix, self.ns, max_keys=max_keys, max_bytes=max_bytes, clock=clock)
        self._wb = WriteBuffer(flush_ms / 1000, clock=clock) if mode == "write-back" else None
        self._closed = False
        self.fetches = self.reloads = 0
        self.last_error: StatekeeperError | None = None

    # ---- what a read sees
    @property
    def revision(self) -> int:
        """The view's revision: every key it holds is at least as new as this."""
        return self._view.revision

    @property
    def lag(self) -> CacheLag:
        """How far behind the view may be: revisions known and not yet seen, seconds since
        the last watch frame."""
        return self._view.lag()

    def __len__(self) -> int:
        return len(self._view)

    def stats(self) -> dict[str, Any]:
        """Counters: keys held, bytes, complete, hits, misses, fetches, evictions, reloads,
        and in write-back mode unflushed, flushes, dropped, oldest_unflushed_s."""
        v = self._view
        out: dict[str, Any] = {
            "keys": len(v),
            "bytes": v.bytes,
            "complete": v.complete,
            "revision": v.revision,
            "hits": v.hits,
            "misses": v.misses,
            "fetches": self.fetches,
            "evictions": v.evictions,
            "reloads": self.reloads,
        }
        if self._wb is not None:
            oldest = self._wb.oldest()
            out |= {
                "unflushed": self._wb.unflushed,
                "flushes": self._wb.flushes,
                "dropped": self._wb.dropped,
                "oldest_unflushed_s": None if oldest is None else self._clock() - oldest,
            }
        return out

    def _check(self, key: Any) -> str:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")
        return check_cache_key(self.prefix, key)

    def _fresh_after(self, max_lag: float | None) -> float | None:
        if max_lag is None:
            return None
        if max_lag < 0:
            raise ValueError("max_lag must be >= 0")
        return self._clock() - max_lag

    def _local(self, key: str) -> tuple[KeyValue | None, int] | Any:
        """What the buffer or the view says of ``key``, or MISS."""
        if self._wb is not None:
            held, value = self._wb.lookup(key)
            if held:  # not committed yet: no version or revisions of its own
                rev = self._view.revision
                return (None if value is None else KeyValue(key, value, 0, 0, 0, self.ns, rev)), rev
        return self._view.lookup(key)

    def _answer(self, key: str, kv: KeyValue | None, rev: int, default: Any) -> Any:
        if kv is None:
            if default is MISSING:
                raise NotFound(
                    "no such key", code="key_not_found", status=404, details={"revision": rev}
                )
            return default
        return KeyValue(
            kv.key, kv.value, kv.version, kv.create_revision, kv.mod_revision, kv.ns, rev
        )

    def _stale(self, what: str) -> CacheStale:
        lag = self._view.lag()
        return CacheStale(
            f"the cache of {self.prefix!r} did not {what} in time (view at revision "
            f"{lag.revision}, last frame {lag.seconds:.3f} s ago)",
            code="cache_stale",
            details={
                "revision": lag.revision,
                "known_revision": lag.known_revision,
                "lag_seconds": lag.seconds,
                "read_floor": self._view.read_floor,
            },
        )

    def _session(self, start: int) -> FrameSession:
        """The watch of the prefix from ``start``; a dead stream is noticed after
        ``watch_timeout`` + ``progress`` seconds without a frame."""
        c = self._client

        def request(rev: int) -> Any:
            return watch_request(self.ns, rev, prefix=self.prefix, progress=self.progress)

        return FrameSession(
            request, start, c._endpoints, c.retry, self.watch_timeout, progress=self.progress,
            progress_events=True, ns=self.ns, clock=self._clock,
        )  # fmt: skip

    def _write_back_only(self, **given: Any) -> None:
        bad = [k for k, v in given.items() if v not in (None, False)]
        if bad:
            raise InvalidRequest(
                f"{', '.join(bad)}: not in write-back mode (writes are sent later, in "
                "batches); use a write-through cache or the client",
                code="invalid_argument",
            )

    @staticmethod
    def _batch_ops(batch: Batch) -> list[dict[str, Any]]:
        return [Ops.put(k, v) if v is not None else Ops.delete(k) for k, v in batch.ops.items()]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(prefix={self.prefix!r}, ns={self.ns!r}, {self.mode}, "
            f"revision={self._view.revision}, keys={len(self._view)})"
        )
