"""The chaos lockers: a few clients contending for one lock through the whole run (every
fault included), doing fenced writes to one shared key while they hold it; checked
afterwards by ``chaos.checker.locks`` against the key's change history read back from the
cluster (``chaos.watch_reads``, the same truth reader as the watch check).

Each locker (``WorkloadConfig.lockers``, history processes ``first_process`` + i) is an
``AsyncClient`` over every endpoint the workload uses (through the proxies under the proxy
topology, so proxy faults hit it too), starting on a different node each
(``prefer_leader=False``), with the client's own retries bounded by ``lock_op_deadline``.
It loops:

1. grant a lease of ``lock_ttl`` seconds (2 s: a partitioned or paused holder loses the
   lock within the run) and keep it alive itself (a task, every ttl / 3), so that it can
   stop renewing it;
2. acquire ``lock_name`` on it (``client.lock(..., lease=, timeout=lock_timeout)``),
   recorded as a ``lock_acquire`` op: ok with the ``fence`` once the client holds it, fail
   on ``lock_timeout`` (its waiter left the queue) or ``lock_not_held`` (its lease expired
   while it waited: its waiter was deleted), unknown on anything else;
3. do ``lock_writes`` (2-4) ``fenced_put`` ops to ``lock_key``, ``put(key, value,
   fence=lock)`` with the value ``L{locker}-f{fence}-c{n}`` (unique), each with its own
   idempotency key: ok (``revision``), fail (``fence_mismatch``, with the server's
   ``holder_fence``: the locker then stops writing, it knows it lost the lock; or another
   refusal), unknown (timeout, unavailable, connection lost: never guessed). Before a write
   (not the first) a ``lock_pause_share`` of the holds *pause*, as a process stopped by GC
   or SIGSTOP: no keepalive, no write, for ttl + ``lock_pause_extra`` seconds, then it goes
   on writing as if it still held the lock: a stale holder, whose writes the fence must
   refuse; so the check has stale holders to look at under every fault, not only when a
   fault happens to cut a holder off;
4. release (``lock_release`` op: ok, fail ``lock_not_held`` when its waiter was gone),
   then revoke the lease.

``lock_unfenced`` (a MUTATION, ``--debug-lock-unfenced``): the writes go out WITHOUT the
fence (the history still names it): a stale holder's write then lands after its
successor's and the check must fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from statekeeper.chaos.background import BackgroundLoop
from statekeeper.chaos.checker.watch import WatchTruth
from statekeeper.chaos.history import HistoryWriter
from statekeeper.chaos.watch_reads import final_watch_reads
from statekeeper.chaos.workload_config import WorkloadConfig
from statekeeper.client import (
    AsyncClient,
    FenceMismatch,
    InvalidRequest,
    LockNotHeld,
    RetryPolicy,
    StatekeeperError,
)
from statekeeper.client.errors import LockTimeout

__all__ = ["LockRun", "Lockers", "finish_lockers", "start_lockers"]

Say = Callable[[str], None]


@dataclass
class LockRun:
    """The lock half of a run, for the checks: the shared key and its truth."""

    key: str
    truth: WatchTruth | None


def _code(e: BaseException) -> str:
    return e.code if isinstance(e, StatekeeperError) else type(e).__name__


class Lockers(BackgroundLoop):
    """Runs the lockers in a background thread with its own event loop. ``start()`` reads
    the shared key's revision (the truth starts after it) and starts them; ``stop()``
    lets each finish its current step (10 s at most) and returns."""

    name = "chaos-lockers"
    stop_timeout = 20.0

    def __init__(
        self,
        endpoints: Sequence[str],
        history: HistoryWriter,
        config: WorkloadConfig,
        first_process: int,
    ) -> None:
        if config.lockers < 1:
            raise ValueError("no lockers configured")
        self.endpoints, self.history, self.config = list(endpoints), history, config
        self.first_process = first_process
        super().__init__()
        self.counts = {"acquired": 0, "writes_ok": 0, "refused": 0, "unknown": 0, "pauses": 0}

    async def _main(self) -> None:
        self._begin()
        cfg = self.config
        read = RetryPolicy(max_attempts=1000, deadline=30.0)
        async with AsyncClient(self.endpoints, ns=cfg.ns, timeout=3.0, retry=read) as c:
            self.start_revision = (await c.range(cfg.lock_key, limit=1)).revision + 1
        tasks = [asyncio.create_task(self._locker(i)) for i in range(cfg.lockers)]
        self._started.set()
        await self._stopping.wait()
        _, pending = await asyncio.wait(tasks, timeout=10.0)
        for t in pending:
            t.cancel()
        for r in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(r, Exception):
                raise r

    async def _locker(self, i: int) -> None:
        cfg, n = self.config, len(self.endpoints)
        rng = random.Random(cfg.seed * 7_919 + i)
        policy = RetryPolicy(max_attempts=1000, deadline=cfg.lock_op_deadline, backoff_max=0.3)
        assert self._stopping is not None
        async with AsyncClient(
            self.endpoints[i % n :] + self.endpoints[: i % n],
            ns=cfg.ns,
            timeout=cfg.attempt_timeout,
            retry=policy,
            prefer_leader=False,
        ) as client:
            while not self._stopping.is_set():
                try:
                    lease = (await client.lease_grant(cfg.lock_ttl)).lease
                except StatekeeperError:
                    await asyncio.sleep(0.2)
                    continue
                keeping = asyncio.Event()
                keeping.set()
                keeper = asyncio.create_task(self._keepalive(client, lease, keeping))
                try:
                    await self._hold(i, client, lease, keeping, rng)
                finally:
                    keeper.cancel()
                    with contextlib.suppress(StatekeeperError, asyncio.CancelledError):
                        await client.lease_revoke(lease)

    async def _keepalive(self, client: Any, lease: int, keeping: asyncio.Event) -> None:
        """Renew the lease every ttl / 3 while ``keeping`` is set (cleared: a pause)."""
        while True:
            await keeping.wait()
            with contextlib.suppress(StatekeeperError, TimeoutError):
                await asyncio.wait_for(client.lease_keepalive(lease), self.config.lock_ttl)
            await asyncio.sleep(self.config.lock_ttl / 3)

    async def _hold(self, i: int, client: Any, lease: int, keeping: asyncio.Event, rng) -> None:
        """One acquisition, its fenced writes (and maybe a pause), its release."""
        cfg, h, p = self.config, self.history, self.first_process + i
        op = h.invoke(p, "lock_acquire", name=cfg.lock_name, lease=lease, locker=i)
        try:
            lock = await client.lock(cfg.lock_name, lease=lease, timeout=cfg.lock_timeout)
        except (LockTimeout, LockNotHeld) as e:  # it never held it: its waiter is gone
            h.fail(op, error=e.code)
            return
        except (StatekeeperError, TimeoutError) as e:
            h.info(op, error=_code(e))
            return
        h.ok(op, fence=lock.fence, revision=lock.revision, key=lock.key)
        self.counts["acquired"] += 1
        writes = rng.randint(*cfg.lock_writes)
        pause_at = rng.randint(1, writes - 1) if rng.random() < cfg.lock_pause_share else None
        for c in range(writes):
            if self._stopping.is_set():
                break
            paused = c == pause_at
            if paused:
                self.counts["pauses"] += 1
                keeping.clear()  # a stopped process renews nothing
                await asyncio.sleep(cfg.lock_ttl + cfg.lock_pause_extra)
                keeping.set()
            if not await self._write(client, p, i, lock, c, paused):
                break
            await asyncio.sleep(rng.uniform(0.05, 0.3))
        op = h.invoke(p, "lock_release", name=cfg.lock_name, fence=lock.fence)
        try:
            r = await client.lock_release(cfg.lock_name, lock.fence)
            h.ok(op, revision=r.revision, held=r.held)
        except LockNotHeld as e:
            h.fail(op, error=e.code)
        except (StatekeeperError, TimeoutError) as e:
            h.info(op, error=_code(e))

    async def _write(self, client: Any, p: int, i: int, lock: Any, c: int, paused: bool) -> bool:
        """One recorded fenced write (``paused``: right after a pause); False when it was
        refused (the lock is lost)."""
        cfg, h = self.config, self.history
        value = f"L{i}-f{lock.fence}-c{c}"
        ik = f"lock-{p}-{lock.fence}-{c}"
        extra = {"unfenced": True} if cfg.lock_unfenced else {}
        if paused:
            extra["paused"] = True
        op = h.invoke(
            p, "fenced_put", key=cfg.lock_key, value=value, fence=lock.fence,
            idempotency_key=ik, locker=i, **extra,
        )  # fmt: skip
        fence = None if cfg.lock_unfenced else lock  # MUTATION: no fence
        try:
            r = await client.put(cfg.lock_key, value, fence=fence, idempotency_key=ik)
        except FenceMismatch as e:
            h.fail(op, error=e.code, holder_fence=e.holder_fence)
            self.counts["refused"] += 1
            return False
        except InvalidRequest as e:
            h.fail(op, error=e.code)
            return False
        except (StatekeeperError, TimeoutError) as e:
            h.info(op, error=_code(e))
            self.counts["unknown"] += 1
            return True
        h.ok(op, revision=r.revision)
        self.counts["writes_ok"] += 1
        return True


def start_lockers(
    endpoints: Sequence[str], history: HistoryWriter, config: WorkloadConfig,
    first_process: int, say: Say,
) -> Lockers | None:  # fmt: skip
    """Start the run's lockers (None: ``config.lockers`` is 0)."""
    if config.lockers < 1:
        return None
    lockers = Lockers(endpoints, history, config, first_process)
    rev = lockers.start()
    say(
        f"   {config.lockers} lockers on lock {config.lock_name!r} writing {config.lock_key!r} "
        f"from revision {rev}"
        + (" (MUTATION: their writes carry no fence)" if config.lock_unfenced else "")
    )
    return lockers


def finish_lockers(
    lockers: Lockers | None, urls: Sequence[str], config: WorkloadConfig, event: Say
) -> LockRun | None:
    """After the run (cluster healed and converged): read the shared key's history."""
    if lockers is None:
        return None
    truth = final_watch_reads(
        urls, config.lock_key, lockers.start_revision, ns=config.ns, samples=0, seed=config.seed
    )
    c = lockers.counts
    read = (
        f"{len(truth.changes)} revisions of the key up to {truth.final_revision}"
        if truth.changes is not None
        else f"NOT READ ({truth.error})"
    )
    event(
        f"locks: {c['acquired']} acquisitions, fenced writes {c['writes_ok']} ok / "
        f"{c['refused']} refused / {c['unknown']} unknown, {c['pauses']} holder pauses; "
        f"the key's history: {read}"
    )
    return LockRun(config.lock_key, truth)
