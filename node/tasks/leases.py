"""The leader's lease expiry task: it decides when leases expire; apply only re-checks.

Runs on the node's asyncio loop, between raft ticks (never inside one). Every `interval` (0.2 s) it
asks raft whether this node leads; when it does, and has led for at least `grace`
seconds in this term, it reads the leases due by the leader's time (`now_ms`:
ClusterClock.now, node/raft/cluster_clock.py: the replicated clock at the election plus the
leader's MONOTONIC time since, never its wall clock) from the local store's expiry index
and proposes ONE `lease_expire` op naming them (at most `batch` ids; up to `max_batches`
proposals per tick when more are due) through the proposer, like any write. Apply
revokes those whose expires_ms <= the entry's time and ignores the rest (renewed since,
or already gone), so a stale read here costs an entry, never a wrong expiry. The entry's
time is a stamp of the same clock taken later, so it is >= the time the leader decided
by: apply agrees.

Nothing expires early, whatever the nodes' wall clocks say, across any number of leader
changes. A renewal appended at real time r with entry clock c sets expires_ms = c + ttl;
every leader's time, at any later real time τ, is < c + (τ - r) + 1 ms
(node/raft/cluster_clock.py proves it without the 1 ms: stamps and leader time are anchor
+ monotonic time, anchors are earlier stamps, so the clock's offset from real time only
ever decreases; the clock counts elapsed time in whole ms, truncated, so a stamp can lag
the real time it was taken at by up to 1 ms). So a lease is due only once the leader's
time is a tick past expires_ms (due_by), once ttl of real time has passed since the
renewal. Deciding at expires_ms exactly expired a lease 1 ms early
(test_lease_expiry.py::test_a_lease_is_not_due_a_millisecond_early_through_the_clocks_truncation). Before this, the
leader's time was its wall clock bounded to 60 s ahead: a new leader whose wall clock
was ahead expired every lease with less than that left, live ones included (audit gap
10; tests/unit/test_lease_expiry.py has the skewed-leader and the simulated-cluster
tests, tests/integration/test_leases.py the faked +50 s wall clock).

Why the grace (default: max election timeout + 1 s) after every election: a keepalive
sent to the old leader just before it died, or lost in the election, gets its retry in
before the new leader expires anything, so nothing expires early because a leader died
before it could append a renewal the client sent in time.
Why nothing lives forever under repeated elections: expires_ms is replicated state
(every keepalive writes it through raft), and a new leader's time starts at the
replicated clock, so it resumes each lease's remaining TTL instead of granting a fresh
one (etcd's original behaviour, fixed there by lease checkpointing). With elections more
frequent than the grace nothing expires until one leader lasts that long.

How late: a lease expires when its TTL has run in the cluster's time, which loses, at
each leader change, the gap between the newest entry the new leader had applied and its
election (about the election timeout), and a total outage's length (the clock resumes
from the last replicated time). Add the grace after the last election and one tick: a
lease nobody renews is gone within ttl + (leader changes since its renewal) x (election
gap) + grace + interval of real time, and within ttl + interval without an election.

Clock, monotonic time and sleep are injected (tests drive `tick()` directly).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from statekeeper.node.errors import OpError
from statekeeper.node.ops.leases import MAX_LEASES_PER_OP
from statekeeper.node.tasks.leader_task import LeaderTask, raft_leadership

log = logging.getLogger("statekeeper.leases")

DEFAULT_INTERVAL = 0.2
CLOCK_TICK_MS = 1  # ClusterClock's resolution: its stamps lag real time by less than this


def due_by(now_ms: int) -> int:
    """The expiry time up to which leases are due at leader time `now_ms` (the module
    docstring: one clock tick later than expires_ms, never earlier than its TTL)."""
    return now_ms - CLOCK_TICK_MS


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
        from statekeeper.node.store.leases import due_leases

        def due(now_ms: int, limit: int) -> list[int]:
            with sm.read_view() as view:
                return due_leases(view, now_ms, limit)

        return cls(
            leadership=raft_leadership(raft),
            due=due,
            now_ms=clock.now,
            propose=proposer.write,
            grace=grace,
        )

    async def tick(self) -> int:
        """Propose the leases due now (in batches); returns how many the store expired."""
        expired = 0
        for _ in range(self._max_batches):
            if not self.may_act():
                break
            ids = self._due(due_by(self._now_ms()), self._batch)
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
