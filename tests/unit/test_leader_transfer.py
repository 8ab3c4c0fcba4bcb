"""node/raft/transfer.py: a hand-over pysyncobj denies (the target lags by the entries a
loaded leader keeps appending) holds new appends and is asked again each tick until sent,
for at most the hold; a sent one keeps the hold while the target elects itself."""

from __future__ import annotations

import math

import pytest

from statekeeper.node.raft import transfer
from statekeeper.node.raft.transfer import LeadershipTransferMixin

SUCCESS, DENIED = "ok", "denied"


class FakeRaft(LeadershipTransferMixin):
    def __init__(self, clock: list[float]) -> None:
        self._election_timeout_min = 0.4
        self.init_transfer(SUCCESS)
        self.leader = True
        self.caught_up_at = math.inf  # when the target's match index reaches the leader's
        self.clock = clock
        self.sent: list[object] = []
        self._SyncObj__pipeNotifier = type("N", (), {"notify": lambda self: None})()

    def _isLeader(self) -> bool:
        return self.leader

    def transferLeadership(self, node, callback) -> None:
        ok = self.clock[0] >= self.caught_up_at
        if ok:
            self.sent.append(node)
        callback(None, SUCCESS if ok else DENIED)


@pytest.fixture
def raft(monkeypatch) -> FakeRaft:
    clock = [100.0]
    monkeypatch.setattr(transfer.time, "monotonic", lambda: clock[0])
    return FakeRaft(clock)


def _tick(raft: FakeRaft, dt: float = 0.01) -> None:
    raft.transfer_tick()
    raft.end_hold_if_over()
    raft.clock[0] += dt


def test_denied_then_held_until_the_target_catches_up_then_sent(raft: FakeRaft) -> None:
    results: list[bool] = []
    raft.request_transfer("b:1", results.append)
    raft.caught_up_at = raft.clock[0] + 0.05  # a few ticks: appends are held meanwhile
    _tick(raft)
    assert raft.holding_appends() and raft.last_transfer == "denied" and results == []
    for _ in range(10):
        _tick(raft)
    assert results == [True] and raft.sent == ["b:1"] and raft.last_transfer == "sent"
    assert raft.holding_appends()  # while the target elects itself
    raft.clock[0] += 0.5
    _tick(raft)
    assert not raft.holding_appends()


def test_the_hold_is_bounded_and_then_the_request_fails(raft: FakeRaft) -> None:
    results: list[bool] = []
    raft.request_transfer(None, results.append)
    for _ in range(60):  # 0.6 s of ticks: longer than the 0.4 s hold
        _tick(raft)
    assert results == [False] and raft.sent == [] and not raft.holding_appends()


def test_not_leader_and_a_second_timeout_now_too_soon(raft: FakeRaft) -> None:
    results: list[bool] = []
    raft.caught_up_at = 0
    raft.request_transfer(None, results.append)
    _tick(raft)
    raft.request_transfer(None, results.append)  # the target is still electing itself
    _tick(raft)
    assert results == [True, False] and len(raft.sent) == 1
    raft.leader = False
    raft.request_transfer(None, results.append)
    _tick(raft)
    assert results[-1] is False and raft.last_transfer == "not leader"
    assert not raft.holding_appends()
