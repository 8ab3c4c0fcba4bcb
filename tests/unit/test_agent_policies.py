"""Checkpoint policies with an injected clock, one test per policy, their combinations,
and maybe_checkpoint over the in-memory client."""

from __future__ import annotations

import pytest

from statekeeper.client.agent import Agent, AllOf, AnyOf, EveryNSteps, EveryTSeconds, Never, OnEvent
from tests.unit.test_agent_fake import MemoryClient


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_every_n_steps() -> None:
    p = EveryNSteps(3)
    assert [p.due(s) for s in range(0, 4)] == [False, False, False, True]
    p.reset(3)
    assert not p.due(5) and p.due(6)
    with pytest.raises(ValueError):
        EveryNSteps(0)


def test_every_t_seconds_with_injected_clock() -> None:
    clock = Clock()
    p = EveryTSeconds(30, clock=clock)
    assert not p.due(1)
    clock.t += 29.9
    assert not p.due(2)
    clock.t += 0.1
    assert p.due(3)
    p.reset(3)
    assert not p.due(4)
    assert p.due(4, now=clock.t + 30)  # an explicit now wins over the clock
    with pytest.raises(ValueError):
        EveryTSeconds(0)


def test_on_event_predicate() -> None:
    p = OnEvent(lambda e: e["type"] == "tool.ok")
    assert p.due(1, {"type": "tool.ok"})
    assert not p.due(1, {"type": "tool.error"})
    assert not p.due(1, None)
    with pytest.raises(TypeError):
        OnEvent("not callable")  # type: ignore[arg-type]


def test_combined_any_and_all() -> None:
    clock = Clock()
    p = EveryNSteps(10) | EveryTSeconds(60, clock=clock) | OnEvent(lambda e: e == "ok")
    assert isinstance(p, AnyOf) and len(p.policies) == 3  # flattened
    assert not p.due(1, None)
    assert p.due(1, "ok")
    assert p.due(10, None)
    clock.t += 60
    assert p.due(1, None)
    p.reset(1)
    assert not p.due(2, None)
    both = EveryNSteps(2) & OnEvent(lambda e: e == "ok")
    assert isinstance(both, AllOf)
    assert not both.due(2, None) and not both.due(1, "ok") and both.due(2, "ok")
    assert not Never().due(10**9, "ok")
    assert "EveryNSteps(10)" in repr(p)


def test_maybe_checkpoint_follows_the_policy_and_resets_it() -> None:
    clock = Clock()
    policy = EveryNSteps(5) | OnEvent(lambda e: e.get("ok", False))
    a = Agent(MemoryClient(), "p1", policy=policy, clock=clock)
    written = [s for s in range(1, 13) if a.maybe_checkpoint({"s": s}, step=s)]
    assert written == [5, 10]
    ck = a.maybe_checkpoint({"s": 11}, step=11, event={"ok": True})
    assert ck is not None and ck.step == 11
    assert a.maybe_checkpoint({"s": 12}, step=12) is None  # reset by the event's checkpoint
    assert [c.step for c in a.checkpoints()] == [11, 10, 5]


def test_a_failed_checkpoint_does_not_reset_the_policy() -> None:
    c = MemoryClient()
    a = Agent(c, "p2", policy=EveryNSteps(2))
    c.fail["txn"] = RuntimeError("down")
    with pytest.raises(RuntimeError):
        a.maybe_checkpoint({}, step=2)
    del c.fail["txn"]
    assert a.maybe_checkpoint({}, step=2) is not None


def test_explicit_checkpoints_reset_time_policies() -> None:
    clock = Clock()
    a = Agent(MemoryClient(), "p3", policy=EveryTSeconds(10, clock=clock), clock=clock)
    clock.t += 9
    a.checkpoint({}, step=1)
    clock.t += 9
    assert a.maybe_checkpoint({}, step=2) is None
    clock.t += 1
    assert a.maybe_checkpoint({}, step=3) is not None
