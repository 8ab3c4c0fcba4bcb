"""Agent plans driven over the in-memory client (no network): checkpoints, chunking, the
crash between chunks and manifest, conflicts, hydrate's round trips, rollback, time
travel, history and gc."""

from __future__ import annotations

import hashlib
import os

import pytest

from statekeeper.client.agent import (
    Agent,
    AsyncAgent,
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointNotFound,
    InvalidAgentId,
)
from tests.unit.test_agent_fake import AsyncMemoryClient, MemoryClient


def reducer(state, event):
    if event.type == "add":
        return {**state, "total": state.get("total", 0) + event.data}
    return state


def make(c=None, **kw) -> Agent:
    kw.setdefault("reducer", reducer)
    kw.setdefault("initial", {})
    return Agent(c or MemoryClient(), "a1", **kw)


def test_checkpoint_latest_and_get() -> None:
    a = make()
    ck = a.checkpoint({"total": 1}, step=1, metadata={"run": "r1"})
    assert (ck.n, ck.step, ck.position, ck.parent, ck.kind) == (1, 1, 0, None, "checkpoint")
    assert ck.revision > 0 and ck.loaded and ck.state == {"total": 1}
    a.log("add", 2)
    ck2 = a.checkpoint({"total": 3}, step=2)
    assert (ck2.n, ck2.parent, ck2.position) == (2, 1, 1)
    b = make(a.client)
    latest = b.latest()
    assert latest.n == 2 and latest.state == {"total": 3} and latest.revision == ck2.revision
    assert b.get_checkpoint(1).state == {"total": 1}
    with pytest.raises(CheckpointNotFound):
        b.get_checkpoint(9)


def test_keys_are_readable_by_a_plain_range() -> None:
    a = make()
    a.log("add", 1)
    a.checkpoint({"total": 1}, step=1)
    keys = [kv.key for kv in a.client.range("agent/a1/")]
    assert keys == ["agent/a1/ckpt/000000000001", "agent/a1/head"]
    assert ("default", "agent/a1") in a.client.streams


def test_list_newest_first_with_metadata_filters_and_limit() -> None:
    a = make()
    for i in range(1, 41):
        a.checkpoint({"i": i}, step=i, metadata={"run": "odd" if i % 2 else "even", "i": i})
    got = a.checkpoints(limit=5)
    assert [c.n for c in got] == [40, 39, 38, 37, 36]
    assert all(not c.loaded for c in got)
    odd = a.checkpoints(limit=3, run="odd")
    assert [c.n for c in odd] == [39, 37, 35]
    assert [c.n for c in a.checkpoints(limit=None, i=3)] == [3]
    assert [c.n for c in a.checkpoints(limit=2, before=10)] == [9, 8]
    assert a.checkpoints(run="none") == []


def test_checkpoint_events_commit_with_it_and_set_position() -> None:
    a = make()
    a.log("add", 1)
    ck = a.checkpoint({"total": 3}, step=1, events=[("add", 2), {"type": "note", "data": "x"}])
    assert ck.position == 3
    evs = a.client.read_stream("agent/a1").events
    assert [(e.seq, e.type, e.meta["step"]) for e in evs] == [(1, "add", 1), (2, "add", 1), (3, "note", 1)]
    assert [name for name, *_ in a.client.calls].count("txn") == 1
    with pytest.raises(ValueError):
        a.checkpoint({}, events=[{"type": "x", "id": "dup"}])


def test_conflicting_writers_get_checkpoint_conflict() -> None:
    c = MemoryClient()
    a, b = make(c), make(c)
    a.checkpoint({"v": 1}, step=1)
    b.hydrate()
    a.checkpoint({"v": 2}, step=2)
    with pytest.raises(CheckpointConflict) as err:
        b.checkpoint({"v": "b"}, step=2)
    assert err.value.current.n == 2 and err.value.status == 409
    assert make(c).latest().state == {"v": 2}
    fresh = make(c)  # never loaded the head: refuses to overwrite it blindly
    with pytest.raises(CheckpointConflict, match="hydrate"):
        fresh.checkpoint({"v": "fresh"})


def test_a_stream_writer_in_between_conflicts_a_checkpoint_with_events() -> None:
    c = MemoryClient()
    a = make(c)
    a.checkpoint({}, step=1)
    c.append("agent/a1", [{"data": b"other"}])
    with pytest.raises(CheckpointConflict, match="stream moved"):
        a.checkpoint({}, step=2, events=[("add", 1)])
    assert make(c).latest().n == 1


def test_lost_answer_retry_counts_as_done() -> None:
    c = MemoryClient()
    a = make(c)
    a.checkpoint({}, step=1)
    saved = (a._head_rev, a.head)
    ck = a.checkpoint({"v": 2}, step=2, metadata={"m": 1})
    a._head_rev, a.head = saved  # as if the answer had been lost
    again = a.checkpoint({"v": 2}, step=2, metadata={"m": 1})
    assert again.n == ck.n == 2 and again.revision == ck.revision
    assert len(a.checkpoints(limit=None)) == 2


def test_retry_with_the_same_idempotency_key_sends_the_same_txn() -> None:
    c = MemoryClient()
    a = make(c)
    a.checkpoint({}, step=1)
    saved = (a._head_rev, a.head)
    first = a.checkpoint({"v": 2}, step=2, idempotency_key="ck-2")
    a._head_rev, a.head = saved  # the answer was lost; the caller retries with its key
    txns = []
    real = c.txn
    c.txn = lambda *args, **kw: txns.append(args) or real(*args, **kw)
    again = a.checkpoint({"v": 2}, step=2, idempotency_key="ck-2")
    assert again.n == first.n and again.time_ms == first.time_ms
    assert txns[0][1][0]["value"] == c.get("agent/a1/ckpt/000000000002").value


def big_state(n: int) -> dict:
    return {"blob": os.urandom(n)}


def chunky(c=None) -> Agent:
    return make(c, value_limit=1024, request_limit=4096, inline_limit=512, batch_bytes=3072)


def test_large_state_is_chunked_and_round_trips() -> None:
    a = chunky()
    state = big_state(5000)
    ck = a.checkpoint(state, step=1)
    assert ck.chunks == 5 and ck.size > 5000
    chunk_keys = [kv.key for kv in a.client.range("agent/a1/chunk/")]
    assert len(chunk_keys) == 5 and chunk_keys[0].endswith("/000000")
    assert all(len(kv.value) <= 1024 for kv in a.client.range("agent/a1/chunk/"))
    batches = [kw["ops"] for name, _, kw in a.client.calls if name == "batch"]
    assert batches[-2:] == [["put"] * 3, ["put"] * 2]  # groups under the request limit
    assert chunky(a.client).latest().state == state
    a.client.calls.clear()
    a.checkpoint(state, step=2)  # same state: content-addressed, nothing re-sent
    assert not [kw for name, _, kw in a.client.calls if name == "batch"]


def test_chunks_of_another_chunk_size_are_reused_or_replaced() -> None:
    c = MemoryClient()
    state = big_state(5000)
    a = chunky(c)
    a.checkpoint(state, step=1)  # 1024-byte chunks
    b = make(c, value_limit=4096, request_limit=16384, inline_limit=512, chunk_size=2048)
    b.latest()
    c.calls.clear()
    ck = b.checkpoint(state, step=2)
    puts = [kw for name, _, kw in c.calls if name == "batch" and "put" in kw["ops"]]
    assert ck.chunks == 5 and not puts  # the stored set of another chunk size is adopted
    assert make(c).get_checkpoint(2).state == state
    other = big_state(5000)  # a partial upload of another size, then a crash
    c.fail["txn"] = RuntimeError("crash")
    with pytest.raises(RuntimeError):
        a.checkpoint(other, step=3)
    del c.fail["txn"]
    sha = hashlib.sha256(a.ctx.codec.encode(other)).hexdigest()
    for kv in c.range(f"agent/a1/chunk/{sha}/").kvs[1:]:
        c.delete(kv.key)  # leave only chunk 0: a partial set of another size
    ck = b.checkpoint(other, step=3)
    assert ck.chunks == 3 and make(c).get_checkpoint(ck.n).state == other


def test_crash_between_chunks_and_manifest_keeps_previous_and_gc_collects() -> None:
    c = MemoryClient()
    a = chunky(c)
    a.checkpoint(big_state(3000), step=1)
    c.fail["txn"] = RuntimeError("crash before the manifest txn")
    with pytest.raises(RuntimeError):
        a.checkpoint(big_state(3000), step=2)
    del c.fail["txn"]
    chunks = c.range("agent/a1/chunk/").kvs
    assert len({kv.key.split("/")[3] for kv in chunks}) == 2
    b = chunky(c)
    assert b.latest().step == 1
    assert b.gc() == len(chunks) // 2
    assert len({kv.key.split("/")[3] for kv in c.range("agent/a1/chunk/")}) == 1
    assert b.latest().step == 1 and b.gc() == 0


def test_gc_keeps_the_heads_chunks_when_its_manifest_is_gone() -> None:
    """A retention policy may drop the head's ckpt/ manifest (max_age_s without
    keep_last): gc must not then delete the chunks the head still reads."""
    c = MemoryClient()
    a = chunky(c)
    state = big_state(3000)
    ck = a.checkpoint(state, step=1)
    c.delete(a.ctx.layout.ckpt(ck.n))  # what the retention GC would do
    assert chunky(c).gc() == 0
    assert chunky(c).latest().state == state


def test_gc_racing_a_writer_makes_the_writer_upload_again() -> None:
    c = MemoryClient()
    a = chunky(c)
    a.checkpoint({}, step=1)
    state = big_state(2000)
    real_txn = c.txn
    fired = []

    def txn(*args, **kw):  # gc runs between the writer's chunk upload and its txn
        if not fired:
            fired.append(1)
            assert chunky(c).gc() == 3
        return real_txn(*args, **kw)

    c.txn = txn
    ck = a.checkpoint(state, step=2)
    assert ck.n == 2 and chunky(c).latest().state == state


def test_missing_chunk_is_corrupt_not_silent() -> None:
    c = MemoryClient()
    a = chunky(c)
    a.checkpoint(big_state(3000), step=1)
    key = c.range("agent/a1/chunk/").kvs[1].key
    c.delete(key)
    with pytest.raises(CheckpointCorrupt, match="chunk 1"):
        chunky(c).latest()


def test_hydrate_is_one_request_for_inline_state_and_short_tail() -> None:
    c = MemoryClient()
    a = make(c)
    a.log("add", 1)
    a.checkpoint({"total": 1}, step=1)
    a.log("add", 2, step=2)
    a.log("add", 3, step=3)
    b = make(c)
    c.requests = 0
    h = b.hydrate()
    assert c.requests == 1 and h.requests == 1
    # h.step is the step to continue from: the one after the last event's (3).
    assert (h.state, h.step, h.position, h.events_folded, h.checkpoint.n) == ({"total": 6}, 4, 3, 2, 1)
    assert (b.step, b.position, b.last_seq) == (4, 3, 3)
    ck = b.checkpoint(h.state)
    assert ck.position == 3 and ck.parent == 1 and ck.step == 3


def test_hydrate_long_tail_and_no_checkpoint() -> None:
    c = MemoryClient()
    a = make(c, tail=4)
    for _ in range(10):
        a.log("add", 1)
    c.requests = 0
    h = make(c, tail=4).hydrate()
    assert h.state == {"total": 10} and h.checkpoint is None and h.events_folded == 10
    assert c.requests == 2  # the batch, then the tail forward


def test_hydrate_without_reducer_returns_the_events() -> None:
    c = MemoryClient()
    a = make(c)
    a.checkpoint({"v": 1}, step=1)
    a.log("note", {"k": "v"})
    h = Agent(c, "a1").hydrate()
    assert h.state == {"v": 1} and h.events_folded == 0 and h.position == 0
    assert [(e.type, e.data) for e in h.events] == [("note", {"k": "v"})]


def test_rollback_keeps_history_and_logs_an_event() -> None:
    c = MemoryClient()
    a = make(c)
    for s in range(1, 4):
        a.log("add", s, step=s)
        a.checkpoint({"total": s * (s + 1) // 2}, step=s)
    a.log("add", 100, step=4)
    rb = a.rollback(to=2)
    assert (rb.n, rb.kind, rb.parent, rb.step, rb.state) == (4, "rollback", 2, 2, {"total": 3})
    assert rb.metadata == {"rollback_from": 3}
    evs = c.read_stream("agent/a1").events
    assert evs[-1].type == "statekeeper.rollback" and rb.position == evs[-1].seq == 5
    assert len(a.checkpoints(limit=None)) == 4  # nothing deleted
    h = make(c).hydrate()
    assert h.state == {"total": 3} and h.step == 3 and h.checkpoint.n == 4
    with pytest.raises(CheckpointNotFound):
        Agent(c, "a1").rollback(to=0)  # no checkpoint at or below, no reducer to fold
    assert a.rollback(to=0).state == {} == a.state_at(step=0)  # the initial state
    assert a.rollback(ckpt=3).state == {"total": 6}


def test_state_at_step_and_revision() -> None:
    c = MemoryClient()
    a = make(c)
    revs = {}
    for s in range(1, 7):
        r = a.log("add", 1, step=s)
        revs[s] = r.revision
        if s % 3 == 0:
            a.checkpoint({"total": s}, step=s)
    assert a.state_at(step=4) == {"total": 4}
    assert a.state_at(step=2) == {"total": 2}
    assert a.state_at(revision=revs[5]) == {"total": 5}
    a.rollback(to=3)
    a.log("add", 10, step=4)
    assert a.state_at(step=4) == {"total": 13}  # the current timeline after the rollback
    assert a.state_at(step=6) == {"total": 13}
    with pytest.raises(ValueError):
        a.state_at()


def test_history_is_a_timeline_with_merged_rollback() -> None:
    c = MemoryClient()
    a = make(c)
    a.log("add", 1, step=1)
    a.checkpoint({"total": 1}, step=1, metadata={"note": "first"})
    a.log("add", 2, step=2)
    a.checkpoint({"total": 3}, step=2)
    a.rollback(to=1)
    rows = a.history()
    assert [r.kind for r in rows] == ["event", "checkpoint", "event", "checkpoint", "rollback"]
    assert rows[1].ckpt == 1 and "first" in rows[1].summary
    assert rows[-1].seq == 3 and rows[-1].ckpt == 3 and "to #1" in rows[-1].summary
    assert [r.revision for r in rows] == sorted(r.revision for r in rows)
    assert [r.kind for r in a.history(limit=2)] == ["checkpoint", "rollback"]


def test_bad_agent_ids() -> None:
    for bad in ("", "a/b", "a\x00b", 3):
        with pytest.raises(InvalidAgentId):
            Agent(MemoryClient(), bad)


async def test_async_agent_same_operations() -> None:
    c = AsyncMemoryClient()
    a = AsyncAgent(c, "a1", reducer=reducer, initial={})
    await a.log("add", 5, step=1)
    ck = await a.checkpoint({"total": 5}, step=1)
    await a.log("add", 1, step=2)
    b = AsyncAgent(c, "a1", reducer=reducer, initial={})
    h = await b.hydrate()
    assert h.state == {"total": 6} and ck.n == 1
    assert (await b.rollback(to=1)).state == {"total": 5}
    assert [r.kind for r in await b.history()][-1] == "rollback"
    assert await b.state_at(step=2) == {"total": 5}
