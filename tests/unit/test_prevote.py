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


class _Voter(_Follower):
    """A follower whose term and log are set, and whose term changes are recorded as
    pysyncobj's __setCurrentTerm makes them (persisted with the vote)."""

    def __init__(self, name: str, term: int, last: tuple[int, int]) -> None:
        super().__init__()
        self.selfNode = name
        self.otherNodes = [n for n in ("a", "b", "c") if n != name]
        self.raftCurrentTerm = term
        self._journal = [(b"", last[1], last[0])]
        self._last_leader_contact = -1e9  # no leader heard of: may grant

    def _SyncObj__setCurrentTerm(self, term: int, voted_for) -> None:
        self.raftCurrentTerm = term

    def deliver_to(self, other: _Voter) -> None:
        """Hand `other` what this node sent it, and clear the outbox."""
        for to, m in self._SyncObj__transport.sent:
            if to == other.selfNode:
                handler = (
                    other._on_prevote_request
                    if m["type"] == PREVOTE_REQUEST
                    else other._on_prevote_response
                )
                handler(self.selfNode, m)
        self._SyncObj__transport.sent.clear()


def test_a_candidate_behind_in_term_but_ahead_in_log_catches_up_the_term_and_wins() -> None:
    """Sim seed 300018: n1 (term 5, log to 3331 of term 5) and n2 (term 6: it voted in
    term 6 just before it crashed; log to 3302 of term 3) are the only voters left (n0
    lost its disk). n2 cannot win (n1's log is newer); n1's pre-vote for term 6 is refused
    by n2 (6 is not above its term) and n1 never learned n2's term: no leader, for ever.
    The refusal now carries the voter's term, and a candidate behind adopts it (as etcd's
    raft does for a rejected pre-vote answer of a higher term)."""
    n1 = _Voter("b", term=5, last=(5, 3331))
    n2 = _Voter("c", term=6, last=(3, 3302))
    for _ in range(3):  # three rounds of pre-votes
        for cand, voter in ((n1, n2), (n2, n1)):
            cand._SyncObj__raftElectionDeadline = cand.raft_clock() - 0.01
            cand._prevote_tick()
            cand.deliver_to(voter)
            voter.deliver_to(cand)
        if n1._prevote_won:
            break
    assert n1._prevote_won, (n1.raftCurrentTerm, n2.raftCurrentTerm)
    assert not n2._prevote_won
    assert n1.raftCurrentTerm == 6  # adopted from n2's refusal; the election then asks 7


def test_a_refusal_from_a_voter_at_a_lower_term_changes_nothing() -> None:
    a = _Voter("a", term=7, last=(7, 10))
    b = _Voter("b", term=4, last=(7, 12))  # longer log: refuses a
    a._SyncObj__raftElectionDeadline = a.raft_clock() - 0.01
    a._prevote_tick()
    a.deliver_to(b)
    b.deliver_to(a)
    assert a.raftCurrentTerm == 7 and not a._prevote_won
