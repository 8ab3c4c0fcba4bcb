"""The client's lease operations, sans-IO: request bodies and paths, answer parsing, error
mapping, put's lease/ttl fields, the keepalive schedule with an injected clock, and both
keepers (thread, task) against a fake client. No network."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import msgpack
import pytest

from statekeeper.client import (
    AsyncClient,
    Client,
    InvalidRequest,
    KeepaliveResult,
    Lease,
    LeaseGrant,
    LeaseNotFound,
    LeaseState,
    NotFound,
    Unavailable,
    ops,
)
from statekeeper.client.batch_ops import BatchOps
from statekeeper.client.kv_requests import write_request
from statekeeper.client.leases.commands import (
    grant_request,
    info_request,
    keepalive_request,
    list_request,
    revoke_request,
)
from statekeeper.client.leases.keeper import AsyncLease, KeepaliveSchedule, TaskKeeper, ThreadKeeper
from statekeeper.client.ops import lease_id
from statekeeper.client.responses import error_from_response
from statekeeper.client.wire import Request

MP = "application/msgpack"


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def body_of(req: Request) -> dict[str, Any]:
    assert req.body is not None
    return msgpack.unpackb(req.body, raw=False)


def answer(req: Request, obj: Any, status: int = 200) -> Any:
    return req.parse(status, MP, pack(obj))


# -- requests and answers --------------------------------------------------------------------


def test_lease_requests_and_their_answers() -> None:
    g = grant_request("agents", 2.5, "ik")
    assert (g.path, g.op, g.idempotency_key) == ("/v1/leases/grant", "lease_grant", "ik")
    assert body_of(g) == {"ns": "agents", "ttl_ms": 2500, "idempotency_key": "ik"}
    granted = answer(g, {"revision": 3, "lease": 7, "ttl_ms": 2500, "expires_ms": 9})
    assert granted == LeaseGrant(7, 2500, 9, 3) and granted.ttl == 2.5

    k = keepalive_request([7, 8])
    assert (k.path, k.idempotency_key, body_of(k)) == (
        "/v1/leases/keepalive",
        None,
        {"leases": [7, 8]},
    )
    renewed = answer(
        k,
        {
            "revision": 4,
            "leases": [
                {"lease": 7, "ttl_ms": 1, "expires_ms": 2},
                {"lease": 8, "error": "lease_not_found"},
            ],
        },
    )
    assert renewed == KeepaliveResult(4, [LeaseState(7, 1, 2)], [8])
    with pytest.raises(InvalidRequest):
        keepalive_request([])

    r = revoke_request(7, "rk")
    assert body_of(r) == {"lease": 7, "idempotency_key": "rk"} and r.path == "/v1/leases/revoke"
    assert answer(r, {"revision": 5, "deleted": 2}).deleted == 2
    err = {"error": {"code": "lease_not_found", "message": "gone", "lease": 7}}
    with pytest.raises(LeaseNotFound) as ei:
        answer(r, err, 404)
    assert isinstance(ei.value, NotFound) and ei.value.lease == 7

    i = info_request(7, "serializable", 5)
    assert body_of(i) == {"lease": 7, "consistency": "serializable", "min_revision": 5}
    info = answer(
        i,
        {
            "revision": 6,
            "lease": 7,
            "ns": "a",
            "ttl_ms": 1,
            "expires_ms": 2,
            "remaining_ms": 1,
            "keys": ["x"],
            "more_keys": False,
        },
    )
    assert (info.ns, info.keys, info.remaining_ms, info.revision) == ("a", ["x"], 1, 6)

    page = answer(
        list_request(3, 10, None, None),
        {
            "revision": 6,
            "leases": [{"lease": 4, "ns": "a", "ttl_ms": 1, "expires_ms": 2}],
            "more": True,
        },
    )
    assert body_of(list_request(3, 10, None, None)) == {"after": 3, "limit": 10}
    assert [x.lease for x in page] == [4] and page.more
    assert isinstance(error_from_response(404, MP, pack(err)), LeaseNotFound)


def test_put_takes_a_lease_or_a_ttl() -> None:
    class Granted:
        id = 9

    assert ops.put("k", "v", lease=Granted())["lease"] == 9
    assert ops.put("k", "v", lease=3)["lease"] == 3
    assert ops.put("k", "v", ttl=30)["ttl_ms"] == 30_000
    assert "lease" not in ops.put("k", "v") and "ttl_ms" not in ops.put("k", "v")
    for bad in ({"lease": 1, "ttl": 2}, {"ttl": 0}, {"ttl": True}):
        with pytest.raises(InvalidRequest):
            ops.put("k", "v", **bad)
    with pytest.raises(TypeError):
        ops.put("k", "v", lease="3")
    req = write_request(ops.put("k", "v", ttl=2), "ns", "ik")
    assert body_of(req)["ttl_ms"] == 2000
    assert answer(req, {"revision": 2, "lease": 4}).lease == 4
    b = BatchOps("ns").put("k", "v", lease=5)
    assert b.ops[0]["lease"] == 5


def test_what_lease_grant_returns_is_a_lease_everywhere() -> None:
    """Issue 30 item 3: put, append, keepalive, revoke and info refused the LeaseGrant the
    client itself returned ("a lease must be a lease id (int > 0) or a Lease")."""
    grant = LeaseGrant(lease=7, ttl_ms=10_000, expires_ms=1, revision=3)
    assert grant.id == 7
    assert ops.put("k", "v", lease=grant)["lease"] == 7
    assert BatchOps("ns").put("k", "v", lease=grant).ops[0]["lease"] == 7
    assert lease_id(grant) == 7
    with pytest.raises(TypeError, match="LeaseGrant"):
        ops.put("k", "v", lease=2.5)


def test_a_lease_must_be_granted_before_it_is_used() -> None:
    pending = AsyncLease(object(), 10, "ns")
    with pytest.raises(InvalidRequest):
        ops.put("k", "v", lease=pending)
    with Client("http://127.0.0.1:1") as c, pytest.raises(InvalidRequest):
        c.lease(0)


# -- the schedule ----------------------------------------------------------------------------


class FakeLease:
    def __init__(self, lease_id: int, ttl: float, deadline: float = float("inf")) -> None:
        self.id, self.ttl = lease_id, ttl
        self._deadline = deadline
        self.renewed: list[float] = []
        self.lost = False

    def _renewed(self, sent: float) -> None:
        self.renewed.append(sent)
        self._deadline = sent + self.ttl

    def _lost(self) -> None:
        self.lost = True


def test_schedule_renews_all_leases_every_shortest_ttl_over_three() -> None:
    now = [100.0]
    s = KeepaliveSchedule(lambda: now[0])
    assert s.wait_time() is None and s.take_due() == []
    a, b = FakeLease(1, 9.0), FakeLease(2, 3.0)
    s.add(a)
    s.add(b)
    assert s.wait_time() == pytest.approx(1.0)  # 3 s / 3
    assert s.take_due() == []
    now[0] = 101.0
    assert s.take_due() == [[1, 2]]  # one op for both
    assert s.wait_time() == pytest.approx(1.0)
    s.settle(KeepaliveResult(5, [LeaseState(1, 9000, 0)], [2]), 101.0)
    assert a.renewed == [101.0] and b.lost and len(s) == 1
    assert s.interval() == pytest.approx(3.0)
    s.failed()  # a failed call: retry within 0.5 s
    assert s.wait_time() == pytest.approx(0.5)


def test_schedule_wakes_at_a_deadline_and_expires_leases_not_renewed_within_their_ttl() -> None:
    now = [100.0]
    s = KeepaliveSchedule(lambda: now[0])
    a, b = FakeLease(1, 9.0, deadline=109.0), FakeLease(2, 9.0, deadline=102.0)
    s.add(a)
    s.add(b)
    assert s.wait_time() == pytest.approx(2.0)  # b's deadline comes before the tick (3 s)
    assert s.expire() == []
    now[0] = 102.0
    assert s.expire() == [b] and b.lost and not a.lost and len(s) == 1
    assert s.expire() == []  # lost once; the keeper no longer renews it
    assert s.take_due() == [] and s.wait_time() == pytest.approx(1.0)


def test_schedule_splits_large_sets() -> None:
    now = [0.0]
    s = KeepaliveSchedule(lambda: now[0])
    for i in range(1, 2502):
        s.add(FakeLease(i, 3.0))
    now[0] = 5.0
    assert [len(b) for b in s.take_due()] == [1000, 1000, 501]


def test_alive_follows_the_last_renewal_not_the_grant() -> None:
    now = [0.0]
    lease = AsyncLease(object(), 3.0, "ns", clock=lambda: now[0])
    assert not lease.alive
    lease._granted(LeaseGrant(1, 3000, 0, 1), 0.0)
    assert lease.alive
    now[0] = 2.9
    lease._renewed(2.0)
    now[0] = 4.9
    assert lease.alive
    now[0] = 5.0
    assert not lease.alive  # not renewed within its TTL: the client no longer vouches
    lease._renewed(4.5)
    assert lease.alive
    lease._lost()
    assert not lease.alive


# -- the keepers, against a fake client --------------------------------------------------------


class FakeClient:
    """What the keepers and leases call: grant, keepalive, revoke; records the calls."""

    def __init__(self) -> None:
        self.next_id = 1
        self.keepalives: list[tuple[int, ...]] = []
        self.revoked: list[int] = []
        self.gone: set[int] = set()
        self.fail_next = 0
        self.keeper: Any = None
        self.lock = threading.Lock()

    def _keeper(self) -> Any:
        return self.keeper

    def _grant(self, ttl: float) -> LeaseGrant:
        with self.lock:
            lease, self.next_id = self.next_id, self.next_id + 1
        return LeaseGrant(lease, int(ttl * 1000), 0, 1)

    def _keepalive(self, ids: tuple[int, ...]) -> KeepaliveResult:
        with self.lock:
            self.keepalives.append(ids)
            if self.fail_next:
                self.fail_next -= 1
                raise Unavailable("down", code="unavailable")
        alive = [LeaseState(i, 1, 1) for i in ids if i not in self.gone]
        return KeepaliveResult(1, alive, [i for i in ids if i in self.gone])


class SyncFake(FakeClient):
    def lease_grant(self, ttl: float, *, ns: str | None = None) -> LeaseGrant:
        return self._grant(ttl)

    def lease_keepalive(self, *ids: int) -> KeepaliveResult:
        return self._keepalive(ids)

    def lease_revoke(self, lease: int) -> Any:
        self.revoked.append(lease)


class AsyncFake(FakeClient):
    async def lease_grant(self, ttl: float, *, ns: str | None = None) -> LeaseGrant:
        return self._grant(ttl)

    async def lease_keepalive(self, *ids: int) -> KeepaliveResult:
        return self._keepalive(ids)

    async def lease_revoke(self, lease: int) -> Any:
        self.revoked.append(lease)


def _wait_for(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_thread_keeper_renews_in_one_op_retries_and_stops() -> None:
    c = SyncFake()
    c.keeper = ThreadKeeper(c)
    a, b = Lease(c, 0.3, "ns"), Lease(c, 0.6, "ns")  # ticks every 0.1 s
    c.fail_next = 1
    _wait_for(lambda: len(c.keepalives) >= 4)
    assert c.keepalives[1] == (1, 2)  # after the failure, the retry renews both in one op
    assert a.alive and b.alive
    c.gone.add(2)
    _wait_for(lambda: not b.alive)
    with a:
        pass  # leaving the block revokes it
    assert c.revoked == [1] and not a.alive
    c.keeper.stop()
    sent = len(c.keepalives)
    time.sleep(0.3)
    assert len(c.keepalives) == sent  # stopped
    assert not c.keeper._thread.is_alive()
    with pytest.raises(RuntimeError):
        Lease(c, 0.3, "ns")


async def test_task_keeper_renews_and_stops() -> None:
    c = AsyncFake()
    c.keeper = TaskKeeper(c)
    async with AsyncLease(c, 0.3, "ns") as lease:
        other = await AsyncLease(c, 0.3, "ns")
        assert (lease.id, other.id) == (1, 2)
        while len(c.keepalives) < 3:
            await asyncio.sleep(0.02)
        assert c.keepalives[-1] == (1, 2) and lease.alive
    assert c.revoked == [1] and not lease.alive and other.alive
    await c.keeper.stop()
    sent = len(c.keepalives)
    await asyncio.sleep(0.25)
    assert len(c.keepalives) == sent


def _fake_lease_ops(c: Any) -> FakeClient:
    """Point a real client's lease ops at a FakeClient (sync or async methods alike):
    its keeper and close() are the real ones."""
    fake = AsyncFake() if isinstance(c, AsyncClient) else SyncFake()
    c.lease_grant = fake.lease_grant
    c.lease_keepalive = fake.lease_keepalive
    c.lease_revoke = fake.lease_revoke
    return fake


async def test_async_client_lease_is_plain_and_close_stops_keepalives() -> None:
    """AsyncClient.close() stops the task that renews its leases (audit gap 3: this test
    used to close a client whose lease was never granted, so it could not fail)."""
    c = AsyncClient("http://127.0.0.1:1")
    fake = _fake_lease_ops(c)
    pending = c.lease(5)  # nothing sent yet: granted when awaited or entered
    assert isinstance(pending, AsyncLease) and pending.id is None
    lease = await AsyncLease(c, 0.3, c.ns)  # renewed every 0.1 s by the client's task
    assert lease.id == 1
    while len(fake.keepalives) < 2:
        await asyncio.sleep(0.02)
    task = c._lease_keeper._task
    await c.close()
    sent = len(fake.keepalives)
    await asyncio.sleep(0.35)  # 3 renewal periods
    assert len(fake.keepalives) == sent, "keepalives went on after close()"
    assert task is None or task.done()
    assert fake.revoked == []  # close() does not revoke: the lease just expires


def test_sync_client_close_stops_keepalives() -> None:
    """Client.close() stops the thread that renews its leases."""
    c = Client("http://127.0.0.1:1")
    fake = _fake_lease_ops(c)
    lease = Lease(c, 0.3, c.ns)  # granted now, renewed every 0.1 s by the client's thread
    assert lease.id == 1
    _wait_for(lambda: len(fake.keepalives) >= 2)
    thread = c._lease_keeper._thread
    c.close()
    sent = len(fake.keepalives)
    time.sleep(0.35)
    assert len(fake.keepalives) == sent, "keepalives went on after close()"
    assert not thread.is_alive()
    assert fake.revoked == []


def test_on_lost_fires_once_outside_the_keeper_lock_and_a_raising_callback_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = SyncFake()
    c.keeper = ThreadKeeper(c)
    lease, kept = Lease(c, 0.6, "ns"), Lease(c, 0.6, "ns")
    fired: list[Any] = []

    def boom(x: Any) -> None:
        raise RuntimeError("callback bug")

    lease.on_lost(boom)
    lease.on_lost(lambda x: fired.append(Lease(c, 3.0, "ns")))  # may take a lease: no deadlock
    kept.on_lost(fired.append)
    kept.revoke()  # revoked by its owner: not lost
    c.gone.add(lease.id)
    _wait_for(lambda: fired)
    time.sleep(0.3)
    assert len(fired) == 1 and isinstance(fired[0], Lease) and fired[0].alive
    assert "callback bug" in caplog.text
    c.keeper.stop()


async def test_async_on_lost_may_be_a_coroutine_function() -> None:
    c = AsyncFake()
    c.keeper = TaskKeeper(c)
    lease = await AsyncLease(c, 0.3, "ns")
    lost = asyncio.Event()

    async def on_lost(x: Any) -> None:
        await asyncio.sleep(0)
        lost.set()

    lease.on_lost(on_lost)
    c.fail_next = 100  # keepalives fail past the TTL
    await asyncio.wait_for(lost.wait(), 2.0)
    assert not lease.alive
    await c.keeper.stop()
