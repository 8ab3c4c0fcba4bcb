"""Archived checkpoints in the agent layer (issue 30 item 2), over the in-memory client
whose ``archive()`` does what a seal of ``statekeeper archive run --within ckpt`` does
(the key deleted, a get answering Archived with the segment, a range not listing it):
get_checkpoint, rollback and state_at raise CheckpointArchived naming the segment (never
"no checkpoint #n"), and read the checkpoint from the archive with archived="fetch"."""

from __future__ import annotations

import asyncio

import pytest

from statekeeper.client import Archived, InvalidRequest, NotFound
from statekeeper.client.agent import (
    Agent,
    AsyncAgent,
    CheckpointArchived,
    CheckpointNotFound,
    EventsMissing,
)
from tests.unit.test_agent_fake import AsyncMemoryClient, MemoryClient


def reducer(state, event):
    if event.type == "add":
        return {**state, "total": state.get("total", 0) + event.data}
    return state


def ckpt(n: int) -> str:
    return f"agent/a1/ckpt/{n:012d}"


def state(n: int, pad: int) -> dict:
    return {"total": n, "pad": "x" * pad}


def agent_with_six(c: MemoryClient, pad: int = 0, **kw) -> Agent:
    """Checkpoints 1..6 at steps 1..6 (an event of step s before each); 1..3 archived."""
    a = Agent(c, "a1", reducer=reducer, initial={}, **kw)
    for s in range(1, 7):
        a.log("add", 1, step=s)
        a.checkpoint(state(s, pad), step=s)
    c.archive([ckpt(1), ckpt(2), ckpt(3)], "seg-1")
    return a


def test_get_checkpoint_names_the_segment_and_fetches_it() -> None:
    a = agent_with_six(MemoryClient())
    with pytest.raises(CheckpointArchived) as e:
        a.get_checkpoint(2)
    err = e.value
    assert isinstance(err, Archived) and isinstance(err, NotFound)
    assert (err.code, err.status, err.segment, err.ckpt, err.agent) == (
        "archived",
        410,
        "seg-1",
        2,
        "a1",
    )
    assert "checkpoint #2" in str(err) and "seg-1" in str(err) and 'archived="fetch"' in str(err)
    got = a.get_checkpoint(2, archived="fetch")
    assert (got.n, got.step, got.state) == (2, 2, state(2, 0))
    assert a.get_checkpoint(5, archived="fetch").state == state(5, 0)  # live: as it is
    with pytest.raises(CheckpointNotFound) as nf:
        a.get_checkpoint(9)
    assert not isinstance(nf.value, Archived)
    with pytest.raises(InvalidRequest):
        a.get_checkpoint(2, archived="restore")


def test_a_chunked_archived_checkpoint_is_fetched_with_its_live_chunks() -> None:
    c = MemoryClient()
    a = agent_with_six(c, pad=300, inline_limit=64, chunk_size=64, batch_bytes=128)
    assert a.get_checkpoint(1, archived="fetch").state == state(1, 300)


def test_rollback_to_an_archived_checkpoint() -> None:
    c = MemoryClient()
    a = agent_with_six(c)
    before = (dict(c.kv), c.rev)
    with pytest.raises(CheckpointArchived) as e:
        a.rollback(ckpt=2)
    assert (e.value.ckpt, e.value.segment) == (2, "seg-1")
    with pytest.raises(CheckpointArchived) as e:
        a.rollback(to=2)  # no live checkpoint has step <= 2; #3, the newest archived, may
    assert (e.value.ckpt, e.value.segment) == (3, "seg-1") and "step <= 2" in str(e.value)
    assert (dict(c.kv), c.rev) == before  # nothing written
    ck = a.rollback(to=2, archived="fetch")
    assert (ck.n, ck.parent, ck.step, ck.state) == (7, 2, 2, state(2, 0))
    ck = a.rollback(ckpt=1, archived="fetch")
    assert (ck.n, ck.parent, ck.state) == (8, 1, state(1, 0))
    assert a.hydrate().state == state(1, 0)


def test_deleted_checkpoints_are_still_not_found() -> None:
    """Checkpoints a retention policy deleted are gone, not archived."""
    c = MemoryClient()
    a = agent_with_six(c)
    c.archived.clear()  # as if 1..3 had been deleted
    with pytest.raises(CheckpointNotFound) as e:
        a.rollback(ckpt=2, archived="fetch")
    assert not isinstance(e.value, Archived)
    # By step, nothing archived is in the way: step 2's state is folded from the initial
    # state and the events of steps 1 and 2, exactly what state_at(step=2) gives (steps.py).
    assert a.rollback(to=2).state == a.state_at(step=2) == {"total": 2}


def test_state_at_a_step_whose_checkpoint_was_archived() -> None:
    c = MemoryClient()
    a = agent_with_six(c)
    assert a.state_at(step=2) == {"total": 2}  # folded from the start: the stream is whole
    c.truncate_stream("agent/a1", 3)  # the events of steps 1 and 2 are gone too
    with pytest.raises(EventsMissing):
        a.state_at(step=2)
    assert a.state_at(step=2, archived="fetch") == state(2, 0)
    assert a.state_at(step=5, archived="fetch") == state(5, 0)


def test_async_agent_fetches_archived_checkpoints_too() -> None:
    async def main() -> None:
        inner = MemoryClient()
        agent_with_six(inner)
        a = AsyncAgent(AsyncMemoryClient(inner), "a1", reducer=reducer, initial={})
        with pytest.raises(CheckpointArchived):
            await a.get_checkpoint(3)
        assert (await a.get_checkpoint(3, archived="fetch")).state == state(3, 0)
        inner.truncate_stream("agent/a1", 3)
        assert await a.state_at(step=2, archived="fetch") == state(2, 0)
        with pytest.raises(CheckpointArchived):
            await a.rollback(to=1)
        # By step, rollback is state_at(step=1): #1 and the events after it up to step 1,
        # and seq 2 (step 1 or 2? it is gone) cannot be told apart: the honest answer.
        with pytest.raises(EventsMissing):
            await a.rollback(to=1, archived="fetch")
        assert (await a.rollback(ckpt=1, archived="fetch")).state == state(1, 0)

    asyncio.run(main())
