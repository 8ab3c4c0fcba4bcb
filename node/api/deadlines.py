"""Request timeouts for writes with one timer per node instead of one per request.

`asyncio.timeout` per write (node/api/routes.py) cost a leader 6-7 % of its GIL time at 64
clients doing puts (py-spy --gil, issue 28: Timeout.__aenter__ 3.5 %, reschedule 1.9 %,
and the timer handle each request pushed onto the loop's heap and cancelled again).
Every write here waits the same `seconds`, so deadlines come due in the order the writes
started: a FIFO queue is already sorted, and one timer armed for the oldest write still
waiting does for all of them. Per write that is a clock read and an append.

On expiry the write's future is cancelled, as asyncio.timeout's cancellation of the
awaiting task did (the proposer sees the same cancelled future), and the awaiting
coroutine, told by timed_out() that the deadline did it, answers the timeout error. A
cancellation of the awaiting task itself still propagates as CancelledError.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Deadlines:
    """Cancels a watched future `seconds` after it was watched, unless it is done."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: deque[tuple[float, asyncio.Future]] = deque()  # by deadline
        self._timer: asyncio.TimerHandle | None = None
        self._expired: set[asyncio.Future] = set()

    def watch(self, fut: asyncio.Future) -> None:
        """Cancel `fut` in `seconds` unless it is done by then. Its waiter, on the
        CancelledError, asks timed_out() whether that was the deadline (no wrapping
        coroutine: one less per request)."""
        loop = fut.get_loop()
        if loop is not self._loop:  # first use, or a new event loop (tests): start afresh
            self._loop, self._queue, self._timer, self._expired = loop, deque(), None, set()
        queue = self._queue
        while queue and queue[0][1].done():  # answered ones: drop them as we go
            queue.popleft()
        queue.append((loop.time() + self.seconds, fut))
        if self._timer is None:
            self._timer = loop.call_at(queue[0][0], self._expire)

    def timed_out(self, fut: asyncio.Future) -> bool:
        """Whether a watched `fut` was cancelled by its deadline and the task awaiting it
        (the current one) was not cancelled too: then the await means TimeoutError."""
        if fut not in self._expired:
            return False
        self._expired.discard(fut)
        task = asyncio.current_task()
        return task is None or not task.cancelling()

    def _expire(self) -> None:
        self._timer = None
        loop, queue = self._loop, self._queue
        assert loop is not None
        now = loop.time()
        while queue:
            deadline, fut = queue[0]
            if not fut.done():
                if deadline > now:
                    break
                self._expired.add(fut)
                fut.cancel()
            queue.popleft()
        if queue:
            self._timer = loop.call_at(queue[0][0], self._expire)
