"""Fencing of the agent layer (issue 30 item 5), over the in-memory client: an Agent given
``fence=lock`` carries the lock's fence on every write (log's append, checkpoint's chunk
puts and txn, rollback's txn, gc's txn), so once the lock has moved on every write of that
stale instance fails FenceMismatch and writes nothing, on both Agent and AsyncAgent."""

from __future__ import annotations

import asyncio
import copy
from types import SimpleNamespace

import pytest

from statekeeper.client import FenceMismatch
from statekeeper.client.agent import Agent, AsyncAgent, CheckpointConflict
from tests.unit.test_agent_fake import AsyncMemoryClient, MemoryClient


def reducer(state, event):
    if event.type == "add":
        return {**state, "total": state.get("total", 0) + event.data}
    return state


def lock(token: int, name: str = "job", ns: str = "default") -> SimpleNamespace:
    """Lock-shaped (what fence_field reads: name, fence; and the lock's ns)."""
    return SimpleNamespace(name=name, fence=token, ns=ns)


SMALL = {"inline_limit": 64, "chunk_size": 64, "batch_bytes": 128}  # chunked states


def big(n: int) -> dict:
    return {"total": n, "pad": "x" * 300}


def snapshot(c: MemoryClient) -> tuple:
    return copy.deepcopy(c.kv), copy.deepcopy(c.streams), c.rev


def test_a_fenced_agent_writes_with_its_fence_everywhere() -> None:
    c = MemoryClient()
    c.holders[("default", "job")] = 7
    a = Agent(c, "a1", reducer=reducer, initial={}, fence=lock(7), **SMALL)
    a.log("add", 1)
    a.checkpoint(big(1), step=1)
    a.checkpoint(big(2), step=2)
    a.rollback(ckpt=1)
    c.put("agent/a1/chunk/" + "0" * 64 + "/000000", b"orphan")
    assert a.gc() == 1
    writes = [(m, kw["fence"]) for m, _, kw in c.calls if m in ("append", "txn", "put")]
    writes.pop(-2)  # the test's own put of an orphan
    assert [m for m, _ in writes] == ["append", "txn", "txn", "txn", "txn"]  # chunk puts: batches
    assert all(f is not None and (f.name, f.fence) == ("job", 7) for _, f in writes)
    assert a.hydrate().state == big(1)


@pytest.mark.parametrize("chunked", [False, True], ids=["inline", "chunked"])
def test_a_stale_agent_writes_nothing(chunked: bool) -> None:
    """The lock moved on (another holder, fence 8): log, checkpoint (its chunks too),
    maybe_checkpoint, rollback and gc all fail FenceMismatch, and the store is unchanged."""
    c = MemoryClient()
    c.holders[("default", "job")] = 7
    kw = SMALL if chunked else {}
    a = Agent(c, "a1", reducer=reducer, initial={}, fence=lock(7), **kw)
    a.log("add", 1)
    a.checkpoint(big(1), step=1)
    c.holders[("default", "job")] = 8  # A was paused past its TTL; B holds the lock
    c.put("agent/a1/chunk/" + "0" * 64 + "/000000", b"orphan")  # for gc to delete
    before = snapshot(c)
    with pytest.raises(FenceMismatch) as e:
        a.log("add", 2)
    assert e.value.holder_fence == 8 and e.value.code == "fence_mismatch"
    with pytest.raises(FenceMismatch):  # not CheckpointConflict: the fence is the reason
        a.checkpoint(big(3), step=2)
    with pytest.raises(FenceMismatch):
        a.checkpoint(big(3), step=2, events=[("add", 2)])
    with pytest.raises(FenceMismatch):
        a.rollback(ckpt=1)
    with pytest.raises(FenceMismatch):
        a.gc()
    assert snapshot(c) == before
    # B, with the lock's new fence, goes on from what A committed.
    b = Agent(c, "a1", reducer=reducer, initial={}, fence=lock(8), **kw)
    assert b.hydrate().state == big(1)
    b.log("add", 5)
    assert b.checkpoint({"total": 6}, step=2).n == 2


def test_a_stale_agents_conflict_is_not_mistaken_for_a_fence() -> None:
    """A fenced agent that holds the lock still gets CheckpointConflict when another
    (unfenced) writer moved the head: the fence adds a check, it hides none."""
    c = MemoryClient()
    c.holders[("default", "job")] = 7
    a = Agent(c, "a1", reducer=reducer, initial={}, fence=lock(7))
    a.checkpoint({"total": 0}, step=0)
    other = Agent(c, "a1", reducer=reducer, initial={})
    other.hydrate()
    other.checkpoint({"total": 1}, step=1)
    with pytest.raises(CheckpointConflict):
        a.checkpoint({"total": 2}, step=2)


def test_the_fence_of_one_call_overrides_the_agents() -> None:
    c = MemoryClient()
    c.holders[("default", "job")] = 3
    a = Agent(c, "a1", reducer=reducer, initial={})
    a.log("add", 1)  # unfenced: applies whoever holds the lock
    a.log("add", 1, fence=lock(3))
    with pytest.raises(FenceMismatch):
        a.log("add", 1, fence=lock(2))
    with pytest.raises(FenceMismatch):
        a.checkpoint({"total": 2}, step=1, fence=lock(2))
    assert a.checkpoint({"total": 2}, step=1, fence=lock(3)).n == 1
    with pytest.raises(FenceMismatch):
        a.rollback(ckpt=1, fence=("job", 2))
    assert len(c.streams[("default", "agent/a1")]) == 2


def test_a_fence_of_another_namespace_is_refused_at_once() -> None:
    """The server checks a fence in the write's own namespace: a lock of another one
    would make every write fail, so the Agent refuses it before any request."""
    c = MemoryClient()
    with pytest.raises(ValueError, match="namespace"):
        Agent(c, "a1", ns="agents", fence=lock(1, ns="locks"))
    a = Agent(c, "a1", ns="agents")
    with pytest.raises(ValueError, match="namespace"):
        a.log("x", fence=lock(1, ns="locks"))
    assert c.calls == []


def test_async_agent_is_fenced_too() -> None:
    async def main() -> None:
        inner = MemoryClient()
        inner.holders[("default", "job")] = 7
        a = AsyncAgent(
            AsyncMemoryClient(inner), "a1", reducer=reducer, initial={}, fence=lock(7), **SMALL
        )
        await a.log("add", 1)
        await a.checkpoint(big(1), step=1)
        inner.holders[("default", "job")] = 8
        before = snapshot(inner)
        with pytest.raises(FenceMismatch):
            await a.log("add", 2)
        with pytest.raises(FenceMismatch):
            await a.checkpoint(big(2), step=2)
        with pytest.raises(FenceMismatch):
            await a.rollback(ckpt=1)
        assert snapshot(inner) == before

    asyncio.run(main())
