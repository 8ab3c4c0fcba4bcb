"""The read policy's revision waiters (node/reads.py): woken by apply, never by polling."""

from __future__ import annotations

import asyncio
import threading

import pytest

from node.errors import OpError
from node.reads import RevisionWaiters, read_options


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
