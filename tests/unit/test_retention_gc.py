"""node/tasks/retention.py (the leader's retention GC task) with injected leadership, clocks,
planner and proposer; the last test runs it against a real state machine whose entries
are stamped by a fake leader clock. No network."""

from __future__ import annotations

import asyncio

import msgpack
import pytest

from statekeeper.node.errors import OpError
from statekeeper.node.store.retention_select import load_policies, plan_gc, select
from statekeeper.node.tasks.retention import RetentionGC
from tests.unit.store.util import Node, put

MIN = 60_000


def gc_op(*keys) -> dict:
    return {"op": "gc", "ns": "default", "deletes": [[k, 1] for k in keys], "truncates": []}


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "db")
    yield n
    n.sm.close()


def policy(prefix, **rules) -> dict:
    return {"op": "retention_set", "prefix": prefix, "target": "keys", **rules}


class Fake:
    """Leadership, monotonic time, a planner and a recording proposer."""

    def __init__(self) -> None:
        self.leader, self.term, self.mono, self.now = True, 1, 0.0, 10_000
        self.ops: list[dict] = []
        self.planned_at: list[int] = []
        self.limits: list[int] = []  # the max_ops each plan was asked for
        self.proposed: list[dict] = []
        self.fail: OpError | None = None

    def gc(self, **kw) -> RetentionGC:
        kw.setdefault("grace", 1.7)
        return RetentionGC(
            leadership=lambda: (self.leader, self.term),
            plan=self.plan,
            now_ms=lambda: self.now,
            propose=self.propose,
            monotonic=lambda: self.mono,
            **kw,
        )

    async def plan(self, now_ms: int, max_ops: int) -> list[dict]:
        self.planned_at.append(now_ms)
        self.limits.append(max_ops)
        return list(self.ops)

    async def propose(self, op: dict) -> dict:
        if self.fail is not None:
            raise self.fail
        self.proposed.append(op)
        return {"revision": 1, "deleted": len(op["deletes"]), "skipped": 0, "removed": 0}


async def test_only_a_leader_past_its_grace_plans_and_proposes():
    f = Fake()
    f.ops = [gc_op("a"), gc_op("b", "c")]
    g = f.gc()
    f.leader = False
    assert await g.tick() == 0 and f.planned_at == []
    f.leader = True
    assert await g.tick() == 0  # just became leader: the grace starts now
    f.mono = 1.69
    assert await g.tick() == 0 and f.planned_at == []
    f.mono = 1.7
    assert await g.tick() == 2 and f.planned_at == [10_000]
    assert f.proposed == f.ops and (g.proposals, g.deleted) == (2, 3)


async def test_a_new_term_restarts_the_grace_and_max_ops_bounds_a_tick():
    f = Fake()
    f.ops = [gc_op(str(i)) for i in range(5)]
    g = f.gc(max_ops=2)
    await g.tick()
    f.mono = 2.0
    assert await g.tick() == 2
    f.term = 2
    assert await g.tick() == 0
    f.mono = 3.7
    assert await g.tick() == 2 and len(f.proposed) == 4


async def test_a_failed_proposal_stops_the_tick_and_the_next_tick_retries():
    f = Fake()
    f.ops = [gc_op("a"), gc_op("b")]
    g = f.gc()
    f.mono = 5.0
    await g.tick()  # starts the grace
    f.mono = 7.0
    f.fail = OpError("timeout", "lost")
    assert await g.tick() == 0 and f.proposed == []
    f.fail = None
    assert await g.tick() == 2


async def test_against_a_state_machine(tmp_path):
    """keep_last 3 on agent checkpoints: the leader's ticks leave the 3 newest."""
    node = Node(tmp_path / "db")
    try:
        node.one({"op": "retention_set", "prefix": "agent/", "target": "keys", "keep_last": 3})
        for n in range(1, 11):
            node.put(f"agent/a1/ckpt/{n:012d}", b"state %d" % n)

        async def plan(now_ms: int, max_ops: int) -> list[dict]:
            with node.sm.read_view() as view:
                return plan_gc(view, now_ms, max_items=4, max_ops=max_ops)

        async def propose(op: dict) -> dict:
            node.index += 1
            entry = msgpack.packb({"t": 2_000, "ops": [op]}, use_bin_type=True)
            (result,) = node.sm.apply(node.index, entry)
            return result

        g = RetentionGC(
            leadership=lambda: (True, 1),
            plan=plan,
            now_ms=lambda: 2_000,
            propose=propose,
            grace=0,
            monotonic=lambda: 0.0,
        )
        assert await g.tick() == 2  # 7 deletes in ops of at most 4
        keys = [kv["key"] for kv in node.sm.range("default")["kvs"]]
        assert keys == [f"agent/a1/ckpt/{n:012d}" for n in (8, 9, 10)]
        assert await g.tick() == 0 and g.deleted == 7
    finally:
        node.sm.close()


async def test_the_plan_is_asked_for_at_most_max_ops():
    """Planning stops at what one tick can propose (retention_select.plan_gc max_ops)."""
    f = Fake()
    f.ops = [gc_op(str(i)) for i in range(5)]
    g = f.gc(max_ops=3)
    f.mono = 1.7
    await g.tick()
    f.mono = 3.4
    assert await g.tick() == 3 and f.limits == [3]


class Stop(Exception):
    pass


async def run_until(g: RetentionGC, f: Fake, ticks: int) -> list[float]:
    """run() with a sleep that records its waits; stops after `ticks` sleeps."""
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)
        if len(waits) >= ticks:
            raise Stop

    g._sleep = sleep
    with pytest.raises(Stop):
        await g.run()
    return waits


async def test_a_tick_that_hit_its_cap_runs_again_at_once():
    f = Fake()
    f.ops = [gc_op(str(i)) for i in range(5)]
    g = f.gc(max_ops=2, interval=10.0, grace=0)
    assert await run_until(g, f, 3) == [0, 0, 0]  # a backlog: no interval between ticks
    assert len(f.proposed) == 6
    f.ops = [gc_op("a")]  # below the cap: the backlog is gone
    assert await run_until(g, f, 1) == [10.0]


async def test_a_capped_tick_that_deleted_nothing_waits_the_interval():
    f = Fake()
    f.ops = [{**gc_op(), "deletes": []} for _ in range(3)]  # a stale plan: nothing applied
    g = f.gc(max_ops=2, interval=10.0, grace=0)
    assert await run_until(g, f, 2) == [10.0, 10.0]
    f.ops, f.fail = [gc_op(str(i)) for i in range(3)], OpError("timeout", "lost")
    assert await run_until(g, f, 1) == [10.0]  # failed: planned again after the interval
    f.leader = False
    assert await run_until(g, f, 1) == [10.0]  # a follower never spins


async def test_a_few_gc_ops_are_in_flight_at_once():
    f = Fake()
    f.ops = [gc_op(str(i)) for i in range(7)]
    flying, most = 0, 0
    release = asyncio.Event()

    async def propose(op: dict) -> dict:
        nonlocal flying, most
        flying += 1
        most = max(most, flying)
        await release.wait()
        flying -= 1
        return await Fake.propose(f, op)

    g = f.gc(grace=0, inflight=3)
    g._propose = propose
    task = asyncio.ensure_future(g.tick())
    for _ in range(5):
        await asyncio.sleep(0)
    assert flying == 3  # the first wave of 3, together (one raft entry in the proposer)
    release.set()
    assert await task == 7 and most == 3 and f.proposed == f.ops


async def test_a_failure_in_a_wave_stops_the_tick_after_that_wave():
    f = Fake()
    f.ops = [gc_op(str(i)) for i in range(6)]
    calls = 0

    async def propose(op: dict) -> dict:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OpError("timeout", "lost")
        return await Fake.propose(f, op)

    g = f.gc(grace=0, inflight=3)
    g._propose = propose
    assert await g.tick() == 2 and calls == 3 and not g.again()


# -- the plan of one tick (node/store/retention_select.py plan_gc with max_ops) ---------


class Counting:
    """A read source that counts the records its scans yield."""

    def __init__(self, view) -> None:
        self.view, self.scanned = view, 0

    def scan(self, lo, hi):
        for kv in self.view.scan(lo, hi):
            self.scanned += 1
            yield kv

    def point(self, k):
        return self.view.point(k)


def test_a_bounded_plan_stops_its_scan_at_max_ops(node):
    """The GC task's plan costs what one tick proposes, not the whole backlog."""
    node.one(policy("agent/", keep_last=2))
    for a in range(20):
        for n in range(1, 11):
            node.put(f"agent/{a:02d}/ckpt/{n:012d}", b"x")
    with node.sm.read_view() as view:
        src = Counting(view)
        ops = plan_gc(src, 1_000, max_items=3, max_ops=2)
        assert [len(op["deletes"]) for op in ops] == [3, 3]
        assert [k for op in ops for k, _ in op["deletes"]] == [
            f"agent/00/ckpt/{n:012d}" for n in range(1, 7)
        ]
        assert src.scanned <= 1 + 6 + 2  # the policy, 6 doomed, the 2 newer ones seen
        assert len(plan_gc(view, 1_000, max_items=3)) == 54  # unbounded: 160 deletes
    for op in ops:
        node.one(op, t=1_000)
    with node.sm.read_view() as view:
        (op,) = plan_gc(view, 1_000, max_items=500, max_ops=1)
    assert len(op["deletes"]) == 160 - 6 and op["deletes"][0][0] == f"agent/00/ckpt/{7:012d}"


@pytest.mark.parametrize(
    "rules",
    [
        [("agent/", {"keep_last": 2})],
        [("agent/", {"keep_last": 2, "within": "ckpt"})],
        [("agent/", {"keep_last": 3, "keep_every": 2}), ("agent/b", {"keep_last": 1})],
        [("", {"keep_last": 1, "max_age_s": 60}), ("agent/a/", {"max_age_s": 60})],
    ],
)
def test_the_streaming_plan_drops_what_status_counts(node, rules):
    """plan_gc (one scan, stops early) names the same deletes as select_keys (status)."""
    for prefix, kw in rules:
        node.one(policy(prefix, **kw), t=MIN)
    names = ["1", "2", "x/1", "x/2", "x/3", "x/y/1", "x/y/2", "z", "ckpt/x", "x-1", "x0"]
    keys = [f"agent/{a}/ckpt/{n}" for a in "ab" for n in names] + ["agent/a/k", "top"]
    keys += [f"agent/{a}/ckpt/{n:012d}" for a in "ab" for n in range(1, 8)]
    for i, k in enumerate(sorted(keys, key=lambda k: (sum(map(ord, k)) % 7, k))):
        node.one(put(k, b"v"), t=MIN + i * MIN)  # time index records along the way
    now = MIN * (len(keys) // 2 + 2)
    with node.sm.read_view() as view:
        policies = load_policies(view)
        want = sorted(tuple(x) for p in policies for x in select(view, p, policies, now).deletes)
        got = sorted(tuple(x) for op in plan_gc(view, now) for x in op["deletes"])
        firsts = [
            tuple(x) for op in plan_gc(view, now, max_items=2, max_ops=1) for x in op["deletes"]
        ]
    assert want and got == want
    assert len(firsts) == min(2, len(want)) and set(firsts) <= set(want)
