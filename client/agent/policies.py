"""When to checkpoint: policies the client evaluates (no server involvement).

    policy = EveryNSteps(10) | EveryTSeconds(30) | OnEvent(lambda e: e.type == "tool.ok")
    agent = Agent(client, "agent-7", policy=policy)
    agent.maybe_checkpoint(state, step=s, event=e)   # a Checkpoint when one was due

``due(step, event, now)`` only asks; ``reset(step, now)`` is called after a checkpoint
was written (by whatever policy), so a failed write does not count as one. "Every T
seconds" uses the local monotonic clock (client-side, so not the leader's clock; see
docs/agent-state.md, "Checkpoints"); tests inject ``clock``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["AllOf", "AnyOf", "EveryNSteps", "EveryTSeconds", "Never", "OnEvent", "Policy"]


class Policy:
    """Base of the checkpoint policies; combine them with ``|`` (any) and ``&`` (all)."""

    def due(self, step: int, event: Any = None, now: float | None = None) -> bool:
        raise NotImplementedError

    def reset(self, step: int, now: float | None = None) -> None:
        """A checkpoint of ``step`` was written at ``now``."""

    def __or__(self, other: Policy) -> AnyOf:
        return AnyOf(self, other)

    def __and__(self, other: Policy) -> AllOf:
        return AllOf(self, other)


class Never(Policy):
    """Never due (the default: checkpoint only when asked)."""

    def due(self, step: int, event: Any = None, now: float | None = None) -> bool:
        return False

    def __repr__(self) -> str:
        return "Never()"


class EveryNSteps(Policy):
    """Due once ``n`` steps have passed since the last checkpoint (or since step 0)."""

    def __init__(self, n: int) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"EveryNSteps needs an int n >= 1, not {n!r}")
        self.n = n
        self.last_step = 0

    def due(self, step: int, event: Any = None, now: float | None = None) -> bool:
        return step - self.last_step >= self.n

    def reset(self, step: int, now: float | None = None) -> None:
        self.last_step = step

    def __repr__(self) -> str:
        return f"EveryNSteps({self.n})"


class EveryTSeconds(Policy):
    """Due once ``t`` seconds of ``clock`` have passed since the last checkpoint (or since
    the policy was created)."""

    def __init__(self, t: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(t, int | float) or isinstance(t, bool) or t <= 0:
            raise ValueError(f"EveryTSeconds needs t > 0 seconds, not {t!r}")
        self.t = float(t)
        self.clock = clock
        self.last = clock()

    def due(self, step: int, event: Any = None, now: float | None = None) -> bool:
        return (self.clock() if now is None else now) - self.last >= self.t

    def reset(self, step: int, now: float | None = None) -> None:
        self.last = self.clock() if now is None else now

    def __repr__(self) -> str:
        return f"EveryTSeconds({self.t:g})"


class OnEvent(Policy):
    """Due when the event passed to ``maybe_checkpoint`` matches ``predicate`` (e.g. a
    successful tool call). Without an event it is not due."""

    def __init__(self, predicate: Callable[[Any], bool]) -> None:
        if not callable(predicate):
            raise TypeError("OnEvent needs a callable predicate(event) -> bool")
        self.predicate = predicate

    def due(self, step: int, event: Any = None, now: float | None = None) -> bool:
        return event is not None and bool(self.predicate(event))

    def __repr__(self) -> str:
        return f"OnEvent({getattr(self.predicate, '__name__', 'predicate')})"


class _Combined(Policy):
    def __init__(self, *policies: Policy) -> None:
        flat: list[Policy] = []
        for p in policies:
            if not isinstance(p, Policy):
                raise TypeError(f"not a Policy: {p!r}")
            flat.extend(p.policies if type(p) is type(self) else [p])  # type: ignore[attr-defined]
        self.policies = tuple(flat)

    def reset(self, step: int, now: float | None = None) -> None:
        for p in self.policies:
            p.reset(step, now)

    def __repr__(self) -> str:
        sep = " | " if isinstance(self, AnyOf) else " & "
        return "(" + sep.join(map(repr, self.policies)) + ")"


class AnyOf(_Combined):
    """Due when any of its policies is (``a | b``); a checkpoint resets them all."""

    def due(self, step: int, event: Any = None, now: float | None = None) -> bool:
        return any(p.due(step, event, now) for p in self.policies)


class AllOf(_Combined):
    """Due when all of its policies are (``a & b``)."""

    def due(self, step: int, event: Any = None, now: float | None = None) -> bool:
        return all(p.due(step, event, now) for p in self.policies)
