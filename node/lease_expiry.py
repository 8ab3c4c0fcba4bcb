"""The leader's lease expiry task: it decides when leases expire; apply only re-checks.

Runs on the node's asyncio loop, never on the raft thread. Every `interval` (0.2 s) it
asks raft whether this node leads; when it does, and has led for at least `grace`
seconds in this term, it reads the leases due by the leader's clock (`now_ms`, the
ClusterClock's stamp-to-be, node/cluster_clock.py) from the local store's expiry index
and proposes ONE `lease_expire` op naming them (at most `batch` ids; up to `max_batches`
proposals per tick when more are due) through the proposer, like any write. Apply
revokes those whose expires_ms <= the entry's time and ignores the rest (renewed since,
or already gone), so a stale read here costs an entry, never a wrong expiry.

Why the grace (default: max election timeout + 1 s) after every election: a keepalive
sent to the old leader just before it died, or lost in the election, gets its retry in
before the new leader expires anything, so nothing expires early because a leader died.
Why nothing lives forever under repeated elections: expires_ms is replicated state
(every keepalive writes it through raft), and the cluster clock only moves forward, so a
new leader resumes each lease's remaining TTL instead of granting a fresh one (etcd's
original behaviour, fixed there by lease checkpointing). With elections more frequent
than the grace nothing expires until one leader lasts that long. After a total outage
the cluster clock resumes from the last replicated time (at most 60 s ahead of it), so a
lease nobody renewed expires at restart once a leader has led for the grace if less than
~60 s of its TTL was left, else when the rest of its TTL has run: never early, possibly
late by the outage.

Clock, monotonic time and sleep are injected (tests drive `tick()` directly).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from node.errors import OpError
from node.leader_task import LeaderTask, raft_leadership
from node.lease_ops import MAX_LEASES_PER_OP

log = logging.getLogger("statekeeper.leases")

DEFAULT_INTERVAL = 0.2


class LeaseExpiry(LeaderTask):
    """The expiry loop of one node (it does anything only while the node leads)."""

    what = "lease expiry"
    log = log

    def __init__(
        self,
        *,
        leadership: Callable[[], tuple[bool, int]],
        due: Callable[[int, int], list[int]],
        now_ms: Callable[[], int],
        propose: Callable[[dict], Awaitable[dict]],
        grace: float,
        interval: float = DEFAULT_INTERVAL,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        batch: int = MAX_LEASES_PER_OP,
        max_batches: int = 10,
    ) -> None:
        super().__init__(leadership, grace, interval, monotonic, sleep)
        self._due = due  # (now_ms, limit) -> lease ids due by now_ms in the local store
        self._now_ms = now_ms
        self._propose = propose
        self._batch = min(batch, MAX_LEASES_PER_OP)
        self._max_batches = max_batches
        self.proposals = 0  # lease_expire ops proposed (tests, debugging)
        self.expired = 0  # leases they expired

    @classmethod
    def for_node(cls, sm: Any, raft: Any, clock: Any, proposer: Any, grace: float) -> LeaseExpiry:
        """The task of a running node: its store, raft, cluster clock and proposer."""
        from node.store.leases import due_leases

        def due(now_ms: int, limit: int) -> list[int]:
            with sm.read_view() as view:
                return due_leases(view, now_ms, limit)

        return cls(
            leadership=raft_leadership(raft),
            due=due,
            now_ms=clock.peek,
            propose=proposer.write,
            grace=grace,
        )

    async def tick(self) -> int:
        """Propose the leases due now (in batches); returns how many the store expired."""
        expired = 0
        for _ in range(self._max_batches):
            if not self.may_act():
                break
            ids = self._due(self._now_ms(), self._batch)
            if not ids:
                break
            try:
                result = await self._propose({"op": "lease_expire", "leases": ids})
            except OpError as e:  # lost leadership, timeout: the next tick tries again
                log.info("lease_expire of %d leases not confirmed (%s)", len(ids), e.code)
                break
            self.proposals += 1
            if "error" in result:
                log.warning("lease_expire failed: %s", result["error"])
                break
            done = len(result.get("expired", ()))
            expired += done
            if done < len(ids) or len(ids) < self._batch:
                break  # the rest was not due at the entry's time, or nothing more is due
        self.expired += expired
        return expired
