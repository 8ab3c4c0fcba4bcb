"""The effect ledger: exactly-once recording of irreversible actions (tool calls: a payment,
an e-mail, a booking). A client layer over kv, txn, leases and fenced locks; no server op.

    receipt = client.effects.run("run-17/charge", lambda ctx: bank.charge(
        40_00, idempotency_key=ctx.idempotency_key))          # await ... on an AsyncClient

``client.effects.run(key, fn, *, ttl=30, wait=True, timeout=None, ns=None, runner=None)``:

1. read the record ``__effects/{key}``: DONE -> return its stored result; fn is not called;
2. take the lock ``effect:{key}`` on a lease of ``ttl`` seconds (kept alive by the client
   while fn runs): held by another runner -> log who holds it and how long its lease has
   left (a WARNING), then wait in line (``wait=True``, at most ``timeout`` s) or raise
   EffectInProgress (``wait=False``; also on the timeout). Held by an earlier process of
   this run's ``runner`` (a stable id, e.g. the pod's name: the lock's owner is
   ``"{runner}#{incarnation}"``, the incarnation random per ledger object, so per client)
   -> that process is dead (a runner id names one live process), so release its waiter
   key at once instead of waiting out its TTL (a WARNING says so);
3. read the record again: DONE (the runner waited for finished it) -> release, return its
   result; CLAIMED by an earlier attempt (which died, was cut off, or whose fn raised: the
   lock came to us, so that attempt is over) -> this attempt gets ``maybe_happened=True``;
4. fenced put CLAIMED {attempt, fence}; call ``fn(ctx)`` (an :class:`EffectContext`:
   ``attempt``, ``maybe_happened``, ``idempotency_key`` (the same for every attempt of the
   effect), ``fence``, ``previous``); then ONE fenced txn puts DONE {result} and deletes
   the claim's waiter key: the effect is recorded and the claim released atomically.
   If fn raises, the error is recorded in the CLAIMED record, the claim released, and the
   exception propagates (the next run gets ``maybe_happened=True``).

If the process dies anywhere, its lease expires after ``ttl`` and the next claimant continues
from the record. The ledger guarantees fn is called by one runner at a time and its result
is recorded at most once; it cannot make a crashed call un-happen: between fn's effect and
DONE, a crash means the next attempt runs fn again with ``maybe_happened=True``. So an
irreversible fn must be idempotent by key: pass ``ctx.idempotency_key`` as the external
API's idempotency key, or, when ``maybe_happened``, look the effect up there first. Then the
effect happens exactly once and DONE holds its result.

The five things (docs/agent-state.md, "The five things"):

1. Consistency: linearizable. Records are read linearizably; the claim, DONE and the
   release are fenced writes (the server applies them only while this run's claim holds
   the lock), so a runner paused past its TTL cannot record over its successor. One runner
   calls fn at a time, EXCEPT that a runner paused past its TTL inside fn (GC, SIGSTOP)
   may still be running when its successor starts: the fence refuses its DONE
   (EffectClaimLost), the shared ``idempotency_key`` keeps the external effect single.
2. ok / failed / unknown: ok = fn's result, recorded DONE (or the stored one; it is
   returned as msgpack decodes it, the same on every run). Failed: EffectInProgress
   (nothing written, fn not called), fn's own exception (recorded, claim released),
   EffectClaimLost (``fn_called`` says whether fn ran; its result is not recorded),
   EffectResultLost (DONE, but the result could not be stored; every later run raises it
   too). Unknown: Timeout/Unavailable from the claim (fn was not called) or from the DONE
   txn (fn ran): ``effects.get(key)`` tells; a later run returns the result if DONE landed,
   else runs fn again with ``maybe_happened=True`` and the same idempotency key. Every
   write keeps its idempotency key across the client's retries.
3. Limits: effect key 1..4000 UTF-8 bytes, no NUL (400 ``invalid_argument``); ``ttl`` >=
   the server's min lease TTL (2 s default; 400); the result must be msgpack-able (None,
   bool, int, float, str, bytes, list/tuple, dict) and its record under the server's value
   limit (1 MiB default), else EffectResultLost. Records are kept until deleted:
   ``effects.forget(key)`` or a prefix delete of ``__effects/``.
4. Key layout (a plain ``range`` of ``__effects/`` reads it): ``__effects/{key}`` =
   msgpack ``{state: "claimed" | "done", attempt, fence, idempotency_key, started_ms,
   done_ms?, result?, error?, result_lost?, runner?}`` (times: the claiming client's clock,
   informational); the claim is lock ``effect:{key}``, i.e. waiter keys
   ``__lock/effect:{key}/{fence:020d}`` attached to the run's lease, owner
   ``"{runner}#{incarnation}"`` when the run has a runner id.
5. Chaos: tests/integration/test_effects.py SIGKILLs a runner process before fn's call,
   during it and after it before DONE, SIGSTOPs one past its TTL, and races two runners;
   an external "bank" applying a charge once per idempotency key checks exactly once. No
   chaos workload runs the ledger under faults yet; its primitives: the kv/txn workload,
   and the lock workload (chaos/lock_workload.py) once it is in the suite.
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..base import BaseClient
from ..errors import StatekeeperError
from ..ops import ttl_ms
from .plan import (
    Acquire,
    Call,
    EffectContext,
    EffectPlan,
    EffectRecord,
    Invoke,
    check_effect_key,
    forget_plan,
    get_plan,
    list_plan,
    run_plan,
)

__all__ = ["AsyncEffects", "EffectCommands", "EffectContext", "EffectRecord", "Effects"]

log = logging.getLogger("statekeeper.client.effects")

Clock = Callable[[], float]


def _release_failed(e: BaseException) -> None:
    log.warning("could not release an effect claim (it ends with its lease): %s", e)


def drive(client: Any, plan: EffectPlan, fn: Callable[[EffectContext], Any] | None) -> Any:
    """Run ``plan`` over a blocking client; returns what the plan returns. A lock the
    plan did not release is released here, whatever stopped the plan."""
    lock = None
    try:
        step = next(plan)
        while True:
            try:
                if isinstance(step, Call):
                    result = getattr(client, step.method)(*step.args, **step.kwargs)
                elif isinstance(step, Acquire):
                    result = lock = client.lock(step.name, step.ttl, **_lock_options(step))
                elif isinstance(step, Invoke):
                    assert fn is not None
                    result = _called(fn, step.ctx)
                else:
                    result = _release(lock)
            except Exception as exc:  # handed to the plan, which may catch it
                step = plan.throw(exc)
            else:
                step = plan.send(result)
    except StopIteration as done:
        return done.value
    finally:
        plan.close()
        _release(lock)


def _lock_options(step: Acquire) -> dict[str, Any]:
    return {"wait": step.wait, "timeout": step.timeout, "ns": step.ns, "owner": step.owner}


def _called(fn: Callable[[EffectContext], Any], ctx: EffectContext) -> Any:
    result = fn(ctx)
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        raise TypeError("fn returned an awaitable: run async functions with an AsyncClient")
    return result


def _release(lock: Any) -> bool:
    if lock is None:
        return False
    try:
        return bool(lock.release())
    except StatekeeperError as e:
        _release_failed(e)
        return False


async def adrive(client: Any, plan: EffectPlan, fn: Callable[[EffectContext], Any] | None) -> Any:
    """Run ``plan`` over an AsyncClient (see :func:`drive`); fn may be a coroutine
    function or a plain one."""
    lock = None
    try:
        step = next(plan)
        while True:
            try:
                if isinstance(step, Call):
                    result = await getattr(client, step.method)(*step.args, **step.kwargs)
                elif isinstance(step, Acquire):
                    result = lock = await client.lock(step.name, step.ttl, **_lock_options(step))
                elif isinstance(step, Invoke):
                    assert fn is not None
                    result = fn(step.ctx)
                    if inspect.isawaitable(result):
                        result = await result
                else:
                    result = await _arelease(lock)
            except Exception as exc:
                step = plan.throw(exc)
            else:
                step = plan.send(result)
    except StopIteration as done:
        return done.value
    finally:
        plan.close()
        await _arelease(lock)


async def _arelease(lock: Any) -> bool:
    if lock is None:
        return False
    try:
        return bool(await lock.release())
    except StatekeeperError as e:
        _release_failed(e)
        return False


class _EffectsBase:
    """What both share: the client, the clock, argument checks and the plans."""

    blocking: bool
    """True for Effects (run() blocks), False for AsyncEffects (run() is a coroutine):
    what tool.py asks, so that it need not import this module back."""

    def __init__(self, client: Any, *, clock: Clock = time.time, runner: str | None = None) -> None:
        self.client = client
        self._clock = clock
        self.runner = runner  # the default of run(runner=)
        self._incarnation = uuid.uuid4().hex[:12]

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _ns(self, ns: str | None) -> str:
        return self.client.ns if ns is None else ns

    def _owner(self, runner: str | None) -> str | None:
        """The claim's lock owner: ``"{runner}#{incarnation}"`` (None without a runner)."""
        runner = self.runner if runner is None else runner
        if runner is None:
            return None
        if not isinstance(runner, str) or not runner:
            raise TypeError(f"runner must be a non-empty str, not {runner!r}")
        return f"{runner}#{self._incarnation}"

    def _run_plan(
        self,
        key: str,
        fn: Any,
        ttl: float,
        wait: bool,
        timeout: float | None,
        ns: str | None,
        runner: str | None,
    ) -> EffectPlan:
        check_effect_key(key)
        if not callable(fn):
            raise TypeError(f"fn must be callable, not {type(fn).__name__}")
        ttl_ms(ttl)
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"timeout must be >= 0 seconds, not {timeout!r}")
        owner = self._owner(runner)
        return run_plan(
            key,
            ns=self._ns(ns),
            ttl=ttl,
            wait=wait,
            timeout=timeout,
            now_ms=self._now_ms,
            owner=owner,
        )

    def tool(
        self,
        tool: Any = None,
        *,
        key_prefix: str = "tool/",
        ttl: float = 30.0,
        timeout: float | None = None,
        runner: str | None = None,
    ) -> Any:
        """A LangChain / LangGraph tool run through this ledger, once per tool call (keyed
        ``{key_prefix}{thread_id}/{tool_call_id}``; client/effects/tool.py): ``tool`` is a
        BaseTool or a function; without it, a decorator. Needs langchain_core and
        langgraph (``pip install 'statekeeper[langgraph]'``)."""
        from .tool import effect_tool  # the LangChain dependency only for those who use it

        options = {"key_prefix": key_prefix, "ttl": ttl, "timeout": timeout, "runner": runner}
        if tool is None:
            return lambda t: effect_tool(self, t, **options)
        return effect_tool(self, tool, **options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(ns={self.client.ns!r})"


class Effects(_EffectsBase):
    """The effect ledger of a :class:`client.Client` (``client.effects``); see the module
    docstring for what it guarantees."""

    blocking = True

    def run(
        self,
        effect_key: str,
        fn: Callable[[EffectContext], Any],
        *,
        ttl: float = 30.0,
        wait: bool = True,
        timeout: float | None = None,
        ns: str | None = None,
        runner: str | None = None,
    ) -> Any:
        """Run effect ``effect_key`` once: its stored result if it is DONE, else claim it,
        call ``fn(ctx)`` and record the result (see the module docstring).

        Args:
            effect_key: names the effect (1..4000 UTF-8 bytes), e.g. "run-17/charge".
            fn: called with an :class:`EffectContext`; returns a msgpack-able result
                (bytes included). Pass ``ctx.idempotency_key`` to the external API.
            ttl: seconds: the claim's lease; a runner that dies frees the effect after it.
            wait: another live runner holds the effect: wait for it (True: its result, or
                this run's turn) or raise EffectInProgress at once (False).
            timeout: seconds to wait at most (then EffectInProgress); None: no limit.
            ns: namespace; defaults to the client's.
            runner: a stable id of this runner (a pod's name, a host + service): a claim
                left by an earlier process with the same id is taken over at once
                (``maybe_happened=True``) instead of after its ``ttl``. One live process
                per id: a second live one would take the claim away (its DONE is then
                refused, EffectClaimLost). Defaults to ``effects.runner`` (None).

        Returns:
            fn's result as stored (msgpack round trip: tuples come back as lists).

        Raises:
            EffectInProgress, EffectClaimLost, EffectResultLost, fn's exception, and the
            client's errors (Timeout/Unavailable: outcome unknown, see the docstring).
        """
        if inspect.iscoroutinefunction(fn):
            raise TypeError("fn is a coroutine function: run it with an AsyncClient")
        plan = self._run_plan(effect_key, fn, ttl, wait, timeout, ns, runner)
        return drive(self.client, plan, fn)

    def get(self, effect_key: str, *, ns: str | None = None) -> EffectRecord | None:
        """The record of ``effect_key`` (linearizable by default), or None."""
        return drive(self.client, get_plan(check_effect_key(effect_key), ns=self._ns(ns)), None)

    def list(
        self,
        prefix: str = "",
        *,
        ns: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[EffectRecord]:
        """The records whose effect key starts with ``prefix``, in key order, at one
        revision (at most ``limit``); ``after``: only effect keys after this one (the
        last key of the previous page)."""
        plan = list_plan(prefix, ns=self._ns(ns), limit=limit, after=after)
        return drive(self.client, plan, None)

    def forget(self, effect_key: str, *, ns: str | None = None, ttl: float = 30.0) -> bool:
        """Delete the record (under the effect's lock: EffectInProgress while a run holds
        it): the next run calls fn again, with a NEW idempotency key. True if it existed."""
        plan = forget_plan(check_effect_key(effect_key), ns=self._ns(ns), ttl=ttl)
        return drive(self.client, plan, None)


class AsyncEffects(_EffectsBase):
    """The effect ledger of an :class:`client.AsyncClient` (``client.effects``): the
    methods of :class:`Effects`, as coroutines; ``fn`` may be a coroutine function."""

    blocking = False

    async def run(
        self,
        effect_key: str,
        fn: Callable[[EffectContext], Any],
        *,
        ttl: float = 30.0,
        wait: bool = True,
        timeout: float | None = None,
        ns: str | None = None,
        runner: str | None = None,
    ) -> Any:
        """See :meth:`Effects.run`; ``fn(ctx)`` is awaited if it returns an awaitable."""
        plan = self._run_plan(effect_key, fn, ttl, wait, timeout, ns, runner)
        return await adrive(self.client, plan, fn)

    async def get(self, effect_key: str, *, ns: str | None = None) -> EffectRecord | None:
        """See :meth:`Effects.get`."""
        plan = get_plan(check_effect_key(effect_key), ns=self._ns(ns))
        return await adrive(self.client, plan, None)

    async def list(
        self,
        prefix: str = "",
        *,
        ns: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> list[EffectRecord]:
        """See :meth:`Effects.list`."""
        plan = list_plan(prefix, ns=self._ns(ns), limit=limit, after=after)
        return await adrive(self.client, plan, None)

    async def forget(self, effect_key: str, *, ns: str | None = None, ttl: float = 30.0) -> bool:
        """See :meth:`Effects.forget`."""
        plan = forget_plan(check_effect_key(effect_key), ns=self._ns(ns), ttl=ttl)
        return await adrive(self.client, plan, None)


class EffectCommands(BaseClient):
    """``client.effects`` of both clients; a transport sets ``_effects_type``."""

    _effects_type: Any
    _effects: Any = None

    @property
    def effects(self) -> Any:
        """The effect ledger (client/effects/ledger.py): ``run(key, fn, *, ttl=30, wait=True,
        timeout=None, ns=None, runner=None)`` runs an irreversible call once and records its result
        (awaited on an AsyncClient, where fn may be async); ``get(key)``, ``list(prefix)``,
        ``forget(key)`` inspect and delete records (``__effects/{key}``)."""
        if self._effects is None:
            self._effects = self._effects_type(self)
        return self._effects
