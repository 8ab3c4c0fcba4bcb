"""node/shutdown.py's step order and its bounds, with a fake HTTP server and raft."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from statekeeper.node.shutdown import Shutdown


@dataclass
class Status:
    is_leader: bool
    leader_id: str | None


class FakeRaft:
    """Leads until the `accept_after`-th transfer request (denied before: not caught up)."""

    def __init__(self, leader: bool, accept_after: int | None = 1) -> None:
        self.leader = "n0" if leader else "n1"
        self.asked = 0
        self.accept_after = accept_after

    def status(self) -> Status:
        return Status(self.leader == "n0", self.leader)

    def transfer_leadership(self) -> str:
        self.asked += 1
        if self.accept_after is not None and self.asked >= self.accept_after:
            self.leader = "n2"
            return "sent"
        return "denied"


class FakeHttp:
    def __init__(self, busy_for: float = 0.0) -> None:
        self.events: list[str] = []
        self.busy_until = busy_for

    def drain(self, message: str) -> None:
        self.events.append("drain")
        self.busy_until += asyncio.get_running_loop().time()

    def busy(self) -> int:
        return int(asyncio.get_running_loop().time() < self.busy_until)

    async def close(self, grace: float = 5.0) -> None:
        self.events.append("close")


def _shutdown(http, raft, grace=5.0, handover=1.0):
    log: list[str] = []
    sd = Shutdown(
        "n0",
        http,
        raft,
        grace=grace,
        handover_timeout=handover,
        on_drain=lambda: log.append("not ready"),
        release=[lambda: log.append("proposals failed"), lambda: log.append("raft+store closed")],
    )
    return sd, log


async def test_a_leader_drains_waits_for_requests_hands_over_then_closes():
    http, raft = FakeHttp(busy_for=0.1), FakeRaft(leader=True, accept_after=3)
    sd, log = _shutdown(http, raft)
    assert await sd.run() == "graceful"
    assert sd.steps_done == ["drain", "finish_requests", "hand_over", "stop"]
    assert raft.asked == 3 and raft.leader == "n2"  # denied twice, asked again
    assert log == ["not ready", "proposals failed", "raft+store closed"]
    assert http.events == ["drain", "close"]


async def test_a_follower_does_not_hand_over():
    raft = FakeRaft(leader=False)
    sd, _ = _shutdown(FakeHttp(), raft)
    assert await sd.run() == "graceful"
    assert raft.asked == 0
    assert sd.steps_done == ["drain", "finish_requests", "stop"]


async def test_a_hand_over_nobody_accepts_ends_after_its_timeout_and_still_stops():
    raft = FakeRaft(leader=True, accept_after=None)
    sd, log = _shutdown(FakeHttp(), raft, handover=0.2)
    assert await sd.run() == "graceful"
    assert raft.asked > 1
    assert sd.steps_done == ["drain", "finish_requests", "stop"]
    assert log[-1] == "raft+store closed"


async def test_the_grace_ending_cuts_the_wait_short_and_still_closes_everything():
    http = FakeHttp(busy_for=60.0)  # a request that never ends
    sd, log = _shutdown(http, FakeRaft(leader=True), grace=0.2)
    assert await sd.run() == "grace of 0.2 s over"
    assert sd.steps_done == ["drain", "stop"]
    assert log == ["not ready", "proposals failed", "raft+store closed"]


async def test_a_second_signal_stops_at_once():
    http = FakeHttp(busy_for=60.0)
    sd, log = _shutdown(http, FakeRaft(leader=True), grace=60.0)
    run = asyncio.create_task(sd.run())
    await asyncio.sleep(0.1)
    sd.hurry()
    assert await asyncio.wait_for(run, 5) == "second signal"
    assert sd.steps_done == ["drain", "stop"]
    assert log[-1] == "raft+store closed"


async def test_a_failing_close_action_does_not_skip_the_next():
    def boom() -> None:
        raise RuntimeError("x")

    closed: list[str] = []
    sd = Shutdown(
        "n0",
        FakeHttp(),
        FakeRaft(leader=False),
        grace=1.0,
        handover_timeout=1.0,
        on_drain=lambda: None,
        release=[boom, lambda: closed.append("store")],
    )
    await sd.run()
    assert closed == ["store"]
