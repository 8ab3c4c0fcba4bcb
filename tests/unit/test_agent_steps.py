"""Issue 30 items 6, 7 and 1 over the in-memory clients (no network): one model of steps
(hydrate returns the step to continue from, a kill-and-resume loop loses no step,
rollback(to=N) is exactly state_at(step=N)), ``agent.apply`` (log + fold with the same
reducer), and a rollback that copies a state this process cannot decode."""

from __future__ import annotations

import dataclasses
import json

import pytest

from statekeeper.client.agent import (
    Agent,
    AsyncAgent,
    CheckpointNotFound,
    EveryNSteps,
    SchemaRegistry,
)
from statekeeper.client.errors import Conflict
from statekeeper.cluster import agent_cli, cli
from tests.unit.test_agent_fake import AsyncMemoryClient, MemoryClient


def reducer(state, event):
    if event.type == "add":
        return {**state, "total": state.get("total", 0) + event.data}
    return state


def make(c, cls=Agent, **kw):
    kw.setdefault("reducer", reducer)
    kw.setdefault("initial", {})
    return cls(c, "a1", **kw)


def steps_logged(c) -> list[int]:
    return [e.meta["step"] for e in c.read_stream("agent/a1").events if e.type == "add"]


# -- item 6: one model of steps ----------------------------------------------------------


def run_until(c, last: int, crash_at: int | None, policy=None) -> None:
    """The obvious loop: hydrate, then log step after step ("log, then step += 1"); a
    crash is the end of this Agent object (the next call makes a new one)."""
    a = make(c, policy=policy)
    h = a.hydrate()
    step = h.step
    while step <= last:
        a.log("add", step, step=step)
        if policy is not None:
            a.maybe_checkpoint(reducer_sum(step), step=step)
        if step == crash_at:
            return
        step += 1


def reducer_sum(step: int) -> dict:
    return {"total": step * (step + 1) // 2}


def test_a_fresh_agent_starts_at_step_1() -> None:
    a = make(MemoryClient())
    assert a.step == 1 and a.hydrate().step == 1


@pytest.mark.parametrize("policy", [None, EveryNSteps(2)], ids=["no-checkpoints", "every-2"])
def test_kill_and_resume_loses_no_step(policy) -> None:
    c = MemoryClient()
    for crash_at in (2, 3, 5):
        run_until(c, 8, crash_at, policy)
    run_until(c, 8, None, policy)
    assert steps_logged(c) == list(range(1, 9))
    h = make(c).hydrate()
    assert h.state == reducer_sum(8) and h.step == 9


def test_hydrate_returns_the_step_after_the_checkpoint_and_events() -> None:
    c = MemoryClient()
    a = make(c)
    a.log("add", 1, step=1)
    a.checkpoint({"total": 1}, step=1)
    assert a.step == 2  # a checkpoint ends its step
    assert make(c).hydrate().step == 2
    a.log("add", 2)  # stamped with agent.step
    assert steps_logged(c) == [1, 2]
    assert make(c).hydrate().step == 3


def build_timeline(c) -> Agent:
    """Steps 1..7, one event each; checkpoints after steps 2 and 5."""
    a = make(c)
    for s in range(1, 8):
        a.log("add", s, step=s)
        if s in (2, 5):
            a.checkpoint(reducer_sum(s), step=s)
    return a


@pytest.mark.parametrize("n", range(0, 8))
def test_rollback_to_n_is_state_at_n(n: int) -> None:
    c = MemoryClient()
    a = build_timeline(c)
    want = a.state_at(step=n)
    assert want == (reducer_sum(n) if n else {})
    rb = a.rollback(to=n)
    assert (rb.state, rb.step, rb.kind) == (want, n, "rollback")
    h = make(c).hydrate()
    assert (h.state, h.step) == (want, n + 1)  # continue from the step after it
    assert a.state_at(step=n) == want and a.step == n + 1
    assert make(c).latest().state == want


async def test_async_rollback_to_n_is_state_at_n_and_resume() -> None:
    c = AsyncMemoryClient()
    a = make(c, AsyncAgent)
    for s in range(1, 6):
        await a.log("add", s, step=s)
        if s == 2:
            await a.checkpoint(reducer_sum(2), step=2)
    b = make(c, AsyncAgent)
    assert (await b.hydrate()).step == 6
    want = await b.state_at(step=4)
    rb = await b.rollback(to=4)
    assert rb.state == want == reducer_sum(4) and rb.step == 4
    h = await make(c, AsyncAgent).hydrate()
    assert (h.state, h.step) == (want, 5)


def test_rollback_between_checkpoints_without_a_reducer_is_refused_not_snapped() -> None:
    c = MemoryClient()
    build_timeline(c)
    with pytest.raises(CheckpointNotFound, match="reducer") as err:
        Agent(c, "a1").rollback(to=4)
    assert err.value.code == "checkpoint_not_found"
    assert make(c).latest().n == 2  # nothing written
    assert Agent(c, "a1").rollback(to=2).state == reducer_sum(2)  # a checkpoint: copied
    # Before the first checkpoint: the initial state and step 1's event, folded (the CLI's
    # "statekeeper agent rollback --to 1" said only "no checkpoint with step <= 1").
    with pytest.raises(CheckpointNotFound, match="initial state folded with 1 event.*reducer"):
        Agent(c, "a1").rollback(to=1)


def test_a_large_folded_rollback_is_chunked() -> None:
    c = MemoryClient()
    a = make(c, inline_limit=64, chunk_size=64)
    a.log("add", 1, step=1)
    a.checkpoint({"total": 1, "pad": "x" * 300}, step=1)
    a.log("add", 2, step=2)
    rb = a.rollback(to=2)
    assert rb.chunks > 1 and rb.state == {"total": 3, "pad": "x" * 300}
    assert make(c).hydrate().state == rb.state


# -- item 7: apply -------------------------------------------------------------------------


def test_apply_logs_and_folds_with_the_reducer() -> None:
    c = MemoryClient()
    a = make(c)
    a.hydrate()
    assert a.apply("add", 2, step=1) == {"total": 2}
    assert a.apply("add", 3, id="e2", step=2) == {"total": 5} == a.state
    assert a.apply("add", 3, id="e2", step=2) == {"total": 5}  # a retried id: folded once
    b = make(c)
    assert b.hydrate().state == {"total": 5}
    assert b.apply("add", 3, id="e2", step=2) == {"total": 5}  # already in the hydrated state
    ck = b.checkpoint(b.state)
    assert ck.step == 2 and ck.position == 2


async def test_async_apply() -> None:
    c = AsyncMemoryClient()
    a = make(c, AsyncAgent)
    await a.hydrate()
    assert await a.apply("add", 4) == {"total": 4}
    assert (await make(c, AsyncAgent).hydrate()).state == {"total": 4}


def test_apply_needs_the_state_and_refuses_to_skip_events() -> None:
    c = MemoryClient()
    with pytest.raises(ValueError, match="hydrate"):
        make(c).apply("add", 1)
    with pytest.raises(ValueError, match="reducer"):
        Agent(c, "a1").apply("add", 1)
    a = make(c)
    a.hydrate()
    a.log("add", 1)  # logged, not folded into a.state
    with pytest.raises(ValueError, match="log"):
        a.apply("add", 1)
    other = make(c)
    other.hydrate()
    a.hydrate()
    other.log("add", 7)  # another writer moved the stream: nothing written
    with pytest.raises(Conflict):
        a.apply("add", 1)
    assert make(c).hydrate().state == {"total": 8}


# -- item 1: rollback copies a state it cannot decode -------------------------------------


@dataclasses.dataclass
class Plan:
    todo: list[str]


def registered() -> SchemaRegistry:
    reg = SchemaRegistry()
    reg.register(Plan, "Plan", 1)
    return reg


def typed_store(inline_limit: int = 256 * 1024) -> MemoryClient:
    c = MemoryClient()
    a = Agent(c, "a1", registry=registered(), inline_limit=inline_limit, chunk_size=64)
    a.log("tool.ok", {"tool": "search"}, step=1)
    a.checkpoint(Plan(["a", "b"] * (20 if inline_limit < 1024 else 1)), step=1)
    a.log("tool.ok", {"tool": "fetch"}, step=2)
    a.checkpoint(Plan(["a"]), step=2)
    return c


@pytest.mark.parametrize("inline_limit", [256 * 1024, 64], ids=["inline", "chunked"])
def test_rollback_copies_a_registered_class_state_without_its_registry(inline_limit) -> None:
    c = typed_store(inline_limit)
    chunks_before = len(c.range("agent/a1/chunk/").kvs)
    rb = Agent(c, "a1", registry=SchemaRegistry()).rollback(to=1)  # the class is unknown here
    assert (rb.n, rb.step, rb.parent) == (3, 1, 1)
    one, head = c.get("agent/a1/ckpt/000000000001").value, c.get("agent/a1/head").value
    import msgpack

    m1, mh = msgpack.unpackb(one), msgpack.unpackb(head)
    assert mh["sha256"] == m1["sha256"] and mh.get("inline") == m1.get("inline")
    assert len(c.range("agent/a1/chunk/").kvs) == chunks_before  # the chunks are shared
    assert Agent(c, "a1", registry=registered()).latest().state == Plan(
        ["a", "b"] * (20 if inline_limit < 1024 else 1)
    )


def test_cli_rollback_of_a_registered_class_state(monkeypatch, capsys) -> None:
    c = typed_store()
    monkeypatch.setattr(agent_cli, "open_client", lambda args: c)
    try:
        code = cli.main(["agent", "rollback", "a1", "--to", "1", "--json"])
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["step"] == 1 and json.loads(out)["parent"] == 1
    assert Agent(c, "a1", registry=registered()).latest().state == Plan(["a", "b"])
