"""The read policy's revision waiters (node/reads.py): woken by apply, never by polling."""

from __future__ import annotations

import asyncio
import threading

import pytest

from statekeeper.node.api.stream_auth import TokenChanges
from statekeeper.node.errors import OpError
from statekeeper.node.reads import ReadPolicy, RevisionWaiters, read_options


def test_waiters_wake_when_apply_reaches_their_revision() -> None:
    revision = [3]
    w = RevisionWaiters(lambda: revision[0])

    async def main():
        loop = asyncio.get_running_loop()
        low = asyncio.ensure_future(w.wait(5))
        high = asyncio.ensure_future(w.wait(9))
        await asyncio.sleep(0.05)
        assert not low.done() and not high.done()

        def apply_to(r):  # the raft thread: set the revision, then tell the waiters
            revision[0] = r
            w.applied()

        await loop.run_in_executor(None, apply_to, 6)
        await asyncio.wait_for(low, 1.0)
        await asyncio.sleep(0.05)
        assert not high.done()
        await loop.run_in_executor(None, apply_to, 9)
        await asyncio.wait_for(high, 1.0)
        await asyncio.wait_for(w.wait(1), 0.1)  # already there: returns at once

    asyncio.run(main())


def test_no_wakeup_is_lost_between_check_and_wait() -> None:
    """apply racing with wait(): many rounds, each waiter must finish."""
    revision = [0]
    w = RevisionWaiters(lambda: revision[0])

    async def main():
        loop = asyncio.get_running_loop()
        for target in range(1, 300):
            def bump(t=target):
                revision[0] = t
                w.applied()

            t = threading.Thread(target=bump)
            t.start()
            await asyncio.wait_for(w.wait(target), 2.0)
            await loop.run_in_executor(None, t.join)

    asyncio.run(main())


@pytest.mark.parametrize("body", [{"consistency": "eventual"}, {"min_revision": -1}, {"min_revision": "3"}])
def test_bad_read_options(body: dict) -> None:
    with pytest.raises(OpError) as e:
        read_options(dict(body))
    assert e.value.code == "invalid_argument"


# -- long poll (read_stream's wait_ms) --------------------------------------------------------


def _policy(revision: list[int], stopping=lambda: False) -> ReadPolicy:
    # raft/proposer are only used by wait(); the long poll needs the revision alone.
    return ReadPolicy(None, None, lambda: revision[0], lambda: None, 5.0, stopping=stopping)


def test_wait_for_change_wakes_on_apply_or_gives_up_at_the_deadline() -> None:
    revision = [4]
    w = RevisionWaiters(lambda: revision[0])

    async def main():
        loop = asyncio.get_running_loop()
        assert await w.wait_for_change(3, loop.time() + 1)  # already past: at once
        t0 = loop.time()
        assert not await w.wait_for_change(4, loop.time() + 0.1)
        assert loop.time() - t0 >= 0.09
        later = asyncio.ensure_future(w.wait_for_change(4, loop.time() + 5))
        await asyncio.sleep(0.05)
        revision[0] = 5
        w.applied()
        assert await asyncio.wait_for(later, 1.0)

    asyncio.run(main())


def test_long_poll_reads_again_when_the_revision_moves() -> None:
    revision = [7]
    events: list[str] = []
    policy = _policy(revision)
    reads = []

    def read() -> dict:
        reads.append(revision[0])
        return {"revision": revision[0], "events": list(events)}

    async def main():
        loop = asyncio.get_running_loop()
        poll = asyncio.ensure_future(policy.long_poll(read, 5_000))
        await asyncio.sleep(0.05)
        revision[0] = 8  # a write elsewhere: read again, still nothing
        policy.revisions.applied()
        await asyncio.sleep(0.05)
        events.append("e")
        revision[0] = 9
        policy.revisions.applied()
        t0 = loop.time()
        result = await asyncio.wait_for(poll, 1.0)
        assert result == {"revision": 9, "events": ["e"]} and loop.time() - t0 < 0.5
        assert reads == [7, 8, 9]
        # Nothing happens: the empty answer after wait_ms.
        t0 = loop.time()
        events.clear()
        assert (await policy.long_poll(read, 100))["events"] == []
        assert 0.09 <= loop.time() - t0 < 1.0

    asyncio.run(main())


def test_long_poll_ends_early_when_the_node_stops() -> None:
    stopping = [False]
    policy = _policy([1], stopping=lambda: stopping[0])

    async def main():
        loop = asyncio.get_running_loop()
        poll = asyncio.ensure_future(
            policy.long_poll(lambda: {"revision": 1, "events": []}, 60_000)
        )
        await asyncio.sleep(0.05)
        stopping[0] = True
        t0 = loop.time()
        assert (await asyncio.wait_for(poll, 3.0))["events"] == []
        assert loop.time() - t0 <= 1.5  # within one slice

    asyncio.run(main())


def test_a_token_table_change_wakes_waiters_and_leaves_no_callback_behind() -> None:
    """Open streams wait on one future shared per token-table change (node/api/stream_auth.py);
    a token op does not move the revision, so it is what wakes them. Each wait removes its
    callback: a stream waking every second for days must not pile them up."""
    revision = [4]
    tokens = [{}]
    w = RevisionWaiters(lambda: revision[0])
    changes = TokenChanges(lambda: tokens[0])

    class Counted(asyncio.Future):
        callbacks = 0

        def add_done_callback(self, fn, *, context=None):
            self.callbacks += 1
            super().add_done_callback(fn, context=context)

        def remove_done_callback(self, fn):
            removed = super().remove_done_callback(fn)
            self.callbacks -= removed
            return removed

    async def main():
        loop = asyncio.get_running_loop()
        counted = Counted()
        for _ in range(50):  # waits that end at their deadline
            assert not await w.wait_for_change(4, loop.time() + 0.001, counted)
        assert counted.callbacks == 0
        changes.applied()  # (the first look at the table)
        shared = changes.next_change()
        waiting = [
            asyncio.ensure_future(w.wait_for_change(4, loop.time() + 5, changes.next_change()))
            for _ in range(3)
        ]
        await asyncio.sleep(0.01)
        changes.applied()  # no change of the table: nobody wakes
        await asyncio.sleep(0.01)
        assert not any(t.done() for t in waiting)
        tokens[0] = {"t": object()}  # (replaced whole, as apply does)
        changes.applied()
        assert await asyncio.wait_for(asyncio.gather(*waiting), 1.0) == [False] * 3
        assert shared.done() and changes.next_change() is not shared

    asyncio.run(main())


# -- serializable min_revision ahead of this node --------------------------------------------


class _Follower:
    def is_leader(self) -> bool:
        return False


class _Barrier:
    """The proposer's barrier: applying it brings this node to the cluster's revision."""

    def __init__(self, revision: list[int], cluster_revision: int):
        self.revision, self.cluster_revision, self.calls = revision, cluster_revision, 0

    async def barrier(self) -> None:
        self.calls += 1
        self.revision[0] = self.cluster_revision


def test_serializable_min_revision_ahead_of_the_cluster_is_future_revision() -> None:
    """It waited the whole request timeout and answered 504 timeout, where a linearizable
    read (and archive_list) answered 400 future_revision at once (issue 27, schemathesis)."""
    revision = [3]
    barrier = _Barrier(revision, cluster_revision=7)
    policy = ReadPolicy(_Follower(), barrier, lambda: revision[0], lambda: None, 0.5)

    async def main():
        with pytest.raises(OpError) as e:
            await policy.wait("serializable", 10**12)
        assert e.value.code == "future_revision"
        revision[0] = 3
        await policy.wait("serializable", 5)  # behind here, reached by the cluster: served

    asyncio.run(main())
    assert barrier.calls == 2


def test_serializable_min_revision_reached_locally_needs_no_round_trip() -> None:
    revision = [9]
    barrier = _Barrier(revision, cluster_revision=9)
    policy = ReadPolicy(_Follower(), barrier, lambda: revision[0], lambda: None, 0.5)
    asyncio.run(policy.wait("serializable", 9))
    assert barrier.calls == 0


def test_serializable_min_revision_without_a_leader_waits_as_before() -> None:
    """No point to catch up to (not serving): wait for the revision, then 504 timeout."""
    revision = [3]

    def not_serving() -> None:
        raise OpError("unavailable", "no leader")

    policy = ReadPolicy(_Follower(), _Barrier(revision, 3), lambda: revision[0], not_serving, 0.2)
    with pytest.raises(OpError) as e:
        asyncio.run(policy.wait("serializable", 5))
    assert e.value.code == "timeout"
