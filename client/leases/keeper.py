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
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import LeaseNotFound, StatekeeperError
from .commands import MAX_KEEPALIVE_LEASES
from .results import KeepaliveResult, LeaseGrant, RevokeResult

__all__ = ["AsyncLease", "KeepaliveSchedule", "Lease", "TaskKeeper", "ThreadKeeper"]

log = logging.getLogger("statekeeper.client.leases")

RETRY_DELAY = 0.5  # after a failed keepalive call, at most this long until the next try
Clock = Callable[[], float]


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

    @property
    def alive(self) -> bool:
        """Granted, not revoked or reported gone, and renewed within its TTL."""
        return self._state == "alive" and self._clock() < self._deadline

    def _granted(self, grant: LeaseGrant, sent: float) -> None:
        self.id, self.ttl = grant.lease, grant.ttl_ms / 1000
        self._state, self._deadline = "alive", sent + self.ttl

    def _renewed(self, sent: float) -> None:
        self._deadline = max(self._deadline, sent + self.ttl)

    def _lost(self) -> None:
        if self._state == "alive":
            self._state = "lost"

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
        """Seconds until the next tick (None: no leases, wait until one is added)."""
        if not self._leases:
            self._next = math.inf
            return None
        return max(0.0, self._next - self._clock())

    def take_due(self) -> list[list[int]]:
        """If the tick is due: the lease ids to renew, in ops of at most 1000 (and the
        next tick is scheduled); else []."""
        now = self._clock()
        if not self._leases or now < self._next:
            return []
        self._next = now + self.interval()
        ids = list(self._leases)
        return [ids[i : i + MAX_KEEPALIVE_LEASES] for i in range(0, len(ids), MAX_KEEPALIVE_LEASES)]

    def settle(self, result: KeepaliveResult, sent: float) -> None:
        """The answer to a keepalive sent at `sent` (monotonic)."""
        for state in result.leases:
            lease = self._leases.get(state.lease)
            if lease is not None:
                lease._renewed(sent)
        for gone in result.missing:
            lease = self._leases.pop(gone, None)
            if lease is not None:
                lease._lost()
                log.warning("lease %d is gone (revoked or expired); its keys are deleted", gone)

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
            self._schedule.settle(result, sent)

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

    async def _renew(self, ids: list[int]) -> None:
        sent = self._clock()
        try:
            result = await self._client.lease_keepalive(*ids)
        except (StatekeeperError, RuntimeError) as e:
            log.warning("keepalive of %d leases failed: %s", len(ids), e)
            self._schedule.failed()
            return
        self._schedule.settle(result, sent)

    async def stop(self) -> None:
        """Stop renewing (the client is closing)."""
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
