"""A node that lost its disk (issue 26, defect 5): it restarts with no raft state, so it
has forgotten the entries it acknowledged and the vote it cast. Until it has caught up
it must not vote (node/raft/catchup.py). Real raft nodes on loopback, real RocksDB."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest

from statekeeper.node.raft.catchup import CATCHING_UP_FILE
from statekeeper.node.raft.data_dir import JOINING_FILE, EmptyStart
from tests.integration.raft_harness import Member, config, leader_of, wait_for

pytestmark = pytest.mark.integration



def _acked_then_lost(tmp_path: Path, nodes: dict[str, Member]):
    """'acked' committed by leader L and follower A while B is down; then A loses its
    whole data dir and L stops. Returns (cfg, L, A, B)."""
    cfg = config(tmp_path, 3, snapshot_min_entries=100_000)
    nodes.update({f"n{i}": Member(cfg, f"n{i}") for i in range(3)})
    lead = leader_of(list(nodes.values()))
    lead.put("before")
    L = lead.node_id
    A, B = (n for n in sorted(nodes) if n != L)
    wait_for(lambda: nodes[B].sm.applied_index >= lead.sm.applied_index, 5, "B caught up")
    nodes.pop(B).close()
    lead.put("acked")
    wait_for(lambda: nodes[A].raft._journal[-1][1] >= lead.raft._journal[-1][1], 5, "A has it")
    nodes.pop(A).close()
    shutil.rmtree(cfg.node_data_dir(A))  # a lost disk: raft state (term, vote, log) and db
    nodes.pop(L).close()
    return cfg, L, A, B


def test_a_node_that_lost_its_disk_cannot_elect_a_leader_missing_an_acked_write(
    tmp_path: Path, nodes
) -> None:
    """The probe (probe_lost_disk_vote.py): A restarts empty next to B, which never saw
    'acked'. Before the fix A voted for B at once, B led term 2 without 'acked', and L's
    applied copy was overwritten when it rejoined (replicas diverged)."""
    cfg, L, A, B = _acked_then_lost(tmp_path, nodes)
    nodes[A] = Member(cfg, A)
    nodes[B] = Member(cfg, B)
    # Give a wrong election every chance to happen (it took well under a second before).
    with contextlib.suppress(AssertionError):
        leader_of([nodes[A], nodes[B]], timeout=3)
    nodes[L] = Member(cfg, L)
    new = leader_of(list(nodes.values()), timeout=20)
    new.put("after")
    for m in nodes.values():
        wait_for(lambda m=m: m.sm.applied_index >= new.sm.applied_index, 20, f"{m.node_id} applied")
    for m in nodes.values():
        assert m.sm.get("a", "acked")["kv"] is not None, f"'acked' lost on {m.node_id}"
    assert len({m.sm.revision for m in nodes.values()}) == 1, "replicas diverged"


def test_an_empty_start_is_a_non_voter_until_caught_up_even_across_a_restart(
    tmp_path: Path, nodes
) -> None:
    """Marker lifecycle: an empty start writes raft/catching-up and does not vote; a
    restart before it caught up keeps it so; once it heard a leader and holds an entry
    of that leader's term up to its commit index, the marker goes and it votes."""
    cfg, L, A, B = _acked_then_lost(tmp_path, nodes)
    marker = cfg.node_data_dir(A) / "raft" / CATCHING_UP_FILE
    nodes[A] = Member(cfg, A)
    assert marker.exists() and not nodes[A].raft.status().voter
    nodes.pop(A).close()
    nodes[A] = Member(cfg, A)  # restarted before it caught up: still not a voter
    assert marker.exists() and not nodes[A].raft.status().voter
    nodes[L] = Member(cfg, L)
    nodes[B] = Member(cfg, B)
    lead = leader_of(list(nodes.values()), timeout=20)
    assert lead.node_id == L  # B lacks 'acked' and A stands for no election
    wait_for(lambda: nodes[A].raft.status().voter, 20, "A caught up and votes")
    assert not marker.exists()
    assert nodes[A].sm.get("a", "acked")["kv"] is not None
    # Now a voter: with L down, A and B elect a leader (needs A's vote or A standing).
    nodes.pop(L).close()
    new = leader_of([nodes[A], nodes[B]], timeout=20)
    assert new.sm.get("a", "acked")["kv"] is not None


def test_a_new_clusters_nodes_vote_from_their_first_start(tmp_path: Path, nodes) -> None:
    """Bootstrap: config() initialises the data dirs of a brand-new cluster (as
    `statekeeper cluster up` and `--new-cluster` do): every node votes at once."""
    cfg = config(tmp_path, 3)
    nodes.update({f"n{i}": Member(cfg, f"n{i}") for i in range(3)})
    leader_of(list(nodes.values())).put("k")
    for m in nodes.values():
        assert m.raft.status().voter
        assert not (cfg.node_data_dir(m.node_id) / "raft" / CATCHING_UP_FILE).exists()


def test_new_members_joining_vote_but_stand_for_no_election_until_caught_up(
    tmp_path: Path, nodes
) -> None:
    """--join (issue 32, seed 810258): a new member votes from its first start, but its
    configuration comes from cluster.toml, not a log, so it must not stand: two joiners
    whose empty logs satisfy each other elected one of them, a leader missing every
    committed entry (the simulator: two leaders in term 1). Here: two joiners alone elect
    no one; with a member holding the log, they elect it and then catch up."""
    cfg = config(tmp_path, 3)
    for i in range(3):
        shutil.rmtree(cfg.node_data_dir(f"n{i}") / "raft")
    nodes.update({i: Member(cfg, i, EmptyStart.JOIN) for i in ("n1", "n2")})
    assert all(m.raft.status().voter for m in nodes.values())
    with pytest.raises(AssertionError, match="a leader"):
        leader_of(list(nodes.values()), timeout=3)
    nodes["n0"] = Member(cfg, "n0", EmptyStart.NEW_CLUSTER)
    assert leader_of(list(nodes.values()), timeout=20).node_id == "n0"
    for i in ("n1", "n2"):
        wait_for(lambda i=i: not (cfg.node_data_dir(i) / "raft" / JOINING_FILE).exists(), 20)
