"""The cache's sans-IO core (client/cache/core.py), no network: the view's LRU bound and
completeness, frames applied whole, fetches racing with changes, lag accounting and
read-your-writes with an injected clock, and the write-back buffer's batching, flush
triggers, retries and overlay."""

from __future__ import annotations

import pytest

from statekeeper.client.cache.core import MISS, CacheView, WriteBuffer, check_cache_key
from statekeeper.client.errors import InvalidRequest
from statekeeper.client.results import KeyValue
from statekeeper.client.watch.core import WatchEvent, WatchProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def kv(key: str, value: str, rev: int, version: int = 1) -> KeyValue:
    return KeyValue(key, value.encode(), version, rev, rev, "ns", rev)


def put(key: str, value: str, rev: int) -> WatchEvent:
    return WatchEvent("put", kv(key, value, rev), None, rev)


def delete(key: str, rev: int) -> WatchEvent:
    return WatchEvent("delete", KeyValue(key, b"", 0, 0, rev, "ns", rev), None, rev)


def view(max_keys: int = 100, clock: Clock | None = None, **kw) -> CacheView:
    return CacheView("p/", "ns", max_keys=max_keys, clock=clock or Clock(), **kw)


def value(v: CacheView, key: str) -> bytes | None | object:
    got = v.lookup(key)
    if got is MISS:
        return MISS
    return None if got[0] is None else got[0].value


def test_load_then_frames_whole_revisions() -> None:
    v = view()
    assert not v.readable()  # not loaded
    v.load([kv("p/a", "1", 3), kv("p/b", "2", 4)], revision=10, complete=True)
    assert v.readable() and v.revision == 10 and v.complete
    assert v.lookup("p/a") == (kv("p/a", "1", 3), 10)
    assert v.lookup("p/zz") == (None, 10)  # complete: a key it lacks does not exist
    v.apply([put("p/a", "x", 11), put("p/c", "3", 11)])
    v.apply([delete("p/b", 12)])
    assert (value(v, "p/a"), value(v, "p/b"), value(v, "p/c")) == (b"x", None, b"3")
    assert v.revision == 12 and len(v) == 2  # a complete view forgets deleted keys
    v.apply([put("p/a", "old", 11)])  # a frame it already has: ignored
    assert value(v, "p/a") == b"x"
    v.apply([WatchProgress(20)])
    assert v.revision == 20 and v.lookup("p/a")[1] == 20


def test_lru_bound_evicts_least_recently_read_and_the_view_turns_incomplete() -> None:
    v = view(max_keys=3)
    v.load([kv(f"p/{i}", str(i), 2) for i in range(3)], revision=5, complete=True)
    v.lookup("p/0")  # read: now the most recent
    v.apply([put("p/3", "3", 6)])  # a complete view takes every put: one must go
    assert len(v) == 3 and v.evictions == 1 and not v.complete
    assert value(v, "p/1") is MISS  # the least recently read went
    assert value(v, "p/0") == b"0" and value(v, "p/3") == b"3"
    # Incomplete: a put of a key it does not hold is not taken in (the reads pick what stays)
    v.apply([put("p/9", "9", 7)])
    assert value(v, "p/9") is MISS and len(v) == 3
    # ...a held key's changes are, a delete becomes a tombstone (known missing).
    v.apply([delete("p/0", 8)])
    assert v.lookup("p/0") == (None, 8) and len(v) == 3


def test_load_over_the_bound_is_incomplete_and_bytes_bound() -> None:
    v = view(max_keys=2)
    v.load([kv("p/a", "1", 1), kv("p/b", "2", 1)], revision=3, complete=False)
    assert not v.complete and value(v, "p/c") is MISS
    b = view(max_bytes=30)
    b.load([kv(f"p/{i}", "x" * 10, 1) for i in range(4)], revision=2, complete=True)
    assert b.bytes <= 30 and len(b) == 2 and not b.complete  # 13 bytes a key


def test_fetch_answers_are_kept_and_a_change_during_the_fetch_wins() -> None:
    v = view(max_keys=2)
    v.load([kv("p/a", "1", 1), kv("p/b", "2", 1)], revision=5, complete=False)
    assert v.lookup("p/x") is MISS
    at = v.begin_fetch("p/x")
    assert at == 5
    v.apply([put("p/x", "new", 7)])  # not held: not taken in, but the fetch notes it
    assert v.end_fetch("p/x", kv("p/x", "old", 4), at) == (kv("p/x", "new", 7), 7)
    assert value(v, "p/x") == b"new"  # kept (and the LRU evicted someone)
    assert len(v) == 2
    # A miss is kept as a tombstone, valid at the view's revision.
    at = v.begin_fetch("p/y")
    assert v.end_fetch("p/y", None, at) == (None, 7)
    assert v.lookup("p/y") == (None, 7)
    # A newer fetched state is not undone by an older frame.
    at = v.begin_fetch("p/z")
    v.end_fetch("p/z", kv("p/z", "z9", 9), 9)  # e.g. read at the latest revision
    v.apply([put("p/z", "z8", 8)])
    assert v.lookup("p/z") == (kv("p/z", "z9", 9), 9)


def test_a_fetch_from_before_a_reload_is_answered_but_not_kept() -> None:
    v = view(max_keys=1)
    v.load([kv("p/a", "1", 1)], revision=5, complete=False)
    at = v.begin_fetch("p/b")
    v.load([kv("p/a", "1", 1)], revision=50, complete=False)  # e.g. after compaction
    assert v.end_fetch("p/b", kv("p/b", "b", 3), at) == (kv("p/b", "b", 3), 5)
    assert value(v, "p/b") is MISS


def test_failed_fetch_releases_its_slot() -> None:
    v = view(max_keys=1)
    v.load([], revision=2, complete=False)
    v.begin_fetch("p/a")
    assert v.end_fetch("p/a", None, None) == (None, 2)  # revision unknown: not kept
    assert value(v, "p/a") is MISS and not v._fetching


def test_lag_and_read_your_writes_with_an_injected_clock() -> None:
    clock = Clock()
    v = view(clock=clock)
    v.load([], revision=10, complete=True)
    clock.now += 0.4
    lag = v.lag()
    assert (lag.revision, lag.revisions) == (10, 0) and lag.seconds == pytest.approx(0.4)
    assert v.readable(fresh_after=clock.now - 0.5) and not v.readable(clock.now - 0.3)
    v.wrote(15)  # this cache's write: reads wait until the view shows it
    assert not v.readable() and v.lag().revisions == 5
    v.apply([WatchProgress(14)])
    assert not v.readable() and v.lag().seconds == 0
    v.apply([put("p/k", "v", 15)])
    assert v.readable() and v.lag().revisions == 0
    v.heard(30)  # e.g. another client's read said so
    assert v.lag().revisions == 15 and v.readable()  # only own writes hold reads back
    clock.now += 3
    assert v.lag().seconds == pytest.approx(3) and not v.readable(clock.now - 1)


def test_keys_outside_the_prefix_are_refused() -> None:
    assert check_cache_key("p/", "p/x") == "p/x"
    with pytest.raises(InvalidRequest):
        check_cache_key("p/", "q/x")
    with pytest.raises(TypeError):
        check_cache_key("p/", b"p/x")


# ---- write-back


def test_flush_is_due_flush_ms_after_the_oldest_unflushed_write() -> None:
    clock = Clock()
    wb = WriteBuffer(0.1, clock=clock)
    assert wb.wait_time() is None and wb.take() is None
    wb.stage("p/a", b"1")
    clock.now += 0.06
    wb.stage("p/b", b"2")  # does not push the deadline
    assert wb.wait_time() == pytest.approx(0.04)
    wb.stage("p/a", b"3")  # re-staged: newest value, one op
    assert wb.lookup("p/a") == (True, b"3") and wb.unflushed == 2
    clock.now += 0.05
    assert wb.wait_time() == 0
    batch = wb.take()
    assert batch is not None and batch.ops == {"p/b": b"2", "p/a": b"3"} and batch.seq == 3
    assert wb.wait_time() is None  # nothing pending; the batch is in flight
    assert wb.lookup("p/b") == (True, b"2")  # still readable while in flight
    wb.landed(batch, revision=40)
    assert wb.flushed_seq == 3 and wb.unflushed == 0
    assert wb.lookup("p/a") == (True, b"3")  # until the view shows revision 40
    wb.view_reached(39)
    assert wb.lookup("p/a") == (True, b"3")
    wb.view_reached(40)
    assert wb.lookup("p/a") == (False, None)


def test_a_full_batch_is_due_at_once_and_batches_are_bounded() -> None:
    clock = Clock()
    wb = WriteBuffer(10.0, max_ops=3, max_bytes=100, clock=clock)
    wb.stage("p/1", b"x")
    wb.stage("p/2", None)  # a delete
    assert wb.wait_time() == pytest.approx(10.0)
    wb.stage("p/3", b"x")
    assert wb.wait_time() == 0  # max_ops reached
    wb.stage("p/4", b"y" * 60)
    first = wb.take()
    assert first is not None and list(first.ops) == ["p/1", "p/2", "p/3"]
    assert first.ops["p/2"] is None
    wb.landed(first, 7)
    wb.stage("p/5", b"z" * 60)  # 4 and 5 together exceed max_bytes: two batches
    assert wb.wait_time() == 0  # the leftover is overdue
    second = wb.take()
    assert second is not None and list(second.ops) == ["p/4"]
    wb.landed(second, 8)
    third = wb.take()
    assert third is not None and list(third.ops) == ["p/5"] and third.seq == 5


def test_a_failed_batch_is_resent_unchanged_and_writes_after_it_wait() -> None:
    clock = Clock()
    wb = WriteBuffer(0.1, clock=clock)
    wb.stage("p/a", b"1")
    clock.now += 0.1
    batch = wb.take()
    assert batch is not None
    wb.failed(batch, final=False)
    wb.stage("p/a", b"2")  # newer: pending, read first, sent after the old batch
    assert wb.lookup("p/a") == (True, b"2") and wb.unflushed == 2
    assert wb.wait_time() == pytest.approx(0.1)  # the retry is due flush_s later
    clock.now += 0.1
    again = wb.take()
    assert again is batch and again.attempts == 2  # same ops, same idempotency key
    assert again.idempotency_key == batch.idempotency_key and again.ops == {"p/a": b"1"}
    wb.landed(again, 11)
    assert wb.flushed_seq == 1 and wb.seq == 2
    nxt = wb.take()
    assert nxt is not None and nxt.ops == {"p/a": b"2"}


def test_a_refused_batch_is_dropped_and_counted() -> None:
    wb = WriteBuffer(0.1, clock=Clock())
    wb.stage("p/a", b"1")
    batch = wb.take()
    assert batch is not None
    wb.failed(batch, final=True)
    assert wb.dropped == 1 and wb.flushed_seq == 1 and wb.unflushed == 0
    assert wb.lookup("p/a") == (False, None) and wb.take() is None


def test_oldest_unflushed_write_and_local_limits() -> None:
    clock = Clock()
    wb = WriteBuffer(0.1, clock=clock)
    wb.stage("p/a", b"1")
    clock.now += 1
    assert wb.oldest() == 100.0
    with pytest.raises(InvalidRequest):
        wb.stage("p/" + "k" * 5000, b"")
    with pytest.raises(InvalidRequest):
        wb.stage("p/b", b"v" * (1024 * 1024 + 1))
    with pytest.raises(ValueError):
        WriteBuffer(0)
