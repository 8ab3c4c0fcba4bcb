"""StatekeeperSaver(ttl=...) on a real cluster (issue 30 item 13): a thread nobody writes
disappears entirely (checkpoints, blobs, pending writes, run indexes, its lease marker),
removed by the cluster's lease expiry, while a thread still being written stays; with
the sync and the async methods, and with LangGraph's TTL config shape."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from statekeeper.client import Client
from statekeeper.client.langgraph import keys as K
from statekeeper.client.langgraph.saver import StatekeeperSaver
from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration

TTL = 2.0
GONE_WITHIN = TTL * 1.1 + 4.0  # lease slack, expiry tick, a loaded machine


@pytest.fixture(scope="module")
def endpoints(shared_cluster: LocalCluster) -> list[str]:
    return [shared_cluster.url(n) for n in shared_cluster.node_ids]


@pytest.fixture
def ns() -> str:
    return f"lg-ttl-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def raw(endpoints: list[str]) -> Iterator[Client]:
    with Client(endpoints) as c:
        yield c


def _checkpoint(saver: StatekeeperSaver, thread: str, parent: dict | None, i: int) -> tuple:
    cfg = generate_config(thread)
    if parent is not None:
        cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    versions = {"messages": saver.get_next_version(None, None), "step": i + 1}
    cp = generate_checkpoint(
        channel_values={"messages": [f"m{i}"] * 3, "step": i}, channel_versions=versions
    )
    return cfg, cp, generate_metadata(step=i, run_id=f"run-{thread}"), versions


def _keys_of(raw: Client, ns: str, thread: str) -> list[str]:
    return [kv.key for kv in raw.range("", ns=ns, keys_only=True) if K.thread_of(kv.key) == thread]


def _kinds(keys: list[str]) -> set[str]:
    return {k.split("/", 1)[0] for k in keys}


ALL_KINDS = {"ckpt", "blob", "writes", "run", "trun", "last", "ttl"}


def _wait_gone(raw: Client, ns: str, thread: str) -> float:
    start = time.monotonic()
    while _keys_of(raw, ns, thread):
        assert time.monotonic() - start < GONE_WITHIN, _keys_of(raw, ns, thread)
        time.sleep(0.1)
    return time.monotonic() - start


def test_idle_thread_expires_whole_while_written_one_stays(
    endpoints: list[str], raw: Client, ns: str
) -> None:
    idle, busy = f"idle-{uuid.uuid4().hex[:6]}", f"busy-{uuid.uuid4().hex[:6]}"
    with StatekeeperSaver.from_endpoints(endpoints, ns=ns, ttl=TTL) as saver:
        parent = None
        for i in range(2):
            parent = saver.put(*_checkpoint(saver, idle, parent, i))
        saver.put_writes(parent, [("messages", "pending"), ("step", 9)], task_id="task-1")
        assert _kinds(_keys_of(raw, ns, idle)) == ALL_KINDS
        expiry = raw.get(K.ttl_key(idle), ns=ns)
        assert raw.lease_info(int(expiry.value)).ttl_ms == int(TTL * 1.1 * 1000)

        start, busy_parent, i = time.monotonic(), None, 0
        while _keys_of(raw, ns, idle):  # keep the other thread written meanwhile
            assert time.monotonic() - start < GONE_WITHIN, _kinds(_keys_of(raw, ns, idle))
            busy_parent = saver.put(*_checkpoint(saver, busy, busy_parent, i))
            saver.put_writes(busy_parent, [("messages", f"w{i}")], task_id=f"task-{i}")
            i += 1
            time.sleep(0.2)
        assert time.monotonic() - start > TTL * 0.5  # not gone at once
        assert saver.get_tuple(generate_config(idle)) is None
        assert list(saver.list(generate_config(idle))) == []
        assert _kinds(_keys_of(raw, ns, busy)) == ALL_KINDS
        latest = saver.get_tuple(generate_config(busy))
        assert latest.checkpoint["channel_values"]["step"] == i - 1
        assert len(list(saver.list(generate_config(busy)))) == i
        # Left alone, the busy thread goes too.
        _wait_gone(raw, ns, busy)


def test_async_saver_with_langgraph_ttl_config(endpoints: list[str], raw: Client, ns: str) -> None:
    idle, busy = f"aidle-{uuid.uuid4().hex[:6]}", f"abusy-{uuid.uuid4().hex[:6]}"
    config = {"default_ttl": TTL / 60, "refresh_on_read": True}

    async def scenario() -> int:
        async with StatekeeperSaver.from_endpoints(endpoints, ns=ns, ttl=config) as saver:
            parent = await saver.aput(*_checkpoint(saver, idle, None, 0))
            await saver.aput_writes(parent, [("messages", "x")], task_id="t")
            busy_parent = await saver.aput(*_checkpoint(saver, busy, None, 0))
            assert _kinds(_keys_of(raw, ns, idle)) == ALL_KINDS
            start, reads = time.monotonic(), 0
            while _keys_of(raw, ns, idle):  # only READ the busy thread: refresh_on_read
                assert time.monotonic() - start < GONE_WITHIN
                assert (await saver.aget_tuple(busy_parent)) is not None
                reads += 1
                await asyncio.sleep(0.2)
            assert await saver.aget_tuple(generate_config(idle)) is None
            assert [t async for t in saver.alist(generate_config(idle))] == []
            assert (await saver.aget_tuple(busy_parent)).checkpoint["channel_values"]["step"] == 0
            return reads

    assert asyncio.run(scenario()) > 3
    assert _kinds(_keys_of(raw, ns, busy)) == {"ckpt", "blob", "run", "trun", "last", "ttl"}


def test_a_thread_with_chunked_values_expires_with_its_chunks(
    endpoints: list[str], raw: Client, ns: str
) -> None:
    """A channel value and a pending write over the inline limit are stored as chunks,
    uploaded before the put's txn: they carry the thread's lease too, so the thread goes
    entirely, chunks included (they used to stay forever)."""
    thread = f"big-{uuid.uuid4().hex[:6]}"
    big = "x" * (600 * 1024)  # over inline_bytes (256 KiB): chunked
    with StatekeeperSaver.from_endpoints(endpoints, ns=ns, ttl=TTL) as saver:
        cfg = generate_config(thread)
        cp = generate_checkpoint(channel_values={"doc": big}, channel_versions={"doc": 1})
        parent = saver.put(cfg, cp, generate_metadata(step=0, run_id="r"), {"doc": 1})
        saver.put_writes(parent, [("doc", big + "w")], task_id="task-1")
        kinds = _kinds(_keys_of(raw, ns, thread))
        assert {"chunk", "blob", "writes", "ttl"} <= kinds
        assert saver.get_tuple(parent).checkpoint["channel_values"]["doc"] == big
        lease = int(raw.get(K.ttl_key(thread), ns=ns).value)
        chunk_keys = [k for k in _keys_of(raw, ns, thread) if k.startswith(K.CHUNK)]
        assert len(chunk_keys) >= 2
        assert set(chunk_keys) <= set(raw.lease_info(lease).keys)
        _wait_gone(raw, ns, thread)
