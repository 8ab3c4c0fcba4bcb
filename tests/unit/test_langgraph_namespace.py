"""Issue 30 item 11: StatekeeperSaver and StatekeeperStore default to the namespace of the
client they are given (an explicit ns= still wins), sync and async."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from statekeeper.client.langgraph.saver import StatekeeperSaver
from statekeeper.client.langgraph.store import StatekeeperStore
from tests.unit.test_agent_fake import AsyncMemoryClient, MemoryClient


def _put(saver: StatekeeperSaver) -> dict:
    cp = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": 1})
    return saver.put(generate_config("t1"), cp, generate_metadata(), {"a": 1})


def test_saver_writes_to_the_clients_namespace() -> None:
    inner = MemoryClient(ns="tenant-a")
    saver = StatekeeperSaver(client=inner)
    assert saver.ns == "tenant-a"
    _put(saver)
    assert inner.range(ns="tenant-a").kvs
    assert inner.range(ns="langgraph").kvs == []


async def test_async_saver_writes_to_the_clients_namespace() -> None:
    inner = MemoryClient(ns="tenant-b")
    saver = StatekeeperSaver(aclient=AsyncMemoryClient(inner))
    assert saver.ns == "tenant-b"
    cp = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": 1})
    await saver.aput(generate_config("t1"), cp, generate_metadata(), {"a": 1})
    assert inner.range(ns="tenant-b").kvs
    assert inner.range(ns="langgraph").kvs == []


def test_explicit_ns_still_wins_and_no_client_keeps_langgraph() -> None:
    inner = MemoryClient(ns="tenant-a")
    saver = StatekeeperSaver(client=inner, ns="langgraph")
    _put(saver)
    assert inner.range(ns="langgraph").kvs and inner.range(ns="tenant-a").kvs == []
    assert StatekeeperSaver().ns == "langgraph"
    both = StatekeeperSaver(MemoryClient(ns="x"), aclient=AsyncMemoryClient(MemoryClient(ns="x")))
    assert both.ns == "x"


def test_clients_of_two_namespaces_need_an_explicit_ns() -> None:
    a, b = MemoryClient(ns="a"), AsyncMemoryClient(MemoryClient(ns="b"))
    with pytest.raises(ValueError, match="pass ns="):
        StatekeeperSaver(a, aclient=b)
    with pytest.raises(ValueError, match="pass ns="):
        StatekeeperStore(a, aclient=b)
    assert StatekeeperSaver(a, aclient=b, ns="c").ns == "c"


def test_store_writes_to_the_clients_namespace() -> None:
    inner = MemoryClient(ns="tenant-a")
    store = StatekeeperStore(inner)
    assert store.ns == "tenant-a"
    store.put(("users",), "k", {"v": 1})
    assert inner.range(ns="tenant-a").kvs
    assert inner.range(ns="langgraph-store").kvs == []
    assert StatekeeperStore(inner, ns="other").ns == "other"


async def test_async_store_writes_to_the_clients_namespace() -> None:
    inner = MemoryClient(ns="tenant-b")
    store = StatekeeperStore(aclient=AsyncMemoryClient(inner))
    assert store.ns == "tenant-b"
    await store.aput(("users",), "k", {"v": 1})
    assert inner.range(ns="tenant-b").kvs
    assert inner.range(ns="langgraph-store").kvs == []
