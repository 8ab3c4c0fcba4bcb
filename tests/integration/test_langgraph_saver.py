"""StatekeeperSaver against a real 3-node cluster: LangGraph's published checkpointer
conformance suite (all eight capabilities, every test), and what the suite does not check:
a put is one revision, list pages, large values are chunked (a 100 MiB channel value,
sync and async), pickle is never used, the
sync API, and the per-event-loop AsyncClient."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from statekeeper.client import Client
from statekeeper.client.langgraph import keys as K
from statekeeper.client.langgraph.saver import StatekeeperSaver
from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def endpoints(shared_cluster: LocalCluster) -> list[str]:
    return [shared_cluster.url(n) for n in shared_cluster.node_ids]


@pytest.fixture
def saver(endpoints: list[str]) -> Iterator[StatekeeperSaver]:
    with StatekeeperSaver.from_endpoints(endpoints, ns=f"lg-{uuid.uuid4().hex[:8]}") as s:
        yield s


def _put(
    saver: StatekeeperSaver,
    thread: str,
    values: dict,
    parent: dict | None = None,
    cns: str = "",
    versions: dict | None = None,
    **meta,
) -> dict:
    """Put a checkpoint of ``values``: every channel gets a new version unless ``versions``
    (the checkpoint's, of which those not in the parent's are new) is given."""
    cfg = generate_config(thread, checkpoint_ns=cns)
    new = {k: saver.get_next_version(None, None) for k in values}
    if parent is not None:
        cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    if versions is not None:
        prev = saver.get_tuple(parent).checkpoint["channel_versions"] if parent else {}
        new = {k: v for k, v in versions.items() if prev.get(k) != v}
    cp = generate_checkpoint(channel_values=values, channel_versions=versions or new)
    return saver.put(cfg, cp, generate_metadata(**meta), new)


async def test_conformance_suite_all_capabilities(endpoints: list[str]) -> None:
    ns = f"lg-conformance-{uuid.uuid4().hex[:8]}"

    @checkpointer_test(name="StatekeeperSaver")
    async def statekeeper_saver():
        async with StatekeeperSaver.from_endpoints(endpoints, ns=ns) as s:
            yield s

    t0 = time.monotonic()
    report = await validate(statekeeper_saver, progress=ProgressCallbacks.verbose())
    report.print_report()
    print(f"conformance run: {time.monotonic() - t0:.1f} s")
    detected = {name for name, r in report.results.items() if r.detected}
    assert detected == {c.value for c in ALL_CAPABILITIES}, report.to_dict()
    failures = {n: r.failures for n, r in report.results.items() if r.failures}
    assert report.passed_all() and not failures, failures
    assert sum(r.tests_passed for r in report.results.values()) >= 80
    assert report.conformance_level() == "FULL"


def test_put_is_one_revision(saver: StatekeeperSaver) -> None:
    thread = f"t-{uuid.uuid4().hex[:6]}"
    first = _put(saver, thread, {"a": "1", "b": [1, 2]}, versions={"a": 1, "b": 1}, run_id="r1")
    second = _put(
        saver,
        thread,
        {"a": "2", "b": [1, 2], "c": {"x": 1}},
        parent=first,
        versions={"a": 2, "b": 1, "c": 1},
        run_id="r1",
    )
    c = saver.client
    cid = second["configurable"]["checkpoint_id"]
    rec = c.get(K.ckpt_key(thread, "", cid), ns=saver.ns)
    rev = rec.mod_revision
    written = [kv for kv in c.range(K.blob_prefix(thread), ns=saver.ns) if kv.mod_revision == rev]
    assert len(written) == 2  # only the new versions of a and c: b's blob is reused
    others = [K.run_key("r1", thread, "", cid), K.trun_key(thread, "r1"), K.last_key(thread, "")]
    assert {c.get(k, ns=saver.ns).mod_revision for k in others} == {rev}
    before = c.range(K.ckpt_prefix(thread), ns=saver.ns, revision=rev - 1)
    assert [kv.key for kv in before] == [
        K.ckpt_key(thread, "", first["configurable"]["checkpoint_id"])
    ]
    assert not [
        kv
        for kv in c.range(K.blob_prefix(thread), ns=saver.ns, revision=rev - 1)
        if kv.create_revision == rev
    ]
    tup = saver.get_tuple(second)
    assert tup.checkpoint["channel_values"] == {"a": "2", "b": [1, 2], "c": {"x": 1}}
    assert (
        tup.parent_config["configurable"]["checkpoint_id"] == first["configurable"]["checkpoint_id"]
    )


def test_list_pages_before_limit_namespaces_and_threads(saver: StatekeeperSaver) -> None:
    saver.page_size = 3
    thread, other = f"t-{uuid.uuid4().hex[:6]}", f"u-{uuid.uuid4().hex[:6]}"
    cfgs, parent = [], None
    for i in range(10):
        parent = _put(
            saver, thread, {"i": i}, parent=parent, step=i, source="loop" if i % 2 else "input"
        )
        cfgs.append(parent)
    ids = [c["configurable"]["checkpoint_id"] for c in cfgs]
    sub = _put(saver, thread, {"s": 1}, cns="child:1", step=0)
    _put(saver, other, {"o": 1}, step=0)
    listed = [t.checkpoint["id"] for t in saver.list(generate_config(thread))]
    assert listed == ids[::-1]
    assert [
        t.checkpoint["channel_values"]["i"] for t in saver.list(generate_config(thread), limit=4)
    ] == [9, 8, 7, 6]
    before = generate_config(thread, checkpoint_id=ids[7])
    assert [
        t.checkpoint["id"] for t in saver.list(generate_config(thread), before=before, limit=5)
    ] == ids[6:1:-1]
    odd = [
        t.metadata["step"]
        for t in saver.list(generate_config(thread), filter={"source": "loop"}, limit=4)
    ]
    assert odd == [9, 7, 5, 3]
    one = list(saver.list(generate_config(thread, checkpoint_id=ids[4])))
    assert [t.checkpoint["id"] for t in one] == [ids[4]]
    every_ns = [
        t.config["configurable"]["checkpoint_ns"]
        for t in saver.list({"configurable": {"thread_id": thread}})
    ]
    assert every_ns == [""] * 10 + ["child:1"]  # namespaces in key order, each newest first
    sub_before = {"configurable": {"checkpoint_id": ids[3]}}
    got = [
        t.config["configurable"]
        for t in saver.list({"configurable": {"thread_id": thread}}, before=sub_before)
    ]
    want = set(ids[:3]) | (
        {sub["configurable"]["checkpoint_id"]}
        if sub["configurable"]["checkpoint_id"] < ids[3]
        else set()
    )
    assert {g["checkpoint_id"] for g in got} == want
    threads = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    assert threads == {thread, other}
    assert len(list(saver.list(None, limit=12))) == 12


def test_sync_api_writes_runs_copy_prune(saver: StatekeeperSaver) -> None:
    thread, copy = f"t-{uuid.uuid4().hex[:6]}", f"c-{uuid.uuid4().hex[:6]}"
    a = _put(saver, thread, {"x": 1, "keep": "k"}, run_id="run-a")
    b = _put(saver, thread, {"x": 2}, parent=a, run_id="run-b")
    saver.put_writes(b, [("x", 3), (ERROR, "boom")], "task-1", "0")
    saver.put_writes(b, [("x", 4), (ERROR, "boom again"), (INTERRUPT, {"q": 1})], "task-1", "0")
    writes = saver.get_tuple(b).pending_writes
    # writes_sort_key order: (task_path, task_id, idx); INTERRUPT is -3, ERROR -1
    assert writes == [
        ("task-1", INTERRUPT, {"q": 1}),
        ("task-1", ERROR, "boom again"),
        ("task-1", "x", 3),
    ]
    saver.copy_thread(thread, copy)
    assert [t.checkpoint["channel_values"] for t in saver.list(generate_config(copy))] == [
        {"x": 2},
        {"x": 1, "keep": "k"},
    ]
    assert saver.get_tuple(generate_config(copy)).pending_writes == writes
    saver.prune([copy], strategy="keep_latest")
    kept = list(saver.list(generate_config(copy)))
    assert len(kept) == 1 and kept[0].parent_config is None and kept[0].pending_writes == writes
    assert kept[0].checkpoint["channel_values"] == {"x": 2}
    assert (
        saver.get_tuple(generate_config(copy, checkpoint_id=a["configurable"]["checkpoint_id"]))
        is None
    )
    assert len(saver.client.range(K.blob_prefix(copy), ns=saver.ns).kvs) == 1  # x@2 only
    saver.delete_for_runs(["run-b"])  # in every thread: the copy's checkpoint was run-b's too
    left = list(saver.list(generate_config(thread)))
    assert [t.metadata["run_id"] for t in left] == ["run-a"]
    assert list(saver.list(generate_config(copy))) == []
    keys = [kv.key for kv in saver.client.range(K.blob_prefix(thread), ns=saver.ns)]
    assert len(keys) == 2  # x@2 went with run-b's checkpoint
    assert saver.client.range(K.blob_prefix(copy), ns=saver.ns).kvs == []
    with pytest.raises(ValueError):
        saver.prune([copy], strategy="nope")
    saver.delete_thread(thread)
    saver.prune([copy], strategy="delete")
    assert saver.client.range(ns=saver.ns).kvs == []


def test_large_values_and_writes_round_trip_as_chunks(saver: StatekeeperSaver) -> None:
    thread = f"t-{uuid.uuid4().hex[:6]}"
    big = b"\x01" * (2 * 1024 * 1024 + 17)
    cfg = _put(saver, thread, {"big": big, "small": "s"})
    assert saver.get_tuple(cfg).checkpoint["channel_values"] == {"big": big, "small": "s"}
    saver.put_writes(cfg, [("out", "y" * (1024 * 1024 + 5))], "t1")
    assert saver.get_tuple(cfg).pending_writes == [("t1", "out", "y" * (1024 * 1024 + 5))]
    # five values of 900 KiB: each fits a key, together not one txn (refused before)
    five = {f"m{i}": bytes([i]) * (900 * 1024) for i in range(5)}
    nxt = _put(saver, thread, five, parent=cfg)
    assert saver.get_tuple(nxt).checkpoint["channel_values"] == five
    assert len(list(saver.list(generate_config(thread)))) == 2


MIB = 1024 * 1024


def _hundred_mib_round_trip(saver: StatekeeperSaver, put_get) -> dict[str, float]:
    """put / get_tuple / list / put_writes / delete_thread of a 100 MiB channel value (not
    compressible) through ``put_get``'s sync or async calls; returns the seconds taken."""
    thread = f"big-{uuid.uuid4().hex[:6]}"
    big = os.urandom(100 * MIB)
    times = put_get(thread, big)
    keys = saver.client.range(K.chunk_prefix(K.blob_prefix(thread)), ns=saver.ns, keys_only=True)
    assert keys.kvs == []  # delete_thread took the chunks along
    assert saver.client.range(ns=saver.ns, keys_only=True, limit=1).kvs == []
    print("100 MiB: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
    return times


def test_a_100_mib_channel_value_round_trips(saver: StatekeeperSaver) -> None:
    def put_get(thread: str, big: bytes) -> dict[str, float]:
        t0 = time.monotonic()
        cfg = _put(saver, thread, {"big": big, "small": "s"})
        t1 = time.monotonic()
        got = saver.get_tuple(generate_config(thread))
        t2 = time.monotonic()
        assert got.checkpoint["channel_values"]["big"] == big
        listed = list(saver.list(generate_config(thread)))
        assert [t.checkpoint["channel_values"]["big"] == big for t in listed] == [True]
        saver.put_writes(cfg, [("out", big[: 3 * MIB])], "task")
        assert saver.get_tuple(cfg).pending_writes == [("task", "out", big[: 3 * MIB])]
        chunks = saver.client.range(K.CHUNK, ns=saver.ns, keys_only=True, limit=1000).kvs
        assert len(chunks) >= 103
        saver.delete_thread(thread)
        return {"put": t1 - t0, "get_tuple": t2 - t1}

    _hundred_mib_round_trip(saver, put_get)


def test_a_100_mib_channel_value_round_trips_async(saver: StatekeeperSaver) -> None:
    def put_get(thread: str, big: bytes) -> dict[str, float]:
        async def go() -> dict[str, float]:
            cfg = generate_config(thread)
            cp = generate_checkpoint(channel_values={"big": big}, channel_versions={"big": 1})
            t0 = time.monotonic()
            stored = await saver.aput(cfg, cp, generate_metadata(), {"big": 1})
            t1 = time.monotonic()
            got = await saver.aget_tuple(generate_config(thread))
            t2 = time.monotonic()
            assert got.checkpoint["channel_values"]["big"] == big
            assert [t.config async for t in saver.alist(generate_config(thread))] == [stored]
            await saver.aput_writes(stored, [("out", big[: 3 * MIB])], "task")
            got = await saver.aget_tuple(stored)
            assert got.pending_writes == [("task", "out", big[: 3 * MIB])]
            await saver.adelete_thread(thread)
            return {"aput": t1 - t0, "aget_tuple": t2 - t1}

        return asyncio.run(go())

    _hundred_mib_round_trip(saver, put_get)


def test_never_pickles(saver: StatekeeperSaver) -> None:
    thread = f"t-{uuid.uuid4().hex[:6]}"
    with pytest.raises(TypeError, match="never pickles"):
        _put(saver, thread, {"lock": threading.Lock()})
    assert saver.get_tuple(generate_config(thread)) is None
    cfg = _put(saver, thread, {"ok": 1})
    with pytest.raises(TypeError, match="never pickles"):
        saver.put_writes(cfg, [("ch", lambda: 1)], "task")
    with pytest.raises(ValueError, match="pickle"):
        StatekeeperSaver(saver.client, serde=JsonPlusSerializer(pickle_fallback=True))


def test_async_client_per_event_loop_and_missing_clients(endpoints: list[str]) -> None:
    ns = f"lg-{uuid.uuid4().hex[:8]}"
    saver = StatekeeperSaver.from_endpoints(endpoints, ns=ns)

    async def put_and_get(thread: str) -> dict:
        cfg = generate_config(thread)
        cp = generate_checkpoint(channel_values={"v": thread}, channel_versions={"v": 1})
        stored = await saver.aput(cfg, cp, generate_metadata(), {"v": 1})
        return (await saver.aget_tuple(stored)).checkpoint["channel_values"]

    assert asyncio.run(put_and_get("one")) == {"v": "one"}  # a loop, then another one
    assert asyncio.run(put_and_get("two")) == {"v": "two"}
    saver.close()
    with Client(endpoints, ns=ns) as c:
        sync_only = StatekeeperSaver(c, ns=ns)
        assert sync_only.get_tuple(generate_config("one")).checkpoint["channel_values"] == {
            "v": "one"
        }
        with pytest.raises(RuntimeError, match="aclient=AsyncClient"):
            asyncio.run(sync_only.aget_tuple(generate_config("one")))
    with pytest.raises(RuntimeError, match="client=Client"):
        StatekeeperSaver(ns=ns).get_tuple(generate_config("one"))


def test_threads_sharing_a_saver_are_combined_and_each_put_is_its_own(
    saver: StatekeeperSaver,
) -> None:
    """16 threads put chains and pending writes through ONE saver: txns issued while
    another is in flight go out as batches (fewer requests than txns: saver_combine.py),
    and every checkpoint and write reads back as its own put wrote it."""
    sent: list[str] = []
    real_txn, real_batch = saver.client.txn, saver.client.batch
    saver.client.txn = lambda *a, **kw: sent.append("txn") or real_txn(*a, **kw)
    saver.client.batch = lambda *a, **kw: sent.append("batch") or real_batch(*a, **kw)
    errors: list[BaseException] = []
    heads: dict[str, dict] = {}

    def worker(w: int) -> None:
        try:
            parent = None
            for step in range(6):
                cfg = _put(saver, f"w{w}", {"n": step, "w": w}, parent=parent, step=step)
                saver.put_writes(cfg, [("n", step + 1), ("w", w)], f"task-{w}-{step}")
                parent = cfg
            heads[f"w{w}"] = parent
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    saver.client.txn, saver.client.batch = real_txn, real_batch
    assert not errors, errors
    assert len(sent) < 16 * 12  # 192 txns: some went out together
    for w in range(16):
        tup = saver.get_tuple(heads[f"w{w}"])
        assert tup.checkpoint["channel_values"] == {"n": 5, "w": w}
        assert [(c, v) for _, c, v in tup.pending_writes] == [("n", 6), ("w", w)]
        assert len(list(saver.list(generate_config(f"w{w}")))) == 6
