"""One thread per node: pysyncobj driven by the node's asyncio loop.

pysyncobj runs a thread of its own by default (autoTick): it polls its sockets, ticks
(elections, commit index, apply, heartbeats) and runs every callback there, while the HTTP
server runs on the asyncio loop. Every put then crossed threads twice: the proposer woke
the raft thread through a pipe, and the raft thread woke the loop with
call_soon_threadsafe; with both threads busy the GIL went back and forth at each step
(about 1 ms a put at one client, issue 17), and sys.setswitchinterval was lowered to 1 ms
to bound the stalls.

Here pysyncobj runs with autoTick off, on the loop:
- LoopPoller is pysyncobj's Poller interface over the loop's add_reader/add_writer: a peer
  socket that becomes readable or writable runs pysyncobj's handler from the loop at once,
  and poll() (called at the end of every tick) never waits.
- LoopDriver schedules ticks: soon after every socket event (a reply may have moved the
  commit index), after every submitted command (wake(), thread-safe), and every `period`
  seconds (elections, heartbeats, reconnects, snapshot status: what pysyncobj's thread
  did every autoTickPeriod). Wake-ups coalesce: at most one tick is pending at a time.

Invariants:
- Everything pysyncobj does (handlers, ticks, callbacks) runs on the driver's loop thread,
  so "the raft thread" of the rest of node/raft/ is that thread; code elsewhere in the
  node that handed results over with call_soon_threadsafe keeps working unchanged.
- Other threads only call wake() (and RaftNode's flag-setting methods): nothing else.
- An exception out of a handler or a tick is logged and the loop goes on, as pysyncobj's
  own thread did ("failed _onTick in _autoTickThread").
- An embedding without a loop of its own (tests/integration/raft_harness.py, a library
  user) gets a loop on a thread of the node's own (LoopDriver.in_own_thread): still one
  thread for everything raft does.

The cost: a tick's blocking work (the leader's fsync, apply) now delays HTTP work on the
same loop instead of overlapping it under the GIL; measured in benchmarks.compare (see
benchmarks/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("statekeeper.raft")

# pysyncobj's POLL_EVENT_TYPE values (node/raft/syncobj.py checks they still are).
READ, WRITE, ERROR = 1, 2, 4

Handler = Callable[[int, int], None]


class LoopPoller:
    """pysyncobj's Poller (subscribe, unsubscribe, poll) on an asyncio loop.

    Errors (POLLERR/POLLHUP) come from the loop as readiness: pysyncobj's handler then reads
    or writes, fails and drops the connection, as it does on an ERROR event. A descriptor is
    registered afresh whenever its handler changes: pysyncobj closes a socket before it
    unsubscribes it, and the number may come back as a new socket."""

    def __init__(self, loop: asyncio.AbstractEventLoop, after_event: Callable[[], None]):
        self._loop = loop
        self._after_event = after_event
        self._subs: dict[int, tuple[Handler, int]] = {}

    def subscribe(self, descr: int, callback: Handler, eventMask: int) -> None:  # noqa: N803
        want = (READ if eventMask & (READ | ERROR) else 0) | (eventMask & WRITE)
        old = self._subs.get(descr)
        if old is not None and old[0] == callback:
            if old[1] == want:
                return  # pysyncobj re-subscribes on every send of a large message
            self._set(descr, old[1], want)
        else:
            if old is not None:
                self._set(descr, old[1], 0)
            self._set(descr, 0, want)
        self._subs[descr] = (callback, want)

    def unsubscribe(self, descr: int) -> None:
        old = self._subs.pop(descr, None)
        if old is not None:
            self._set(descr, old[1], 0)

    def poll(self, timeout: float) -> None:
        """Events reach the handlers from the loop as they happen: a tick never waits."""

    def close(self) -> None:
        for descr in list(self._subs):
            self.unsubscribe(descr)

    def _set(self, descr: int, have: int, want: int) -> None:
        # The descriptor may be closed already: the loop forgets it quietly.
        with contextlib.suppress(OSError, ValueError):
            if have & READ and not want & READ:
                self._loop.remove_reader(descr)
            if have & WRITE and not want & WRITE:
                self._loop.remove_writer(descr)
            if want & READ and not have & READ:
                self._loop.add_reader(descr, self._fire, descr, READ)
            if want & WRITE and not have & WRITE:
                self._loop.add_writer(descr, self._fire, descr, WRITE)

    def _fire(self, descr: int, event: int) -> None:
        sub = self._subs.get(descr)
        if sub is None:
            return
        try:
            sub[0](descr, event)
        except Exception:
            log.exception("a raft socket handler failed")
        self._after_event()


class LoopDriver:
    """Ticks a SyncObj on an asyncio loop: on events, on wake(), and every `period` s."""

    def __init__(self, loop: asyncio.AbstractEventLoop, period: float, loop_thread_id: int):
        self.loop = loop
        self.period = period
        self.loop_thread_id = loop_thread_id
        self.poller = LoopPoller(loop, self.tick_soon)
        self._tick: Callable[[], None] | None = None
        self._pending = False
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = False
        self._thread: threading.Thread | None = None

    @classmethod
    def for_running_loop(cls, loop: asyncio.AbstractEventLoop, period: float) -> LoopDriver:
        """A driver on `loop`, which runs on the calling thread."""
        return cls(loop, period, threading.get_ident())

    @classmethod
    def in_own_thread(cls, period: float, name: str = "raft") -> LoopDriver:
        """A driver whose loop runs on a new daemon thread (no loop to share)."""
        loop = asyncio.new_event_loop()
        started = threading.Event()
        ident: list[int] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            ident.append(threading.get_ident())
            loop.call_soon(started.set)
            loop.run_forever()
            loop.close()

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        started.wait()
        driver = cls(loop, period, ident[0])
        driver._thread = thread
        return driver

    def start(self, tick: Callable[[], None]) -> None:
        """Any thread: begin ticking with tick() (the SyncObj's one-tick step)."""
        self._tick = tick
        self.call(self._start_on_loop)

    def _start_on_loop(self) -> None:
        self._arm_timer()
        self.tick_soon()

    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self.loop_thread_id

    def call(self, fn: Callable[[], None]) -> None:
        """Run fn on the loop soon, from any thread."""
        if self.on_loop_thread():
            self.loop.call_soon(fn)
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to wake
                self.loop.call_soon_threadsafe(fn)

    def wake(self) -> None:
        """Any thread: tick soon (a command was queued, a read is waiting)."""
        if self.on_loop_thread():
            self.tick_soon()
        else:
            self.call(self.tick_soon)

    def tick_soon(self) -> None:
        """Loop thread: one tick at the next pass of the loop (coalesced)."""
        if not self._pending and not self._stopped and self._tick is not None:
            self._pending = True
            self.loop.call_soon(self._run_tick)

    def _run_tick(self) -> None:
        self._pending = False
        if self._stopped or self._tick is None:
            return
        try:
            self._tick()
        except Exception:
            log.exception("a raft tick failed")

    def _arm_timer(self) -> None:
        if not self._stopped:
            self._timer = self.loop.call_later(self.period, self._on_timer)

    def _on_timer(self) -> None:
        self._arm_timer()
        self.tick_soon()

    def run_sync(self, fn: Callable[[], object], timeout: float = 30.0) -> object:
        """Run fn on the loop thread and return its result (from any thread; on the loop
        thread itself fn runs at once)."""
        if self.on_loop_thread():
            return fn()
        done = threading.Event()
        out: list = []

        def run() -> None:
            try:
                out.append((fn(), None))
            except BaseException as e:  # handed to the caller's thread
                out.append((None, e))
            finally:
                done.set()

        self.call(run)
        if not done.wait(timeout):
            raise TimeoutError("the raft loop did not run the call in time")
        result, err = out[0]
        if err is not None:
            raise err
        return result

    def stop(self) -> None:
        """Loop thread: no more ticks or socket events; the own thread (if any) ends."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        self.poller.close()
        if self._thread is not None:
            self.loop.call_soon(self.loop.stop)

    def join(self, timeout: float = 10.0) -> None:
        """Any thread but the loop's: wait for the own thread to end (after stop())."""
        if self._thread is not None and not self.on_loop_thread():
            self._thread.join(timeout)
