"""The effect ledger's blocking and asyncio drivers (client/effects/ledger.py) over an in-memory
fake client with fenced writes and one-holder locks: run once then the record, releases on
every exit (fn's error, KeyboardInterrupt, a cancelled task), wait=False, bad arguments, and
``client.effects`` on both clients. No server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statekeeper.client import (
    AsyncClient,
    Client,
    EffectInProgress,
    FenceMismatch,
    InvalidRequest,
    LockHeld,
)
from statekeeper.client.effects.ledger import AsyncEffects, Effects
from statekeeper.client.effects.plan import EffectContext
from statekeeper.client.results import DeleteResult, KeyValue, RangeResult, TxnResult, WriteResult
from tests.unit.test_effects import NS, FakeLock


class AsyncFakeLock(FakeLock):
    async def release(self) -> bool:  # type: ignore[override]
        return FakeLock.release(self)


class FakeClient:
    """get/put/txn/range and one-holder locks (fenced writes checked) in memory."""

    ns = NS
    lock_type: type[FakeLock] = FakeLock

    def __init__(self) -> None:
        self.kv: dict[tuple[str, str], bytes] = {}
        self.rev = 1
        self.locks: list[FakeLock] = []
        self.calls: list[str] = []

    def _holder(self, name: str) -> FakeLock | None:
        for lk in self.locks:
            if lk.name == name and lk.held:
                return lk
        return None

    def lock(
        self, name: str, ttl: float, *, wait: bool, timeout: Any, ns: str, owner: Any = None
    ) -> FakeLock:
        self.calls.append("lock")
        holder = self._holder(name)
        if holder is not None:
            raise LockHeld("held", code="lock_held", details={"holder_fence": holder.fence})
        self.rev += 1
        lk = self.lock_type(self, name, self.rev, ns)
        self.kv[(ns, lk.key)] = b""
        self.locks.append(lk)
        return lk

    def _fenced(self, fence: FakeLock | None) -> None:
        if fence is not None and self._holder(fence.name) is not fence:
            raise FenceMismatch("moved on", code="fence_mismatch")

    def get(self, key: str, *, ns: str, default: Any, consistency: Any = None) -> Any:
        self.calls.append("get")
        value = self.kv.get((ns, key))
        return default if value is None else KeyValue(key, value, 1, 2, self.rev, ns, self.rev)

    def put(self, key: str, value: bytes, *, ns: str, fence: Any = None) -> WriteResult:
        self.calls.append("put")
        self._fenced(fence)
        self.rev += 1
        self.kv[(ns, key)] = value
        return WriteResult(self.rev)

    def txn(self, compare: Any, success: Any, *, ns: str, fence: Any = None) -> TxnResult:
        self.calls.append("txn")
        self._fenced(fence)
        self.rev += 1
        out = []
        for op in success:
            if op["op"] == "put":
                self.kv[(ns, op["key"])] = op["value"]
                out.append(WriteResult(self.rev))
            else:
                gone = self.kv.pop((ns, op["key"]), None) is not None
                if op["key"].startswith("__lock/"):
                    for lk in self.locks:
                        if lk.key == op["key"]:
                            lk.held = False
                out.append(DeleteResult(self.rev, int(gone)))
        return TxnResult(True, self.rev, out)

    def range(self, prefix: str, *, ns: str, consistency: Any, limit: int, **kw: Any) -> Any:
        kvs = [
            KeyValue(k, v, 1, 1, 1, ns, self.rev)
            for (n, k), v in sorted(self.kv.items())
            if n == ns and k.startswith(prefix)
        ]
        return RangeResult(kvs[:limit], self.rev)


class AsyncFake(FakeClient):
    lock_type = AsyncFakeLock

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name in ("lock", "get", "put", "txn", "range"):

            async def call(*a: Any, **k: Any) -> Any:
                await asyncio.sleep(0)
                return attr(*a, **k)

            return call
        return attr


def test_sync_driver_runs_once_then_returns_the_record():
    c, calls = FakeClient(), []
    fx = Effects(c, clock=lambda: 5.0)

    def charge(ctx: EffectContext) -> dict[str, Any]:
        calls.append(ctx)
        return {"receipt": f"r-{ctx.idempotency_key}"}

    first = fx.run("pay/1", charge, ttl=5)
    assert fx.run("pay/1", charge, ttl=5) == first == {"receipt": "r-pay/1#2"}
    assert len(calls) == 1 and not calls[0].maybe_happened
    r = fx.get("pay/1")
    assert r is not None and r.done and r.result == first and r.done_ms == 5000
    assert c.locks[0].held is False and c.locks[0].released >= 1
    assert [x.key for x in fx.list("pay/")] == ["pay/1"]
    assert fx.forget("pay/1") and fx.get("pay/1") is None
    assert fx.run("pay/1", charge, ttl=5)["receipt"] != first["receipt"]  # a new effect


def test_sync_driver_releases_on_fn_error_and_on_keyboard_interrupt():
    c = FakeClient()
    fx = Effects(c)

    def fails(ctx: EffectContext) -> None:
        raise KeyError("k")

    with pytest.raises(KeyError):
        fx.run("e", fails)
    assert c._holder("effect:e") is None
    assert fx.get("e").error == "KeyError: 'k'"

    def interrupted(ctx: EffectContext) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fx.run("e", interrupted)
    assert c._holder("effect:e") is None  # released by the driver
    seen: list[EffectContext] = []
    assert fx.run("e", lambda ctx: seen.append(ctx) or "ok") == "ok"
    assert seen[0].maybe_happened and seen[0].attempt == 3


def test_sync_driver_wait_false_while_held():
    c = FakeClient()
    c.lock("effect:busy", 5, wait=True, timeout=None, ns=NS)
    with pytest.raises(EffectInProgress):
        Effects(c).run("busy", lambda ctx: 1, wait=False)
    assert c.calls.count("put") == 0


def test_sync_run_refuses_async_functions_and_bad_arguments():
    fx = Effects(FakeClient())

    async def coro(ctx: EffectContext) -> int:
        return 1

    with pytest.raises(TypeError):
        fx.run("k", coro)
    with pytest.raises(TypeError):  # an awaitable from a plain function: refused, released
        fx.run("k", lambda ctx: coro(ctx))
    with pytest.raises(InvalidRequest):
        fx.run("k", lambda ctx: 1, ttl=0)
    with pytest.raises(ValueError):
        fx.run("k", lambda ctx: 1, timeout=-1)
    with pytest.raises(TypeError):
        fx.run("k", "not callable")  # type: ignore[arg-type]


def test_async_driver_awaits_coroutine_functions_and_plain_ones():
    async def main() -> None:
        c = AsyncFake()
        fx = AsyncEffects(c)

        async def charge(ctx: EffectContext) -> bytes:
            await asyncio.sleep(0)
            return b"\x00receipt"

        assert await fx.run("a", charge) == b"\x00receipt"  # bytes stay bytes
        assert await fx.run("a", charge) == b"\x00receipt"
        assert await fx.run("b", lambda ctx: [ctx.attempt]) == [1]
        assert (await fx.get("a")).done and len(await fx.list()) == 2
        await c.lock("effect:c", 5, wait=True, timeout=None, ns=NS)
        with pytest.raises(EffectInProgress):
            await fx.run("c", charge, wait=False)

    asyncio.run(main())


def test_async_driver_releases_when_cancelled():
    async def main() -> None:
        c = AsyncFake()
        started = asyncio.Event()

        async def slow(ctx: EffectContext) -> None:
            started.set()
            await asyncio.sleep(10)

        task = asyncio.create_task(AsyncEffects(c).run("slow", slow))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert c._holder("effect:slow") is None

    asyncio.run(main())


def test_both_clients_have_an_effects_ledger():
    c, a = Client("http://127.0.0.1:1"), AsyncClient("http://127.0.0.1:1")
    assert isinstance(c.effects, Effects) and c.effects is c.effects
    assert isinstance(a.effects, AsyncEffects) and a.effects.client is a
    c.close()
