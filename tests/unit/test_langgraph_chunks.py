"""Issue 30 item 12 with no network: StatekeeperSaver stores channel values and pending
writes too large for its txn as content-addressed chunks (client/chunks.py, the agent
layer's code) written before the txn that puts their manifests; the plan, the round trip
through put / get_tuple / list / put_writes, sync and async, and that every way of
deleting (delete_thread, prune, delete_for_runs) takes the chunks along. Small limits
keep the values small here; tests/integration/test_langgraph_saver.py puts 100 MiB."""

from __future__ import annotations

import os

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from statekeeper.client.errors import Conflict, InvalidRequest
from statekeeper.client.langgraph import keys as K
from statekeeper.client.langgraph.saver import StatekeeperSaver
from statekeeper.client.langgraph.saver_chunks import split_inline
from statekeeper.client.langgraph.saver_codec import Limits
from statekeeper.client.langgraph.saver_plan import Ctx, put_ops, put_plan
from tests.unit.test_agent_fake import AsyncMemoryClient, MemoryClient

SMALL = Limits(value_bytes=1024, inline_bytes=2048, chunk_bytes=1024, request_bytes=64 * 1024)
BIG = os.urandom(10_000)  # 10 chunks of 1 KiB once encoded


def small_saver(client=None, aclient=None) -> StatekeeperSaver:
    saver = StatekeeperSaver(client, aclient=aclient, ns="lg")
    saver.limits = SMALL
    return saver


def keys(inner: MemoryClient, prefix: str = "") -> list[str]:
    return [kv.key for kv in inner.range(prefix, ns="lg", keys_only=True).kvs]


def put(saver: StatekeeperSaver, thread: str, values: dict, versions: dict, parent=None, **md):
    cfg = generate_config(thread)
    if parent is not None:
        cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    cp = generate_checkpoint(channel_values=values, channel_versions=versions)
    return saver.put(cfg, cp, generate_metadata(**md), {ch: versions[ch] for ch in values})


# -- the plan --------------------------------------------------------------------------------


def test_split_inline_chunks_large_values_then_the_largest_until_the_txn_fits() -> None:
    lim = Limits(inline_bytes=100, chunk_bytes=50, request_bytes=1000)
    inline, spills = split_inline([("a", b"x" * 101), ("b", b"y" * 10)], 0, lim)
    assert inline == [("b", b"y" * 10)] and [s.key for s in spills] == ["a"]
    assert spills[0].sha == __import__("hashlib").sha256(b"x" * 101).hexdigest()
    # nine values of 90 bytes each fit inline alone, not together with 500 bytes of others
    values = [(f"k{i}", bytes([i]) * (90 - i)) for i in range(9)]
    inline, spills = split_inline(values, 500, lim)
    assert spills and {s.key for s in spills} == {f"k{i}" for i in range(len(spills))}
    assert len(inline) + len(spills) == 9  # the largest left first
    assert split_inline(values, 0, Limits(inline_bytes=100, request_bytes=10_000))[1] == []


def test_put_uploads_chunks_first_then_one_txn_with_manifest_and_compares() -> None:
    ctx = Ctx("lg", JsonPlusSerializer(), SMALL)
    cfg = generate_config("t1")
    cp = generate_checkpoint(
        channel_values={"big": BIG, "s": 1}, channel_versions={"big": 1, "s": 1}
    )
    planned = put_ops(ctx, cfg, cp, generate_metadata(), {"big": 1, "s": 1})
    assert [s.key for s in planned.spills] == ["blob/t1//big/1"]
    assert "blob/t1//big/1" not in [o["key"] for o in planned.ops]
    plan = put_plan(ctx, cfg, cp, generate_metadata(), {"big": 1, "s": 1})
    step = next(plan)  # the scan of the chunk dir, before anything is written
    assert step.method == "range" and step.args[0].startswith("chunk/blob/t1//big/1/")
    inner = MemoryClient(ns="lg")
    result = inner.range(*step.args, **step.kwargs)
    puts = []
    step = plan.send(result)
    while not (getattr(step, "method", None) == "txn"):
        puts += [c.args[0] for c in step.calls]  # one batch of chunk puts per chunk
        assert len(step.calls) == 1
        step = plan.send([None] * len(step.calls))
    n = len(puts)
    assert n == -(-len(planned.spills[0].data) // 1024)
    cmps, success = step.args
    assert [c["target"] for c in cmps] == ["exists"] * n and [c["key"] for c in cmps] == puts
    assert success[0]["key"] == "blob/t1//big/1" and success[0]["value"][:1] == b"\xc1"


def test_round_trip_of_chunked_values_and_writes_and_what_delete_thread_leaves() -> None:
    inner = MemoryClient(ns="lg")
    saver = small_saver(inner)
    first = put(saver, "t1", {"big": BIG, "s": "x"}, {"big": 1, "s": 1})
    second = put(saver, "t1", {"big": BIG[::-1]}, {"big": 2, "s": 1}, first)
    saver.put_writes(second, [("big", BIG + b"w"), ("s", "y")], "task")
    assert any(k.startswith("chunk/blob/t1//big/1/") for k in keys(inner))
    tup = saver.get_tuple(generate_config("t1"))
    assert tup.checkpoint["channel_values"] == {"big": BIG[::-1], "s": "x"}
    assert tup.pending_writes == [("task", "big", BIG + b"w"), ("task", "s", "y")]
    listed = list(saver.list(generate_config("t1")))
    assert [t.checkpoint["channel_values"]["big"] for t in listed] == [BIG[::-1], BIG]
    # the same write again (a retried task) uploads nothing: a scan, a get, the txn
    before = inner.requests
    saver.put_writes(second, [("big", BIG + b"w")], "task")
    assert [c[0] for c in inner.calls[before:]] == ["range", "get", "txn"]
    put(saver, "t2", {"big": BIG}, {"big": 1})
    saver.delete_thread("t1")
    assert [k for k in keys(inner) if "t1" in k] == []
    assert saver.get_tuple(generate_config("t2")).checkpoint["channel_values"]["big"] == BIG


def test_prune_and_delete_for_runs_take_the_chunks_of_what_they_delete() -> None:
    inner = MemoryClient(ns="lg")
    saver = small_saver(inner)
    a = put(saver, "t", {"big": BIG}, {"big": 1}, run_id="r1")
    saver.put_writes(a, [("w", BIG)], "task")
    b = put(saver, "t", {"big": BIG[:5000]}, {"big": 2}, a, run_id="r2")
    put(saver, "t", {"big": BIG[5000:]}, {"big": 3}, b, run_id="r2")
    saver.delete_for_runs(["r1"])
    assert not any(k.startswith(("chunk/blob/t//big/1/", "chunk/writes/")) for k in keys(inner))
    saver.prune(["t"])
    assert {K.chunk_owner(k) for k in keys(inner, "chunk/")} == {"blob/t//big/3"}
    assert saver.get_tuple(generate_config("t")).checkpoint["channel_values"]["big"] == BIG[5000:]


def test_chunks_of_a_crashed_put_are_collected_by_the_next_sweep() -> None:
    inner = MemoryClient(ns="lg")
    saver = small_saver(inner)
    put(saver, "t", {"s": 1}, {"s": 1}, run_id="r1")
    inner.fail["txn"] = ConnectionError("crash between the upload and the txn")
    with pytest.raises(ConnectionError):
        put(saver, "t", {"big": BIG}, {"big": 1})
    del inner.fail["txn"]
    assert keys(inner, "chunk/blob/t//big/1/")  # orphans, no manifest references them
    saver.prune(["t"])
    assert keys(inner, "chunk/") == []


class DeletesChunksOnce(MemoryClient):
    """Deletes every chunk just before the first txn, as delete_thread or a sweep running
    between a put's upload and its txn would."""

    armed = True
    prefix = "chunk/"

    def txn(self, compare, success, failure=(), *, ns=None, idempotency_key=None):
        if self.armed:
            self.armed = False
            gone = [{"op": "delete", "key": self.prefix, "prefix": True}]
            self._txn(self._ns(ns), [], gone, [])
        return super().txn(compare, success, failure, ns=ns, idempotency_key=idempotency_key)


def test_chunks_deleted_before_the_txn_fail_it_and_are_uploaded_again() -> None:
    inner = DeletesChunksOnce(ns="lg")
    saver = small_saver(inner)
    cfg = put(saver, "t", {"big": BIG}, {"big": 1})
    assert [c[0] for c in inner.calls].count("txn") == 2
    assert saver.get_tuple(cfg).checkpoint["channel_values"]["big"] == BIG
    inner.armed, inner.prefix = True, "chunk/writes/"
    before = len(inner.calls)
    saver.put_writes(cfg, [("w", BIG)], "task")
    assert [c[0] for c in inner.calls[before:]].count("txn") == 2
    assert saver.get_tuple(cfg).pending_writes == [("task", "w", BIG)]


def test_a_put_whose_chunks_keep_vanishing_gives_up_with_conflict() -> None:
    class AlwaysDeletes(DeletesChunksOnce):
        def txn(self, *args, **kwargs):
            self.armed = True
            return super().txn(*args, **kwargs)

    with pytest.raises(Conflict, match="chunks"):
        put(small_saver(AlwaysDeletes(ns="lg")), "t", {"big": BIG}, {"big": 1})


def test_copy_thread_copies_the_chunks() -> None:
    inner = MemoryClient(ns="lg")
    saver = small_saver(inner)
    cfg = put(saver, "src", {"big": BIG}, {"big": 1})
    saver.put_writes(cfg, [("w", BIG)], "task")
    saver.copy_thread("src", "dst")
    saver.delete_thread("src")
    tup = saver.get_tuple(generate_config("dst"))
    assert tup.checkpoint["channel_values"]["big"] == BIG
    assert tup.pending_writes == [("task", "w", BIG)]


async def test_async_round_trip_of_chunked_values() -> None:
    inner = MemoryClient(ns="lg")
    saver = small_saver(aclient=AsyncMemoryClient(inner))
    cp = generate_checkpoint(channel_values={"big": BIG}, channel_versions={"big": 1})
    cfg = await saver.aput(generate_config("t"), cp, generate_metadata(), {"big": 1})
    await saver.aput_writes(cfg, [("w", BIG)], "task")
    tup = await saver.aget_tuple(generate_config("t"))
    assert tup.checkpoint["channel_values"] == {"big": BIG}
    assert tup.pending_writes == [("task", "w", BIG)]
    assert [t.checkpoint["channel_values"]["big"] async for t in saver.alist(None)] == [BIG]
    await saver.adelete_thread("t")
    assert keys(inner) == []


def test_more_chunks_than_a_txn_has_ops_is_too_large_naming_the_checkpoint() -> None:
    saver = small_saver(MemoryClient(ns="lg"))
    saver.limits = Limits(value_bytes=1024, inline_bytes=2048, chunk_bytes=1024, ops=8)
    with pytest.raises(InvalidRequest) as e:
        put(saver, "t", {"big": BIG}, {"big": 1})
    assert e.value.code == "too_large" and "thread 't'" in str(e.value)
