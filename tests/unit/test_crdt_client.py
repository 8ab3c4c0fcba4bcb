"""The client's CRDT layer with no network: the request builders of client/crdt/commands.py,
and the replicas of client/crdt/replica.py driven over an in-memory store that merges like
the node does (client/crdt/model.py): offline updates, sync, convergence, a failed sync
keeping its pending deltas, no double counting, persistence, the async driver."""

from __future__ import annotations

import asyncio
import os

import msgpack
import pytest

from statekeeper.client import AsyncClient, Client, InvalidRequest, NotFound, Timeout, Unavailable
from statekeeper.client.crdt import CounterReplica, MapReplica, ReplicaFileError, SetReplica
from statekeeper.client.crdt import model as m
from statekeeper.client.crdt.commands import CrdtAccessor, CrdtValue, get_request, merge_request
from statekeeper.client.errors import Conflict, CrdtTypeMismatch
from statekeeper.client.kv_requests import MISSING
from statekeeper.client.wire import MSGPACK

KEY = "shared/visits"


class MemoryCrdt:
    """Client-shaped, in memory: ``crdt_merge`` / ``crdt_get`` over a store that merges
    like apply. ``fail[method]`` is raised instead of running it (``after`` in
    ``fail_after``: run it, then raise: an answer lost after the merge landed)."""

    def __init__(self, ns: str = "default") -> None:
        self.ns = ns
        self.rev = 1
        self.store: dict[tuple[str, str], tuple[str, object, int, int]] = {}
        self.fail: dict[str, BaseException] = {}
        self.fail_after: dict[str, BaseException] = {}
        self.calls: list[str] = []

    def crdt_merge(self, key, type_name, state, *, ns=None, idempotency_key=None):
        self.calls.append("crdt_merge")
        if "crdt_merge" in self.fail:
            raise self.fail["crdt_merge"]
        ns = self.ns if ns is None else ns
        delta = m.decode(type_name, state)
        t, cur, mod, ver = self.store.get((ns, key), (type_name, m.empty(type_name), 0, 0))
        if t != type_name:
            raise CrdtTypeMismatch(f"{key} holds a {t}", code="crdt_type_mismatch",
                                   status=409, details={"found": t})  # fmt: skip
        merged = m.merge(t, cur, delta)
        changed = m.encode(t, merged) != m.encode(t, cur) or mod == 0
        if changed:
            self.rev += 1
            self.store[(ns, key)] = (t, merged, self.rev, ver + 1)
        result = (self.rev, changed, m.value(t, merged))
        if "crdt_merge" in self.fail_after:
            raise self.fail_after["crdt_merge"]
        from statekeeper.client.crdt.commands import CrdtMergeResult

        return CrdtMergeResult(*result)

    def crdt_get(self, key, *, state=False, ns=None, default=MISSING, **kw):
        self.calls.append("crdt_get")
        if "crdt_get" in self.fail:
            raise self.fail["crdt_get"]
        ns = self.ns if ns is None else ns
        got = self.store.get((ns, key))
        if got is None:
            if default is not MISSING:
                return default
            raise NotFound(f"{key} not found", code="not_found", status=404)
        t, s, mod, ver = got
        return CrdtValue(key, t, m.value(t, s), s if state else None, self.rev, mod, ver, ns)

    def value(self, key: str = KEY):
        t, s, _, _ = self.store[(self.ns, key)]
        return m.value(t, s)


class AsyncMemoryCrdt:
    """The same store behind coroutine methods (an AsyncClient's shape)."""

    def __init__(self, inner: MemoryCrdt) -> None:
        self.inner, self.ns = inner, inner.ns
        self.gate: asyncio.Event | None = None  # set: merges wait for it

    async def crdt_merge(self, *args, **kw):
        if self.gate is not None:
            await self.gate.wait()
        return self.inner.crdt_merge(*args, **kw)

    async def crdt_get(self, *args, **kw):
        return self.inner.crdt_get(*args, **kw)


# ---------------------------------------------------------------------- requests


def _answer(d: dict) -> tuple[int, str, bytes]:
    return 200, MSGPACK, msgpack.packb(d, use_bin_type=True)


def test_merge_request_encodes_a_state_and_parses_the_answer() -> None:
    delta = m.pncounter_add(m.empty("pncounter"), "r1", 5)
    req = merge_request("ns1", KEY, "pncounter", delta, "ik-1")
    assert (req.method, req.path, req.op, req.idempotency_key) == (
        "POST", "/v1/crdt/merge", "merge", "ik-1",
    )  # fmt: skip
    body = msgpack.unpackb(req.body, raw=False)
    assert body == {"ns": "ns1", "key": KEY, "type": "pncounter",
                    "state": m.encode("pncounter", delta), "idempotency_key": "ik-1"}  # fmt: skip
    r = req.parse(*_answer({"revision": 9, "changed": False, "value": 5}))
    assert (r.revision, r.changed, r.value) == (9, False, 5)
    raw = merge_request("ns1", KEY, "gcounter", b"\x80")  # bytes go as they are
    assert msgpack.unpackb(raw.body, raw=False)["state"] == b"\x80"
    assert raw.idempotency_key  # a fresh one


def test_merge_request_refuses_bad_types_and_states_before_sending() -> None:
    with pytest.raises(InvalidRequest, match="unknown CRDT type"):
        merge_request("ns", KEY, "counter", {})
    with pytest.raises(InvalidRequest) as e:
        merge_request("ns", KEY, "gcounter", {"r": -1})
    assert e.value.code == "invalid_argument"


def test_get_request_decodes_the_state_and_maps_errors() -> None:
    s = m.merge("orset", m.empty("orset"), m.orset_add(m.empty("orset"), "r", "x"))
    req = get_request("ns", KEY, state=True, consistency="serializable", min_revision=4)
    body = msgpack.unpackb(req.body, raw=False)
    assert body == {"ns": "ns", "key": KEY, "state": True, "consistency": "serializable",
                    "min_revision": 4}  # fmt: skip
    got = req.parse(*_answer({"revision": 7, "type": "orset", "value": ["x"],
                              "state": m.encode("orset", s), "mod_revision": 5, "version": 2}))  # fmt: skip
    assert got == CrdtValue(KEY, "orset", ["x"], s, 7, 5, 2, "ns")
    missing = (404, MSGPACK, msgpack.packb({"error": {"code": "not_found", "message": "no"}}))
    assert get_request("ns", KEY, default=None).parse(*missing) is None
    with pytest.raises(NotFound):
        get_request("ns", KEY).parse(*missing)
    clash = msgpack.packb({"error": {"code": "crdt_type_mismatch", "message": "a plain value",
                                     "found": "value"}})  # fmt: skip
    with pytest.raises(CrdtTypeMismatch) as e:
        get_request("ns", KEY).parse(409, MSGPACK, clash)
    assert isinstance(e.value, Conflict) and e.value.found == "value" and e.value.status == 409


def test_both_clients_have_the_crdt_accessor_and_operations() -> None:
    for cls in (Client, AsyncClient):
        assert isinstance(cls.crdt, property)
        assert callable(cls.crdt_merge) and callable(cls.crdt_get)
    with Client("http://127.0.0.1:1", ns="agents") as c:
        assert isinstance(c.crdt, CrdtAccessor) and c.crdt is c.crdt
        r = c.crdt.counter(KEY)
        assert (r.ns, r.key, r.type, r.value) == ("agents", KEY, "pncounter", 0)
        assert c.crdt.set(KEY, ns="x").ns == "x"


# ---------------------------------------------------------------------- replicas


def test_counter_replicas_update_offline_sync_and_converge() -> None:
    store = MemoryCrdt()
    acc = CrdtAccessor(store)
    a, b = acc.counter(KEY), acc.counter(KEY)
    assert a.replica_id != b.replica_id
    a.increment(3)
    a.decrement()
    b.increment(10)
    assert (a.value, b.value, store.calls) == (2, 10, [])  # local, no network
    ra = a.sync()
    assert (ra.sent, ra.changed, ra.value) == (True, True, 2)
    rb = b.sync()
    assert (rb.value, store.value()) == (12, 12)
    assert a.sync().value == 12 and not a.pending
    again = b.sync(full=True)  # the whole state once more: nothing changes
    assert (again.sent, again.changed, again.value, store.value()) == (True, False, 12, 12)
    store.calls.clear()
    assert a.sync().sent is False and store.calls == ["crdt_get"]  # nothing pending: pull only


def test_a_failed_sync_keeps_its_pending_delta() -> None:
    store = MemoryCrdt()
    c = CounterReplica(store, KEY, replica_id="r1")
    c.increment(4)
    store.fail["crdt_merge"] = Unavailable("down", code="connection_failed")
    with pytest.raises(Unavailable):
        c.sync()
    assert c.pending and c.value == 4 and (store.ns, KEY) not in store.store
    c.increment(1)  # still works offline
    del store.fail["crdt_merge"]
    assert c.sync().value == 5 and not c.pending and store.value() == 5


def test_an_unknown_merge_that_landed_is_not_counted_twice() -> None:
    store = MemoryCrdt()
    c = CounterReplica(store, KEY, replica_id="r1")
    c.increment(7)
    store.fail_after["crdt_merge"] = Timeout("lost answer", code="client_timeout")
    with pytest.raises(Timeout):
        c.sync()
    assert c.pending and store.value() == 7  # it landed; the replica cannot know
    del store.fail_after["crdt_merge"]
    r = c.sync()  # sends it again
    assert (r.sent, r.changed, r.value, store.value()) == (True, False, 7, 7)


def test_a_failed_pull_after_a_merge_leaves_nothing_pending() -> None:
    store = MemoryCrdt()
    c = CounterReplica(store, KEY)
    c.increment(2)
    store.fail["crdt_get"] = Unavailable("down", code="unavailable")
    with pytest.raises(Unavailable):
        c.sync()
    assert not c.pending and store.value() == 2


def test_updates_during_a_failing_sync_stay_pending_with_the_shipped_ones() -> None:
    store = MemoryCrdt()
    c = CounterReplica(store, KEY, replica_id="r1")
    c.increment(2)
    plan = c._sync_plan(full=False)
    step = next(plan)  # the merge is "on the wire" now
    assert step.method == "crdt_merge" and c.pending
    c.increment(5)  # another thread increments meanwhile
    with pytest.raises(Unavailable):
        plan.throw(Unavailable("down", code="unavailable"))
    assert c.sync().value == 7 and store.value() == 7
    with pytest.raises(RuntimeError, match="already running"):
        p1 = c._sync_plan(full=False)
        c.increment(1)
        next(p1)
        next(c._sync_plan(full=False))


def test_type_mismatch_keeps_the_deltas_and_bad_updates_change_nothing() -> None:
    store = MemoryCrdt()
    g = CrdtAccessor(store).gcounter(KEY)
    g.increment(1)
    g.sync()
    c = CounterReplica(store, KEY)
    c.increment(1)
    with pytest.raises(CrdtTypeMismatch):
        c.sync()
    assert c.pending
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InvalidRequest):
            c.increment(bad)
    s = SetReplica(store, "s")
    before = m.encode("orset", s.state)
    with pytest.raises(InvalidRequest):
        s.add(True)  # a bool is no element
    assert m.encode("orset", s.state) == before and not s.pending


def test_set_register_mvregister_and_map_replicas() -> None:
    store = MemoryCrdt()
    acc = CrdtAccessor(store)
    s1, s2 = acc.set("found"), acc.set("found")
    s1.add("a")
    s1.add("b")
    s1.sync()
    s2.sync()
    s2.remove("a")  # removes the add it saw
    s1.add("a")  # concurrent add: wins
    s2.add(3)
    for r in (s1, s2, s1):
        r.sync()
    assert s1.value == s2.value == store.value("found") == [3, "a", "b"]  # ints sort first
    assert "a" in s1 and len(s2) == 3
    now = [1_000]
    r1 = acc.register("plan", clock=lambda: now[0])
    r2 = acc.register("plan", clock=lambda: now[0] - 500)  # a clock behind
    r1.set({"step": 1})
    r1.sync()
    r2.sync()
    r2.set({"step": 2})  # it saw step 1: wins although its clock is behind
    r2.sync()
    assert r1.sync().value == {"step": 2} == store.value("plan")
    v1, v2 = acc.mvregister("doc"), acc.mvregister("doc")
    v1.set("x")
    v2.set("y")
    for r in (v1, v2, v1):
        r.sync()
    assert sorted(v1.values) == ["x", "y"]
    v1.set("z")
    v1.sync()
    v2.sync()
    assert v2.values == ["z"]
    mp = acc.map("agent")
    mp.increment("hits", 2)
    mp.add("tags", "t1")
    mp.set("owner", "me")
    mp.set_mv("note", "n")
    mp.remove("note")
    assert mp.value == {"hits": 2, "tags": ["t1"], "owner": "me"}
    with pytest.raises(InvalidRequest):
        mp.set("hits", 3)  # a counter field
    mp.sync()
    other = acc.map("agent")
    other.sync()
    other.discard("tags", "t1")
    other.decrement("hits")
    other.sync()
    assert mp.sync().value == {"hits": 1, "tags": [], "owner": "me"} == store.value("agent")
    assert mp.get("owner") == "me" and mp.get("nope", 0) == 0


# ---------------------------------------------------------------------- persistence


def test_persistence_round_trip(tmp_path) -> None:
    store = MemoryCrdt()
    path = tmp_path / "visits.replica"
    c = CounterReplica(store, KEY, path=path)
    assert path.exists()  # created empty, with its id
    c.increment(3)
    again = CounterReplica(store, KEY, path=path)  # a restart
    assert (again.replica_id, again.value, again.pending) == (c.replica_id, 3, True)
    again.increment(2)
    again.sync()
    back = CounterReplica(store, KEY, path=path)
    assert (back.value, back.pending, store.value()) == (5, False, 5)
    assert sorted(os.listdir(tmp_path)) == ["visits.replica"]  # no temporary file left
    d = msgpack.unpackb(path.read_bytes(), raw=False)
    assert d["replica_id"] == c.replica_id and d["format"] == "statekeeper-crdt-replica"
    manual = MapReplica(store, "m", path=tmp_path / "m", autosave=False)
    manual.set("k", 1)
    assert MapReplica(store, "m", path=tmp_path / "m").value == {}  # not saved yet
    manual.save()
    assert MapReplica(store, "m", path=tmp_path / "m").value == {"k": 1}


def test_a_failed_sync_survives_a_restart_from_the_file(tmp_path) -> None:
    store = MemoryCrdt()
    path = tmp_path / "r"
    c = CounterReplica(store, KEY, path=path)
    c.increment(4)
    store.fail["crdt_merge"] = Unavailable("down", code="unavailable")
    with pytest.raises(Unavailable):
        c.sync()
    del store.fail["crdt_merge"]
    restarted = CounterReplica(store, KEY, path=path)
    assert restarted.pending and restarted.sync().value == 4 == store.value()


def test_replica_files_are_checked(tmp_path) -> None:
    store = MemoryCrdt()
    path = tmp_path / "r"
    CounterReplica(store, KEY, path=path, replica_id="r1")
    with pytest.raises(ReplicaFileError, match="belongs to replica 'r1'"):
        CounterReplica(store, KEY, path=path, replica_id="r2")
    with pytest.raises(ReplicaFileError, match="key"):
        CounterReplica(store, "other", path=path)
    with pytest.raises(ReplicaFileError, match="type"):
        SetReplica(store, KEY, path=path)
    path.write_bytes(b"\xc1junk")
    with pytest.raises(ReplicaFileError, match="not a replica file"):
        CounterReplica(store, KEY, path=path)
    assert CounterReplica(store, KEY, path=tmp_path / "r1", replica_id="r1").replica_id == "r1"


# ---------------------------------------------------------------------- async


async def test_async_replicas_sync_with_await() -> None:
    inner = MemoryCrdt()
    store = AsyncMemoryCrdt(inner)
    a = CounterReplica(store, KEY)
    b = CrdtAccessor(store).counter(KEY)
    a.increment(2)
    b.increment(3)
    assert (await a.sync()).value == 2
    assert (await b.sync()).value == 5
    assert (await a.sync()).value == 5 == inner.value()


async def test_a_cancelled_async_sync_keeps_its_deltas() -> None:
    inner = MemoryCrdt()
    store = AsyncMemoryCrdt(inner)
    store.gate = asyncio.Event()
    c = CounterReplica(store, KEY)
    c.increment(6)
    task = asyncio.create_task(c.sync())
    await asyncio.sleep(0.01)
    c.increment(1)  # while the merge waits
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert c.pending
    store.gate.set()
    assert (await c.sync()).value == 7 == inner.value()
