# ruff: noqa: F811
"""Errors name the user's own argument, not the internals it became (issue 30 item 19): a
long LangGraph thread_id, an event too large for a checkpoint (refused before any chunk is
uploaded), a store value that is not a dict, a CRDT read of a plain key. Against a real
cluster, sync and async clients where the call has both."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.client import AsyncClient, Client, InvalidRequest
from statekeeper.client.agent import Agent, AsyncAgent
from statekeeper.client.errors import CrdtTypeMismatch
from statekeeper.client.langgraph import StatekeeperSaver, StatekeeperStore
from statekeeper.cluster.supervisor import LocalCluster

# The fixtures `client` and `ns` come from agent_helpers (tests take them as arguments).
from tests.integration.agent_helpers import client, ns, reducer  # noqa: F401

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


def _urls(cluster: LocalCluster) -> list[str]:
    return [cluster.url(n) for n in cluster.node_ids]


def _config(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def test_a_long_thread_id_is_named_with_its_limit(shared_cluster: LocalCluster) -> None:
    long_id = "t" * 5000
    with StatekeeperSaver.from_endpoints(
        _urls(shared_cluster), ns=f"lg-{uuid.uuid4().hex[:8]}"
    ) as s:
        for call in (
            lambda: s.get_tuple(_config(long_id)),
            lambda: list(s.list(_config(long_id))),
            lambda: s.put(_config(long_id), empty_checkpoint(), {}, {}),
            lambda: s.delete_thread(long_id),
        ):
            with pytest.raises(
                InvalidRequest, match=r"^key_too_large: thread_id is 5000 characters"
            ) as e:
                call()
            assert "1024" in str(e.value) and "start" not in str(e.value)
        with pytest.raises(InvalidRequest, match="^key_too_large: thread_id is 5000"):
            asyncio.run(s.aget_tuple(_config(long_id)))
        with pytest.raises(ValueError, match="thread_id"):
            s.get_tuple({"configurable": {}})


def test_an_event_too_large_for_a_checkpoint_uploads_nothing(client: Client) -> None:
    agent = Agent(client, "big-events", reducer=reducer, initial={})
    state = {"blob": "x" * (600 * 1024)}  # chunked: over the inline limit
    event = {"type": "tool_result", "data": b"y" * (2 * MIB)}
    with pytest.raises(InvalidRequest) as e:
        agent.checkpoint(state, events=[("note", b"small"), event])
    message = str(e.value)
    assert message.startswith("value_too_large: events[1] (type 'tool_result') is 2097152 bytes")
    assert "success[" not in message
    assert client.range("", keys_only=True).kvs == []  # no orphan chunk keys
    with pytest.raises(
        InvalidRequest, match=r"^value_too_large: event 'tool_result' is 2097152 bytes"
    ):
        agent.log("tool_result", b"y" * (2 * MIB))


def test_an_event_too_large_for_an_async_checkpoint(shared_cluster: LocalCluster, ns) -> None:
    async def run() -> None:
        async with AsyncClient(_urls(shared_cluster), ns=ns) as ac:
            agent = AsyncAgent(ac, "big-events", reducer=reducer, initial={})
            with pytest.raises(
                InvalidRequest, match=r"^value_too_large: events\[0\] \(type 'big'\)"
            ):
                await agent.checkpoint(
                    {"blob": "x" * (600 * 1024)}, events=[("big", b"y" * (2 * MIB))]
                )
            assert (await ac.range("", keys_only=True)).kvs == []

    asyncio.run(run())


def test_a_store_value_that_is_not_a_dict_says_so(shared_cluster: LocalCluster) -> None:
    with StatekeeperStore.from_endpoints(
        _urls(shared_cluster), ns=f"st-{uuid.uuid4().hex[:8]}"
    ) as store:
        with pytest.raises(
            TypeError, match=r"value of item \('users', '42'\)/'prefs' must be a dict.*str"
        ):
            store.put(("users", "42"), "prefs", "str")
        with pytest.raises(TypeError, match="must be a dict"):
            asyncio.run(store.aput(("users", "42"), "prefs", ["a"]))
        assert store.get(("users", "42"), "prefs") is None


def test_a_crdt_read_of_a_plain_key_says_it_once(client: Client) -> None:
    client.put("visits", b"3")
    with pytest.raises(CrdtTypeMismatch) as e:
        client.crdt_get("visits")
    message = str(e.value)
    assert "key 'visits' holds a plain value, not a CRDT" in message, message
    assert message.count("CRDT") == 1
    with pytest.raises(CrdtTypeMismatch, match="key 'visits' holds a plain value, not a pncounter"):
        counter = client.crdt.counter("visits", "r1")
        counter.increment()
        counter.sync()


def test_events_over_the_request_limit_together_upload_nothing(client: Client) -> None:
    agent = Agent(client, "many-events", reducer=reducer, initial={})
    events = [("part", b"z" * (900 * 1024)) for _ in range(5)]  # each fits, 4.5 MiB in all
    with pytest.raises(InvalidRequest, match=r"^request_too_large: events hold 4608000 bytes"):
        agent.checkpoint({"blob": "x" * (600 * 1024)}, events=events)
    assert client.range("", keys_only=True).kvs == []
