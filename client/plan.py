"""The agent layer's sans-IO core: every operation of :class:`Agent`, :class:`AsyncAgent`
and the projections is a *plan*, a generator that yields the client calls it needs and is
sent their results, like client/base.py's call plan one level up.

A plan yields

- a :class:`Call`: call ``client.<method>(*args, **kwargs)``; the result is sent back, or
  the exception the call raised is thrown into the plan (so a plan can catch a Conflict);
- a :class:`BatchCall`: add each call to one ``client.batch(ns=, consistency=)`` and send it
  (one POST /v1/batch); the list of per-op results (an exception *instance* for an op that
  failed, not raised) is sent back.

and returns the operation's result. :func:`run` drives a plan over a blocking
:class:`client.Client` and :func:`arun` over an :class:`client.AsyncClient`; the unit tests
drive them over an in-memory client (``MemoryClient`` in tests/unit/test_agent_fake.py) or
by hand, with no network. The
client below does the retries (each call keeps its idempotency key across them), so a plan
only decides what to call next.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

from .errors import StatekeeperError

__all__ = [
    "AgentPlan", "BatchCall", "Call", "arun", "batch", "call", "driven", "planned",
    "raise_errors", "run",
]


@dataclass(frozen=True, slots=True)
class Call:
    """One client call: ``client.<method>(*args, **kwargs)``."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BatchCall:
    """Calls sent together in one POST /v1/batch (not atomic; reads and writes)."""

    calls: tuple[Call, ...]
    ns: str | None = None
    consistency: str | None = None


Step: TypeAlias = Call | BatchCall
T = TypeVar("T")
AgentPlan: TypeAlias = Generator[Step, Any, T]


def call(method: str, *args: Any, **kwargs: Any) -> Call:
    """A :class:`Call`; keyword arguments that are None are left out (the client's
    defaults then apply, which keeps the fake and the real client in step)."""
    return Call(method, args, {k: v for k, v in kwargs.items() if v is not None})


def batch(*calls: Call, ns: str | None = None, consistency: str | None = None) -> BatchCall:
    return BatchCall(tuple(calls), ns, consistency)


def raise_errors(results: list[Any]) -> list[Any]:
    """The results of a batch, raising the first op error among them."""
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def _batch_of(client: Any, step: BatchCall) -> Any:
    b = client.batch(ns=step.ns, consistency=step.consistency)
    for c in step.calls:
        getattr(b, c.method)(*c.args, **c.kwargs)
    return b


def run(client: Any, plan: AgentPlan[T]) -> T:
    """Drive ``plan`` over a blocking client; returns what the plan returns."""
    try:
        step = next(plan)
        while True:
            try:
                if isinstance(step, BatchCall):
                    result = _batch_of(client, step).execute()
                else:
                    result = getattr(client, step.method)(*step.args, **step.kwargs)
            except Exception as exc:  # handed to the plan, which may catch it
                step = plan.throw(exc)
            else:
                step = plan.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        plan.close()


async def arun(client: Any, plan: AgentPlan[T]) -> T:
    """Drive ``plan`` over an AsyncClient; returns what the plan returns."""
    try:
        step = next(plan)
        while True:
            try:
                if isinstance(step, BatchCall):
                    result = await _batch_of(client, step).execute()
                else:
                    result = await getattr(client, step.method)(*step.args, **step.kwargs)
            except Exception as exc:
                step = plan.throw(exc)
            else:
                step = plan.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        plan.close()


def is_error(obj: Any, code: str) -> bool:
    """True if ``obj`` is a StatekeeperError with that code."""
    return isinstance(obj, StatekeeperError) and obj.code == code


class planned:
    """Marks an operation written as a plan (a generator method); :func:`driven` turns it
    into a method that runs it (blocking) or a coroutine function that awaits it."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., AgentPlan[Any]]) -> None:
        self.fn = fn


def driven(
    core: type, driver: Callable[[Any, AgentPlan[Any]], Any], is_async: bool
) -> Callable[[type], type]:
    """Class decorator: every @planned operation of ``core`` becomes a method of the class
    that builds the plan and runs it with ``driver`` over ``self.client`` (so a blocking
    and an asyncio class share one implementation, as Client and AsyncClient do)."""

    def make(fn: Callable[..., AgentPlan[Any]]) -> Callable[..., Any]:
        if is_async:

            @functools.wraps(fn)
            async def operation(self: Any, *args: Any, **kwargs: Any) -> Any:
                return await driver(self.client, fn(self, *args, **kwargs))

            return operation

        @functools.wraps(fn)
        def blocking(self: Any, *args: Any, **kwargs: Any) -> Any:
            return driver(self.client, fn(self, *args, **kwargs))

        return blocking

    def decorate(cls: type) -> type:
        operations = {}
        for base in reversed(core.__mro__):  # a mixin's operations too (agent/catalog.py)
            operations.update(vars(base))
        for name, attr in operations.items():
            if isinstance(attr, planned):
                setattr(cls, name, make(attr.fn))
        return cls

    return decorate
