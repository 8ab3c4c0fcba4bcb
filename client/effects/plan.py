"""The effect ledger's sans-IO core (client/effects/ledger.py has the API and the five things): its
records, the context fn gets, and every operation as a *plan*, a generator that yields the
steps it needs and is sent their results (client/plan.py's model), so the blocking
and the asyncio client run one definition and a test drives it by hand.

A plan yields the steps of client/effects/steps.py (Call, Acquire, Invoke, Release); the
claim (taking the effect's lock, a restarted runner taking over its own claim) is
client/effects/claim.py. A driver releases the lock itself when a plan stops without
releasing it (an error, a KeyboardInterrupt, a cancelled task), so no claim outlives its
run by more than the lease.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from ..errors import (
    EffectClaimLost,
    EffectResultLost,
    FenceMismatch,
    InvalidRequest,
    LockHeld,
    StatekeeperError,
)
from ..ops import Ops
from .claim import NowMs, claim_plan, in_progress, lock_name, runner_of
from .steps import Acquire, Call, EffectPlan, Invoke, Release

__all__ = [
    "EFFECTS_PREFIX",
    "Acquire",
    "Call",
    "EffectContext",
    "EffectPlan",
    "EffectRecord",
    "Invoke",
    "Release",
    "check_effect_key",
    "forget_plan",
    "get_plan",
    "list_plan",
    "lock_name",
    "record_key",
    "run_plan",
    "runner_of",
]

EFFECTS_PREFIX = "__effects/"
MAX_EFFECT_KEY_BYTES = 4000  # "__effects/" + key and "__lock/effect:" + key + 21 fit 4 KiB
MAX_ERROR_CHARS = 1000
TOO_LARGE = ("value_too_large", "request_too_large")
PAGE = 1000


# -- records ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EffectContext:
    """What fn is called with.

    Attributes:
        key: the effect key; ns: its namespace.
        attempt: 1 for the first claim, n + 1 after n earlier claims that did not finish.
        maybe_happened: an earlier attempt claimed the effect and did not record it DONE
            (it died, was cut off, or fn raised): its call may have taken effect. Pass
            ``idempotency_key`` to the external API, or look the effect up there first.
        idempotency_key: ``"{key}#{fence of the first claim}"``, the same for every
            attempt of this effect: give it to the external API as its own idempotency key.
        fence: this attempt's fencing token (grows from attempt to attempt), for APIs
            that take one.
        previous: the earlier attempt's record (None on attempt 1): ``previous.error``
            is its fn's exception, if it raised.
    """

    key: str
    ns: str
    attempt: int
    maybe_happened: bool
    idempotency_key: str
    fence: int
    previous: EffectRecord | None = None


@dataclass(frozen=True, slots=True)
class EffectRecord:
    """The record ``__effects/{key}`` (msgpack in the store), as read.

    Attributes:
        key: the effect key; ns: its namespace.
        state: ``"claimed"`` (a run holds it, or one stopped before DONE) or ``"done"``.
        attempt: the claim's number (1, 2, ...); fence: that claim's fencing token.
        idempotency_key: see :class:`EffectContext`.
        started_ms, done_ms: the claiming client's wall clock (informational only).
        result: fn's result (done), as msgpack decodes it (tuples come back as lists).
        error: the exception fn raised in the last attempt (claimed), else None.
        result_lost: done, but the result could not be stored: why (else None).
        mod_revision: the revision of the record's last write; revision: of the read.
        runner: the runner id of the claim (``run(..., runner=)``), else None.
    """

    key: str
    ns: str
    state: str
    attempt: int
    fence: int
    idempotency_key: str
    started_ms: int
    done_ms: int | None = None
    result: Any = None
    error: str | None = None
    result_lost: str | None = None
    mod_revision: int = 0
    revision: int = 0
    runner: str | None = None

    @property
    def done(self) -> bool:
        return self.state == "done"

    def outcome(self) -> Any:
        """The stored result of a DONE record; raises EffectResultLost if it was lost."""
        if self.result_lost is not None:
            raise result_lost(self.key, self.result_lost)
        return self.result


def record_key(key: str) -> str:
    return EFFECTS_PREFIX + key


def check_effect_key(key: Any) -> str:
    """An effect key: a str of 1..4000 UTF-8 bytes without NUL (else InvalidRequest)."""
    if not isinstance(key, str):
        raise TypeError(f"effect key must be str, not {type(key).__name__}")
    size = len(key.encode("utf-8"))
    if not 1 <= size <= MAX_EFFECT_KEY_BYTES or "\x00" in key:
        raise InvalidRequest(
            f"effect key must be 1..{MAX_EFFECT_KEY_BYTES} UTF-8 bytes without NUL "
            f"({size} bytes given)",
            code="invalid_argument",
        )
    return key


def pack(record: Mapping[str, Any]) -> bytes:
    return msgpack.packb(record, use_bin_type=True)


def decode(kv: Any, key: str, ns: str) -> EffectRecord | None:
    """The EffectRecord of a KeyValue (None for None)."""
    if kv is None:
        return None
    try:
        d = msgpack.unpackb(kv.value, raw=False, strict_map_key=False)
        if not isinstance(d, dict) or d.get("state") not in ("claimed", "done"):
            raise ValueError("not an effect record")
        return EffectRecord(
            key,
            ns,
            d["state"],
            int(d["attempt"]),
            int(d["fence"]),
            str(d["idempotency_key"]),
            int(d.get("started_ms", 0)),
            d.get("done_ms"),
            d.get("result"),
            d.get("error"),
            d.get("result_lost"),
            kv.mod_revision,
            kv.revision,
            d.get("runner"),
        )
    except (ValueError, KeyError, TypeError, msgpack.UnpackException) as e:
        raise StatekeeperError(
            f"{kv.key!r} in namespace {ns!r} is not an effect record ({e}); it was not "
            f"written by client.effects: delete it to reuse the key",
            code="effect_record_invalid",
            details={"key": key},
        ) from None


def _fields(ctx: EffectContext, started_ms: int, owner: str | None) -> dict[str, Any]:
    fields = {
        "state": "claimed",
        "attempt": ctx.attempt,
        "fence": ctx.fence,
        "idempotency_key": ctx.idempotency_key,
        "started_ms": started_ms,
    }
    if owner is not None:
        fields["runner"] = runner_of(owner)
    return fields


def context(key: str, ns: str, earlier: EffectRecord | None, fence: int) -> EffectContext:
    """The context of the claim with ``fence`` after the ``earlier`` record (or none)."""
    if earlier is None:
        return EffectContext(key, ns, 1, False, f"{key}#{fence}", fence)
    return EffectContext(
        key, ns, earlier.attempt + 1, True, earlier.idempotency_key, fence, earlier
    )


# -- errors ----------------------------------------------------------------------------------


def claim_lost(key: str, fence: int, e: BaseException | None, fn_called: bool) -> EffectClaimLost:
    holder = getattr(e, "holder_fence", None)
    what = (
        "fn ran but its result was NOT recorded (the next claimant is told maybe_happened)"
        if fn_called
        else "fn was not called"
    )
    return EffectClaimLost(
        f"the claim on effect {key!r} with fence {fence} was lost (its lease expired; the "
        f"lock is now held with fence {holder}): {what}",
        code="effect_claim_lost",
        details={"key": key, "fence": fence, "holder_fence": holder, "fn_called": fn_called},
    )


def result_lost(key: str, reason: str) -> EffectResultLost:
    return EffectResultLost(
        f"effect {key!r} is done (fn is not called again) but its result was not stored: {reason}",
        code="effect_result_lost",
        details={"key": key, "reason": reason},
    )


# -- plans -----------------------------------------------------------------------------------


def _read(key: str, ns: str) -> Call:
    return Call(
        "get", (record_key(key),), {"ns": ns, "default": None, "consistency": "linearizable"}
    )


def run_plan(
    key: str,
    *,
    ns: str,
    ttl: float,
    wait: bool,
    timeout: float | None,
    now_ms: NowMs,
    owner: str | None = None,
) -> EffectPlan:
    """Run effect ``key`` (see client/effects/ledger.py): the stored result if DONE; else claim
    it (lock + fenced CLAIMED), Invoke fn, record DONE and release in one fenced txn.
    ``owner``: ``"{runner}#{incarnation}"``, the lock's owner when the run has a runner id."""
    first = decode((yield _read(key, ns)), key, ns)
    if first is not None and first.done:
        return first.outcome()
    lock = yield from claim_plan(key, ns, ttl, wait, timeout, owner, now_ms)
    earlier = decode((yield _read(key, ns)), key, ns)
    if earlier is not None and earlier.done:  # the holder we waited for finished it
        yield Release()
        return earlier.outcome()
    ctx = context(key, ns, earlier, lock.fence)
    claimed = _fields(ctx, now_ms(), owner)
    try:
        yield Call("put", (record_key(key), pack(claimed)), {"ns": ns, "fence": lock})
    except FenceMismatch as e:
        raise claim_lost(key, lock.fence, e, fn_called=False) from e
    if not getattr(lock, "held", True):  # the keeper saw the lease die: do not call fn
        raise claim_lost(key, lock.fence, None, fn_called=False)
    try:
        result = yield Invoke(ctx)
    except Exception as e:
        failed = dict(claimed, error=f"{type(e).__name__}: {e}"[:MAX_ERROR_CHARS])
        yield from _settle(key, ns, lock, failed)
        raise
    return (yield from _record_done(key, ns, lock, claimed, result, now_ms))


def _settle(key: str, ns: str, lock: Any, record: Mapping[str, Any]) -> EffectPlan:
    """Write ``record`` and release the lock in one fenced txn; a failure is left to the
    lease (the record then stays as the claim wrote it)."""
    try:
        yield _done_txn(key, ns, lock, pack(record))
    except StatekeeperError:
        pass
    yield Release()


def _done_txn(key: str, ns: str, lock: Any, value: bytes) -> Call:
    """ONE fenced txn: the record, and the delete of this claim's waiter key (release)."""
    success = (Ops.put(record_key(key), value), Ops.delete(lock.key))
    return Call("txn", ((), success), {"ns": ns, "fence": lock})


def _record_done(
    key: str, ns: str, lock: Any, claimed: dict[str, Any], result: Any, now_ms: NowMs
) -> EffectPlan:
    """Record DONE with ``result`` and release; returns the result as stored."""
    done = dict(claimed, state="done", done_ms=now_ms())
    lost: str | None = None
    try:
        value = pack(dict(done, result=result))
    except (TypeError, ValueError, OverflowError) as e:
        lost = f"the result is not msgpack-able: {type(e).__name__}: {e}"[:MAX_ERROR_CHARS]
        value = pack(dict(done, result_lost=lost))
    try:
        yield _done_txn(key, ns, lock, value)
    except FenceMismatch as e:
        raise claim_lost(key, lock.fence, e, fn_called=True) from e
    except InvalidRequest as e:
        if e.code not in TOO_LARGE or lost is not None:
            raise
        lost = f"the result is too large to store ({len(value)} bytes packed): {e.message}"
        try:
            yield _done_txn(key, ns, lock, pack(dict(done, result_lost=lost)))
        except FenceMismatch as e2:
            raise claim_lost(key, lock.fence, e2, fn_called=True) from e2
    yield Release()
    if lost is not None:
        raise result_lost(key, lost)
    return msgpack.unpackb(value, raw=False, strict_map_key=False)["result"]


def get_plan(key: str, *, ns: str, consistency: str | None = None) -> EffectPlan:
    """The EffectRecord of ``key``, or None."""
    kv = yield Call(
        "get", (record_key(key),), {"ns": ns, "default": None, "consistency": consistency}
    )
    return decode(kv, key, ns)


def list_plan(
    prefix: str,
    *,
    ns: str,
    limit: int | None,
    consistency: str | None = None,
    after: str | None = None,
) -> EffectPlan:
    """The EffectRecords whose key starts with ``prefix`` (and, given ``after``, sorts
    after that effect key: the last of the previous page), in key order, read at one
    revision (at most ``limit``)."""
    out: list[EffectRecord] = []
    first = EFFECTS_PREFIX + prefix
    args: tuple[str, ...] = (first,)
    kw: dict[str, Any] = {"ns": ns, "consistency": consistency}
    if after is not None:  # [after + "\x01" (keys hold no NUL: its successor), prefix's end)
        args, end = (), first[:-1] + chr(ord(first[-1]) + 1)  # (a prefix ending U+10FFFF: no)
        kw.update(start=max(first, EFFECTS_PREFIX + after + "\x01"), end=end)
    while limit is None or len(out) < limit:
        page = PAGE if limit is None else min(PAGE, limit - len(out))
        r = yield Call("range", args, dict(kw, limit=page))
        out += [decode(kv, kv.key[len(EFFECTS_PREFIX) :], ns) for kv in r.kvs]  # type: ignore[misc]
        if not r.more:
            break
        kw.update(revision=r.revision, continuation=r.continuation)
    return out


def forget_plan(key: str, *, ns: str, ttl: float) -> EffectPlan:
    """Delete the record of ``key`` under its lock (never while a run holds it): the next
    run calls fn again, with a new idempotency key. True if there was a record."""
    try:
        lock = yield Acquire(lock_name(key), ttl, False, None, ns)
    except LockHeld as e:
        raise in_progress(key, e) from e
    success = (Ops.delete(record_key(key)), Ops.delete(lock.key))
    try:
        r = yield Call("txn", ((), success), {"ns": ns, "fence": lock})
    except FenceMismatch as e:
        raise claim_lost(key, lock.fence, e, fn_called=False) from e
    yield Release()
    return bool(r.results[0].deleted)
