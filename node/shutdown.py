"""A node's graceful stop (SIGTERM or SIGINT), as named steps in the order clients need.

1. `drain`: the node reports not-ready and stops accepting connections; every request
   that has not started gets a retryable 503 `unavailable` with Connection: close (on
   connections already open, so a client learns it cleanly instead of by a reset), and
   watches end (their clients resume elsewhere). Leader-only background work stops.
2. `finish_requests`: the requests in progress finish. Nothing new is proposed through
   this node any more, so when they are done a follower can catch up with the whole log.
3. `hand_over` (leader only): raft hands leadership to the most caught-up follower
   (TimeoutNow), asked again every `RETRY_EVERY` s while it is denied (no follower has the
   whole log yet), until another node leads; at most `handover_timeout`. The cluster then
   has a leader without waiting an election timeout. The outcome is logged.
4. `stop`: writes still queued and never proposed fail with `unavailable` (true: not
   applied); the HTTP server closes; raft stops (its thread joined, the journal synced
   and closed); RocksDB closes.

Steps 1-3 share one deadline, `grace` seconds from the signal
([http] shutdown_grace_seconds). When it passes, or a second SIGTERM/SIGINT arrives
(`hurry()`), the step under way is cut short and `stop` runs at once. That is still safe:
the journal is fsynced before any write is acknowledged, and `stop` closes it and RocksDB
all the same. The process exits 0 either way; the log says which it was.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from statekeeper.node import failpoints

log = logging.getLogger("statekeeper.node")

# How often a denied leadership transfer is asked for again, and the drain's poll period.
RETRY_EVERY = 0.02


class _Http(Protocol):
    def drain(self, message: str) -> None: ...
    def busy(self) -> int: ...
    async def close(self, grace: float = ...) -> None: ...


class _Raft(Protocol):
    def status(self): ...  # .is_leader, .leader_id
    def transfer_leadership(self) -> str: ...


@dataclass
class Shutdown:
    """Drives the steps; `main.py` builds it, calls `hurry` on a second signal, and awaits
    `run`. `release` are the closing actions of `stop` after HTTP, in order (fail queued
    proposals, raft.destroy, store close); each runs even if an earlier one raised."""

    node_id: str
    http: _Http
    raft: _Raft
    grace: float
    handover_timeout: float
    on_drain: Callable[[], None]  # marks the API as shutting down, stops background tasks
    release: list[Callable[[], Awaitable[None] | None]] = field(default_factory=list)
    clock: Callable[[], float] = field(default_factory=lambda: asyncio.get_running_loop().time)
    steps_done: list[str] = field(default_factory=list)
    _hurry: asyncio.Event = field(default_factory=asyncio.Event)

    def hurry(self) -> None:
        """A second signal: stop waiting, stop now."""
        if not self._hurry.is_set():
            log.warning("%s: second stop signal: stopping at once", self.node_id)
        self._hurry.set()

    async def run(self) -> str:
        """The whole sequence; returns "graceful" or why it was cut short."""
        deadline = self.clock() + self.grace
        outcome = "graceful"
        try:
            async with asyncio.timeout_at(deadline):
                if not await self._unless_hurried(self._graceful()):
                    outcome = "second signal"
        except TimeoutError:
            outcome = f"grace of {self.grace:g} s over"
            log.warning("%s: %s; stopping at once", self.node_id, outcome)
        await self._stop()
        return outcome

    async def _unless_hurried(self, aw: Awaitable[None]) -> bool:
        task = asyncio.ensure_future(aw)
        hurry = asyncio.ensure_future(self._hurry.wait())
        try:
            await asyncio.wait({task, hurry}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (task, hurry):
                t.cancel()
        if task.done() and not task.cancelled():
            task.result()  # a failed step is a bug: let it show
            return True
        return False

    async def _graceful(self) -> None:
        self.drain()
        await self.finish_requests()
        await self.hand_over()

    def drain(self) -> None:
        self.on_drain()
        self.http.drain(f"{self.node_id} is shutting down; retry on another node")
        self.steps_done.append("drain")

    async def finish_requests(self) -> None:
        busy = self.http.busy()
        if busy:
            log.info("%s: waiting for %d request(s) in progress", self.node_id, busy)
        while self.http.busy() or failpoints.active("shutdown-stall"):
            await asyncio.sleep(RETRY_EVERY)
        self.steps_done.append("finish_requests")

    async def hand_over(self) -> None:
        if not self.raft.status().is_leader:
            return
        started = self.clock()
        outcome = ""
        while self.clock() - started < self.handover_timeout:
            st = self.raft.status()
            if not st.is_leader and st.leader_id not in (None, self.node_id):
                log.info(
                    "%s: handed leadership over to %s in %.2f s",
                    self.node_id,
                    st.leader_id,
                    self.clock() - started,
                )
                self.steps_done.append("hand_over")
                return
            outcome = self.raft.transfer_leadership() or outcome
            await asyncio.sleep(RETRY_EVERY)
        log.warning(
            "%s: no follower took over leadership within %.1f s (last attempt: %s); "
            "the others elect a leader after an election timeout",
            self.node_id,
            self.handover_timeout,
            outcome or "none made",
        )

    async def _stop(self) -> None:
        # Whatever happened above, everything is closed: nothing is left half-written.
        await self.http.close(grace=0.0)
        for action in self.release:
            try:
                result = action()
                if result is not None:
                    await result
            except Exception:
                log.exception("%s: error while stopping", self.node_id)
        self.steps_done.append("stop")
