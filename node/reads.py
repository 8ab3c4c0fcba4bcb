"""When a read may be served from this node's local state: the read policy, in one place.

    consistency="linearizable" (default)
        on the leader: ReadIndex (Raft thesis 6.4). The leader notes its commit index, a
        majority confirms it still leads (node/raft/readindex.py sends one round for all
        reads that arrived together), and the read is served once that index is applied here. No log
        entry, no fsync. A leader whose no-op is not committed yet, a deposed leader that
        knows a new one, and every follower use a barrier instead: an entry proposed after
        the read arrived (node/proposer.py; it rides along with pending writes), applied
        here.
    consistency="serializable"
        local state as it is, no round trip.
    min_revision=R (with either)
        additionally wait until this node has applied revision R (read-your-writes on a
        follower). Waiters are woken by apply (`RevisionWaiters.applied`, raft thread), not by
        polling. Linearizable: once the read point is applied, every revision a client can
        know of is too, so an R still ahead is `future_revision` (400) at once. Serializable:
        an R this node has not applied is waited for while the node catches up to the
        cluster's point once (ReadIndex or barrier, as a linearizable read): R still ahead
        there is `future_revision` (400) too. Without a point (no leader) it waits up to the
        request timeout, then `timeout` (504), saying so.

A read that cannot be made safe within the request timeout fails "unavailable" (a read has
no side effect, so that is always true).

Long poll (read_stream's `wait_ms`, the live half of a stream subscription): `long_poll`
serves the read; while its answer has no events it waits, woken by apply like
`min_revision`, until the local revision moves past the one served (or the wait is over)
and reads again. It ends early, with the empty answer, when the node starts shutting down,
so a subscriber re-polls another node instead of being cut off. With auth on it ends with
`unauthenticated` once the caller's token is revoked or expires (node/api/stream_auth.py).

The failpoint `read-barrier-skip` (chaos mutation test only, node/failpoints.py) serves
linearizable reads without any of this, so the suite can show that it catches stale reads.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from statekeeper.node import failpoints
from statekeeper.node.errors import OpError
from statekeeper.node.ops.fields import MAX_REVISION
from statekeeper.node.proposer import Proposer
from statekeeper.node.raft import READ_INDEX_NOT_LEADER, READ_INDEX_NOT_YET, RaftNode

if TYPE_CHECKING:
    from statekeeper.node.api.stream_auth import StreamGuard
    from statekeeper.node.metrics import NodeMetrics

CONSISTENCY = ("linearizable", "serializable")
LONG_POLL_SLICE = 1.0  # seconds a long poll waits before it looks at `stopping` again


def read_options(body: dict) -> tuple[str, int | None]:
    """Pop and check `consistency` and `min_revision` from a read request body."""
    consistency = body.pop("consistency", None)
    if consistency is None:  # absent, or null (reads as absent)
        consistency = "linearizable"
    elif type(consistency) is not str or consistency not in CONSISTENCY:
        raise OpError("invalid_argument", f"consistency must be one of {CONSISTENCY}")
    min_rev = body.pop("min_revision", None)
    if min_rev is not None and (type(min_rev) is not int or not 0 <= min_rev <= MAX_REVISION):
        raise OpError(
            "invalid_argument", f"min_revision must be an integer within 0..{MAX_REVISION}"
        )
    return consistency, min_rev


class RevisionWaiters:
    """Futures waiting for the local revision to reach a value, resolved after apply.

    `wait` runs on the event loop; `applied` is called by the raft thread after every apply
    and hands over to the loop only when somebody waits. No wake-up is lost: `wait` marks
    itself waiting before it re-reads the revision, and apply updates the revision before it
    reads the mark.
    """

    def __init__(self, revision: Callable[[], int]) -> None:
        self._revision = revision
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._waiting = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def wait(self, target: int, interrupt: asyncio.Future[None] | None = None) -> None:
        """Until the local revision reaches `target`, or `interrupt` is done."""
        if self._revision() >= target or (interrupt is not None and interrupt.done()):
            return
        self._loop = loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._heap, (target, next(self._seq), fut))
        self._waiting = True
        self._wake()  # the revision may have moved since the first check

        def interrupted(_: asyncio.Future[None]) -> None:
            if not fut.done():
                fut.set_result(None)

        if interrupt is not None:
            interrupt.add_done_callback(interrupted)
        try:
            await fut
        finally:
            if interrupt is not None:  # a shared future: leave no callback behind
                interrupt.remove_done_callback(interrupted)

    def applied(self) -> None:
        """Any thread (the raft thread, after each apply)."""
        if self._waiting and self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake)

    async def wait_for_change(
        self, revision: int, deadline: float, interrupt: asyncio.Future[None] | None = None
    ) -> bool:
        """Wait until the local revision is above `revision`, the loop's clock reaches
        `deadline` or `interrupt` is done; True if the revision moved."""
        if self._revision() > revision:
            return True
        try:
            async with asyncio.timeout_at(deadline):
                await self.wait(revision + 1, interrupt)
        except TimeoutError:
            pass
        return self._revision() > revision

    def _wake(self) -> None:
        revision = self._revision()
        heap = self._heap
        while heap and (heap[0][0] <= revision or heap[0][2].done()):
            _, _, fut = heapq.heappop(heap)
            if not fut.done():
                fut.set_result(None)
        self._waiting = bool(heap)


class ReadPolicy:
    """Makes reads safe to serve locally (see the module docstring)."""

    def __init__(
        self,
        raft: RaftNode,
        proposer: Proposer,
        revision: Callable[[], int],
        check_serving: Callable[[], None],
        timeout: float,
        stopping: Callable[[], bool] = lambda: False,
        metrics: NodeMetrics | None = None,
    ) -> None:
        self._raft = raft
        # ReadIndex outcome -> counter child (node/metrics.py), or None.
        self._read_index_outcomes = (
            None
            if metrics is None
            else {
                READ_INDEX_NOT_LEADER: metrics.read_index.labels("not_leader"),
                READ_INDEX_NOT_YET: metrics.read_index.labels("not_yet"),
                None: metrics.read_index.labels("ok"),
            }
        )
        self._stopping = stopping
        self._proposer = proposer
        self._check_serving = check_serving
        self._timeout = timeout
        self.revisions = RevisionWaiters(revision)
        self._revision = revision
        self._index_waiters: list[asyncio.Future[int]] = []  # ReadIndex requests not yet sent

    async def wait(self, consistency: str, min_revision: int | None) -> None:
        """Return once a read of `consistency` may be served here (raises OpError)."""
        if consistency == "linearizable" and not failpoints.active("read-barrier-skip"):
            self._check_serving()
            await self._within_timeout(self._linearizable_point())
        if min_revision is None or self._revision() >= min_revision:
            return
        if consistency == "linearizable":
            raise self._future_revision(min_revision)
        await self._serializable_wait(min_revision)

    def _future_revision(self, min_revision: int) -> OpError:
        # Everything committed before this read arrived is applied here now, and a client
        # can only know revisions that were: this one does not exist (yet).
        return OpError(
            "future_revision",
            f"min_revision {min_revision} is ahead of the cluster (at {self._revision()})",
            revision=self._revision(),
        )

    async def _serializable_wait(self, min_revision: int) -> None:
        """Wait for `min_revision` here, and meanwhile catch up to the cluster's point once
        (ReadIndex / barrier): reached there and not here means it does not exist, 400
        `future_revision` as for a linearizable read. It waited the whole timeout and
        answered 504 (issue 27). When no point can be had (no leader), wait as before."""
        reached = asyncio.ensure_future(self.revisions.wait(min_revision))
        point = asyncio.ensure_future(self._caught_up())
        try:
            async with asyncio.timeout(self._timeout):
                await asyncio.wait({reached, point}, return_when=asyncio.FIRST_COMPLETED)
                if reached.done() or self._revision() >= min_revision:
                    return
                if point.exception() is None:
                    raise self._future_revision(min_revision)
                await reached
        except TimeoutError:
            raise OpError(
                "timeout",
                f"min_revision {min_revision} not reached within {self._timeout:g} s "
                f"(this node is at {self._revision()})",
            ) from None
        finally:
            reached.cancel()
            if point.done() and not point.cancelled():
                point.exception()  # retrieved: a failed point is not logged as unhandled
            point.cancel()

    async def _caught_up(self) -> None:
        self._check_serving()
        await self._linearizable_point()

    async def long_poll(
        self, read: Callable[[], dict], wait_ms: int, guard: StreamGuard | None = None
    ) -> dict:
        """`read()`'s answer, read again each time the revision moves while it has no
        `events`, for at most `wait_ms` in all (see the module docstring). With a `guard`
        (auth on), the caller's token is checked again after every read and whenever the
        token table changes or the token expires: OpError `unauthenticated` once it no
        longer stands (node/api/stream_auth.py)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        result = read()
        while not result["events"] and not self._stopping():
            now = loop.time()
            if now >= deadline:
                break
            # Slices of at most a second, so a shutdown ends the poll soon.
            step = min(deadline, now + LONG_POLL_SLICE)
            interrupt = None
            if guard is not None:
                step = min(step, guard.wake_at(now) or step)
                interrupt = guard.next_change()
            if await self.revisions.wait_for_change(result["revision"], step, interrupt):
                result = read()
            if guard is not None and (err := guard.error()) is not None:
                raise err
        return result

    async def _within_timeout(self, aw) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                await aw
        except TimeoutError:
            raise OpError(
                "unavailable", f"could not confirm a read within {self._timeout:g} s (no quorum?)"
            ) from None

    async def _linearizable_point(self) -> None:
        if self._raft.is_leader():
            index = await self._read_index()
            if index >= 0:
                return
            if index == READ_INDEX_NOT_LEADER:
                self._check_serving()  # deposed: fail fast unless a new leader is known
        await self._proposer.barrier()

    def _read_index(self) -> asyncio.Future[int]:
        # Reads parsed in one loop iteration share one request to the raft thread (one
        # wake-up, one hand-back) instead of one each.
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        if not self._index_waiters:
            loop.call_soon(self._request_read_index, loop)
        self._index_waiters.append(fut)
        return fut

    def _request_read_index(self, loop: asyncio.AbstractEventLoop) -> None:
        waiters, self._index_waiters = self._index_waiters, []

        outcomes = self._read_index_outcomes

        def resolve(index: int) -> None:
            if outcomes is not None:
                outcomes[index if index < 0 else None].inc()
            for fut in waiters:
                if not fut.done():  # a read may have timed out meanwhile
                    fut.set_result(index)

        self._raft.read_index(lambda index: loop.call_soon_threadsafe(resolve, index))
