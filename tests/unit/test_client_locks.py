"""client/locks/lock.py and the lock parts of the clients without a server: the sans-IO Waiting,
Lock / AsyncLock driven over a fake client (waiting by watch, timeout, wait=False, a lost
place, cleanup), the `fence` of writes and batches, and the error classes."""

from __future__ import annotations

import asyncio
import json

import msgpack
import pytest

from statekeeper.client import (
    Client,
    FenceMismatch,
    InvalidRequest,
    LockHeld,
    LockNotHeld,
    LockTimeout,
)
from statekeeper.client.locks.lock import AsyncLock, Lock, Waiting
from statekeeper.client.locks.results import LockAcquired
from statekeeper.client.ops import fence_field
from statekeeper.client.responses import error_from_response
from statekeeper.client.results import KeyValue
from statekeeper.client.watch.core import WatchEvent, WatchProgress

P = "__lock/job/"


def key(rev: int) -> str:
    return f"{P}{rev:020d}"


def acquired(rev: int, holder: int, ahead: int | None) -> LockAcquired:
    return LockAcquired(
        "job", key(rev), rev, holder, holder == rev, None if ahead is None else key(ahead), rev
    )


def deleted(k: str, rev: int) -> WatchEvent:
    return WatchEvent("delete", KeyValue(k, b"", 0, 0, rev, "default", rev), None, rev)


def queue(*revs: int, at: int = 50) -> list[KeyValue]:
    return [KeyValue(key(r), b"", 1, r, r, "default", at) for r in revs]


# -- Waiting -------------------------------------------------------------------------------


def test_waiting_watches_from_ahead_to_its_own_key_after_the_acquire():
    w = Waiting("ns1", acquired(7, 3, 5))
    assert w.watch_args() == {
        "start": key(5),
        "end": key(7) + "\x01",
        "start_revision": 8,
        "ns": "ns1",
    }
    assert not w.seen(WatchEvent("put", KeyValue(key(5), b"", 2, 5, 9), None, 9))
    assert not w.seen(WatchProgress(9))
    assert not w.seen(deleted(P + "00000000000000000005/x", 9))  # another lock's key
    assert w.seen(deleted(key(5), 9))
    with pytest.raises(LockNotHeld) as ei:
        w.seen(deleted(key(7), 9))
    assert ei.value.fence == 7 and ei.value.name == "job"


def test_waiting_settles_on_the_queue_it_reads():
    w = Waiting("ns1", acquired(7, 3, 5))
    assert w.scan_args()["start"] == P and w.scan_args()["end"] == key(7) + "\x01"
    # 5 died, 3 still holds: wait for 3 from the read's revision.
    assert not w.settle([(key(3), 3), (P + "0000000000000000000x", 4), (key(7), 7)], 20)
    assert (w.ahead, w.revision, w.holder_fence) == (key(3), 20, 3)
    assert w.watch_args()["start_revision"] == 21
    assert w.settle([(key(7), 7)], 25) and w.holder_fence == 7
    with pytest.raises(LockNotHeld):
        w.settle([(key(3), 3)], 30)  # its own key is gone: the lease expired
    with pytest.raises(LockNotHeld):
        w.settle([], 30)


# -- Lock over a fake client -----------------------------------------------------------------


class FakeLease:
    def __init__(self) -> None:
        self.id, self.alive, self.revoked = 9, True, 0

    def revoke(self):
        self.revoked += 1
        self.alive = False
        return type("R", (), {"deleted": 1})()


class FakeClient:
    """What Lock calls: lease, lock_acquire, watch, scan, lock_release."""

    def __init__(self, result, watches=(), scans=(), acquire_error=None) -> None:
        self.result, self.acquire_error = result, acquire_error
        self.watches, self.scans = list(watches), list(scans)
        self.leases: list[FakeLease] = []
        self.watch_calls: list[dict] = []
        self.released: list[tuple] = []
        self.closed_watches = 0

    def lease(self, ttl, *, ns):
        self.leases.append(FakeLease())
        return self.leases[-1]

    def lock_acquire(self, name, lease, *, wait, owner, ns):
        self.acquire_args = (name, lease, wait, owner, ns)
        if self.acquire_error is not None:
            raise self.acquire_error
        return self.result

    def watch(self, **kw):
        self.watch_calls.append(kw)
        items = self.watches.pop(0)

        def gen():
            try:
                yield from items
                while kw.get("progress_events"):  # idle: progress frames forever
                    yield WatchProgress(0)
            finally:
                self.closed_watches += 1

        return gen()

    def scan(self, **kw):
        return iter(self.scans.pop(0))

    def lock_release(self, name, fence, *, ns):
        self.released.append((name, fence, ns))


def test_a_free_lock_is_held_at_once_and_released_by_revoking_its_lease():
    c = FakeClient(acquired(4, 4, None))
    with Lock(c, "job", 10.0, lease=None, wait=True, timeout=None, owner="me", ns="n") as lock:
        assert lock.held and (lock.fence, lock.key) == (4, key(4))
        assert c.acquire_args == ("job", c.leases[0], True, "me", "n") and not c.watch_calls
    assert not lock.held and c.leases[0].revoked == 1 and lock.release() is False


def test_a_waiter_watches_its_neighbour_and_looks_again_until_first():
    c = FakeClient(
        acquired(7, 3, 5),
        watches=[[deleted(key(5), 9)], [deleted(key(3), 12)]],
        scans=[queue(3, 7, at=10), queue(7, at=12)],
    )
    lock = Lock(c, "job", 10.0, lease=77, wait=True, timeout=None, owner=None, ns="n")
    assert lock.held and lock.fence == 7
    assert [w["start"] for w in c.watch_calls] == [key(5), key(3)]
    assert [w["start_revision"] for w in c.watch_calls] == [8, 11]
    assert c.closed_watches == 2 and not c.leases  # rides on lease 77
    assert lock.release() is True and c.released == [("job", 7, "n")]


def test_a_timeout_leaves_the_queue_and_names_the_holder():
    c = FakeClient(acquired(7, 3, 5), watches=[[]])
    with pytest.raises(LockTimeout) as ei:
        Lock(c, "job", 10.0, lease=None, wait=True, timeout=0.2, owner=None, ns="n")
    assert ei.value.holder_fence == 3 and isinstance(ei.value, LockHeld)
    assert c.leases[0].revoked == 1 and c.closed_watches == 1


def test_wait_false_raises_lock_held_and_revokes_its_lease():
    err = LockHeld("held", code="lock_held", status=409, details={"holder_fence": 3})
    c = FakeClient(None, acquire_error=err)
    with pytest.raises(LockHeld) as ei:
        Lock(c, "job", 10.0, lease=None, wait=False, timeout=None, owner=None, ns="n")
    assert ei.value.holder_fence == 3 and c.acquire_args[2] is False
    assert c.leases[0].revoked == 1


def test_a_waiter_whose_lease_died_raises_lock_not_held_and_tries_to_leave():
    c = FakeClient(acquired(7, 3, 5), watches=[[deleted(key(7), 9)]])
    with pytest.raises(LockNotHeld):
        Lock(c, "job", 10.0, lease=77, wait=True, timeout=None, owner=None, ns="n")
    assert c.released == [("job", 7, "n")]  # cleanup tried (the server: lock_not_held)


class FakeAsyncLease(FakeLease):
    """Granted when awaited, like AsyncLease."""

    def __await__(self):
        if False:
            yield
        return self

    async def revoke(self):
        return FakeLease.revoke(self)


class FakeAsyncClient(FakeClient):
    def lease(self, ttl, *, ns):
        self.leases.append(FakeAsyncLease())
        return self.leases[-1]

    async def lock_acquire(self, *a, **kw):
        return FakeClient.lock_acquire(self, *a, **kw)

    def watch(self, **kw):
        self.watch_calls.append(kw)
        items = self.watches.pop(0)

        async def gen():
            try:
                for item in items:
                    yield item
                await asyncio.sleep(3600)  # idle
            finally:
                self.closed_watches += 1

        return gen()

    def scan(self, **kw):
        items = self.scans.pop(0)

        async def gen():
            for item in items:
                yield item

        return gen()

    async def lock_release(self, name, fence, *, ns):
        self.released.append((name, fence, ns))


def test_async_lock_waits_by_watch_and_times_out_cleanly():
    async def main():
        c = FakeAsyncClient(
            acquired(7, 3, 5), watches=[[deleted(key(5), 9)]], scans=[queue(7, at=10)]
        )
        lock = AsyncLock(c, "job", 10.0, lease=None, wait=True, timeout=None, owner=None, ns="n")
        assert await lock is lock and lock.fence == 7 and lock.held
        assert await lock.release() is True and c.leases[0].revoked == 1
        slow = FakeAsyncClient(acquired(7, 3, 5), watches=[[]])
        with pytest.raises(LockTimeout):
            async with AsyncLock(
                slow, "job", 10.0, lease=55, wait=True, timeout=0.1, owner=None, ns="n"
            ):
                pass
        assert slow.released == [("job", 7, "n")] and slow.closed_watches == 1

    asyncio.run(main())


# -- fences on the wire, errors --------------------------------------------------------------


def test_fence_field_takes_a_lock_a_pair_or_a_dict():
    c = FakeClient(acquired(4, 4, None))
    lock = Lock(c, "job", 10.0, lease=1, wait=True, timeout=None, owner=None, ns="n")
    assert fence_field(lock) == {"name": "job", "token": 4}
    assert fence_field(("job", 5)) == {"name": "job", "token": 5}
    assert fence_field({"name": "job", "token": 6}) == {"name": "job", "token": 6}
    with pytest.raises(TypeError):
        fence_field(5)
    with pytest.raises(InvalidRequest):
        fence_field(("job", None))


def test_writes_and_batches_carry_the_fence():
    client = Client("http://127.0.0.1:1")
    with client.batch() as b:
        b.put("k", "v", fence=("job", 4)).delete("k", fence=("job", 4))
        b.txn([], [client.ops.put("k", "v")], fence=("job", 4))
        b.append("s", "e", fence=("job", 4))
        b.results = []  # do not send
    assert [op.get("fence") for op in b.ops] == [{"name": "job", "token": 4}] * 4
    assert "fence" not in b.ops[2]["success"][0]
    client.close()


def test_lock_errors_map_to_their_classes():
    body = {
        "error": {
            "code": "fence_mismatch",
            "message": "m",
            "name": "job",
            "token": 3,
            "holder_fence": 9,
        }
    }
    err = error_from_response(409, "application/json", json.dumps(body).encode())
    assert isinstance(err, FenceMismatch) and (err.holder_fence, err.token, err.name) == (
        9,
        3,
        "job",
    )
    held = {"error": {"code": "lock_held", "message": "m", "holder_fence": 4}}
    err = error_from_response(409, "application/msgpack", msgpack.packb(held))
    assert type(err) is LockHeld and err.holder_fence == 4
    gone = {"error": {"code": "lock_not_held", "message": "m", "name": "job", "fence": 4}}
    err = error_from_response(404, "application/msgpack", msgpack.packb(gone))
    assert isinstance(err, LockNotHeld) and err.fence == 4
