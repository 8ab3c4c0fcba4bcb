"""StatekeeperStore against a real 3-node cluster: generated batches run against LangGraph's
InMemoryStore and StatekeeperStore must give the same results (differential test, sync and
async drivers), TTL expiry (hidden at once, deleted by the server's lease), refresh on read,
semantic search ranked like InMemoryStore's, batches over the request limits, the key
layout as the server holds it, and the async API."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from statekeeper.client import AsyncClient, Client
from statekeeper.client.langgraph.store import StatekeeperStore
from statekeeper.cluster.supervisor import LocalCluster
from tests.unit.test_langgraph_store_core import (
    INDEX,
    canon,
    differential,
    load,
    model_batch,
    ranked,
)

pytestmark = pytest.mark.integration

EXAMPLES = 80


def fresh_ns() -> str:
    return f"lg-store-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def endpoints(shared_cluster: LocalCluster) -> list[str]:
    return [shared_cluster.url(n) for n in shared_cluster.node_ids]


@pytest.fixture(scope="module")
def client(endpoints: list[str]) -> Iterator[Client]:
    with Client(endpoints) as c:
        yield c


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)
    return time.monotonic() - start


# -- differential ------------------------------------------------------------------------


async def _abatch(endpoints: list[str], ns: str, ops: list[Any]) -> list[Any]:
    async with AsyncClient(endpoints) as ac:
        return await StatekeeperStore(aclient=ac, ns=ns, page_size=3).abatch(ops)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_same_results_as_in_memory_store(
    data: st.DataObject, client: Client, endpoints: list[str]
) -> None:
    """Each example: a fresh statekeeper namespace, 2-12 generated batches (puts, deletes,
    gets, searches with filters / limit / offset / prefixes, list_namespaces with
    prefix / suffix / wildcards / max_depth / limit / offset), each followed by a probe
    batch; about one batch in four goes through abatch on an AsyncClient."""
    ns = fresh_ns()
    store = StatekeeperStore(client, ns=ns, page_size=3)  # scans continue over pages

    def run(ops: list[Any]) -> list[Any]:
        if data.draw(st.integers(0, 3), label="async") == 0:
            return asyncio.run(_abatch(endpoints, ns, ops))
        return store.batch(ops)

    differential(data, run)


def test_differential_runtime_budget(client: Client) -> None:
    """The differential test's cost per batch on this cluster (it is printed; a slow
    cluster would push the hypothesis test past its budget long before this fails)."""
    store = StatekeeperStore(client, ns=fresh_ns())
    ops = [PutOp(("a",), f"k{i}", {"n": i % 5, "tag": "red"}) for i in range(6)]
    start = time.perf_counter()
    for _ in range(20):
        store.batch([*ops, GetOp(("a",), "k1"), SearchOp(("a",), {"n": {"$gt": 1}})])
    per_batch = (time.perf_counter() - start) / 20
    print(f"one read request + one write txn: {per_batch * 1000:.1f} ms per batch")
    assert per_batch < 0.5


# -- layout, limits ------------------------------------------------------------------------


def test_key_layout_as_the_server_holds_it(client: Client) -> None:
    ns = fresh_ns()
    store = StatekeeperStore(client, ns=ns)
    store.put(("users", "a/b"), "prefs/1", {"theme": "dark"})
    store.put(("users",), "100%", {"n": 1})
    keys = [kv.key for kv in client.scan("item/", ns=ns)]
    assert keys == ["item/users/100%25", "item/users/a%2Fb/prefs%2F1"]
    rec = json.loads(client.get("item/users/a%2Fb/prefs%2F1", ns=ns).value)
    assert rec["namespace"] == ["users", "a/b"] and rec["value"] == {"theme": "dark"}
    assert store.list_namespaces() == [("users",), ("users", "a/b")]


def test_a_batch_over_the_request_limits_is_split_and_scans_page(client: Client) -> None:
    ns = fresh_ns()
    store = StatekeeperStore(client, ns=ns, page_size=100)
    store.batch([PutOp(("big",), f"k{i:05d}", {"i": i}) for i in range(1500)])  # 2 txns
    assert client.range("item/big/", ns=ns, limit=2000, keys_only=True).kvs[-1].key == (
        "item/big/k01499")
    got = store.search(("big",), filter={"i": {"$gte": 1490}}, limit=100)  # 15 pages
    assert [it.value["i"] for it in got] == list(range(1490, 1500))
    assert [it.key for it in store.search(("big",), offset=250, limit=2)] == ["k00250", "k00251"]


# -- TTL ----------------------------------------------------------------------------------


def test_an_expired_item_is_invisible_at_once_and_deleted_by_the_server(client: Client) -> None:
    ns = fresh_ns()
    store = StatekeeperStore(client, ns=ns, ttl={"refresh_on_read": False})
    store.put(("t",), "short", {"n": 1}, ttl=0.02)  # 1.2 s; its lease: the 2 s minimum
    store.put(("t",), "stays", {"n": 2})
    key = "item/t/short"
    assert store.get(("t",), "short").value == {"n": 1}
    # A store whose clock runs 2 minutes ahead sees the item expired while the server
    # still holds it (deterministic: the lease has at least ~0.8 s left).
    ahead = StatekeeperStore(client, ns=ns, clock=lambda: time.time() + 120)
    assert client.get(key, ns=ns, default=None) is not None
    assert ahead.get(("t",), "short") is None
    assert [it.key for it in ahead.search(("t",))] == ["stays"]
    waited = wait_until(lambda: store.get(("t",), "short") is None, 5, "hidden after its TTL")
    assert [it.key for it in store.search(("t",))] == ["stays"]
    gone = wait_until(lambda: client.get(key, ns=ns, default=None) is None, 15,
                      "deleted by its lease")
    print(f"hidden after {waited:.2f} s more, deleted by the server {gone:.2f} s later")
    store.delete(("t",), "stays")
    assert store.list_namespaces() == []


def test_refresh_on_read_keeps_an_item_alive(client: Client) -> None:
    ns = fresh_ns()
    store = StatekeeperStore(client, ns=ns, ttl={"default_ttl": 0.05, "refresh_on_read": True})
    store.put(("r",), "k", {"n": 1})  # 3 s, refreshed by every read
    store.put(("r",), "s", {"n": 2})  # 3 s, read without refresh
    first = client.get("item/r/k", ns=ns)
    for _ in range(6):  # 6 s of reads, one a second: twice its TTL
        time.sleep(1.0)
        assert store.get(("r",), "k").value == {"n": 1}
        store.get(("r",), "s", refresh_ttl=False)
    assert [it.key for it in store.search(("r",))] == ["k"]  # s expired; search refreshes
    item = store.get(("r",), "k")
    assert item.updated_at == item.created_at  # a refresh keeps the item's timestamps
    assert client.get("item/r/k", ns=ns).mod_revision > first.mod_revision  # rewritten
    wait_until(lambda: client.get("item/r/s", ns=ns, default=None) is None, 10,
               "the unrefreshed item deleted")
    wait_until(lambda: client.get("item/r/k", ns=ns, default=None) is None, 10,
               "the item deleted once reads stop")
    assert store.get(("r",), "k") is None


def test_a_ttl_over_a_day_has_no_lease_and_is_swept(client: Client) -> None:
    ns = fresh_ns()
    store = StatekeeperStore(client, ns=ns, ttl={"refresh_on_read": False})
    store.put(("long",), "a", {"n": 1}, ttl=2 * 1440)
    store.put(("long",), "b", {"n": 2}, ttl=2 * 1440)
    store.put(("long",), "c", {"n": 3})
    later = StatekeeperStore(client, ns=ns, clock=lambda: time.time() + 3 * 86400)
    assert later.sweep_ttl() == 2
    assert [kv.key for kv in client.scan("item/", ns=ns)] == ["item/long/c"]


# -- semantic search ------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["pear", "zebra", "banana split", "tree of apples"])
def test_semantic_search_ranks_like_in_memory_store(client: Client, query: str) -> None:
    store = StatekeeperStore(client, ns=fresh_ns(), index=INDEX)
    mem = InMemoryStore(index=INDEX)
    load(store)
    load(mem)
    for flt, prefix in [(None, ("docs",)), ({"n": {"$lte": 4}}, ("docs",)), (None, ("docs", "b"))]:
        ours = store.search(prefix, query=query, filter=flt, limit=20)
        theirs = mem.search(prefix, query=query, filter=flt, limit=20)
        (o_scored, o_rest), (t_scored, t_rest) = ranked(ours), ranked(theirs)
        assert [k for k, _ in o_scored] == [k for k, _ in t_scored]
        assert [s for _, s in o_scored] == pytest.approx([s for _, s in t_scored], abs=1e-9)
        assert o_rest == t_rest
    best = store.search(("docs",), query=query, limit=1)[0]
    assert best.key == ranked(mem.search(("docs",), query=query, limit=1))[0][0][0]


def test_semantic_search_refuses_other_dims(client: Client) -> None:
    ns = fresh_ns()
    StatekeeperStore(client, ns=ns, index=INDEX).put(("d",), "1", {"text": "pear"})
    other = StatekeeperStore(client, ns=ns, index={"dims": 3, "embed": lambda ts: [[1.0] * 3
                                                                                   for _ in ts]})
    with pytest.raises(ValueError, match="8 dimensions"):
        other.search(("d",), query="pear")


# -- async ----------------------------------------------------------------------------------


SEQUENCE: list[list[Any]] = [
    [PutOp(("u", "1"), "a", {"n": 1, "tag": "red"}), PutOp(("u", "2"), "b", {"n": 2}),
     PutOp(("v",), "c", {"n": 3, "tag": "red"}), PutOp(("u", "1"), "a", {"n": 4, "tag": "red"})],
    [GetOp(("u", "1"), "a"), SearchOp(("u",)), SearchOp((), {"tag": "red"}, limit=1, offset=1),
     ListNamespacesOp(max_depth=1), PutOp(("u", "2"), "b", None)],
    [GetOp(("u", "2"), "b"), ListNamespacesOp(), SearchOp((), {"n": {"$gte": 3}})],
]


async def test_abatch_on_an_async_client(endpoints: list[str]) -> None:
    mem = InMemoryStore()
    async with StatekeeperStore.from_endpoints(endpoints, ns=fresh_ns()) as store:
        for ops in SEQUENCE:
            assert canon(await store.abatch(ops)) == canon(model_batch(mem, ops))
        await store.aput(("w",), "k", {"x": 1}, ttl=1)
        assert (await store.aget(("w",), "k")).value == {"x": 1}
        assert await store.alist_namespaces(prefix=("u",)) == [("u", "1")]
        await store.adelete(("w",), "k")
        assert await store.asearch(("w",)) == []
        # the blocking client of the same store sees the same data
        assert store.get(("u", "1"), "a").value == {"n": 4, "tag": "red"}


async def test_abatch_without_an_async_client_uses_a_thread(client: Client) -> None:
    store = StatekeeperStore(client, ns=fresh_ns())
    await store.aput(("t",), "k", {"n": 1})
    assert (await store.aget(("t",), "k")).value == {"n": 1}


# -- large items (issue 30 item 12) -------------------------------------------------------


def _keys(client: Client, ns: str, prefix: str) -> list[str]:
    return [kv.key for kv in client.range(prefix, ns=ns, keys_only=True)]


def test_a_20_mib_item_is_stored_as_chunks_and_read_back(client: Client) -> None:
    """An item far over the 1 MiB value limit: its record is stored as chunks then a
    manifest; get and search read it back whole; an overwrite and a delete take the old
    chunks along in their txn."""
    ns = fresh_ns()
    store = StatekeeperStore(client, ns=ns)
    text = uuid.uuid4().hex * (20 * 1024 * 1024 // 32)  # 20 MiB of JSON string
    store.put(("docs",), "big", {"text": text, "n": 1})
    assert len(_keys(client, ns, "chunk/")) >= 20
    got = store.get(("docs",), "big")
    assert got is not None and got.value == {"text": text, "n": 1}
    found = store.search(("docs",), filter={"n": 1})
    assert [it.key for it in found] == ["big"] and found[0].value["text"] == text
    store.put(("docs",), "big", {"text": text[::-1], "n": 2})  # another 20 MiB
    assert store.get(("docs",), "big").value["n"] == 2
    assert len({k.rsplit("/", 1)[0] for k in _keys(client, ns, "chunk/")}) == 1  # old set gone
    store.put(("docs",), "big", {"n": 3})  # small again: the chunks go
    assert _keys(client, ns, "chunk/") == []
    assert store.get(("docs",), "big").value == {"n": 3}
    store.put(("docs",), "big", {"text": text})
    store.delete(("docs",), "big")
    assert _keys(client, ns, "chunk/") == [] and store.get(("docs",), "big") is None


def test_a_large_item_with_a_ttl_expires_with_its_chunks(client: Client) -> None:
    ns = fresh_ns()
    store = StatekeeperStore(client, ns=ns)
    store.put(("t",), "big", {"text": "y" * (3 * 1024 * 1024)}, ttl=0.02)  # 1.2 s, lease 2 s
    assert _keys(client, ns, "chunk/") and store.get(("t",), "big") is not None
    wait_until(lambda: not _keys(client, ns, ""), 15, "the item and its chunks deleted")
