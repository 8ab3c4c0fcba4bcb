"""node/retention_gc.py (the leader's retention GC task) with injected leadership, clocks,
planner and proposer; the last test runs it against a real state machine whose entries
are stamped by a fake leader clock. No network."""

from __future__ import annotations

import msgpack

from node.errors import OpError
from node.retention_gc import RetentionGC
from node.store.retention_select import plan_gc
from tests.unit.store.util import Node


def gc_op(*keys) -> dict:
    return {"op": "gc", "ns": "default", "deletes": [[k, 1] for k in keys], "truncates": []}


class Fake:
    """Leadership, monotonic time, a planner and a recording proposer."""

    def __init__(self) -> None:
        self.leader, self.term, self.mono, self.now = True, 1, 0.0, 10_000
        self.ops: list[dict] = []
        self.planned_at: list[int] = []
        self.proposed: list[dict] = []
        self.fail: OpError | None = None

    def gc(self, **kw) -> RetentionGC:
        return RetentionGC(
            leadership=lambda: (self.leader, self.term),
            plan=self.plan,
            now_ms=lambda: self.now,
            propose=self.propose,
            grace=1.7,
            monotonic=lambda: self.mono,
            **kw,
        )

    async def plan(self, now_ms: int) -> list[dict]:
        self.planned_at.append(now_ms)
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

        async def plan(now_ms: int) -> list[dict]:
            with node.sm.read_view() as view:
                return plan_gc(view, now_ms, max_items=4)

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
