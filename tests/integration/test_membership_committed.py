"""Membership follows the committed log (issue 26, items 1 and 2): raft nodes in this
process on loopback (raft_harness.py), real RocksDB. Both tests failed before their fix.

The interleaving both start from: a leader appends "remove F2" while its followers are
down, so the change cannot commit; the other two then elect a leader and write past it,
and the stale entry must be truncated when the old leader comes back.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from statekeeper.node import snapshot_file
from statekeeper.node.raft.members import MEMBERSHIP_COMMAND
from tests.integration.raft_harness import Member, config, leader_of, wait_for

pytestmark = pytest.mark.integration



def _ids(m: Member) -> list[str]:
    return sorted(x.id for x in m.raft.members())


def _leader_appends_a_removal_it_cannot_commit(tmp_path: Path, nodes: dict) -> tuple:
    """Three nodes; the leader L appends "rem F2" with both followers stopped. Returns
    (cfg, L, F1, F2, index of the change, its term)."""
    cfg = config(tmp_path, 3, election_timeout_min=1.0, election_timeout_max=2.0,
                 snapshot_min_entries=100_000)  # fmt: skip
    for i in range(3):
        nodes[f"n{i}"] = Member(cfg, f"n{i}")
    lead = leader_of(list(nodes.values()))
    for i in range(3):
        lead.put(f"k{i}")
    leader = lead.node_id
    f1, f2 = (n for n in sorted(nodes) if n != leader)
    victim = next(m for m in lead.raft.members() if m.id == f2)
    nodes.pop(f1).close()
    nodes.pop(f2).close()
    lead.raft.change_member("rem", victim, lambda err: None)
    j = lead.raft._journal
    wait_for(lambda: j[-1][0][:1] == MEMBERSHIP_COMMAND, 5, "the removal appended")
    assert lead.obj.raftCommitIndex < j[-1][1]
    return cfg, leader, f1, f2, j[-1][1], j[-1][2]


def test_a_snapshot_carries_the_configuration_at_its_last_index(tmp_path: Path, nodes) -> None:
    """Item 1: the snapshot recorded the members of the log's END: an uncommitted removal
    (later truncated) came back at every restart and 2 of 3 real members never elected."""
    cfg, leader, _f1, f2, change_idx, _term = _leader_appends_a_removal_it_cannot_commit(
        tmp_path, nodes
    )
    lead = nodes[leader]
    assert f2 not in _ids(lead)  # the change took effect on append (log end)
    before = lead.raft.snapshots_taken
    lead.raft.compact_journal()
    wait_for(lambda: lead.raft.snapshots_taken > before, 10, "the snapshot")
    header, _ = snapshot_file.read_header(str(cfg.node_data_dir(leader) / "raft" / "snapshot.bin"))
    assert header["last"][1] < change_idx
    assert sorted(m["id"] for m in header["members"]) == ["n0", "n1", "n2"], header["members"]
    assert sorted(header["cluster"]) == sorted(n.raft_address for n in cfg.nodes)
    # A restart still ends in the uncommitted removal: the journal holds it after the snapshot.
    nodes.pop(leader).close()
    nodes[leader] = again = Member(cfg, leader)
    assert f2 not in _ids(again)


def test_a_node_whose_log_ends_in_an_uncommitted_removal_hears_the_removed_leader(
    tmp_path: Path, nodes
) -> None:
    """Item 2: a node refused connections from (and stopped dialling) the member its
    uncommitted entry removed: with that member leading, the stale entry was never
    truncated and the node never heard a leader."""
    cfg, old, f1, f2, change_idx, change_term = _leader_appends_a_removal_it_cannot_commit(
        tmp_path, nodes
    )
    nodes.pop(old).close()
    nodes[f1], nodes[f2] = Member(cfg, f1), Member(cfg, f2)
    if leader_of([nodes[f1], nodes[f2]], timeout=20).node_id != f2:
        nodes[f1].raft.request_transfer(f2, lambda ok: None)
        wait_for(lambda: nodes[f2].raft.is_leader(), 10, f"{f2} leads")
    for i in range(3):
        nodes[f2].put(f"after{i}")
    nodes[old] = back = Member(cfg, old)
    j = back.raft._journal

    def stale_entry_replaced() -> bool:
        pos = change_idx - j[0][1]
        return j[-1][1] >= change_idx and j[pos][2] != change_term

    wait_for(stale_entry_replaced, 15, f"{old}'s uncommitted 'rem {f2}' replaced by {f2}")
    wait_for(lambda: _ids(back) == ["n0", "n1", "n2"], 5, f"{old} back to three members")
    # 2 of the 3 real members commit without the third.
    nodes.pop(f1).close()
    wait_for(lambda: nodes[f2].raft.is_leader() or back.raft.is_leader(), 20, "a leader")
    lead = nodes[f2] if nodes[f2].raft.is_leader() else back
    lead.put("with-one-down")


def test_a_follower_takes_entries_from_a_leader_outside_its_configuration(
    tmp_path: Path, nodes
) -> None:
    """Item 2, the accepting side: a node whose log lacks the leader's "add" (here: its
    bootstrap set omits the leader) refused the leader's connection, which names an
    address it did not know, and so never received the entries that would teach it.
    The leader's address is made the higher one, so the leader is the one that dials."""
    cfg = config(tmp_path, 3, election_timeout_min=1.0, election_timeout_max=2.0)
    by_port = sorted(cfg.nodes, key=lambda n: n.raft_address)
    n0, n2, n1 = (
        dataclasses.replace(n, id=i) for n, i in zip(by_port, ("n0", "n2", "n1"), strict=True)
    )
    full = dataclasses.replace(cfg, nodes=(n0, n1, n2))
    assert n1.raft_address > n2.raft_address  # n1 dials n2
    lagging = dataclasses.replace(cfg, nodes=(n0, n2))  # n2 has never heard of n1
    nodes["n0"], nodes["n1"] = Member(full, "n0"), Member(full, "n1")
    lead = leader_of([nodes["n0"], nodes["n1"]], timeout=20)
    if lead.node_id != "n1":
        lead.raft.request_transfer("n1", lambda ok: None)
        wait_for(lambda: nodes["n1"].raft.is_leader(), 10, "n1 leads")
    nodes["n2"] = Member(lagging, "n2")
    nodes["n1"].put("k")
    end = nodes["n1"].raft._journal[-1][1]
    j2 = nodes["n2"].raft._journal
    wait_for(lambda: j2[-1][1] >= end, 15, "n2 holds n1's entries")
    wait_for(lambda: nodes["n2"].raft.status().commit_index >= end, 5, "n2 commits them")
