"""Locks held on leases: :class:`Lock` (Client) and :class:`AsyncLock` (AsyncClient), and
:class:`Waiting`, the sans-IO part both run while a waiter waits for its turn.

The recipe (etcd's, fenced; docs/protocol.md, "Locks and fencing"): ``lock_acquire`` puts
a waiter key ``__lock/{name}/{revision}`` attached to the lock's lease and answers its
``fence`` (that revision), whether it holds the lock (it is the first waiter) and the key
``ahead`` of it. A waiter that does not hold it watches ONLY the range from ``ahead`` to
its own key (no herd: one watch per waiter, on its neighbour) from the acquire's revision
+ 1, so no deletion can slip between the answer and the watch, and no polling. When
``ahead`` is deleted it reads the queue up to its own key (one linearizable scan): first
-> it holds the lock; else the new ``ahead`` (the one before it may have died while
someone further ahead still holds the lock) and it watches again from that read's
revision + 1. If its own key is deleted (its lease expired or was revoked) it has lost
its place: LockNotHeld. A compacted watch start simply means "look again".

A lock the client makes gets its own lease (``ttl``), renewed by the client's lease keeper
(client/leases/keeper.py: a thread on Client, a task on AsyncClient, one keepalive op per
tick for all the client's leases) and revoked on release, which deletes the waiter key in
the same op. With ``lease=`` the lock rides on that lease and is released with
``lock_release``. Whatever stops an acquisition (LockHeld with ``wait=False``, the
timeout, an error, cancellation) takes the waiter out of the queue again.

``lock.lost`` (a ``threading.Event`` on Lock, an ``asyncio.Event`` on AsyncLock: ``if
lock.lost.is_set()``, ``lock.lost.wait(timeout)``, ``await lock.lost.wait()``) is set when
the held lock's lease is lost (client/leases/keeper.py: a keepalive answered that it is gone,
or none succeeded within its TTL), the moment the client stops vouching for it; a release
by its holder does not set it. On a lease given as a bare id nothing tells, so it is never
set; ``lock.lease.on_lost(fn)`` is the callback form.

``lock.fence`` is what makes the lock safe: a write with ``fence=lock`` is applied only
while this waiter still holds the lock (the server checks it in the same apply), so a
holder that was paused past its TTL cannot overwrite its successor's work.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import Compacted, LockNotHeld, LockTimeout, StatekeeperError
from ..watch.core import WatchEvent
from .results import LockAcquired

__all__ = ["AsyncLock", "Lock", "Waiting", "waiter_prefix"]

log = logging.getLogger("statekeeper.client.locks")

LOCK_PREFIX = "__lock/"
TOKEN_DIGITS = 20
Clock = Callable[[], float]


def waiter_prefix(name: str) -> str:
    """Every waiter key of lock ``name`` starts with this."""
    return f"{LOCK_PREFIX}{name}/"


class Waiting:
    """Sans-IO: one waiter between its acquire and its turn (see the module docstring).

    A driver loops: watch with :meth:`watch_args` until :meth:`seen` says the waiter
    ahead is gone (or the watch fails ``Compacted``), then scan with :meth:`scan_args`
    and hand the (key, create_revision) pairs and the scan's revision to :meth:`settle`,
    which says whether the lock is now held. ``holder_fence`` is the last holder seen.
    """

    def __init__(self, ns: str, result: LockAcquired) -> None:
        self.ns = ns
        self.name = result.name
        self.key = result.key
        self.ahead = result.ahead
        self.revision = result.revision  # watch from here + 1
        self.holder_fence = result.holder_fence
        self._prefix = waiter_prefix(result.name)

    def watch_args(self) -> dict[str, Any]:
        """client.watch's arguments: the keys from ``ahead`` to this waiter's own key."""
        return {
            "start": self.ahead,
            "end": self.key + "\x01",  # this key included (keys have no NUL)
            "start_revision": self.revision + 1,
            "ns": self.ns,
        }

    def seen(self, event: Any) -> bool:
        """True when the waiter ahead was deleted (look again); raises LockNotHeld when
        this waiter's own key was."""
        if not isinstance(event, WatchEvent) or event.type != "delete":
            return False
        if event.key == self.key:
            raise self.lost()
        return event.key == self.ahead

    def scan_args(self) -> dict[str, Any]:
        """client.scan's arguments: the queue up to and including this waiter."""
        return {
            "start": self._prefix,
            "end": self.key + "\x01",
            "keys_only": True,
            "ns": self.ns,
            "consistency": "linearizable",
        }

    def settle(self, queue: list[tuple[str, int]], revision: int) -> bool:
        """The scan's (key, create_revision) pairs, read at ``revision``: True if this
        waiter is first (holds the lock); else watch the new ``ahead`` from there."""
        mine = [kc for kc in queue if self._is_waiter(kc[0])]
        if not mine or mine[-1][0] != self.key:
            raise self.lost()
        self.holder_fence = mine[0][1]
        if len(mine) == 1:
            return True
        self.ahead, self.revision = mine[-2][0], revision
        return False

    def _is_waiter(self, key: str) -> bool:
        rest = key[len(self._prefix) :]
        return key.startswith(self._prefix) and len(rest) == TOKEN_DIGITS and rest.isdigit()

    def lost(self) -> LockNotHeld:
        return LockNotHeld(
            f"lost the place in lock {self.name!r}'s queue while waiting: waiter "
            f"{self.key!r} was deleted (its lease expired or was revoked)",
            code="lock_not_held",
            details={"name": self.name, "fence": int(self.key[-TOKEN_DIGITS:])},
        )


class _LockBase:
    """What both lock classes share: identity, state, and the failure messages."""

    _event_type: Callable[[], Any]  # what ``lost`` is

    def __init__(
        self,
        client: Any,
        name: str,
        ttl: float,
        *,
        lease: Any,
        wait: bool,
        timeout: float | None,
        owner: str | None,
        ns: str,
        clock: Clock = time.monotonic,
    ) -> None:
        self._client = client
        self.name = name
        self.ns = ns
        self.ttl = ttl
        self.lease = lease
        self._own_lease = lease is None
        self._wait, self._timeout, self._owner = wait, timeout, owner
        self._clock = clock
        self.key: str | None = None
        self.fence: int | None = None
        self.revision: int | None = None  # of the acquire
        self._state = "new"  # new -> acquiring -> held -> released | failed
        self.lost: Any = self._event_type()

    def _watch_lease(self) -> None:
        """The lock is held: set ``lost`` when its lease is lost."""
        if hasattr(self.lease, "on_lost"):
            self.lease.on_lost(self._lease_lost)

    def _unwatch_lease(self) -> None:
        if hasattr(self.lease, "discard_on_lost"):
            self.lease.discard_on_lost(self._lease_lost)

    def _lease_lost(self, lease: Any) -> None:
        if self._state == "held":
            log.warning(
                "lock %r (fence %s) is lost: its lease %s is gone or was not renewed in time",
                self.name,
                self.fence,
                lease.id,
            )
            self.lost.set()

    @property
    def held(self) -> bool:
        """Acquired, not released, and (as far as this client knows) its lease alive.
        Only fenced writes make "held" safe to act on: see the module docstring."""
        return self._state == "held" and bool(getattr(self.lease, "alive", True))

    def _deadline(self) -> float | None:
        return None if self._timeout is None else self._clock() + self._timeout

    def _enqueued(self, r: LockAcquired) -> Waiting | None:
        self.key, self.fence, self.revision = r.key, r.fence, r.revision
        return None if r.acquired else Waiting(self.ns, r)

    def _timed_out(self, w: Waiting) -> LockTimeout:
        return LockTimeout(
            f"lock {self.name!r} not acquired within {self._timeout:g} s (held with fence "
            f"{w.holder_fence}); this waiter left the queue",
            code="lock_timeout",
            details={"name": self.name, "holder_fence": w.holder_fence},
        )

    def _progress(self, deadline: float | None) -> float:
        """Progress frames wake the watch this often, to check the deadline."""
        if deadline is None:
            return 1.0
        return max(0.05, min(1.0, (deadline - self._clock()) / 4))

    def _cleanup_failed(self, e: BaseException) -> None:
        log.warning("could not take lock %r's waiter out of the queue: %s", self.name, e)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, ns={self.ns!r}, fence={self.fence}, "
            f"{self._state})"
        )


class Lock(_LockBase):
    """A lock of a :class:`client.Client` (see ``Client.lock``): acquired when created
    (blocking until it is this waiter's turn), released by :meth:`release` or at the end
    of its ``with`` block."""

    _event_type = threading.Event

    def __init__(self, client: Any, name: str, ttl: float, **kw: Any) -> None:
        super().__init__(client, name, ttl, **kw)
        deadline = self._deadline()
        self._state = "acquiring"
        try:
            if self._own_lease:
                self.lease = client.lease(ttl, ns=self.ns)
            r = client.lock_acquire(
                name, self.lease, wait=self._wait, owner=self._owner, ns=self.ns
            )
            w = self._enqueued(r)
            while w is not None and not self._turn(w, deadline):
                pass
        except BaseException:
            self._abandon()
            raise
        self._state = "held"
        self._watch_lease()

    def _turn(self, w: Waiting, deadline: float | None) -> bool:
        """Wait until the waiter ahead is gone, then look: True if this one holds it."""
        if deadline is not None and self._clock() >= deadline:
            raise self._timed_out(w)
        events = self._client.watch(
            **w.watch_args(), progress=self._progress(deadline), progress_events=True
        )
        try:
            for item in events:
                if w.seen(item):
                    break
                if deadline is not None and self._clock() >= deadline:
                    raise self._timed_out(w)
            else:
                raise RuntimeError("the client was closed while waiting for the lock")
        except Compacted:
            pass  # the history since is gone: look at the queue
        finally:
            events.close()
        kvs = list(self._client.scan(**w.scan_args()))
        revision = kvs[-1].revision if kvs else w.revision
        return w.settle([(kv.key, kv.create_revision) for kv in kvs], revision)

    def _abandon(self) -> None:
        """Take this waiter out of the queue after a failed acquisition."""
        self._state = "failed"
        try:
            if self._own_lease:
                if self.lease is not None:
                    self.lease.revoke()
            elif self.fence is not None:
                self._client.lock_release(self.name, self.fence, ns=self.ns)
        except (StatekeeperError, RuntimeError) as e:
            self._cleanup_failed(e)

    def release(self) -> bool:
        """Release the lock (the next waiter gets it): revoke its own lease, or delete
        the waiter key. True if this deleted it; False if it was gone already (the lease
        expired: the lock was lost) or released before."""
        if self._state != "held":
            return False
        self._state = "released"
        self._unwatch_lease()
        if self._own_lease:
            r = self.lease.revoke()
            return r is not None and r.deleted > 0
        try:
            self._client.lock_release(self.name, self.fence, ns=self.ns)
        except LockNotHeld:
            return False
        return True

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self.release()
            return
        try:
            self.release()
        except StatekeeperError:
            log.warning("could not release lock %r; it ends with its lease", self.name)


class AsyncLock(_LockBase):
    """A lock of an :class:`client.AsyncClient` (see ``AsyncClient.lock``): acquired when
    awaited (``lock = await client.lock("x")``) or entered (``async with``, which
    releases it on exit). Cancelling the acquisition takes the waiter out of the queue."""

    _event_type = asyncio.Event

    def __await__(self) -> Any:
        return self._acquire().__await__()

    async def _acquire(self) -> AsyncLock:
        if self._state == "held":
            return self
        if self._state != "new":
            raise RuntimeError(f"{self!r} cannot be acquired again")
        self._state = "acquiring"
        deadline = self._deadline()
        try:
            if self._own_lease:  # kept before it is granted: a cancelled grant is revoked
                self.lease = self._client.lease(self.ttl, ns=self.ns)
                await self.lease
            r = await self._client.lock_acquire(
                self.name, self.lease, wait=self._wait, owner=self._owner, ns=self.ns
            )
            w = self._enqueued(r)
            while w is not None and not await self._turn(w, deadline):
                pass
        except BaseException:
            await self._abandon()
            raise
        self._state = "held"
        self._watch_lease()
        return self

    async def _turn(self, w: Waiting, deadline: float | None) -> bool:
        """Wait until the waiter ahead is gone, then look: True if this one holds it."""
        loop = asyncio.get_running_loop()
        at = None if deadline is None else loop.time() + (deadline - self._clock())
        events = self._client.watch(**w.watch_args(), progress=1.0)
        timer = asyncio.timeout_at(at)
        try:
            async with timer:
                async for item in events:
                    if w.seen(item):
                        break
                else:
                    raise RuntimeError("the client was closed while waiting for the lock")
        except TimeoutError:
            if timer.expired():
                raise self._timed_out(w) from None
            raise
        except Compacted:
            pass  # the history since is gone: look at the queue
        finally:
            await events.aclose()
        kvs = [kv async for kv in self._client.scan(**w.scan_args())]
        revision = kvs[-1].revision if kvs else w.revision
        return w.settle([(kv.key, kv.create_revision) for kv in kvs], revision)

    async def _abandon(self) -> None:
        self._state = "failed"
        try:
            if self._own_lease:
                if self.lease is not None:
                    await self.lease.revoke()
            elif self.fence is not None:
                await self._client.lock_release(self.name, self.fence, ns=self.ns)
        except (StatekeeperError, RuntimeError) as e:
            self._cleanup_failed(e)

    async def release(self) -> bool:
        """Release the lock (see :meth:`Lock.release`)."""
        if self._state != "held":
            return False
        self._state = "released"
        self._unwatch_lease()
        if self._own_lease:
            r = await self.lease.revoke()
            return r is not None and r.deleted > 0
        try:
            await self._client.lock_release(self.name, self.fence, ns=self.ns)
        except LockNotHeld:
            return False
        return True

    async def __aenter__(self) -> AsyncLock:
        return await self._acquire()

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            await self.release()
            return
        try:
            await self.release()
        except StatekeeperError:
            log.warning("could not release lock %r; it ends with its lease", self.name)
