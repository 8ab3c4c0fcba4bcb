"""The steps an effect plan (client/effects/plan.py) yields, each answered by a driver
(client/effects/ledger.py):

- :class:`Call`: ``client.<method>(*args, **kwargs)`` (the agent layer's, client/plan.py);
  the result is sent back, or the exception it raised is thrown into the plan;
- :class:`Acquire`: take lock ``name`` (``client.lock(...)``, awaited on an AsyncClient);
  the Lock is sent back (LockHeld / LockTimeout thrown in);
- :class:`Invoke`: call ``fn(ctx)`` (and await it, if it returns an awaitable);
- :class:`Release`: release the lock the driver holds (errors are the driver's to log:
  the lock's lease ends the claim anyway).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from ..plan import Call

if TYPE_CHECKING:
    from .plan import EffectContext

__all__ = ["Acquire", "Call", "EffectPlan", "Invoke", "Release", "Step"]


@dataclass(frozen=True, slots=True)
class Acquire:
    """Take lock ``name`` on a lease of ``ttl`` seconds: ``client.lock(name, ttl, wait=,
    timeout=, ns=, owner=)``."""

    name: str
    ttl: float
    wait: bool
    timeout: float | None
    ns: str
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class Invoke:
    """Call the effect's function with ``ctx``."""

    ctx: EffectContext


@dataclass(frozen=True, slots=True)
class Release:
    """Release the lock taken by the last Acquire (no-op if it is gone already)."""


Step: TypeAlias = Call | Acquire | Invoke | Release
EffectPlan: TypeAlias = Generator[Step, Any, Any]
