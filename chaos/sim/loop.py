"""One asyncio loop on virtual time for a whole simulated cluster.

Every node of a simulated world, and every client, runs on this one loop on one thread.
Time is virtual: it moves only when nothing is ready to run, straight to the next timer
(SimSelector.select), so a second of a cluster's life costs what its callbacks cost.

Which node a callback belongs to is carried by a context variable (CURRENT): a node is
started inside a context naming its Process, and asyncio copies the context into every
handle, task and future callback scheduled from there, so everything the node's code
schedules runs as that node. SimLoop wraps each handle with its Process's guard:
- a killed Process's handles are dropped (its timers, its tasks' next steps), and its
  unfinished tasks are kept until the world ends (bury, close_buried: below);
- a paused Process's handles are held and run, in order, when it resumes (SIGSTOP);
- a handle that asked the process to exit (os._exit, patched: patches.py) kills it.

Socket readiness comes from the simulated network (network.py): the selector asks each
registered simulated socket whether it is readable or writable; real descriptors (the
loop's self-pipe) are never reported, since nothing here runs on another thread.

A dead process's tasks. Dropped, a task suspended at an await becomes garbage, and the
cyclic GC closes its coroutine whenever it runs: the dead node's `finally` blocks then
run in the middle of someone else's step, and CPython 3.11 can crash doing it (seed
1000000 segfaulted in the explorer: the GC closed a coroutine another garbage task's
coroutine was awaiting; closing that task re-entered the half-closed one, whose awaited
object was already freed: gen_close_iter, _PyObject_LookupAttr). So a task created as a
process is remembered (SimLoop's task factory); at the kill, its unfinished ones are
kept by the Process (bury: a dead process runs no code), and at the world's end each is
closed from its outermost coroutine (close_buried), the order in which no coroutine is
closed twice.

Determinism: handles run in the order asyncio orders them (time, then FIFO); sockets are
polled in descriptor order, descriptors are numbered in creation order; the executor and
threads of the node's code run on the loop (InlineExecutor, SimThread) at a time drawn
from the world's seeded random.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import selectors
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SPIN_LIMIT = 200_000  # loop passes at one instant before the world calls it a livelock


class Livelock(RuntimeError):
    """The loop ran SPIN_LIMIT passes without virtual time moving."""


class NodeCrashed(BaseException):
    """Raised where a simulated node's code called os._exit: the node is dead from here."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def _close_unstarted(callback) -> None:
    """A dead process's task step is dropped; if it was the task's first, its coroutine never
    ran, and freeing it would warn "coroutine ... was never awaited" (a request a node got
    just before it died): close it, which is all the warning asks."""
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
            coro.close()


@dataclass(eq=False)
class Process:
    """One incarnation of a simulated node (a restart makes a new one)."""

    node_id: str
    incarnation: int
    alive: bool = True
    paused: bool = False
    exit_code: int | None = None  # set by a patched os._exit
    held: list = field(default_factory=list)  # (callback, args, context) while paused
    tasks: weakref.WeakSet = field(default_factory=weakref.WeakSet)  # created as this process
    buried: list = field(default_factory=list)  # its unfinished tasks once dead (bury)
    clock_skew: float = 0.0  # added to this process's monotonic clock (clock faults)
    wall_skew: float = 0.0  # added to its wall clock only

    @property
    def name(self) -> str:
        return f"{self.node_id}#{self.incarnation}"


CURRENT: contextvars.ContextVar[Process | None] = contextvars.ContextVar(
    "sim_process", default=None
)


def bury(process: Process) -> None:
    """The process is dead: its handles are dropped from now on, and its unfinished tasks
    are kept (never left to the GC) until close_buried (the module docstring)."""
    process.alive = False
    process.buried = [t for t in process.tasks if not t.done()]


def close_buried(process: Process) -> None:
    """At the world's end: close each buried task's coroutine from the outermost one."""
    buried, process.buried = process.buried, []
    for task in buried:
        task._log_destroy_pending = False  # it is, on purpose: no "destroyed but pending"
        try:
            task.get_coro().close()
        except Exception:  # noqa: BLE001 - a dead node's cleanup failing changes nothing
            pass


def context_of(process: Process | None) -> contextvars.Context:
    """A fresh context in which code runs as `process` (None: the world or a client)."""
    ctx = contextvars.Context()
    ctx.run(CURRENT.set, process)
    return ctx


class VirtualClock:
    """The world's time, in seconds. Starts at an arbitrary, fixed point."""

    def __init__(self, start: float = 1_000_000.0):
        self.start = start
        self.now = start

    def elapsed(self) -> float:
        """Seconds since the world began (what traces and verdicts print)."""
        return self.now - self.start


class SimSelector(selectors.BaseSelector):
    """A selector over simulated sockets: never blocks; advances the virtual clock when
    nothing is ready (to the loop's next timer)."""

    def __init__(self, clock: VirtualClock, sockets: Callable[[int], Any], idle_step: float):
        self._clock = clock
        self._sockets = sockets  # fd -> a simulated socket (readable(), writable(), owner) or None
        self._idle_step = idle_step
        self._keys: dict[int, selectors.SelectorKey] = {}
        self._spins = 0  # loop passes since virtual time last moved
        self.passes = 0  # loop passes in all (spin_watch.py: a callback that never returns)

    def register(self, fileobj, events, data=None):
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        if fd in self._keys:
            raise KeyError(f"{fileobj!r} is already registered")
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj):
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def modify(self, fileobj, events, data=None):
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        old = self._keys[fd]
        key = selectors.SelectorKey(old.fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def get_key(self, fileobj):
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys[fd]

    def get_map(self):
        return dict(self._keys)

    def close(self) -> None:
        self._keys.clear()

    def ready(self) -> list[tuple[selectors.SelectorKey, int]]:
        out = []
        for fd in sorted(self._keys):
            sock = self._sockets(fd)
            if sock is None or not sock.pollable():
                continue
            key = self._keys[fd]
            ev = 0
            if key.events & selectors.EVENT_READ and sock.readable():
                ev |= selectors.EVENT_READ
            if key.events & selectors.EVENT_WRITE and sock.writable():
                ev |= selectors.EVENT_WRITE
            if ev:
                out.append((key, ev))
        return out

    def select(self, timeout=None):
        self._spins += 1
        self.passes += 1
        if self._spins > SPIN_LIMIT:
            raise Livelock(
                f"{SPIN_LIMIT} loop passes at virtual time {self._clock.now:.6f} without time moving: "
                "something reschedules itself at once, forever (a busy loop in a real node)"
            )
        ready = self.ready()
        if ready:
            return ready
        if timeout is None:
            timeout = self._idle_step
        if timeout > 0:
            self._clock.now += timeout  # idle: straight to the next timer
            self._spins = 0
        return []


def _task_of_process(loop, coro, context=None) -> asyncio.Task:
    """asyncio's Task, remembered by the Process it is created as (bury)."""
    task = asyncio.Task(coro, loop=loop, context=context)
    process = context.get(CURRENT) if context is not None else CURRENT.get()
    if process is not None:
        process.tasks.add(task)
    return task


class SimLoop(asyncio.SelectorEventLoop):
    """asyncio on virtual time, with every handle run as the Process it belongs to."""

    def __init__(
        self, clock: VirtualClock, sockets: Callable[[int], Any], on_crash, idle_step=0.05
    ):
        self._sim_clock = clock
        self._on_crash = on_crash  # on_crash(process): the world kills it
        self.sim_selector = SimSelector(clock, sockets, idle_step)
        super().__init__(self.sim_selector)
        self.set_default_executor(InlineExecutor())
        self.set_task_factory(_task_of_process)

    def time(self) -> float:
        return self._sim_clock.now

    def _guarded(self, callback, context: contextvars.Context):
        process = context.get(CURRENT)
        if process is None:
            return callback

        def run(*args):
            if not process.alive:
                _close_unstarted(callback)
                return None
            if process.paused:
                process.held.append((callback, args, context))
                return None
            try:
                return callback(*args)
            except NodeCrashed:
                pass
            finally:
                if process.exit_code is not None and process.alive:
                    self._on_crash(process)
            return None

        return run

    def call_soon(self, callback, *args, context=None):
        ctx = context if context is not None else contextvars.copy_context()
        return super().call_soon(self._guarded(callback, ctx), *args, context=ctx)

    def call_at(self, when, callback, *args, context=None):
        ctx = context if context is not None else contextvars.copy_context()
        return super().call_at(when, self._guarded(callback, ctx), *args, context=ctx)

    def call_soon_threadsafe(self, callback, *args, context=None):
        return self.call_soon(callback, *args, context=context)  # one thread: no wake-up

    def _process_events(self, event_list):
        # A socket of a paused or dead process is never reported (SimSelector.ready),
        # so its handlers never run as the wrong incarnation.
        super()._process_events(event_list)

    def resume(self, process: Process) -> None:
        """Run what a paused process held, in order, then let it go on."""
        process.paused = False
        held, process.held = process.held, []
        for callback, args, ctx in held:
            asyncio.SelectorEventLoop.call_soon(
                self, self._guarded(callback, ctx), *args, context=ctx
            )


class InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """run_in_executor on the loop's own thread: the work runs at once, in order (a
    ThreadPoolExecutor only because asyncio insists on one; it never starts a thread)."""

    def __init__(self, *args, **kwargs):
        super().__init__(max_workers=1)

    def submit(self, fn, /, *args, **kwargs):
        fut: concurrent.futures.Future = concurrent.futures.Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except NodeCrashed:
            raise
        except BaseException as e:
            fut.set_exception(e)
        return fut

    def shutdown(self, wait=True, *, cancel_futures=False):
        return None


class SimThread:
    """threading.Thread for the node's helper threads (snapshot pack, install sync,
    pre-flush): start() runs the target on the loop, as the starting process, a moment
    later (a delay drawn from the world's random), so other work interleaves with it."""

    delay: Callable[[], float] = staticmethod(lambda: 0.0)  # set by the world

    def __init__(self, group=None, target=None, name=None, args=(), kwargs=None, *, daemon=None):
        self._target = target
        self._args = args
        self._kwargs = kwargs or {}
        self.name = name or "sim-thread"
        self.daemon = daemon
        self._done = False
        self._handle = None

    def start(self) -> None:
        loop = asyncio.get_event_loop()
        self._handle = loop.call_later(SimThread.delay(), self.run)

    def run(self) -> None:
        if self._done:
            return
        self._done = True
        if self._target is not None:
            self._target(*self._args, **self._kwargs)

    def join(self, timeout=None) -> None:
        if not self._done:  # a join on the loop: the work runs now
            if self._handle is not None:
                self._handle.cancel()
            self.run()

    def is_alive(self) -> bool:
        return not self._done
