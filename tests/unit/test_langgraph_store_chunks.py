"""Issue 30 item 12, the store half, with no network: StatekeeperStore items over the value
limit are stored as content-addressed chunks then a manifest (store_chunks.py), read back
whole by get and search (sync and async drivers), their chunks deleted in the txn of an
overwrite or a delete, and an item with a TTL has its chunks on the lease of its record.
Small limits keep the values small; tests/integration/test_langgraph_store.py puts 20 MiB."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

from langgraph.store.base import PutOp

from statekeeper.client.langgraph.store import StatekeeperStore
from statekeeper.client.langgraph.store_core import Limits, StoreCore
from statekeeper.client.leases.results import LeaseGrant
from statekeeper.client.plan import BatchCall
from statekeeper.client.results import RangeResult, TxnResult, WriteResult
from tests.unit.test_agent_fake import AsyncMemoryClient
from tests.unit.test_langgraph_store_core import RecordingClient

SMALL = Limits(max_value_bytes=1024)
BIG = {"text": "".join(chr(0x41 + i % 26) for i in range(10_000)), "n": 1}


def chunk_keys(c) -> list[str]:
    return [kv.key for kv in c.range("chunk/", ns=c.ns, keys_only=True).kvs]


def test_a_large_item_round_trips_and_its_chunks_go_with_overwrite_and_delete() -> None:
    c = RecordingClient()
    store = StatekeeperStore(c)  # type: ignore[arg-type]
    store.core.limits = SMALL
    store.put(("docs",), "big", BIG)
    first = chunk_keys(c)
    assert len(first) >= 10 and all(k.startswith("chunk/item/docs/big%/") for k in first)
    manifest = json.loads(c.get("item/docs/big", ns="langgraph-store").value)
    assert "value" not in manifest and manifest["chunks"]["count"] == len(first)
    assert store.get(("docs",), "big").value == BIG
    assert [it.value for it in store.search(("docs",), filter={"n": 1})] == [BIG]
    assert store.list_namespaces() == [("docs",)]
    store.put(("docs",), "big", {**BIG, "n": 2})  # another set: the old one goes in its txn
    second = chunk_keys(c)
    assert second and not set(second) & set(first)
    assert store.get(("docs",), "big").value["n"] == 2
    store.put(("docs",), "big", {"n": 3})
    assert chunk_keys(c) == [] and store.get(("docs",), "big").value == {"n": 3}
    store.put(("docs",), "big", BIG)
    store.put(("docs", "big"), "x", BIG)  # an item in namespace ("docs", "big"): other root
    store.delete(("docs",), "big")
    assert chunk_keys(c) and all(k.startswith("chunk/item/docs/big/x%/") for k in chunk_keys(c))
    assert store.get(("docs",), "big") is None and store.get(("docs", "big"), "x").value == BIG


def test_a_large_item_on_the_async_driver() -> None:
    async def go() -> None:
        ac = AsyncMemoryClient()
        store = StatekeeperStore(aclient=ac)  # type: ignore[arg-type]
        store.core.limits = SMALL
        await store.aput(("docs",), "big", BIG)
        assert chunk_keys(ac.inner) and (await store.aget(("docs",), "big")).value == BIG
        await store.adelete(("docs",), "big")
        assert chunk_keys(ac.inner) == []

    asyncio.run(go())


def test_a_large_item_with_a_ttl_puts_chunks_and_manifest_on_one_lease() -> None:
    core = StoreCore("s", limits=SMALL)
    prep = core.prepare([PutOp(("t",), "big", BIG, ttl=1)])
    plan = core.plan(prep, [], {}, datetime(2026, 1, 1, tzinfo=UTC))
    calls = []
    try:
        step = next(plan)
        while True:
            calls.append(step)
            if isinstance(step, BatchCall):
                answer = [WriteResult(3) for _ in step.calls]
            elif step.method == "lease_grant":
                assert step.args == (60,)
                answer = LeaseGrant(0x2A, 60_000, 0, 1)
            elif step.method == "range":
                answer = RangeResult([], 2, False)
            else:
                answer = TxnResult(True, 4, [None])
            step = plan.send(answer)
    except StopIteration:
        pass
    names = [type(c).__name__ if isinstance(c, BatchCall) else c.method for c in calls]
    assert names[0] == "lease_grant" and names[-1] == "txn"
    puts = [c for b in calls if isinstance(b, BatchCall) for c in b.calls]
    assert puts and {c.kwargs["lease"] for c in puts} == {0x2A}
    assert all(c.args[0].startswith("chunk/item/t/big%/2a-") for c in puts)
    compares, success = calls[-1].args
    assert success[0]["lease"] == 0x2A and "ttl_ms" not in success[0]
    assert len(compares) == len(puts)
