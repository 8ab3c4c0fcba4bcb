"""node/raft/loop_driver.py: pysyncobj's poller on an asyncio loop, and the tick schedule
(real loop, real socket pair; no raft)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from statekeeper.node.raft.loop_driver import ERROR, READ, WRITE, LoopDriver, LoopPoller


@pytest.fixture(autouse=True, params=["asyncio", "uvloop"])
def loop_kind(request):
    """Every test on both loops: nodes run uvloop, embeddings may run asyncio's."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    yield request.param
    asyncio.set_event_loop_policy(None)


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def run_loop_for(loop: asyncio.AbstractEventLoop, seconds: float) -> None:
    loop.run_until_complete(asyncio.sleep(seconds))


def test_poller_delivers_read_and_write_events_then_asks_for_a_tick(pair) -> None:
    a, b = pair
    loop = asyncio.new_event_loop()
    events: list[tuple[int, int]] = []
    after: list[int] = []
    poller = LoopPoller(loop, lambda: after.append(1))

    def handler(fd: int, ev: int) -> None:
        events.append((fd, ev))
        if ev & READ:
            a.recv(100)

    poller.subscribe(a.fileno(), handler, READ | ERROR)
    b.send(b"x")
    run_loop_for(loop, 0.05)
    assert events == [(a.fileno(), READ)] and after == [1]
    # Write interest added for the same handler: a writable socket fires at once.
    poller.subscribe(a.fileno(), handler, READ | WRITE | ERROR)
    run_loop_for(loop, 0.02)
    assert (a.fileno(), WRITE) in events
    # Back to read only: no more write events.
    poller.subscribe(a.fileno(), handler, READ | ERROR)
    events.clear()
    run_loop_for(loop, 0.02)
    assert events == []
    poller.unsubscribe(a.fileno())
    b.send(b"y")
    run_loop_for(loop, 0.02)
    assert events == []
    loop.close()


def test_a_closed_descriptor_unsubscribes_quietly_and_its_number_can_come_back(pair) -> None:
    """pysyncobj closes a socket before it unsubscribes it; the number may be reused."""
    a, b = pair
    loop = asyncio.new_event_loop()
    poller = LoopPoller(loop, lambda: None)
    seen: list[str] = []
    fd = a.fileno()
    poller.subscribe(fd, lambda f, e: seen.append("old"), READ | WRITE)
    a.close()
    poller.unsubscribe(fd)  # must not raise
    c, d = socket.socketpair()
    try:
        c.setblocking(False)
        poller.subscribe(c.fileno(), lambda f, e: (seen.append("new"), c.recv(10)), READ)
        d.send(b"z")
        run_loop_for(loop, 0.05)
        assert seen and set(seen) == {"new"}
    finally:
        poller.close()
        c.close()
        d.close()
        loop.close()


def test_a_failing_handler_is_logged_and_the_loop_goes_on(pair, caplog) -> None:
    a, b = pair
    loop = asyncio.new_event_loop()
    after: list[int] = []
    poller = LoopPoller(loop, lambda: after.append(1))

    def boom(fd: int, ev: int) -> None:
        a.recv(10)
        raise RuntimeError("handler broke")

    poller.subscribe(a.fileno(), boom, READ)
    b.send(b"x")
    run_loop_for(loop, 0.05)
    assert "a raft socket handler failed" in caplog.text and after == [1]
    poller.close()
    loop.close()


def test_driver_ticks_on_wake_from_any_thread_coalesced_and_on_its_timer() -> None:
    driver = LoopDriver.in_own_thread(period=0.05, name="raft-test")
    ticks: list[float] = []
    driver.start(lambda: ticks.append(time.monotonic()))
    time.sleep(0.3)
    periodic = len(ticks)
    assert 3 <= periodic <= 9  # ~every 50 ms (plus the first)
    # Many wakes from another thread before the loop runs: coalesced into few ticks.
    before = len(ticks)
    driver.run_sync(lambda: [driver.wake() for _ in range(100)])
    time.sleep(0.01)
    assert 1 <= len(ticks) - before <= 3
    driver.run_sync(driver.stop)
    driver.join()
    stopped = len(ticks)
    time.sleep(0.15)
    assert len(ticks) == stopped


def test_a_failing_tick_is_logged_and_ticking_goes_on(caplog) -> None:
    driver = LoopDriver.in_own_thread(period=0.02)
    calls: list[int] = []

    def tick() -> None:
        calls.append(1)
        raise ValueError("tick broke")

    driver.start(tick)
    time.sleep(0.2)
    driver.run_sync(driver.stop)
    driver.join()
    assert len(calls) >= 3 and "a raft tick failed" in caplog.text


def test_run_sync_returns_and_raises_on_the_callers_thread() -> None:
    driver = LoopDriver.in_own_thread(period=1.0)
    try:
        assert driver.run_sync(threading.get_ident) == driver.loop_thread_id
        assert driver.loop_thread_id != threading.get_ident()
        with pytest.raises(KeyError):
            driver.run_sync(lambda: {}["missing"])
    finally:
        driver.run_sync(driver.stop)
        driver.join()


def test_a_driver_on_the_running_loop_runs_calls_inline() -> None:
    async def main() -> tuple[int, int]:
        driver = LoopDriver.for_running_loop(asyncio.get_running_loop(), period=1.0)
        return driver.run_sync(threading.get_ident), threading.get_ident()

    inner, outer = asyncio.run(main())
    assert inner == outer
