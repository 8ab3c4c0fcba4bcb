"""The sans-IO core of the client cache (docs/cache.md): the view of one prefix, its LRU
bound, its lag, read-your-writes, and the write-back buffer. No sockets, threads or tasks
here: :class:`client.cache.sync.Cache` drives it from a thread, :class:`client.cache.aio.AsyncCache`
from asyncio tasks, each holding its own lock (or loop) around every call. The clock is
injected.

The view (:class:`CacheView`):

- It starts from a range of the prefix read at revision R (``load``) and then applies the
  watch's frames from R + 1 on, one whole frame at a time (``apply``): ``revision`` is the
  view's revision V, and every key the view holds is exactly as the store had it at V
  (a fetched key: at its own read revision, which is newer; see below).
- Invariant: an entry ``(kv | None, as_of)`` is the key's state as of revision ``as_of``
  and of every revision up to ``max(V, as_of)``: a change of a held key at a revision
  above ``as_of`` is applied to it by the frame that carries it, and a frame at or below
  ``as_of`` is ignored for it. ``None`` is a tombstone (known missing).
- ``complete``: the view holds every key of the prefix (the load fit in the bound and
  nothing was evicted since), so a key it does not hold does not exist. Once an entry is
  evicted it is incomplete until the next load, and a key it does not hold is *fetched*:
  read from the cluster at revision V (``begin_fetch``/``end_fetch``); changes of that key
  that arrive while the read is in flight win over the read's answer when newer.
- Bound: at most ``max_keys`` entries (and ``max_bytes`` of keys + values, if given), least
  recently read evicted first. An incomplete view only takes in changes of keys it holds
  (a write load does not flush what is being read); a complete one takes every put.
- Read-your-writes: ``wrote(revision)`` raises the read floor; ``readable`` is False until
  V reaches it. The lag: ``known_revision`` is the highest revision the cache has heard of
  (frames, its writes, its fetches); ``lag()`` = (known - V, seconds since the last frame).
  A watch sends a progress frame after ``progress`` idle seconds, so a healthy idle view's
  lag stays under that; a view whose watch is down ages.

The write-back buffer (:class:`WriteBuffer`): writes staged locally (``stage``), read back
before the view, sent as ONE atomic txn per batch (at most ``max_ops`` ops and
``max_bytes``), one batch in flight at a time so a key's later write always lands after its
earlier one. A batch whose send failed is sent again, unchanged, with the same idempotency
key (applied at most once). Once it lands at revision W its writes stay readable from the
buffer until the view reaches W. A batch is due ``flush_s`` after the oldest unflushed write
(or at once when a full batch is waiting). What is staged and not landed is lost if the
process dies: the RPO (docs/cache.md).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from ..errors import InvalidRequest
from ..results import KeyValue
from ..watch.core import WatchEvent, WatchProgress
from ..wire import new_idempotency_key

__all__ = ["MISS", "Batch", "CacheLag", "CacheView", "WriteBuffer", "check_cache_key"]

Clock = Callable[[], float]
Entry = tuple[KeyValue | None, int]  # (the key, or None: known missing), as_of revision
MISS: Final[Any] = object()
"""``CacheView.lookup``'s answer for a key the view does not know: fetch it."""
_STALE: Final[Any] = object()  # a fetch that began before the last load: do not keep it
MAX_KEY_BYTES = 4 * 1024
MAX_VALUE_BYTES = 1024 * 1024


def check_cache_key(prefix: str, key: Any) -> str:
    """``key`` if it is a str under ``prefix`` (InvalidRequest otherwise)."""
    if not isinstance(key, str):
        raise TypeError(f"key must be str, not {type(key).__name__}")
    if not key.startswith(prefix):
        raise InvalidRequest(
            f"key {key!r} is outside the cached prefix {prefix!r}", code="invalid_argument"
        )
    return key


@dataclass(frozen=True, slots=True)
class CacheLag:
    """How far behind the view may be.

    Attributes:
        revision: the view's revision (every held key is as of at least this one).
        known_revision: the highest store revision the cache has heard of.
        revisions: ``known_revision - revision``.
        seconds: seconds since the last watch frame (or the load) reached the view.
    """

    revision: int
    known_revision: int
    revisions: int
    seconds: float


class CacheView:
    """The view of one prefix (see the module docstring). Not thread-safe."""

    def __init__(
        self,
        prefix: str,
        ns: str,
        *,
        max_keys: int = 100_000,
        max_bytes: int | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        if max_keys < 1:
            raise ValueError("max_keys must be >= 1")
        self.prefix, self.ns = prefix, ns
        self.max_keys, self.max_bytes = max_keys, max_bytes
        self._clock = clock
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._bytes = 0
        self.revision = 0  # the view's revision
        self.loaded = False
        self.known_revision = 0
        self.complete = False
        self.read_floor = 0  # reads wait until revision >= this (read-your-writes)
        self.frame_at = -math.inf  # clock of the last frame (or load)
        self._fetching: dict[str, list[Any]] = {}  # key -> [fetches in flight, latest change]
        self.hits = self.misses = self.evictions = self.loads = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    # ---- filling the view
    def load(self, kvs: Iterable[KeyValue], revision: int, complete: bool) -> None:
        """Replace the view with a read of the prefix at ``revision``: ``kvs`` (at most
        ``max_keys`` of them), every key of the prefix if ``complete``."""
        self._entries.clear()
        self._bytes = 0
        for kv in kvs:
            self._put(kv.key, (kv, revision))
        self.revision = revision
        self.known_revision = max(self.known_revision, revision)
        self.complete = complete
        self._evict()
        for rec in self._fetching.values():
            rec[1] = _STALE  # read at a revision the new view may have skipped
        self.frame_at = self._clock()
        self.loads += 1
        self.loaded = True

    def apply(self, frame: list[WatchEvent] | list[WatchProgress]) -> None:
        """One watch frame: the events of one revision, or a progress mark."""
        if not frame:
            return
        rev = frame[0].revision
        if isinstance(frame[0], WatchEvent):
            if rev <= self.revision:
                return  # already reflected (a resumed watch never resends; be sure anyway)
            for ev in frame:
                assert isinstance(ev, WatchEvent)
                self._change(ev.kv.key, ev.kv if ev.type == "put" else None, rev)
        self.revision = max(self.revision, rev)
        self.known_revision = max(self.known_revision, self.revision)
        self.frame_at = self._clock()

    def _change(self, key: str, kv: KeyValue | None, rev: int) -> None:
        rec = self._fetching.get(key)
        if rec is not None and rec[1] is not _STALE:
            rec[1] = (kv, rev)
        cur = self._entries.get(key)
        if cur is not None:
            if cur[1] >= rev:
                return  # a fetch already brought a newer state
            if kv is None and self.complete:
                self._drop(key)
            else:
                self._put(key, (kv, rev), touch=False)
        elif kv is not None and self.complete:
            self._put(key, (kv, rev))
            self._evict()

    # ---- the LRU
    def _put(self, key: str, entry: Entry, touch: bool = True) -> None:
        old = self._entries.get(key)
        if old is not None and old[0] is not None:
            self._bytes -= len(key) + len(old[0].value)
        self._entries[key] = entry
        if touch:
            self._entries.move_to_end(key)
        if entry[0] is not None:
            self._bytes += len(key) + len(entry[0].value)

    def _drop(self, key: str) -> None:
        old = self._entries.pop(key)
        if old[0] is not None:
            self._bytes -= len(key) + len(old[0].value)

    def _over(self) -> bool:
        return len(self._entries) > self.max_keys or (
            self.max_bytes is not None and self._bytes > self.max_bytes
        )

    def _evict(self) -> None:
        while self._entries and self._over():
            key, (kv, _) = self._entries.popitem(last=False)
            if kv is not None:
                self._bytes -= len(key) + len(kv.value)
                self.complete = False
            self.evictions += 1

    # ---- reads
    def readable(self, fresh_after: float | None = None) -> bool:
        """May a read be served now: the view has reached this cache's writes and (if
        ``fresh_after`` is given) its last frame came at or after that clock time."""
        if self.revision < self.read_floor or not self.loaded:
            return False
        return fresh_after is None or self.frame_at >= fresh_after

    def lookup(self, key: str) -> tuple[KeyValue | None, int] | Any:
        """``(kv or None, revision it is valid at)``, or :data:`MISS` (fetch it)."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0], max(self.revision, entry[1])
        if self.complete:
            self.hits += 1
            return None, self.revision
        self.misses += 1
        return MISS

    def begin_fetch(self, key: str) -> int:
        """A fetch of ``key`` starts: read it at the returned revision (the view's)."""
        rec = self._fetching.get(key)
        if rec is None:
            self._fetching[key] = [1, None]
        else:
            rec[0] += 1
        return self.revision

    def end_fetch(
        self, key: str, kv: KeyValue | None, at: int | None
    ) -> tuple[KeyValue | None, int]:
        """The fetch's answer: ``kv`` (None: missing) as of revision ``at`` (None: the
        revision is unknown; then it is not kept). Returns what the read answers."""
        rec = self._fetching[key]
        rec[0] -= 1
        if rec[0] == 0:
            del self._fetching[key]
        latest = rec[1]
        if at is None or latest is _STALE:
            return kv, at or self.revision
        self.known_revision = max(self.known_revision, at)
        if latest is not None and latest[1] > at:
            kv, at = latest
        cur = self._entries.get(key)
        if cur is not None and cur[1] >= at:
            return cur[0], max(self.revision, cur[1])
        if kv is not None or not self.complete:
            self._put(key, (kv, at))
            self._evict()
        return kv, max(self.revision, at)

    # ---- writes and lag
    def wrote(self, revision: int) -> None:
        """This cache wrote at ``revision``: later reads wait for the view to reach it."""
        self.read_floor = max(self.read_floor, revision)
        self.known_revision = max(self.known_revision, revision)

    def heard(self, revision: int) -> None:
        """The store is known to be at ``revision`` at least (e.g. another client's read)."""
        self.known_revision = max(self.known_revision, revision)

    def lag(self) -> CacheLag:
        seconds = max(0.0, self._clock() - self.frame_at)
        return CacheLag(
            self.revision,
            self.known_revision,
            max(0, self.known_revision - self.revision),
            seconds,
        )

    def held(self, key: str) -> bool:
        """The view holds an entry (a value or a tombstone) for ``key``."""
        return key in self._entries


@dataclass(slots=True)
class Batch:
    """One flush: ``ops`` key -> value (None: delete), sent as one txn with one
    idempotency key; ``seq``: every write staged up to it is in this batch or an earlier
    one; ``first_at``: clock of its oldest write."""

    ops: dict[str, bytes | None]
    seq: int
    first_at: float
    idempotency_key: str = field(default_factory=new_idempotency_key)
    attempts: int = 0


class WriteBuffer:
    """Write-back: writes acknowledged locally and flushed in batches (see the module
    docstring). Not thread-safe."""

    def __init__(
        self,
        flush_s: float,
        *,
        max_ops: int = 1000,
        max_bytes: int = 3 * 1024 * 1024,
        clock: Clock = time.monotonic,
    ) -> None:
        if flush_s <= 0:
            raise ValueError("flush_ms must be > 0")
        self.flush_s = flush_s
        self.max_ops, self.max_bytes = max_ops, max_bytes
        self._clock = clock
        self._pending: OrderedDict[str, tuple[bytes | None, int]] = OrderedDict()  # (value, seq)
        self._pending_bytes = 0
        self._pending_since: float | None = None  # clock of the oldest pending write
        self.sending: Batch | None = None  # the batch being sent, or whose send failed
        self._retry_at: float | None = None  # when a failed batch is due again
        self._landed: list[tuple[int, dict[str, bytes | None]]] = []  # (revision, ops)
        self.seq = 0  # writes staged so far
        self.flushed_seq = 0  # every write up to it has landed (or was dropped)
        self.flushes = self.dropped = 0

    @property
    def unflushed(self) -> int:
        """Writes acknowledged locally and not landed: lost if the process dies now."""
        return len(self._pending) + (len(self.sending.ops) if self.sending else 0)

    def stage(self, key: str, value: bytes | None) -> int:
        """Acknowledge a put (``value``) or delete (None) locally; returns its seq."""
        if len(key.encode()) > MAX_KEY_BYTES:
            raise InvalidRequest(f"key longer than {MAX_KEY_BYTES} bytes", code="key_too_large")
        if value is not None and len(value) > MAX_VALUE_BYTES:
            raise InvalidRequest(
                f"value longer than {MAX_VALUE_BYTES} bytes", code="value_too_large"
            )
        self.seq += 1
        old = self._pending.pop(key, None)  # re-staged: it moves to the end (seq order)
        if old is not None:
            self._pending_bytes -= _size(key, old[0])
        elif self._pending_since is None:
            self._pending_since = self._clock()
        self._pending[key] = (value, self.seq)
        self._pending_bytes += _size(key, value)
        return self.seq

    def lookup(self, key: str) -> tuple[bool, bytes | None]:
        """``(True, value or None for a delete)`` if the buffer holds a write of ``key``
        not yet in the view, newest first; ``(False, None)`` otherwise."""
        p = self._pending.get(key)
        if p is not None:
            return True, p[0]
        if self.sending is not None and key in self.sending.ops:
            return True, self.sending.ops[key]
        for _, ops in reversed(self._landed):
            if key in ops:
                return True, ops[key]
        return False, None

    def oldest(self) -> float | None:
        """Clock time of the oldest unflushed write (None: nothing unflushed)."""
        times = [t for t in (self._pending_since,) if t is not None]
        if self.sending is not None:
            times.append(self.sending.first_at)
        return min(times) if times else None

    def wait_time(self) -> float | None:
        """Seconds until a flush is due (0: now; None: nothing to flush)."""
        now = self._clock()
        if self.sending is not None and self._retry_at is not None:
            return max(0.0, self._retry_at - now)
        if self._pending_since is None:
            return None
        if len(self._pending) >= self.max_ops or self._pending_bytes >= self.max_bytes:
            return 0.0
        return max(0.0, self._pending_since + self.flush_s - now)

    def take(self) -> Batch | None:
        """The batch to send now: the one whose send failed (again, unchanged: same
        idempotency key), else the oldest pending writes up to the bounds; None if
        nothing is unflushed."""
        if self.sending is not None:
            self.sending.attempts += 1
            self._retry_at = None
            return self.sending
        if not self._pending:
            return None
        ops: dict[str, bytes | None] = {}
        size = seq = 0
        while self._pending and len(ops) < self.max_ops:
            key, (value, s) = next(iter(self._pending.items()))
            n = _size(key, value)
            if ops and size + n > self.max_bytes:
                break
            del self._pending[key]
            self._pending_bytes -= n
            ops[key], size, seq = value, size + n, s
        assert self._pending_since is not None
        self.sending = Batch(ops, seq, self._pending_since, attempts=1)
        if not self._pending:
            self._pending_since = None  # else what is left is overdue: due at once
        return self.sending

    def landed(self, batch: Batch, revision: int) -> None:
        """``batch`` was applied at ``revision``."""
        assert batch is self.sending
        self.sending = None
        self._landed.append((revision, batch.ops))
        self.flushed_seq = max(self.flushed_seq, batch.seq)
        self.flushes += 1

    def failed(self, batch: Batch, final: bool) -> None:
        """Sending ``batch`` failed. ``final``: it can never succeed (refused as invalid):
        it is dropped (its writes are lost, counted in ``dropped``); else it is due again
        ``flush_s`` from now, unchanged."""
        assert batch is self.sending
        if final:
            self.sending = None
            self.flushed_seq = max(self.flushed_seq, batch.seq)
            self.dropped += len(batch.ops)
        else:
            self._retry_at = self._clock() + self.flush_s

    def view_reached(self, revision: int) -> None:
        """The view is at ``revision``: landed batches up to it are in it now."""
        if self._landed and self._landed[0][0] <= revision:
            self._landed = [x for x in self._landed if x[0] > revision]


def _size(key: str, value: bytes | None) -> int:
    return len(key) + 16 + (len(value) if value is not None else 0)
