"""What the leader's periodic tasks share (node/tasks/leases.py, node/tasks/retention.py):
act only while this node leads, and only after it has led for `grace` seconds in its
current term; tick every `interval` on the node's asyncio loop (between raft ticks),
logging a failed tick and going on. A tick that left work it can do at once (`again()`,
e.g. it hit its per-tick cap and made progress) is followed by the next one without the
interval (after yielding to the loop). Monotonic time and sleep are injected (tests drive
`tick()` and `run()` directly)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any


class LeaderTask:
    """Base of a leader-only periodic task: subclasses define `tick()`."""

    what = "leader task"  # for the log lines
    log = logging.getLogger("statekeeper.node")

    def __init__(
        self,
        leadership: Callable[[], tuple[bool, int]],
        grace: float,
        interval: float,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self._leadership = leadership  # () -> (this node leads, its term)
        self._grace = grace
        self._interval = interval
        self._mono = monotonic
        self._sleep = sleep
        self._term: int | None = None
        self._since = 0.0

    async def tick(self) -> int:
        raise NotImplementedError

    def again(self) -> bool:
        """The last tick left work it could do at once (default: never)."""
        return False

    async def run(self) -> None:
        """Tick forever (cancel the task to stop it)."""
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug or a closed store: log it, keep the node serving
                self.log.exception("%s tick failed", self.what)
                await self._sleep(self._interval)
                continue
            # again: yield to the loop only, then the next tick (a backlog is not a wait)
            await self._sleep(0 if self.again() else self._interval)

    def may_act(self) -> bool:
        """Leader in this term for at least the grace period."""
        leads, term = self._leadership()
        if not leads:
            self._term = None
            return False
        if term != self._term:
            self._term, self._since = term, self._mono()
            self.log.info("leader in term %d: %s starts in %.1f s", term, self.what, self._grace)
        return self._mono() - self._since >= self._grace


def raft_leadership(raft: Any) -> Callable[[], tuple[bool, int]]:
    """`leadership` of a running node: (it leads, its term) from its RaftNode's status."""

    def leadership() -> tuple[bool, int]:
        st = raft.status()
        return st.is_leader, st.term

    return leadership
