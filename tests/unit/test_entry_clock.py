"""The raft entry codec (node/entry.py) and the leader's bounded clock (cluster_clock.py)."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pysyncobj import pickle as pysyncobj_pickle

from statekeeper.node import entry
from statekeeper.node.raft.cluster_clock import ClusterClock
from statekeeper.node.raft.syncobj import (
    PEER_PICKLE_PROTOCOL,  # importing it sets pysyncobj's protocol
)

OPS = [{"op": "put", "ns": "a", "key": "k", "value": b"v" * 300, "idempotency_key": None}]
DAY_MS = 24 * 3600 * 1000


@given(st.integers(min_value=0, max_value=2**63 - 1), st.integers(min_value=0, max_value=2**63 - 1))
def test_restamp_inside_a_pysyncobj_command(t1: int, t2: int) -> None:
    """With protocol 2 pysyncobj would encode bytes through latin-1 and the entry would not
    appear verbatim in the command; node.raft sets protocol 5."""
    assert PEER_PICKLE_PROTOCOL == 5
    payload = entry.encode(t1, OPS)
    command = b"\x00" + pysyncobj_pickle.dumps((0, (payload,)))
    restamped = entry.restamp(command, t2)
    func, (inner,) = pysyncobj_pickle.loads(restamped[1:])
    assert func == 0
    assert entry.decode(inner) == (t2, OPS)


def test_entries_of_the_old_layout_still_decode() -> None:
    old = msgpack.packb({"t": 5, "ops": OPS}, use_bin_type=True)
    assert entry.decode(old) == (5, OPS)
    assert entry.restamp(old, 9) == old  # not this layout: left alone


@pytest.mark.parametrize(
    "bad", [b"", b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"t": -1, "ops": []})]
)
def test_not_an_entry(bad: bytes) -> None:
    with pytest.raises(entry.EntryError):
        entry.decode(bad)


class Clocks:
    def __init__(self, wall_ms: int) -> None:
        self.wall_ms = wall_ms
        self.mono = 100.0

    def advance(self, seconds: float) -> None:
        self.wall_ms += int(seconds * 1000)
        self.mono += seconds


def _clock(c: Clocks, replicated: int) -> ClusterClock:
    return ClusterClock(lambda: replicated, wall=lambda: c.wall_ms / 1000, monotonic=lambda: c.mono)


def test_a_wall_clock_a_day_ahead_does_not_move_the_cluster_clock() -> None:
    """(Was: moves it by at most the 60 s lead. Any lead lets a later leader anchor ahead
    of real time and expire leases early; node/raft/cluster_clock.py has the argument.)"""
    c = Clocks(wall_ms=1_000_000 + DAY_MS)
    clock = _clock(c, replicated=1_000_000)
    clock.anchor()
    assert clock.stamp() == 1_000_000
    c.advance(10)
    assert clock.stamp() == 1_000_000 + 10_000


def test_a_wall_clock_behind_advances_the_cluster_clock_at_the_monotonic_rate() -> None:
    """(Was: holds the cluster clock still. The wall clock is ignored either way.)"""
    c = Clocks(wall_ms=500_000)
    clock = _clock(c, replicated=1_000_000)
    clock.anchor()
    assert clock.stamp() == 1_000_000
    c.advance(5)
    assert clock.stamp() == 1_005_000


def test_a_correct_wall_clock_is_not_followed_either() -> None:
    """(Was: used as is. The cluster clock resumes from the replicated one and runs at the
    monotonic rate: it lags the wall clock by the election gap, here 1 s.)"""
    c = Clocks(wall_ms=1_000_000)
    clock = _clock(c, replicated=999_000)
    clock.anchor()
    assert clock.stamp() == 999_000
    c.advance(2)
    assert clock.stamp() == 1_001_000


def test_a_wall_clock_jump_mid_term_changes_nothing() -> None:
    c = Clocks(wall_ms=1_000_000)
    clock = _clock(c, replicated=1_000_000)
    clock.anchor()
    c.wall_ms += 25 * 3600 * 1000
    c.advance(1)
    assert clock.stamp() == clock.peek() == 1_001_000
    c.wall_ms -= 28 * 3600 * 1000
    c.advance(1)
    assert clock.stamp() == 1_002_000


def test_the_replicated_clock_is_a_floor_and_a_new_term_starts_from_it() -> None:
    """Entries of an earlier term applied after the anchor may carry later times; the
    stamps and peek never go below the replicated clock."""
    c = Clocks(wall_ms=0)
    replicated = [1_000_000]
    clock = ClusterClock(
        lambda: replicated[0], wall=lambda: c.wall_ms / 1000, monotonic=lambda: c.mono
    )
    clock.anchor()
    replicated[0] = 1_003_000
    c.advance(1)
    assert clock.peek() == clock.stamp() == 1_003_000
    c.advance(3)
    assert clock.stamp() == 1_004_000


def test_a_fresh_cluster_anchors_at_the_wall_clock() -> None:
    c = Clocks(wall_ms=1_700_000_000_000)
    clock = _clock(c, replicated=0)
    clock.anchor()
    assert clock.stamp() == 1_700_000_000_000
