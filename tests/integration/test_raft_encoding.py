"""How the raft layer encodes what it sends and journals (issue 17, per-op CPU): one pickle
and deflate per AppendEntries for all followers (node/raft/peer_encoding.py), checked on
real raft nodes on loopback with real RocksDB."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.raft import peer_encoding, syncobj
from tests.integration.raft_harness import Member, config, leader_of, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def members():
    made: list[Member] = []
    yield made
    for m in made:
        m.close()


class _CountingEncoder(peer_encoding.PassEncoder):
    passes: list[peer_encoding.PassEncoder] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.passes.append(self)


def test_followers_share_one_encoding_per_append_entries(tmp_path: Path, members, monkeypatch) -> None:
    """Before: every follower's AppendEntries was pickled and deflated on its own (~70 us
    each for a small message, mostly zlib's set-up). Now the second follower reuses the
    first one's bytes, and both still apply every entry."""
    monkeypatch.setattr(syncobj, "PassEncoder", _CountingEncoder)
    _CountingEncoder.passes = []
    cfg = config(tmp_path, 3)
    members.extend(Member(cfg, f"n{i}") for i in range(3))
    lead = leader_of(members)
    wait_for(lambda: len(lead.obj._SyncObj__connectedNodes) == 2, what="both followers connected")
    keys = [f"k{i}" for i in range(20)]
    for k in keys:
        lead.put(k, b"v-" + k.encode())
    for m in members:
        wait_for(lambda m=m: m.sm.applied_index >= lead.sm.applied_index, what="followers caught up")
        for k in keys:
            assert m.sm.get("a", k)["kv"]["value"] == b"v-" + k.encode()
    reused = sum(p.reused for p in _CountingEncoder.passes)
    encoded = sum(p.encoded for p in _CountingEncoder.passes)
    # One pass per put at least, each with two identical messages (heartbeats too).
    assert reused >= len(keys), (encoded, reused)
