"""node/lease_expiry.py (the leader's expiry task) with injected leadership, clocks and
proposer, and ClusterClock.peek; the last test runs it against a real state machine, with
entries stamped by a fake leader clock. No network."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from node.cluster_clock import ClusterClock
from node.errors import OpError
from node.lease_expiry import LeaseExpiry
from node.store.leases import due_leases
from tests.unit.store.util import Node


class Fake:
    """Leadership, monotonic time, the store's due leases and a recording proposer."""

    def __init__(self) -> None:
        self.leader, self.term, self.mono, self.now = True, 1, 0.0, 10_000
        self.due: list[int] = []
        self.proposed: list[list[int]] = []
        self.expire_all = True
        self.fail: OpError | None = None

    def expiry(self, **kw) -> LeaseExpiry:
        return LeaseExpiry(
            leadership=lambda: (self.leader, self.term),
            due=lambda now, limit: self.due[:limit],
            now_ms=lambda: self.now,
            propose=self.propose,
            grace=1.7,
            monotonic=lambda: self.mono,
            **kw,
        )

    async def propose(self, op: dict) -> dict:
        assert op["op"] == "lease_expire"
        if self.fail is not None:
            raise self.fail
        self.proposed.append(op["leases"])
        done = op["leases"] if self.expire_all else []
        self.due = [x for x in self.due if x not in done]
        return {"revision": 1, "expired": done, "deleted": 0}


async def test_only_a_leader_past_its_grace_proposes():
    f = Fake()
    f.due = [3, 4]
    e = f.expiry()
    f.leader = False
    assert await e.tick() == 0 and f.proposed == []
    f.leader = True
    assert await e.tick() == 0  # just became leader: grace starts now
    f.mono = 1.69
    assert await e.tick() == 0
    f.mono = 1.7
    assert await e.tick() == 2 and f.proposed == [[3, 4]]
    assert (e.proposals, e.expired) == (1, 2)


async def test_a_new_term_or_a_lost_leadership_restarts_the_grace():
    f = Fake()
    e = f.expiry()
    await e.tick()
    f.mono, f.due = 5.0, [1]
    f.term = 2  # a new election (this node won again): wait again
    assert await e.tick() == 0
    f.mono = 6.0
    f.leader = False
    await e.tick()
    f.leader = True
    f.mono = 7.0
    assert await e.tick() == 0
    f.mono = 8.75
    assert await e.tick() == 1


async def test_batches_until_nothing_is_due_and_stops_when_apply_refused_some():
    f = Fake()
    f.due = list(range(1, 8))
    e = f.expiry(batch=3)
    f.mono = 0.0
    await e.tick()
    f.mono = 2.0
    assert await e.tick() == 7
    assert f.proposed == [[1, 2, 3], [4, 5, 6], [7]]
    f.proposed, f.due, f.expire_all = [], [8, 9], False  # not due at the entry's time
    assert await e.tick() == 0 and f.proposed == [[8, 9]]  # one try per tick


async def test_a_failed_proposal_is_retried_on_the_next_tick():
    f = Fake()
    f.due = [1]
    e = f.expiry()
    await e.tick()
    f.mono = 2.0
    f.fail = OpError("timeout", "lost")
    assert await e.tick() == 0
    f.fail = None
    assert await e.tick() == 1


async def test_run_ticks_with_the_injected_sleep_until_cancelled():
    f = Fake()
    slept: list[float] = []
    mono = itertools.count()

    async def sleep(s: float) -> None:
        slept.append(s)
        f.mono = float(next(mono))
        await asyncio.sleep(0)

    task = asyncio.ensure_future(f.expiry(sleep=sleep).run())
    while len(slept) < 5:
        f.due = [len(slept) + 100]
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert set(slept) == {0.2} and f.proposed  # proposed once past the grace


def test_peek_is_a_stamp_that_is_not_taken():
    wall, mono, replicated = [100.0], [0.0], [0]
    clock = ClusterClock(lambda: replicated[0], wall=lambda: wall[0], monotonic=lambda: mono[0])
    replicated[0] = 50_000
    assert clock.peek() == 50_000  # never anchored: the replicated clock
    clock.anchor()
    assert clock.peek() == 100_000
    wall[0] = 200.0  # a wall clock far ahead: bounded like a stamp
    assert clock.peek() == 50_000 + 60_000
    assert clock.peek() == clock.stamp()
    wall[0] = 1.0  # behind: never earlier than the last stamp
    assert clock.peek() == 110_000


async def test_expiry_against_a_state_machine(tmp_path):
    """The store's index says what is due; the entry's (later) time decides."""
    node = Node(tmp_path / "db")
    now = [1_000]
    node.one({"op": "lease_grant", "ttl_ms": 2_000}, t=now[0])
    node.one({"op": "lease_grant", "ttl_ms": 4_000}, t=now[0])
    node.put("a", b"1", lease=1)
    node.put("b", b"2", lease=2)

    def due(now_ms: int, limit: int) -> list[int]:
        with node.sm.read_view() as view:
            return due_leases(view, now_ms, limit)

    async def propose(op: dict) -> dict:
        return node.one(op, t=now[0])

    e = LeaseExpiry(
        leadership=lambda: (True, 1),
        due=due,
        now_ms=lambda: now[0],
        propose=propose,
        grace=0.0,
    )
    now[0] = 2_999
    assert await e.tick() == 0 and e.proposals == 0  # nothing due: no entry at all
    now[0] = 3_000
    assert await e.tick() == 1
    assert node.value("a") is None and node.value("b") == b"2"
    node.one({"op": "lease_keepalive", "leases": [2]}, t=4_000)  # now expires at 8_000
    now[0] = 7_000
    assert await e.tick() == 0
    now[0] = 8_000
    assert await e.tick() == 1 and node.value("b") is None
    node.sm.close()
