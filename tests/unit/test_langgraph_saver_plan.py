"""StatekeeperSaver's sans-IO core with no network: the key layout, inv() ordering and
escaping, the records and chunking, how put and put_writes are planned (one txn; special
writes overwrite, regular ones only where absent), and the whole saver driven over the
in-memory client against LangGraph's InMemorySaver (same tuples, same lists)."""

from __future__ import annotations

import random
import uuid
from typing import Annotated, TypedDict

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import WRITES_IDX_MAP, BaseCheckpointSaver
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME, SCHEDULED
from langgraph.graph import END, START, StateGraph

from statekeeper.client.langgraph import keys as K
from statekeeper.client.langgraph.saver import StatekeeperSaver
from statekeeper.client.langgraph.saver_codec import (
    CHUNK_MARK,
    Limits,
    check_serde,
    dumps,
    pack_txns,
    stored,
    unpack_record,
)
from statekeeper.client.langgraph.saver_plan import Ctx, put_ops, put_writes_plan, write_entries
from statekeeper.client.results import TxnResult
from tests.unit.test_agent_fake import AsyncMemoryClient, MemoryClient

SERDE = JsonPlusSerializer()


def ctx(**kw) -> Ctx:
    return Ctx("langgraph", SERDE, **kw)


# -- keys ----------------------------------------------------------------------------------


def test_key_layout_is_readable_and_documented() -> None:
    cid = "1f0c5f1e-8d4a-6b2c-8001-0123456789ab"
    assert K.ckpt_key("t1", "", cid) == "ckpt/t1//e0f3a0e1-72b5-94d3-7ffe-fedcba987654"
    assert K.ckpt_key("t1", "child:1", cid).startswith("ckpt/t1/child:1/")
    assert K.blob_key("t1", "", "messages", K.version_part(3)) == "blob/t1//messages/3"
    assert K.writes_key("t1", "", cid, "task", 2) == f"writes/t1//{cid}/task/00000002"
    assert K.writes_key("t1", "", cid, "task", WRITES_IDX_MAP[ERROR]).endswith("/task/-0000001")
    assert K.run_key("r1", "t1", "", cid) == f"run/r1/t1//{cid}"
    assert (K.trun_key("t1", "r1"), K.last_key("t1", "ns")) == ("trun/t1/r1", "last/t1/ns")
    assert K.parse_ckpt_key(K.ckpt_key("a/b", "x%y", cid)) == ("a/b", "x%y", cid)
    assert K.parse_run_key(K.run_key("r/1", "t", "", "c/d")) == ("r/1", "t", "", "c/d")
    assert K.retarget("blob/t1//ch/1", "t/2") == "blob/t%2F2//ch/1"
    assert K.main_key("blob/t//ch/1/c3", 4) == ("blob/t//ch/1", 3)
    assert K.main_key("blob/t//ch/1", 4) == ("blob/t//ch/1", None)


def test_escaping_keeps_threads_apart() -> None:
    assert K.part("a/b%c\x00") == "a%2Fb%25c%00"
    assert K.ckpt_prefix("a/b") == "ckpt/a%2Fb/"
    # a prefix scan of thread "a" never reaches thread "a/b" or "ab"
    for other in ("a/b", "ab", "a%2Fb"):
        assert not K.ckpt_key(other, "", "x").startswith(K.ckpt_prefix("a"))
        assert not K.blob_key(other, "", "c", "1").startswith(K.blob_prefix("a"))
    assert K.prefix_end("ckpt/a/") == "ckpt/a0"


@given(st.text())
def test_part_round_trips_and_has_no_separator(s: str) -> None:
    p = K.part(s)
    assert "/" not in p and "\x00" not in p
    assert K.unpart(p) == s


def test_inv_of_uuids_sorts_newest_first() -> None:
    ids = [str(uuid6(clock_seq=i)) for i in range(200)]
    assert sorted(ids) == ids  # uuid6 is time ordered
    segs = [K.inv(i) for i in ids]
    assert sorted(segs) == segs[::-1]
    assert all(K.uninv(s) == i for s, i in zip(segs, ids, strict=True))
    assert K.inv("00000000-0000-0000-0000-00000000000f") == "ffffffff-ffff-ffff-ffff-fffffffffff0"


@given(st.lists(st.text(min_size=1), min_size=2, max_size=8, unique=True))
def test_inv_reverses_any_order(ids: list[str]) -> None:
    segs = {K.inv(i): i for i in ids}
    assert [segs[s] for s in sorted(segs)] == sorted(ids, reverse=True)
    assert all(K.uninv(s) == i for s, i in segs.items())
    assert all("/" not in s for s in segs)


def test_version_part() -> None:
    assert K.version_part(1) == K.version_part("1") == "1"
    assert (
        K.version_part("00000000000000000000000000000002.0.5")
        == "00000000000000000000000000000002.0.5"
    )
    assert K.version_part("a/b") == "a%2Fb"


# -- codec ---------------------------------------------------------------------------------


def test_values_of_earlier_versions_chunked_in_the_txn_are_still_read() -> None:
    data = bytes(range(256)) * 40
    parts = {i: data[i * 1000 : (i + 1) * 1000] for i in range(11)}
    main = CHUNK_MARK + msgpack.packb([11, len(data)])
    assert stored("k", main, parts) == data
    assert stored("k", b"small", {}) == b"small"
    with pytest.raises(ValueError, match="missing"):
        stored("k", main, {0: parts[0]})


def test_pack_txns_respects_op_and_byte_limits() -> None:
    lim = Limits(ops=3, request_bytes=1000)
    ops_ = [{"op": "put", "key": f"k{i}", "value": b"x" * 300} for i in range(7)]
    txns = pack_txns(ops_, lim)
    assert [len(t) for t in txns] == [2, 2, 2, 1]
    assert [len(t) for t in pack_txns(ops_[:3], Limits(ops=3), reserve=1)] == [2, 1]


def test_pickle_is_refused() -> None:
    with pytest.raises(ValueError, match="pickle"):
        check_serde(JsonPlusSerializer(pickle_fallback=True))
    check_serde(SERDE)

    class Pickler:
        def dumps_typed(self, obj):
            return "pickle", b"..."

    with pytest.raises(TypeError, match="never stores pickle"):
        dumps(Pickler(), 1, "channel 'x'")
    with pytest.raises(TypeError, match="never pickles"):
        dumps(SERDE, lambda: 1, "channel 'x'")
    with pytest.raises(ValueError, match="pickle"):
        StatekeeperSaver(MemoryClient(), serde=JsonPlusSerializer(pickle_fallback=True))


# -- planning put and put_writes -----------------------------------------------------------


def test_put_is_one_txn_with_only_new_blobs() -> None:
    cfg = generate_config("t1", checkpoint_id="parent-id")
    cp = generate_checkpoint(channel_values={"a": 1, "b": [2]}, channel_versions={"a": 2, "b": 1})
    planned = put_ops(ctx(), cfg, cp, generate_metadata(run_id="r1"), {"a": 2})
    txn_ops, out = planned.ops, planned.config
    assert planned.spills == []
    keys = [o["key"] for o in txn_ops]
    assert keys == [
        "blob/t1//a/2",
        K.ckpt_key("t1", "", cp["id"]),
        K.run_key("r1", "t1", "", cp["id"]),
        "trun/t1/r1",
        "last/t1/",
    ]
    assert all(o["op"] == "put" for o in txn_ops)
    rec = unpack_record(txn_ops[1]["value"])
    assert (rec.id, rec.parent, rec.run, rec.blobs, rec.delta) == (
        cp["id"],
        "parent-id",
        "r1",
        {"a": "2", "b": "1"},
        False,
    )
    assert "channel_values" not in SERDE.loads_typed(tuple(rec.ckpt))
    assert out == {
        "configurable": {"thread_id": "t1", "checkpoint_ns": "", "checkpoint_id": cp["id"]}
    }


def test_special_writes_overwrite_regular_ones_are_insert_if_absent() -> None:
    cfg = generate_config("t1", checkpoint_id="c1")
    writes = [("a", 1), (ERROR, "e"), ("b", 2), (INTERRUPT, "i"), (RESUME, "r"), (SCHEDULED, "s")]
    entries = write_entries(ctx(), cfg, writes, "task")
    assert [(e.key.rsplit("/", 1)[1], e.special) for e in entries] == [
        ("00000000", False),
        ("-0000001", True),
        ("00000002", False),
        ("-0000003", True),
        ("-0000004", True),
        ("-0000002", True),
    ]
    plan = put_writes_plan(ctx(), cfg, writes, "task")
    call = next(plan)  # nothing to chunk: the txn comes first
    cmps, success, failure = call.args
    regular = [e.key for e in entries if not e.special]
    assert [c["key"] for c in cmps] == regular and all(c["value"] == 0 for c in cmps)
    assert len(success) == 6 and [o["op"] for o in failure] == ["get", "get"]
    # (task, 0) exists already: the txn goes again without it, the rest unchanged
    existing = object()
    call = plan.send(TxnResult(False, 7, [existing, None]))
    cmps, success, failure = call.args
    assert [c["key"] for c in cmps] == regular[1:] and len(success) == 5
    with pytest.raises(StopIteration):
        plan.send(TxnResult(True, 8, []))


def test_put_writes_needs_a_checkpoint_id() -> None:
    with pytest.raises(ValueError, match="checkpoint_id"):
        write_entries(ctx(), generate_config("t1"), [("a", 1)], "task")


# -- the whole saver over the in-memory client, against InMemorySaver ----------------------


def _same(a, b) -> None:
    assert a.config["configurable"] == b.config["configurable"]
    assert {k: v for k, v in a.checkpoint.items() if k != "ts"} == {
        k: v for k, v in b.checkpoint.items() if k != "ts"
    }
    assert a.metadata == b.metadata
    assert a.parent_config == b.parent_config
    assert a.pending_writes == b.pending_writes


def test_matches_in_memory_saver_on_random_histories() -> None:
    rng = random.Random(13)
    ours, ref = StatekeeperSaver(MemoryClient()), InMemorySaver()
    ours.page_size = 3
    heads: dict[tuple[str, str], dict | None] = {}
    versions: dict[tuple[str, str], dict] = {}
    for step in range(120):
        thread, cns = rng.choice(["t1", "t2", "a/b"]), rng.choice(["", "child:1"])
        head = heads.get((thread, cns))
        if head is not None and rng.random() < 0.4:
            writes = [
                (rng.choice(["x", "y", ERROR, INTERRUPT]), rng.randint(0, 9))
                for _ in range(rng.randint(1, 3))
            ]
            task = rng.choice(["task-1", "task-2"])
            for s in (ours, ref):
                s.put_writes(head, writes, task, task_path=task[-1])
            continue
        cur = dict(versions.get((thread, cns), {}))
        new = {}
        for ch in rng.sample(["x", "y", "z"], rng.randint(0, 3)):
            new[ch] = ref.get_next_version(cur.get(ch), None)
        cur.update(new)
        versions[(thread, cns)] = cur
        values = {ch: [ch, step] for ch in cur if rng.random() < 0.9}
        cp = generate_checkpoint(channel_values=values, channel_versions=cur)
        cfg = generate_config(thread, checkpoint_ns=cns)
        if head is not None:
            cfg["configurable"]["checkpoint_id"] = head["configurable"]["checkpoint_id"]
        md = generate_metadata(step=step, source=rng.choice(["loop", "input"]))
        out = [s.put(cfg, cp, md, new) for s in (ours, ref)]
        assert out[0] == out[1]
        heads[(thread, cns)] = out[0]
    for (thread, cns), head in heads.items():
        _same(ours.get_tuple(head), ref.get_tuple(head))
        _same(
            ours.get_tuple(generate_config(thread, checkpoint_ns=cns)),
            ref.get_tuple(generate_config(thread, checkpoint_ns=cns)),
        )
        for kw in ({}, {"limit": 4}, {"filter": {"source": "loop"}}, {"before": head, "limit": 5}):
            a = list(ours.list(generate_config(thread, checkpoint_ns=cns), **kw))
            b = list(ref.list(generate_config(thread, checkpoint_ns=cns), **kw))
            assert len(a) == len(b) and a
            for x, y in zip(a, b, strict=True):
                _same(x, y)
    assert ours.get_tuple(generate_config("nobody")) is None
    whole = [t.config["configurable"]["checkpoint_id"] for t in ours.list(None)]
    assert len(whole) == len(list(ref.list(None)))


async def test_async_methods_over_the_async_client() -> None:
    inner = MemoryClient()
    saver = StatekeeperSaver(aclient=AsyncMemoryClient(inner))
    thread = str(uuid.uuid4())
    parent = None
    for i in range(5):
        cfg = generate_config(thread)
        if parent:
            cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        cp = generate_checkpoint(channel_values={"i": i}, channel_versions={"i": i + 1})
        parent = await saver.aput(
            cfg, cp, generate_metadata(step=i, run_id=f"r{i % 2}"), {"i": i + 1}
        )
    await saver.aput_writes(parent, [("i", 9)], "task")
    latest = await saver.aget_tuple(generate_config(thread))
    assert latest.checkpoint["channel_values"] == {"i": 4} and latest.pending_writes == [
        ("task", "i", 9)
    ]
    assert [t.metadata["step"] async for t in saver.alist(generate_config(thread), limit=3)] == [
        4,
        3,
        2,
    ]
    await saver.acopy_thread(thread, "copy")
    await saver.adelete_for_runs(["r1"])
    assert [t.metadata["step"] async for t in saver.alist(generate_config(thread))] == [4, 2, 0]
    await saver.aprune([thread, "copy"])
    assert [t.metadata["step"] async for t in saver.alist(None)] == [4, 4]
    await saver.adelete_thread(thread)
    await saver.aprune(["copy"], strategy="delete")
    assert inner.range(ns=saver.ns).kvs == []
    with pytest.raises(RuntimeError, match="client=Client"):
        saver.get_tuple(generate_config(thread))


def test_prune_refuses_delta_channel_threads_and_bad_arguments() -> None:
    saver = StatekeeperSaver(MemoryClient())
    cfg = generate_config("d")
    md = generate_metadata(counters_since_delta_snapshot={"x": [1, 1]})
    saver.put(cfg, generate_checkpoint(), md, {})
    saver.put(generate_config("plain"), generate_checkpoint(), generate_metadata(), {})
    with pytest.raises(NotImplementedError, match="DeltaChannel: d"):
        saver.prune(["plain", "d"])
    assert saver.get_tuple(generate_config("plain")) is not None
    with pytest.raises(TypeError):
        saver.prune("plain")
    with pytest.raises(ValueError, match="strategy"):
        saver.prune(["plain"], strategy="everything")


def test_next_version_is_increasing_strings() -> None:
    saver = StatekeeperSaver(MemoryClient())
    v1 = saver.get_next_version(None, None)
    v2 = saver.get_next_version(v1, None)
    assert v1 < v2 and v1.startswith("0" * 31 + "1.") and v2.startswith("0" * 31 + "2.")
    assert saver.get_next_version(7, None).startswith("0" * 31 + "8.")


# -- DeltaChannel --------------------------------------------------------------------------


def _concat(state, writes):
    return [*(state or []), *(x for w in writes for x in w)]


class DeltaState(TypedDict, total=False):
    items: Annotated[list, DeltaChannel(_concat, snapshot_frequency=3)]
    n: int


def _delta_graph() -> StateGraph:
    g = StateGraph(DeltaState)
    g.add_node("a", lambda s: {"items": [f"a{s.get('n', 0)}"], "n": s.get("n", 0) + 1})
    g.add_node("b", lambda s: {"items": [f"b{s['n']}"]})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g


def test_delta_channel_graph_matches_in_memory_saver_and_the_base_walk() -> None:
    g = _delta_graph()
    cfg = {"configurable": {"thread_id": "t"}}
    ours, ref = StatekeeperSaver(MemoryClient()), InMemorySaver()
    for saver in (ours, ref):
        app = g.compile(checkpointer=saver)
        for i in range(5):
            out = app.invoke({"items": [f"in{i}"]}, cfg)
        assert len(out["items"]) == 15
    assert [s.values for s in g.compile(checkpointer=ours).get_state_history(cfg)] == [
        s.values for s in g.compile(checkpointer=ref).get_state_history(cfg)
    ]
    for tup in ours.list(cfg):
        fast = ours.get_delta_channel_history(config=tup.config, channels=["items", "n"])
        walk = BaseCheckpointSaver.get_delta_channel_history(
            ours, config=tup.config, channels=["items", "n"]
        )
        assert fast == walk
    with pytest.raises(NotImplementedError, match="DeltaChannel"):
        ours.prune(["t"])
