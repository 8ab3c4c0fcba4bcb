"""The leader's retention GC task: it decides what retention policies drop; apply only
re-checks (node/store/retention.py `gc`).

Runs on the node's asyncio loop, between raft ticks, like node/tasks/leases.py:
while this node leads, and has led for at least `grace` seconds in this term (the lease
expiry grace), every `interval` ([retention] gc_interval_seconds, default 10) it plans
the gc ops from a read view of the local store and the leader's clock (`now_ms`, the
ClusterClock's stamp-to-be) in a worker thread, at most `max_ops` of them: planning
stops once it has that many (node/store/retention_select.py `plan_gc`), so a tick costs
the same whatever the backlog. It proposes them `inflight` at a time (the proposer packs
ops proposed together into one raft entry, so a tick waits behind the writers' entries
a few times, not `max_ops` times). A tick that hit the cap and deleted something runs
again at once instead of waiting the interval: GC keeps up with a bulk writer.

The five things: 1. consistency: a stale plan (a key rewritten since, a stream already
truncated) costs an entry, never a wrong delete: apply deletes a key only at the
mod_revision named and truncates only forward; the ops of one plan name disjoint keys,
so those in flight together do not race each other. 2. ok/failed/unknown: a proposal
that fails or times out is simply planned again at the next tick (after the interval).
3. limits: 500 items and 10000 stream events per gc op, `max_ops` ops per tick,
`inflight` in flight. 4. key layout: none of its own (reads b"P", b"t", b"c", b"Q",
b"q"). 5. chaos: none yet.

Clock, monotonic time and sleep are injected (tests drive `tick()` directly).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from statekeeper.node.errors import OpError
from statekeeper.node.tasks.leader_task import LeaderTask, raft_leadership

log = logging.getLogger("statekeeper.retention")

DEFAULT_INTERVAL = 10.0


class RetentionGC(LeaderTask):
    """The GC loop of one node (it does anything only while the node leads)."""

    what = "retention gc"
    log = log

    def __init__(
        self,
        *,
        leadership: Callable[[], tuple[bool, int]],
        plan: Callable[[int, int], Awaitable[list[dict]]],
        now_ms: Callable[[], int],
        propose: Callable[[dict], Awaitable[dict]],
        grace: float,
        interval: float = DEFAULT_INTERVAL,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        max_ops: int = 20,
        inflight: int = 4,
    ) -> None:
        super().__init__(leadership, grace, interval, monotonic, sleep)
        self._plan = plan  # (now_ms, max_ops) -> at most max_ops gc ops from the local store
        self._now_ms = now_ms
        self._propose = propose
        self._max_ops = max_ops
        self._inflight = max(1, inflight)
        self._again = False
        self.proposals = 0  # gc ops proposed (tests, debugging)
        self.deleted = 0  # keys they deleted
        self.removed = 0  # stream events they removed

    @classmethod
    def for_node(
        cls, sm: Any, raft: Any, clock: Any, proposer: Any, grace: float, interval: float
    ) -> RetentionGC:
        """The task of a running node: its store, raft, cluster clock and proposer."""
        from statekeeper.node.store.retention_select import plan_gc

        def plan_now(now_ms: int, max_ops: int) -> list[dict]:
            with sm.read_view() as view:
                return plan_gc(view, now_ms, max_ops=max_ops)

        async def plan(now_ms: int, max_ops: int) -> list[dict]:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, plan_now, now_ms, max_ops)

        return cls(
            leadership=raft_leadership(raft),
            plan=plan,
            now_ms=clock.peek,
            propose=proposer.write,
            grace=grace,
            interval=interval,
        )

    def again(self) -> bool:
        return self._again

    async def tick(self) -> int:
        """Plan and propose the gc ops due now; returns how many ops applied something."""
        self._again = False
        if not self.may_act():
            return 0
        ops = (await self._plan(self._now_ms(), self._max_ops))[: self._max_ops]
        applied = 0
        for i in range(0, len(ops), self._inflight):
            if not self.may_act():
                return applied
            wave = ops[i : i + self._inflight]
            results = await asyncio.gather(*map(self._propose, wave), return_exceptions=True)
            done, ok = self._count(wave, results)
            applied += done
            if not ok:
                return applied  # the next tick (after the interval) plans again
        self._again = len(ops) >= self._max_ops and applied > 0
        return applied

    def _count(self, wave: list[dict], results: list) -> tuple[int, bool]:
        """(ops that applied something, every one was confirmed without an error)."""
        applied, ok = 0, True
        for op, result in zip(wave, results, strict=True):
            if isinstance(result, OpError):  # lost leadership, timeout
                log.info("gc of %s not confirmed (%s)", op["ns"], result.code)
                ok = False
                continue
            if isinstance(result, BaseException):
                raise result
            self.proposals += 1
            if "error" in result:
                log.warning("gc failed: %s", result["error"])
                ok = False
                continue
            self.deleted += result.get("deleted", 0)
            self.removed += result.get("removed", 0)
            if result.get("deleted") or result.get("removed"):
                applied += 1
        return applied, ok
