"""Claiming an effect (the lock ``effect:{key}``), sans-IO like the rest of the plan
(client/effects/plan.py): free -> taken at once; held -> look at its queue (``lock_list``):
the waiters an earlier process of this run's runner left (lock owner
``"{runner}#{incarnation}"``, same runner, another incarnation) are released at once, so a
restarted runner does not wait out its own dead claim's TTL (issue 30 item 8: it waited
30 s by default, silently); anyone else's claim is logged (its runner, fence, and how long
its lease has left) and waited for, or is EffectInProgress with ``wait=False``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..errors import EffectInProgress, LeaseNotFound, LockHeld, LockNotHeld
from .steps import Acquire, Call, EffectPlan

__all__ = ["LOCK_PREFIX", "NowMs", "claim_plan", "in_progress", "lock_name", "runner_of"]

log = logging.getLogger("statekeeper.client.effects")

LOCK_PREFIX = "effect:"
NowMs = Callable[[], int]


def lock_name(key: str) -> str:
    return LOCK_PREFIX + key


def runner_of(owner: str) -> str:
    """The runner id in a claim's lock owner ``"{runner}#{incarnation}"``."""
    return owner.rpartition("#")[0] or owner


def _earlier_incarnation(waiter_owner: str | None, owner: str | None) -> bool:
    """A waiter left by an earlier process of this runner (same id, another incarnation)."""
    if owner is None or waiter_owner is None or waiter_owner == owner or "#" not in waiter_owner:
        return False
    return runner_of(waiter_owner) == runner_of(owner)


def in_progress(key: str, e: LockHeld) -> EffectInProgress:
    return EffectInProgress(
        f"effect {key!r} is being run by another claimant (fence {e.holder_fence}); "
        f"fn was not called",
        code="effect_in_progress",
        details={"key": key, "holder_fence": e.holder_fence},
    )


def claim_plan(
    key: str,
    ns: str,
    ttl: float,
    wait: bool,
    timeout: float | None,
    owner: str | None,
    now_ms: NowMs,
) -> EffectPlan:
    """Take the effect's lock: at once if it is free; else release the waiters an earlier
    incarnation of this runner left (a restarted runner takes over its own claim without
    waiting out its TTL), and wait for anyone else's claim, saying so in the log."""
    name = lock_name(key)
    try:
        return (yield Acquire(name, ttl, False, None, ns, owner))
    except LockHeld as e:
        held = e
    if not wait and owner is None:
        raise in_progress(key, held) from held
    queue = yield from _queue(name, ns)
    others = []
    for waiter in queue:
        if _earlier_incarnation(waiter.owner, owner):
            yield from _take_over(key, name, ns, waiter)
        else:
            others.append(waiter)
    if others and not wait:
        raise in_progress(key, held) from held
    if others:
        yield from _log_waiting(key, others[0], timeout)
    started = now_ms()
    try:
        lock = yield Acquire(name, ttl, wait, timeout, ns, owner)
    except LockHeld as e:  # wait=False, or the timeout (LockTimeout)
        raise in_progress(key, e) from e
    if others:
        log.info("effect %r claimed after waiting %.1f s", key, (now_ms() - started) / 1000)
    return lock


def _queue(name: str, ns: str) -> EffectPlan:
    """The waiters of lock ``name``, holder first (the first 100)."""
    page = yield Call("lock_list", (name,), {"ns": ns, "limit": 1, "consistency": "linearizable"})
    found = [info for info in page.locks if info.name == name]  # the prefix sorts first
    return list(found[0].waiters) if found else []


def _take_over(key: str, name: str, ns: str, waiter: Any) -> EffectPlan:
    """Release the waiter an earlier incarnation of this runner left in the queue."""
    log.warning(
        "effect %r: taking over the claim (fence %d) an earlier process of runner %r left",
        key,
        waiter.fence,
        runner_of(waiter.owner),
    )
    try:
        yield Call("lock_release", (name, waiter.fence), {"ns": ns})
    except LockNotHeld:
        pass  # its lease ended meanwhile


def _log_waiting(key: str, holder: Any, timeout: float | None) -> EffectPlan:
    """Say who holds the effect and how long its lease has left, before waiting for it."""
    left = "its lease is gone"
    if holder.lease is not None:
        try:
            info = yield Call("lease_info", (holder.lease,), {})
            left = f"its lease ends in {(info.remaining_ms or 0) / 1000:.1f} s unless renewed"
        except LeaseNotFound:
            pass
    who = (
        f"runner {runner_of(holder.owner)!r}"
        if holder.owner
        # A new user's restarted process waits here for its own dead claim: say the cure.
        else "a runner without a runner id (with one, run(..., runner=ID) or effects.runner, "
        "a restarted runner takes its own claim over at once)"
    )
    log.warning(
        "effect %r is claimed by %s (fence %d; %s): waiting for it (%s)",
        key,
        who,
        holder.fence,
        left,
        "no timeout" if timeout is None else f"at most {timeout:g} s",
    )
