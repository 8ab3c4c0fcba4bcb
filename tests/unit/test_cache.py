"""Cache and AsyncCache (client/cache/sync.py, client/cache/aio.py) over a fake in-memory
client, no network: read-your-writes waits for the watch, max_lag refuses a stale view
(injected clock), eviction and on-demand fetch at the view's revision, write-back reads
its own writes and flushes on its timer (injected clock), on flush() and on close, and a
failed flush is resent with the same idempotency key."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any

import pytest

from statekeeper.client.cache.aio import AsyncCache
from statekeeper.client.cache.sync import Cache
from statekeeper.client.errors import CacheStale, NotFound, Unavailable
from statekeeper.client.kv_requests import MISSING
from statekeeper.client.results import DeleteResult, KeyValue, RangeResult, TxnResult, WriteResult
from statekeeper.client.retry import DEFAULT_RETRY, Endpoints
from statekeeper.client.watch.core import WatchEvent, WatchProgress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeStore:
    """A namespace in memory whose writes become watch frames (held back on demand)."""

    def __init__(self) -> None:
        self.kvs: dict[str, KeyValue] = {}
        self.revision = 1
        self.frames: queue.Queue[list[Any]] = queue.Queue()
        self.held: list[list[Any]] | None = None  # frames kept back while not None
        self.gets: list[dict[str, Any]] = []
        self.txns: list[tuple[list[dict[str, Any]], str | None]] = []
        self.fail_txns = 0

    def write(self, changes: dict[str, bytes | None]) -> int:
        self.revision += 1
        rev, events = self.revision, []
        for key, value in changes.items():
            if value is None:
                self.kvs.pop(key, None)
                events.append(WatchEvent("delete", KeyValue(key, b"", 0, 0, rev, "t"), None, rev))
            else:
                old = self.kvs.get(key)
                kv = KeyValue(key, value, (old.version if old else 0) + 1, old.create_revision
                              if old else rev, rev, "t", rev)  # fmt: skip
                self.kvs[key] = kv
                events.append(WatchEvent("put", kv, None, rev))
        self.emit(events)
        return rev

    def emit(self, frame: list[Any]) -> None:
        if self.held is not None:
            self.held.append(frame)
        else:
            self.frames.put(frame)

    def release(self) -> None:
        held, self.held = self.held or [], None
        for f in held:
            self.frames.put(f)

    def range(self, prefix: str, limit: int, **kw: Any) -> RangeResult:
        keys = sorted(k for k in self.kvs if k.startswith(prefix))
        return RangeResult([self.kvs[k] for k in keys[:limit]], self.revision, len(keys) > limit)

    def get(self, key: str, revision: int | None = None, default: Any = MISSING, **kw: Any) -> Any:
        self.gets.append({"key": key, "revision": revision, **kw})
        kv = self.kvs.get(key)
        if kv is None and default is MISSING:
            raise NotFound("no such key", code="key_not_found", details={"revision": self.revision})
        return kv if kv is not None else default

    def txn(self, compare: Any, success: list[dict[str, Any]], ik: str | None) -> TxnResult:
        self.txns.append((success, ik))
        if self.fail_txns:
            self.fail_txns -= 1
            raise Unavailable("no leader", code="unavailable")
        changes = {o["key"]: (o["value"] if o["op"] == "put" else None) for o in success}
        return TxnResult(True, self.write(changes), [])


class FakeClient:
    """What a cache uses of a Client, over a FakeStore."""

    timeout = 2.0
    retry = DEFAULT_RETRY

    def __init__(self, store: FakeStore) -> None:
        self.store = store
        self.ns = "t"
        self.endpoints = ("http://fake:1",)
        self._endpoints = Endpoints(self.endpoints)
        self._closed = False

    def _ns(self, ns: str | None) -> str:
        return self.ns if ns is None else ns

    def range(self, prefix: str, *, ns: str, limit: int, **kw: Any) -> RangeResult:
        return self.store.range(prefix, limit)

    def get(self, key: str, *, ns: str, **kw: Any) -> Any:
        return self.store.get(key, **kw)

    def put(self, key: str, value: Any, *, ns: str, **kw: Any) -> WriteResult:
        return WriteResult(
            self.store.write({key: value.encode() if isinstance(value, str) else value})
        )

    def delete(self, key: str, *, ns: str, **kw: Any) -> DeleteResult:
        found = key in self.store.kvs
        return DeleteResult(
            self.store.write({key: None}) if found else self.store.revision, int(found)
        )

    def txn(self, compare: Any, success: Any, *, ns: str, idempotency_key: str) -> TxnResult:
        return self.store.txn(compare, success, idempotency_key)

    def _watch(self, session: Any) -> Any:
        while not self._closed:
            try:
                yield self.store.frames.get(timeout=0.02)
            except queue.Empty:
                pass

    def close(self) -> None:
        self._closed = True


class FakeCache(Cache):
    def _open_watcher(self) -> Any:
        return self._client  # the fake streams its store's frames


def _eventually(check: Any, limit: float = 2.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.fixture
def store() -> FakeStore:
    s = FakeStore()
    for i in range(3):
        s.write({f"p/{i}": b"v%d" % i})
    s.write({"q/other": b"x"})
    while not s.frames.empty():
        s.frames.get()  # before the load: not streamed
    return s


def test_read_your_writes_waits_for_the_watch(store: FakeStore) -> None:
    with FakeCache(FakeClient(store), "p/") as cache:
        assert cache.get("p/1").value == b"v1" and cache.revision == store.revision
        store.held = []  # the watch falls behind
        rev = cache.put("p/1", "mine").revision
        got: list[KeyValue] = []
        reader = threading.Thread(target=lambda: got.append(cache.get("p/1")))
        reader.start()
        time.sleep(0.1)
        assert not got  # waiting for revision `rev`
        store.release()
        reader.join(2)
        assert got[0].value == b"mine" and got[0].revision >= rev
        store.held = []
        cache.put("p/2", "again")
        with pytest.raises(CacheStale) as ei:
            cache.get("p/0", timeout=0.05)  # a view that never catches up: refused
        assert ei.value.code == "cache_stale" and ei.value.details["read_floor"] == rev + 1
        store.release()
        assert cache.get("p/2").text == "again"


def test_max_lag_refuses_a_stale_view_then_serves_a_fresh_one(store: FakeStore) -> None:
    clock = Clock()
    with FakeCache(FakeClient(store), "p/", clock=clock) as cache:
        assert cache.get("p/0", max_lag=0.5).value == b"v0"  # the load was a frame's worth
        clock.now += 5  # no frame for 5 s
        assert cache.lag.seconds == pytest.approx(5)
        assert cache.get("p/0").value == b"v0"  # no max_lag: served anyway
        with pytest.raises(CacheStale):
            cache.get("p/0", max_lag=1, timeout=0.1)
        threading.Timer(0.05, store.emit, [[WatchProgress(store.revision)]]).start()
        assert cache.get("p/0", max_lag=1, timeout=2).value == b"v0"
        assert cache.lag.seconds == 0


def test_eviction_and_on_demand_fetch_at_the_view_revision(store: FakeStore) -> None:
    with FakeCache(FakeClient(store), "p/", max_keys=2) as cache:
        assert not cache.stats()["complete"] and len(cache) == 2
        kv = cache.get("p/2")  # not loaded: fetched at the view's revision
        assert kv.value == b"v2" and store.gets[-1]["revision"] == cache.revision
        assert cache.get("p/2").value == b"v2" and len(store.gets) == 1  # now held
        assert cache.get("p/nope", default=None) is None  # a miss, kept as a tombstone
        assert cache.get("p/nope", default=None) is None and len(store.gets) == 2
        with pytest.raises(NotFound):
            cache.get("p/nope")
        st = cache.stats()
        assert st["keys"] == 2 and st["evictions"] >= 2 and st["fetches"] == 2


def test_write_back_flushes_on_its_timer_with_an_injected_clock(store: FakeStore) -> None:
    clock = Clock()
    cache = FakeCache(FakeClient(store), "p/", mode="write-back", flush_ms=50, clock=clock)
    try:
        assert cache.put("p/a", "1") is None  # acknowledged locally
        cache.delete("p/0")
        kv = cache.get("p/a")
        assert (kv.value, kv.version, kv.mod_revision) == (b"1", 0, 0)  # not committed yet
        with pytest.raises(NotFound):
            cache.get("p/0")  # its own unflushed delete
        time.sleep(0.2)
        assert not store.txns  # the injected clock has not moved: not due
        clock.now += 0.06
        _eventually(lambda: len(store.txns) == 1)
        ops, _ = store.txns[0]
        assert [(o["op"], o["key"]) for o in ops] == [("put", "p/a"), ("delete", "p/0")]
        _eventually(lambda: cache.stats()["unflushed"] == 0)
        assert "p/0" not in store.kvs and store.kvs["p/a"].value == b"1"
        _eventually(lambda: cache.get("p/a").version == 1)  # the view has it now
        cache.put("p/b", "2")
        cache.flush()  # now, without waiting for the timer
        assert len(store.txns) == 2 and store.kvs["p/b"].value == b"2"
        cache.put("p/c", "3")
    finally:
        cache.close()  # flushes what is left
    assert len(store.txns) == 3 and store.kvs["p/c"].value == b"3"


def test_a_failed_flush_is_resent_with_the_same_idempotency_key(store: FakeStore) -> None:
    with FakeCache(FakeClient(store), "p/", mode="write-back", flush_ms=10_000) as cache:
        cache.put("p/a", "1")
        store.fail_txns = 1
        with pytest.raises(Unavailable):
            cache.flush()
        assert cache.stats()["unflushed"] == 1 and cache.get("p/a").value == b"1"
        cache.put("p/a", "2")  # newer: sent after the failed batch
        cache.flush()
        keys = [ik for _, ik in store.txns]
        assert keys[0] == keys[1] != keys[2]
        assert [o["value"] for (o,) in (t[0] for t in store.txns)] == [b"1", b"1", b"2"]
        assert store.kvs["p/a"].value == b"2"


def test_write_back_refuses_what_it_cannot_defer(store: FakeStore) -> None:
    with FakeCache(FakeClient(store), "p/", mode="write-back") as cache:
        with pytest.raises(ValueError):
            cache.put("p/a", "1", ttl=5)
        with pytest.raises(ValueError):
            cache.put("q/a", "1")  # outside the prefix
    with pytest.raises(RuntimeError):
        cache.get("p/a")  # closed


# ---- AsyncCache


class FakeAsyncClient(FakeClient):
    async def range(self, prefix: str, **kw: Any) -> RangeResult:  # type: ignore[override]
        return FakeClient.range(self, prefix, **kw)

    async def get(self, key: str, **kw: Any) -> Any:  # type: ignore[override]
        return FakeClient.get(self, key, **kw)

    async def put(self, key: str, value: Any, **kw: Any) -> WriteResult:  # type: ignore[override]
        return FakeClient.put(self, key, value, **kw)

    async def delete(self, key: str, **kw: Any) -> DeleteResult:  # type: ignore[override]
        return FakeClient.delete(self, key, **kw)

    async def txn(self, compare: Any, success: Any, **kw: Any) -> TxnResult:  # type: ignore[override]
        return FakeClient.txn(self, compare, success, **kw)

    async def _watch(self, session: Any) -> Any:  # type: ignore[override]
        while not self._closed:
            try:
                yield self.store.frames.get_nowait()
            except queue.Empty:
                await asyncio.sleep(0.005)


async def test_async_cache_read_your_writes_max_lag_and_write_back(store: FakeStore) -> None:
    clock = Clock()
    client = FakeAsyncClient(store)
    cache = AsyncCache(client, "p/", clock=clock)
    with pytest.raises(RuntimeError):
        await cache.get("p/0")  # not started
    async with cache:
        assert (await cache.get("p/0")).value == b"v0"
        store.held = []
        await cache.put("p/0", "mine")
        reader = asyncio.ensure_future(cache.get("p/0"))
        await asyncio.sleep(0.05)
        assert not reader.done()
        store.release()
        assert (await asyncio.wait_for(reader, 2)).value == b"mine"
        clock.now += 3
        with pytest.raises(CacheStale):
            await cache.get("p/0", max_lag=1, timeout=0.05)
        store.emit([WatchProgress(store.revision)])
        assert (await cache.get("p/0", max_lag=1)).value == b"mine"
    wb = await AsyncCache(client, "p/", mode="write-back", flush_ms=50, clock=clock)
    await wb.put("p/w", "1")
    await asyncio.sleep(0.1)
    assert not store.txns
    clock.now += 0.06
    for _ in range(200):
        if store.txns:
            break
        await asyncio.sleep(0.005)
    assert store.kvs["p/w"].value == b"1"
    await wb.put("p/x", "2")
    await wb.close()
    assert store.kvs["p/x"].value == b"2" and len(store.txns) == 2


def test_the_load_pages_at_one_revision_and_stops_past_max_keys() -> None:
    from statekeeper.client.cache.base import load_steps

    def kvs(n: int, start: int = 0) -> list[KeyValue]:
        return [KeyValue(f"p/{i}", b"", 1, 1, 1, "t") for i in range(start, start + n)]

    steps = load_steps("p/", "t", max_keys=1500)
    first = next(steps)
    assert first == {"prefix": "p/", "ns": "t", "limit": 1000, "consistency": "linearizable"}
    second = steps.send(RangeResult(kvs(1000), 40, True, "c1"))
    assert second["revision"] == second["min_revision"] == 40
    assert second["continuation"] == "c1" and second["limit"] == 501  # one more than fits
    with pytest.raises(StopIteration) as done:
        steps.send(RangeResult(kvs(501, 1000), 40, True, "c2"))
    loaded, rev, complete = done.value.value
    assert (len(loaded), rev, complete) == (1500, 40, False)
    steps = load_steps("p/", "t", max_keys=10)
    next(steps)
    with pytest.raises(StopIteration) as done:
        steps.send(RangeResult(kvs(3), 7, False))
    assert done.value.value[1:] == (7, True)
