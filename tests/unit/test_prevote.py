"""Pre-vote's tick against pysyncobj's deadline clock (node/raft/prevote.py), no network."""

from __future__ import annotations

import time

from statekeeper.node.raft.prevote import PREVOTE_REQUEST, PreVoteMixin


class _Transport:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    def send(self, node: str, message: dict) -> None:
        self.sent.append((node, message))


class _Follower(PreVoteMixin):
    """What the mixin reads of pysyncobj, on a raft clock far from time.monotonic (the
    clocks pysyncobj and the standard library use drift apart with uptime)."""

    OFFSET = 10_000.0

    def __init__(self) -> None:
        self._init_prevote(0.4)
        self._journal = [(b"", 1, 1)]
        self.otherNodes = ["b", "c"]
        self.selfNode = "a"
        self.raftCurrentTerm = 1
        self._SyncObj__transport = _Transport()
        self._SyncObj__transferInProgress = False
        self._SyncObj__raftElectionDeadline = self.raft_clock() + 1.0

    def raft_clock(self) -> float:
        return time.monotonic() + self.OFFSET

    def _isLeader(self) -> bool:
        return False

    def _SyncObj__connectedToAnyone(self) -> bool:
        return True

    def _SyncObj__generateRaftTimeout(self) -> float:
        return 0.5


def test_no_prevote_before_the_election_deadline_on_the_raft_clock() -> None:
    f = _Follower()
    f._prevote_tick()
    assert f._SyncObj__transport.sent == []  # time.monotonic would be 10,000 s past it


def test_a_prevote_once_the_deadline_has_passed_pushes_it_on_the_raft_clock() -> None:
    f = _Follower()
    f._SyncObj__raftElectionDeadline = f.raft_clock() - 0.01
    f._prevote_tick()
    assert [m["type"] for _, m in f._SyncObj__transport.sent] == [PREVOTE_REQUEST] * 2
    assert f._SyncObj__raftElectionDeadline > f.raft_clock()
