"""StatekeeperStore's sans-IO core with no network: key escaping, the plan's requests (one
read batch, one write txn, splitting over the limits), TTL visibility / refresh / sweep
with a fake clock, semantic ranking, and the same differential test as
tests/integration/test_langgraph_store.py (generated batches against LangGraph's
InMemoryStore) over the in-memory fake client of tests/unit/test_agent_fake.py.

The op strategies and the InMemoryStore reference (:func:`model_batch`) live here and are
imported by the integration test."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from statekeeper.client.errors import InvalidRequest
from statekeeper.client.langgraph.store import StatekeeperStore
from statekeeper.client.langgraph.store_core import Limits
from statekeeper.client.langgraph.store_keys import item_key, namespace_prefix, part, unpart
from tests.unit.test_agent_fake import AsyncMemoryClient, MemoryClient

# -- strategies (shared with the integration test) ----------------------------------------
# Labels and keys with "/" and "%" in them check the escaping: ("a/b",) is not ("a", "b").

LABELS = ["a", "b", "a/b", "%2F", "κ"]
KEYS = ["k", "k2", "a/b", "%", "", "κ/λ"]
_few = st.lists(st.sampled_from(LABELS[:3]), min_size=1, max_size=2).map(tuple)
namespaces = st.one_of(_few, _few, _few, st.lists(st.sampled_from(LABELS), min_size=1,
                                                  max_size=3).map(tuple))
keys = st.sampled_from(KEYS)
values = st.fixed_dictionaries(
    {"n": st.integers(0, 4), "tag": st.sampled_from(["red", "blue"])},
    optional={
        "sub": st.fixed_dictionaries({"x": st.integers(0, 2)}),
        "list": st.lists(st.integers(0, 1), max_size=2),
        "f": st.sampled_from([1.5, -0.25, 3]),
    },
)
FILTER_PARTS: list[dict[str, Any]] = [
    {"tag": "red"},
    {"tag": {"$eq": "blue"}},
    {"tag": {"$ne": "red"}},
    {"n": {"$gt": 1}},
    {"n": {"$gte": 2, "$lte": 3}},
    {"n": {"$lt": 2}},
    {"n": 1},
    {"sub": {"x": 1}},
    {"list": [0, 1]},
    {"f": {"$ne": 3}},
]
filters = st.one_of(
    st.none(),
    st.none(),
    st.lists(st.sampled_from(FILTER_PARTS), min_size=1, max_size=2).map(
        lambda parts: {k: v for p in parts for k, v in p.items()}
    ),
)

Known = list[tuple[tuple[str, ...], str]]


def _masked(ns: tuple[str, ...]) -> st.SearchStrategy[tuple[str, ...]]:
    """``ns`` with some labels turned into "*"."""
    masks = st.lists(st.booleans(), min_size=len(ns), max_size=len(ns))
    return masks.map(lambda m: tuple("*" if w else label for label, w in zip(ns, m, strict=True)))


def _cut(kind: str, path: tuple[str, ...], n: int) -> MatchCondition:
    n = max(1, min(n, len(path)))
    return MatchCondition(kind, path[:n] if kind == "prefix" else path[-n:])


class OpGen:
    """The op strategies of one example. ``known`` (the (namespace, key) pairs put so far,
    grown by the caller) is read at draw time, so the strategies are built once."""

    def __init__(self) -> None:
        self.known: Known = []
        known_target = self._pick(lambda: self.known)
        targets = st.one_of(known_target, known_target, st.tuples(namespaces, keys))
        cut = self._pick(lambda: sorted({ns[:i] for ns, _ in self.known
                                         for i in range(len(ns) + 1)}))
        prefixes = st.one_of(st.just(()), cut, cut, cut,
                             st.lists(st.sampled_from(LABELS), max_size=2).map(tuple))
        paths = st.one_of(
            st.lists(st.sampled_from([*LABELS, "*"]), min_size=1, max_size=3).map(tuple),
            self._pick(lambda: [ns for ns, _ in self.known]).flatmap(_masked),
        )
        condition = st.builds(_cut, st.sampled_from(["prefix", "suffix"]), paths,
                              st.integers(1, 3))
        put = st.builds(lambda t, v: PutOp(t[0], t[1], v), targets, values)
        search = st.builds(SearchOp, prefixes, filters, st.integers(0, 6),
                           st.sampled_from([0, 0, 0, 1, 3]), query=st.none(),
                           refresh_ttl=st.booleans())
        listing = st.builds(
            ListNamespacesOp,
            st.lists(condition, max_size=2).map(tuple),
            st.one_of(st.none(), st.integers(1, 3)),
            st.sampled_from([1, 3, 100]),
            st.integers(0, 2),
        )
        self.first = st.lists(
            st.builds(lambda t, v: PutOp(t[0], t[1], v), st.tuples(namespaces, keys), values),
            min_size=3, max_size=8)
        self.later = st.lists(st.one_of(
            put,
            put,
            targets.map(lambda t: PutOp(t[0], t[1], None)),
            st.builds(lambda t, r: GetOp(t[0], t[1], r), targets, st.booleans()),
            search,
            search,
            listing,
        ), min_size=1, max_size=4)

    @staticmethod
    def _pick(seq: Any) -> st.SearchStrategy[Any]:
        return st.integers(0, 63).map(lambda i: seq()[i % len(seq())])


# After every generated batch, one more batch checks the whole state: every filter over
# the whole store, per first label, and the namespaces at each depth (one range scan).
PROBE: list[Any] = [
    *(SearchOp((), f, limit=100) for f in [None, *FILTER_PARTS]),
    *(SearchOp((label,), limit=100) for label in LABELS[:3]),
    *(ListNamespacesOp(max_depth=d) for d in (None, 1, 2)),
]


def differential(data: st.DataObject, run: Any, max_batches: int = 12) -> int:
    """Draw 2..``max_batches`` batches (1-4 ops; the first, 3-8 puts only), run each with
    ``run(ops)`` and with InMemoryStore, and require the same results, then the same for
    :data:`PROBE`. Returns the number of ops run."""
    mem = InMemoryStore()
    gen = OpGen()
    count = 0
    for _ in range(data.draw(st.integers(2, max_batches), label="batches")):
        ops = data.draw(gen.later if gen.known else gen.first, label="ops")
        assert canon(run(ops)) == canon(model_batch(mem, ops)), ops
        assert canon(run(PROBE)) == canon(model_batch(mem, PROBE)), "probe"
        gen.known.extend((op.namespace, op.key) for op in ops
                         if isinstance(op, PutOp) and (op.namespace, op.key) not in gen.known)
        count += len(ops) + len(PROBE)
    return count


# -- the reference -------------------------------------------------------------------------


def _prune(mem: InMemoryStore) -> None:
    """Forget the namespaces InMemoryStore keeps empty (after deletes, or created by a get
    that only looked): StatekeeperStore lists namespaces that hold items."""
    for ns in [ns for ns, items in mem._data.items() if not items]:
        del mem._data[ns]


def _model_read(mem: InMemoryStore, op: Any) -> Any:
    if isinstance(op, SearchOp):
        # InMemoryStore decides which items match; the order is StatekeeperStore's
        # documented one (key order), then offset and limit.
        everything = op._replace(limit=10**9, offset=0)
        found = mem.batch([everything])[0]
        found.sort(key=lambda it: item_key(it.namespace, it.key))
        return found[op.offset : op.offset + op.limit]
    _prune(mem)
    return mem.batch([op])[0]


def model_batch(mem: InMemoryStore, ops: list[Any]) -> list[Any]:
    """What InMemoryStore answers for one batch, read ops seeing the state before the
    batch's puts (as in its own batch), with the documented differences applied."""
    results = [None if isinstance(op, PutOp) else _model_read(mem, op) for op in ops]
    puts = [op for op in ops if isinstance(op, PutOp)]
    if puts:
        mem.batch(puts)
    return results


def canon(result: Any) -> Any:
    """A result without timestamps: items as (namespace, key, value)."""
    if isinstance(result, list):
        return [canon(r) for r in result]
    if hasattr(result, "key") and hasattr(result, "value"):
        return (tuple(result.namespace), result.key, result.value)
    return result


# -- keys ----------------------------------------------------------------------------------


@given(st.text())
def test_part_round_trips_and_never_holds_a_slash(text: str) -> None:
    assert unpart(part(text)) == text
    assert "/" not in part(text) and "\x00" not in part(text)


@given(st.lists(st.text(min_size=1), max_size=3), st.lists(st.text(min_size=1), max_size=3),
       st.text())
def test_a_namespace_prefix_selects_exactly_its_namespaces(prefix, ns, key) -> None:
    selected = item_key(ns, key).startswith(namespace_prefix(prefix))
    assert selected == (tuple(ns[: len(prefix)]) == tuple(prefix))


# -- the differential test over the fake ---------------------------------------------------


class RecordingClient(MemoryClient):
    """MemoryClient that also keeps the raw success ops of every txn (to see ttl_ms)."""

    def __init__(self) -> None:
        super().__init__("langgraph-store")
        self.txn_ops: list[dict[str, Any]] = []

    def txn(self, compare, success, failure=(), *, ns=None, idempotency_key=None):
        self.txn_ops.extend(success)
        return super().txn(compare, success, failure, ns=ns, idempotency_key=idempotency_key)

    def requests_by_kind(self) -> list[str]:
        return [name for name, _, _ in self.calls]


def fake_store(**kw: Any) -> tuple[StatekeeperStore, RecordingClient]:
    c = RecordingClient()
    return StatekeeperStore(c, **kw), c  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_same_results_as_in_memory_store(data: st.DataObject) -> None:
    store, _ = fake_store(page_size=2)  # small pages: scans continue over several
    differential(data, store.batch)


# -- requests ------------------------------------------------------------------------------


def test_one_read_request_and_one_write_txn_per_batch() -> None:
    store, c = fake_store()
    store.batch([PutOp(("a",), "k", {"n": 1}), PutOp(("b",), "k", {"n": 2})])
    c.calls.clear()
    out = store.batch([
        GetOp(("a",), "k"),
        GetOp(("a",), "k"),
        SearchOp(("b",)),
        ListNamespacesOp(),
        PutOp(("a",), "k", {"n": 3}),
        PutOp(("c",), "k", {"n": 4}),
        PutOp(("a",), "k", {"n": 5}),  # the last put of (a, k) wins
    ])
    assert c.requests_by_kind() == ["batch", "txn"]
    assert out[0].value == {"n": 1} and out[1].value == {"n": 1}  # reads before the puts
    assert [i.value for i in out[2]] == [{"n": 2}]
    assert out[3] == [("a",), ("b",)]
    assert store.get(("a",), "k").value == {"n": 5}
    # each put with a delete of the item's chunks (store_chunks.py), in the same txn
    assert [op["op"] for op in c.txn_ops[-4:]] == ["put", "delete", "put", "delete"]
    assert c.txn_ops[-1] == {"op": "delete", "key": "chunk/item/c/k%/", "prefix": True}


def test_puts_over_the_request_limits_are_split_into_several_txns() -> None:
    store, c = fake_store(limits=Limits(request_ops=10, request_bytes=10**9))
    c.calls.clear()
    store.batch([PutOp(("a",), f"k{i:02d}", {"i": i}) for i in range(25)])
    assert c.requests_by_kind() == ["txn"] * 5  # 5 puts (and their chunk deletes) per txn
    assert len(store.search(("a",), limit=100)) == 25
    small, c2 = fake_store(limits=Limits(request_ops=1000, request_bytes=2000))
    c2.calls.clear()
    small.batch([PutOp(("a",), f"k{i}", {"pad": "x" * 300}) for i in range(12)])
    assert c2.requests_by_kind() == ["txn"] * 4  # 3 records of ~450 bytes per 2000
    assert len(small.search(("a",), limit=100)) == 12


def test_refreshes_are_packed_into_one_batch_request_after_the_reads() -> None:
    clock = Clock()
    store, c = fake_store(clock=clock, ttl={"default_ttl": 5})
    store.batch([PutOp(("a",), f"k{i}", {"i": i}, ttl=5) for i in range(4)])
    c.calls.clear()
    assert len(store.search(("a",))) == 4
    assert c.requests_by_kind() == ["batch", "batch"]  # the reads; four guarded rewrites
    assert len(c.txn_ops) == 12  # 4 puts with their chunk deletes, 4 rewrites


def test_a_value_over_the_limit_fails_before_anything_is_sent() -> None:
    """Over what one txn's chunk compares allow (here 12 chunks of 1 KiB)."""
    store, c = fake_store(limits=Limits(max_value_bytes=1024, request_ops=20))
    with pytest.raises(InvalidRequest) as e:
        store.batch([PutOp(("a",), "ok", {"n": 1}), PutOp(("a",), "big", {"x": "y" * 20_000})])
    assert e.value.code == "value_too_large" and "big" in str(e.value)
    with pytest.raises(TypeError, match="JSON"):
        store.put(("a",), "bad", {"x": object()})
    with pytest.raises(InvalidRequest) as e2:
        store.put(("a",), "k" * 5000, {"n": 1})
    assert e2.value.code == "key_too_large"
    assert c.calls == [] and store.get(("a",), "ok") is None


def test_invalid_ops_are_refused() -> None:
    store, _ = fake_store()
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("a.b",), "k")])
    with pytest.raises(ValueError, match="unknown"):
        store.batch(["nope"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="ttl"):
        store.batch([PutOp(("a",), "k", {"n": 1}, ttl=0)])


def test_plain_search_reads_only_the_pages_it_needs() -> None:
    store, c = fake_store(page_size=3)
    store.batch([PutOp(("a",), f"k{i:02d}", {"i": i}) for i in range(30)])
    c.calls.clear()
    got = store.search(("a",), limit=2, offset=1)
    assert [i.key for i in got] == ["k01", "k02"]
    assert c.requests_by_kind() == ["batch"]  # one page of min(3, 2 + 1 + 2) rows
    c.calls.clear()
    assert len(store.search(("a",), filter={"i": {"$gte": 0}}, limit=100)) == 30
    assert c.requests_by_kind() == ["batch"] * 10  # a filter reads every page


# -- TTL with a fake clock -------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


def test_ttl_hides_expired_items_and_puts_them_on_a_lease() -> None:
    clock = Clock()
    store, c = fake_store(clock=clock, ttl={"refresh_on_read": False})
    store.put(("a",), "short", {"n": 1}, ttl=0.01)  # 0.6 s: the lease is the 2 s minimum
    store.put(("a",), "hour", {"n": 2}, ttl=60)
    store.put(("a",), "forever", {"n": 3})
    ttl_ms = {json.loads(op["value"])["key"]: op.get("ttl_ms") for op in c.txn_ops if op["op"] == "put"}
    assert ttl_ms == {"short": 2000, "hour": 3_600_000, "forever": None}
    clock.t += 1
    assert store.get(("a",), "short") is None
    assert [i.key for i in store.search(("a",))] == ["forever", "hour"]
    clock.t += 3600
    assert [i.key for i in store.search(("a",))] == ["forever"]
    store.delete(("a",), "forever")
    assert store.list_namespaces() == []  # expired items hold no namespace


def test_refresh_on_read_rewrites_the_expiry_guarded_by_the_revision_read() -> None:
    clock = Clock()
    store, c = fake_store(clock=clock, ttl={"default_ttl": 1.0})
    store.put(("a",), "k", {"n": 1})
    for _ in range(5):  # read every 40 s: never expires
        clock.t += 40
        assert store.get(("a",), "k").value == {"n": 1}
    assert store.search(("a",))[0].key == "k"
    clock.t += 40
    assert store.get(("a",), "k", refresh_ttl=False) is not None
    clock.t += 30  # 70 s since the last refresh
    assert store.get(("a",), "k") is None
    # A refresh loses against a concurrent put: it is guarded by the mod_revision read.
    store.put(("a",), "k", {"n": 2})
    clock.t += 10
    plan = store.core.plan(store.core.prepare([GetOp(("a",), "k")]), [], {}, store._now())
    reads = next(plan)
    refresh = plan.send(run_batch(c, reads))
    assert refresh.method == "txn" and refresh.args[0][0]["target"] == "mod_revision"
    StatekeeperStore(c, clock=clock).put(("a",), "k", {"n": 3})  # another writer, no TTL
    assert not c.txn(*refresh.args, **refresh.kwargs).succeeded
    with pytest.raises(StopIteration) as done:
        plan.send(None)
    assert done.value.value[0].value == {"n": 2}  # what the read saw
    clock.t += 3600
    assert store.get(("a",), "k").value == {"n": 3}  # the other put stays, without TTL


def run_batch(c: MemoryClient, step: Any) -> list[Any]:
    b = c.batch(ns=step.ns)
    for one in step.calls:
        getattr(b, one.method)(*one.args, **one.kwargs)
    return b.execute()


def test_ttl_over_a_day_has_no_lease_and_is_deleted_by_reads_and_sweeps() -> None:
    clock = Clock()
    store, c = fake_store(clock=clock, ttl={"refresh_on_read": False})
    store.put(("a",), "long", {"n": 1}, ttl=2 * 1440)
    store.put(("a",), "long2", {"n": 2}, ttl=2 * 1440)
    store.put(("b",), "long3", {"n": 3}, ttl=2 * 1440)
    assert all("ttl_ms" not in op for op in c.txn_ops)
    clock.t += 3 * 86400
    assert store.get(("a",), "long") is None
    assert c._at(c.ns, item_key(("a",), "long"), None) is None  # that read deleted it
    assert store.sweep_ttl() == 2
    assert c._keys(c.ns, None) == []


# -- semantic search -------------------------------------------------------------------------


def toy_embed(texts: list[str]) -> list[list[float]]:
    """8 dims: letter counts by (code point mod 7), plus the length; deterministic."""
    out = []
    for t in texts:
        v = [0.0] * 8
        for ch in t:
            v[ord(ch) % 7] += 1.0
        v[7] = len(t) / 4
        out.append(v)
    return out


INDEX = {"dims": 8, "embed": toy_embed, "fields": ["text"]}
DOCS = [
    (("docs", "a"), "1", {"text": "apples and pears", "n": 1}, None),
    (("docs", "a"), "2", {"text": "zebra crossing", "n": 2}, None),
    (("docs", "b"), "3", {"text": "pear tree", "n": 3}, None),
    (("docs", "b"), "4", {"text": "quantum flux", "n": 4}, None),
    (("docs",), "5", {"text": "no vectors here", "n": 5}, False),
    (("docs",), "6", {"other": "no text field", "n": 6}, None),
    (("docs", "c"), "7", {"text": "x", "tags": ["banana split", "kiwi"], "n": 7}, ["tags[*]"]),
]


def load(store: Any) -> None:
    for ns, key, value, index in DOCS:  # one per batch: InMemoryStore fails on a text twice
        store.put(ns, key, value, index=index)


def ranked(results: list[Any]) -> tuple[list[tuple[str, float]], set[str]]:
    scored = [(r.key, r.score) for r in results if r.score is not None]
    return scored, {r.key for r in results if r.score is None}


@pytest.mark.parametrize("query", ["pear", "zebra", "banana", "tree of apples", "qq"])
@pytest.mark.parametrize("flt", [None, {"n": {"$gte": 3}}])
def test_semantic_ranking_matches_in_memory_store(query: str, flt: Any) -> None:
    store, _ = fake_store(index=INDEX)
    mem = InMemoryStore(index=INDEX)
    load(store)
    load(mem)
    ours = store.search(("docs",), query=query, filter=flt, limit=20)
    theirs = mem.search(("docs",), query=query, filter=flt, limit=20)
    (o_scored, o_rest), (t_scored, t_rest) = ranked(ours), ranked(theirs)
    assert [k for k, _ in o_scored] == [k for k, _ in t_scored]
    assert [s for _, s in o_scored] == pytest.approx([s for _, s in t_scored], abs=1e-9)
    assert o_rest == t_rest
    top = store.search(("docs",), query=query, filter=flt, limit=2, offset=1)
    assert [r.key for r in top] == [k for k, _ in o_scored][1:3]


def test_vectors_are_stored_with_their_dims_and_a_mismatch_is_refused() -> None:
    store, c = fake_store(index=INDEX)
    load(store)
    rec = json.loads(c._at(c.ns, item_key(("docs", "a"), "1"), None).value)
    assert rec["dims"] == 8 and set(rec["vectors"]) == {"text"}
    multi = json.loads(c._at(c.ns, item_key(("docs", "c"), "7"), None).value)
    assert set(multi["vectors"]) == {"tags[*].0", "tags[*].1"}
    narrow = StatekeeperStore(c, index={"dims": 4, "embed": lambda ts: [[1.0] * 4 for _ in ts]})
    with pytest.raises(ValueError, match="8 dimensions but this store's index has 4"):
        narrow.search(("docs",), query="pear")
    assert len(narrow.search(("docs",))) == 7  # without a query nothing is ranked
    bad = StatekeeperStore(c, index={"dims": 8, "embed": lambda ts: [[1.0] * 3 for _ in ts]})
    with pytest.raises(ValueError, match="3 dimensions"):
        bad.put(("docs",), "9", {"text": "t"})
    assert c._at(c.ns, item_key(("docs",), "9"), None) is None


def test_abatch_over_an_async_client() -> None:
    async def go() -> None:
        inner = RecordingClient()
        store = StatekeeperStore(aclient=AsyncMemoryClient(inner), index=INDEX)  # type: ignore[arg-type]
        mem = InMemoryStore(index=INDEX)
        for ns, key, value, index in DOCS:
            await store.aput(ns, key, value, index=index)
            await mem.aput(ns, key, value, index=index)
        ours = await store.asearch(("docs",), query="pear", limit=3)
        theirs = await mem.asearch(("docs",), query="pear", limit=3)
        assert [r.key for r in ours] == [r.key for r in theirs]
        assert await store.alist_namespaces(max_depth=2) == [("docs",), ("docs", "a"),
                                                             ("docs", "b"), ("docs", "c")]
        with pytest.raises(RuntimeError, match="AsyncClient"):
            store.get(("docs",), "5")

    asyncio.run(go())
