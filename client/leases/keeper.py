"""Leases that keep themselves alive: :class:`Lease` (Client) and :class:`AsyncLease`
(AsyncClient), and the per-client keepers that renew them in the background.

One keeper per client, created with its first lease: a daemon thread on a Client
(:class:`ThreadKeeper`), an asyncio task on an AsyncClient (:class:`TaskKeeper`). Both run
the same sans-IO :class:`KeepaliveSchedule`: every tick (the shortest TTL among the
client's leases / 3) ONE ``lease_keepalive`` op renews all of them (split by 1000), so a
client with many leases costs one small request per tick; after a failed call (the
client's RetryPolicy exhausted) it tries again within 0.5 s. A lease the server reports
gone is dropped and stops being ``alive``. Closing the client stops its keeper; its
leases then expire after their TTL.

``alive`` is what the client can vouch for: granted, not revoked, not reported gone, and
renewed within its TTL (measured from when the last successful keepalive was SENT, so it
never outlives the server's own expiry). The clock is injected (tests).

A lease is *lost* (etcd's ``Session.Done()``) when a keepalive answers that it is gone
(revoked by anyone, or expired on the server) or when no keepalive succeeded within its
TTL (the cluster unreachable, or this process paused): the keeper then stops renewing it
for good, ``alive`` stays False, and the callbacks given to ``lease.on_lost(fn)`` are
called once each, ``fn(lease)``, from the keeper (its thread on a Client, its task on an
AsyncClient, where fn may be a coroutine function: its coroutine runs as a task). A
revoke by its owner, or closing the client, loses nothing. A lease renewed late is not
taken back: the server may have expired it already, and its keys with it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import LeaseNotFound, StatekeeperError
from .commands import MAX_KEEPALIVE_LEASES
from .results import KeepaliveResult, LeaseGrant, RevokeResult

__all__ = ["AsyncLease", "KeepaliveSchedule", "Lease", "TaskKeeper", "ThreadKeeper"]

log = logging.getLogger("statekeeper.client.leases")

RETRY_DELAY = 0.5  # after a failed keepalive call, at most this long until the next try
Clock = Callable[[], float]
OnLost = Callable[[Any], Any]
_callback_tasks: set[asyncio.Task[Any]] = set()  # coroutines of on_lost callbacks, kept alive


async def _awaited(result: Any) -> Any:
    return await result


def _spawn(awaitable: Any) -> None:
    """Run an async on_lost callback's awaitable as a task of the running loop."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        raise TypeError("an async on_lost callback needs an AsyncClient's lease") from None
    task = loop.create_task(_awaited(awaitable))
    _callback_tasks.add(task)
    task.add_done_callback(_callback_tasks.discard)


def notify_lost(leases: Iterable[_Tracked]) -> None:
    """Call the on_lost callbacks of ``leases`` (outside the keeper's lock: a callback may
    take a new lease or lock)."""
    for lease in leases:
        lease._notify_lost()


class _Tracked:
    """What both lease classes share: identity, TTL, and whether it is still alive."""

    def __init__(self, client: Any, ttl: float, ns: str, clock: Clock) -> None:
        self._client = client
        self.ttl = float(ttl)
        self.ns = ns
        self.id: int | None = None
        self._clock = clock
        self._deadline = 0.0
        self._state = "new"  # new -> alive -> lost (server: gone) | revoked
        self._on_lost: list[OnLost] = []
        self._callbacks_lock = threading.Lock()  # on_lost vs the keeper's notify_lost

    @property
    def alive(self) -> bool:
        """Granted, not revoked or reported gone, and renewed within its TTL."""
        return self._state == "alive" and self._clock() < self._deadline

    def _granted(self, grant: LeaseGrant, sent: float) -> None:
        self.id, self.ttl = grant.lease, grant.ttl_ms / 1000
        self._state, self._deadline = "alive", sent + self.ttl

    def _renewed(self, sent: float) -> None:
        self._deadline = max(self._deadline, sent + self.ttl)

    def on_lost(self, fn: OnLost) -> OnLost:
        """Call ``fn(lease)`` once when this lease is lost (see the module docstring): at
        once if it is lost already. Returns fn (usable as a decorator). fn runs in the
        keeper, so it should be quick: set an event, cancel a task, stop a loop."""
        with self._callbacks_lock:
            if self._state != "lost":
                self._on_lost.append(fn)
                return fn
        self._call_on_lost(fn)
        return fn

    def discard_on_lost(self, fn: OnLost) -> None:
        """Forget a callback given to :meth:`on_lost` (not called if it was not there)."""
        with self._callbacks_lock:
            if fn in self._on_lost:
                self._on_lost.remove(fn)

    def _lost(self) -> None:
        with self._callbacks_lock:
            if self._state == "alive":
                self._state = "lost"

    def _notify_lost(self) -> None:
        with self._callbacks_lock:
            if self._state != "lost":
                return
            callbacks, self._on_lost = self._on_lost, []
        for fn in callbacks:
            self._call_on_lost(fn)

    def _call_on_lost(self, fn: OnLost) -> None:
        try:
            result = fn(self)
            if inspect.isawaitable(result):
                _spawn(result)
        except Exception:
            log.exception("the on_lost callback %r of lease %s raised", fn, self.id)

    def _start_revoke(self) -> bool:
        """Stop keeping it alive; True if the server still needs a revoke."""
        if self._state == "new":
            self._state = "revoked"
            return False
        if self.id is not None:
            self._client._keeper().discard(self)
        was_alive = self._state == "alive"
        self._state = "revoked"
        return was_alive

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(id={self.id}, ttl={self.ttl:g}, ns={self.ns!r}, {self._state})"
        )


class Lease(_Tracked):
    """A lease a :class:`client.Client` keeps alive (see ``Client.lease``); granted when
    created. As a context manager it revokes itself on exit (if the block raised, a
    failing revoke is not raised over that error: the lease then expires after its TTL).
    """

    def __init__(self, client: Any, ttl: float, ns: str, *, clock: Clock = time.monotonic):
        super().__init__(client, ttl, ns, clock)
        sent = clock()
        self._granted(client.lease_grant(ttl, ns=ns), sent)
        client._keeper().add(self)

    def revoke(self) -> RevokeResult | None:
        """Stop keeping it alive and revoke it: its keys are deleted at one revision.
        None when it was already gone (revoked, or expired on the server)."""
        if not self._start_revoke():
            return None
        try:
            return self._client.lease_revoke(self.id)
        except LeaseNotFound:
            return None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self.revoke()
            return
        try:
            self.revoke()
        except StatekeeperError:
            log.warning("could not revoke lease %s; it expires after its TTL", self.id)


class AsyncLease(_Tracked):
    """A lease an :class:`client.AsyncClient` keeps alive (see ``AsyncClient.lease``):
    granted when awaited (``lease = await client.lease(10)``) or entered (``async with``,
    which revokes it on exit)."""

    def __init__(self, client: Any, ttl: float, ns: str, *, clock: Clock = time.monotonic):
        super().__init__(client, ttl, ns, clock)
        self._granting: asyncio.Future[AsyncLease] | None = None

    def __await__(self) -> Any:
        return self._grant().__await__()

    async def _grant(self) -> AsyncLease:
        if self._granting is None:  # one grant, however many await it
            self._granting = asyncio.ensure_future(self._do_grant())
        return await asyncio.shield(self._granting)

    async def _do_grant(self) -> AsyncLease:
        sent = self._clock()
        grant = await self._client.lease_grant(self.ttl, ns=self.ns)
        if self._state == "new":
            self._granted(grant, sent)
            self._client._keeper().add(self)
        return self

    async def revoke(self) -> RevokeResult | None:
        """Stop keeping it alive and revoke it (see :meth:`Lease.revoke`)."""
        if not self._start_revoke():
            return None
        try:
            return await self._client.lease_revoke(self.id)
        except LeaseNotFound:
            return None

    async def __aenter__(self) -> AsyncLease:
        return await self._grant()

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            await self.revoke()
            return
        try:
            await self.revoke()
        except StatekeeperError:
            log.warning("could not revoke lease %s; it expires after its TTL", self.id)


class KeepaliveSchedule:
    """Sans-IO: which leases one client keeps alive, when the next tick is due, and what
    a keepalive's answer means for them. Not thread-safe (the keepers lock around it)."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._leases: dict[int, _Tracked] = {}
        self._next = math.inf

    def __len__(self) -> int:
        return len(self._leases)

    def interval(self) -> float:
        """Seconds between ticks: the shortest TTL / 3 (inf without leases)."""
        return min((x.ttl for x in self._leases.values()), default=math.inf) / 3

    def add(self, lease: _Tracked) -> None:
        assert lease.id is not None
        self._leases[lease.id] = lease
        self._next = min(self._next, self._clock() + lease.ttl / 3)

    def discard(self, lease: _Tracked) -> None:
        if lease.id is not None and self._leases.get(lease.id) is lease:
            del self._leases[lease.id]

    def wait_time(self) -> float | None:
        """Seconds until the next tick or the first lease's deadline (None: no leases,
        wait until one is added)."""
        if not self._leases:
            self._next = math.inf
            return None
        first_deadline = min(x._deadline for x in self._leases.values())
        return max(0.0, min(self._next, first_deadline) - self._clock())

    def take_due(self) -> list[list[int]]:
        """If the tick is due: the lease ids to renew, in ops of at most 1000 (and the
        next tick is scheduled); else []."""
        now = self._clock()
        if not self._leases or now < self._next:
            return []
        self._next = now + self.interval()
        ids = list(self._leases)
        return [ids[i : i + MAX_KEEPALIVE_LEASES] for i in range(0, len(ids), MAX_KEEPALIVE_LEASES)]

    def settle(self, result: KeepaliveResult, sent: float) -> list[_Tracked]:
        """The answer to a keepalive sent at `sent` (monotonic); returns the leases it
        reports gone (lost: their callbacks are the caller's to call, see notify_lost)."""
        for state in result.leases:
            lease = self._leases.get(state.lease)
            if lease is not None:
                lease._renewed(sent)
        lost = []
        for gone in result.missing:
            lease = self._leases.pop(gone, None)
            if lease is not None:
                lease._lost()
                lost.append(lease)
                log.warning("lease %d is gone (revoked or expired); its keys are deleted", gone)
        return lost

    def expire(self) -> list[_Tracked]:
        """The leases no keepalive renewed within their TTL, dropped and marked lost
        (their callbacks are the caller's to call)."""
        now = self._clock()
        lost = [x for x in self._leases.values() if now >= x._deadline]
        for lease in lost:
            self.discard(lease)
            lease._lost()
            log.warning(
                "lease %s was not renewed within its TTL (%g s): lost; it expires on the "
                "server if it has not already",
                lease.id,
                lease.ttl,
            )
        return lost

    def failed(self) -> None:
        """A keepalive call failed: try again soon."""
        self._next = min(self._next, self._clock() + min(self.interval(), RETRY_DELAY))


class ThreadKeeper:
    """Renews a :class:`client.Client`'s leases from one daemon thread."""

    def __init__(self, client: Any, *, clock: Clock = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._schedule = KeepaliveSchedule(clock)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def add(self, lease: _Tracked) -> None:
        with self._lock:
            if self._stopped:
                raise RuntimeError("the client is closed: nothing keeps the lease alive")
            self._schedule.add(lease)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="statekeeper-keepalive", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def discard(self, lease: _Tracked) -> None:
        with self._lock:
            self._schedule.discard(lease)

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                wait = self._schedule.wait_time()
            self._wake.wait(wait)
            self._wake.clear()
            with self._lock:
                if self._stopped:
                    return
                batches = self._schedule.take_due()
            for ids in batches:
                self._renew(ids)
            with self._lock:
                expired = self._schedule.expire()
            notify_lost(expired)

    def _renew(self, ids: list[int]) -> None:
        sent = self._clock()
        try:
            result = self._client.lease_keepalive(*ids)
        except (StatekeeperError, RuntimeError) as e:  # RuntimeError: closed meanwhile
            log.warning("keepalive of %d leases failed: %s", len(ids), e)
            with self._lock:
                self._schedule.failed()
            return
        with self._lock:
            lost = self._schedule.settle(result, sent)
        notify_lost(lost)

    def stop(self, timeout: float = 2.0) -> None:
        """Stop renewing (the client is closing); waits briefly for a call in flight."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


class TaskKeeper:
    """Renews an :class:`client.AsyncClient`'s leases from one asyncio task (in the loop
    of the first lease's grant)."""

    def __init__(self, client: Any, *, clock: Clock = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._schedule = KeepaliveSchedule(clock)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def add(self, lease: _Tracked) -> None:
        if self._stopped:
            raise RuntimeError("the client is closed: nothing keeps the lease alive")
        self._schedule.add(lease)
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())
        else:
            assert self._wake is not None
            self._wake.set()

    def discard(self, lease: _Tracked) -> None:
        self._schedule.discard(lease)

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self._schedule.wait_time())
            except TimeoutError:
                pass
            self._wake.clear()
            for ids in self._schedule.take_due():
                await self._renew(ids)
            notify_lost(self._schedule.expire())

    async def _renew(self, ids: list[int]) -> None:
        sent = self._clock()
        try:
            result = await self._client.lease_keepalive(*ids)
        except (StatekeeperError, RuntimeError) as e:
            log.warning("keepalive of %d leases failed: %s", len(ids), e)
            self._schedule.failed()
            return
        notify_lost(self._schedule.settle(result, sent))

    async def stop(self) -> None:
        """Stop renewing (the client is closing)."""
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
