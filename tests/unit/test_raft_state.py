"""node/raft/data_dir.py: which starts vote at once (a new cluster, a member joining) and
which catch up first (no raft state: a lost disk), and that the decision survives a
restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.node.config import ClusterConfig, NodeConfig
from statekeeper.node.raft.data_dir import (
    CATCHING_UP_FILE,
    JOINING_FILE,
    EmptyStart,
    bootstrap_new_cluster,
    prepare_raft_dir,
)

LOST, NEW, JOIN = EmptyStart.LOST_DISK, EmptyStart.NEW_CLUSTER, EmptyStart.JOIN


def _cluster(base: Path) -> ClusterConfig:
    nodes = tuple(
        NodeConfig(id=f"n{i}", host="127.0.0.1", raft_port=9000 + i, http_port=9100 + i)
        for i in range(3)
    )
    return ClusterConfig(nodes=nodes, data_dir=str(base), secret="s")


def test_an_empty_start_catches_up_and_a_restart_before_it_did_still_does(tmp_path: Path) -> None:
    raft = tmp_path / "n0" / "raft"
    assert prepare_raft_dir(str(raft), LOST) == CATCHING_UP_FILE
    assert (raft / CATCHING_UP_FILE).exists()
    assert prepare_raft_dir(str(raft), LOST) == CATCHING_UP_FILE  # restarted before caught up
    assert prepare_raft_dir(str(raft), NEW) == CATCHING_UP_FILE  # a flag does not undo it
    assert prepare_raft_dir(str(raft), JOIN) == CATCHING_UP_FILE
    (raft / CATCHING_UP_FILE).unlink()  # what catchup.py does once caught up
    assert prepare_raft_dir(str(raft), LOST) is None


def test_a_new_cluster_member_votes_at_once(tmp_path: Path) -> None:
    raft = tmp_path / "n0" / "raft"
    assert prepare_raft_dir(str(raft), NEW) is None
    assert raft.is_dir() and not (raft / CATCHING_UP_FILE).exists()


def test_a_joining_member_is_marked_joining_until_caught_up_across_restarts(tmp_path: Path) -> None:
    raft = tmp_path / "n0" / "raft"
    assert prepare_raft_dir(str(raft), JOIN) == JOINING_FILE
    assert (raft / JOINING_FILE).exists() and not (raft / CATCHING_UP_FILE).exists()
    assert prepare_raft_dir(str(raft), LOST) == JOINING_FILE  # a restart without --join


def test_new_cluster_and_join_exclude_each_other() -> None:
    assert EmptyStart.from_flags(False, False) is LOST
    assert EmptyStart.from_flags(True, False) is NEW
    assert EmptyStart.from_flags(False, True) is JOIN
    with pytest.raises(ValueError, match="exclude each other"):
        EmptyStart.from_flags(True, True)


def test_a_start_that_crashed_while_creating_the_raft_dir_starts_over(tmp_path: Path) -> None:
    staging = tmp_path / "raft.new"
    staging.mkdir()  # crashed before the rename: no raft dir, so still no raft state
    assert prepare_raft_dir(str(tmp_path / "raft"), LOST) == CATCHING_UP_FILE
    assert (tmp_path / "raft" / CATCHING_UP_FILE).exists() and not staging.exists()


def test_bootstrap_only_when_no_node_has_raft_state(tmp_path: Path) -> None:
    cfg = _cluster(tmp_path)
    assert bootstrap_new_cluster(cfg) == ["n0", "n1", "n2"]
    assert all((cfg.node_data_dir(f"n{i}") / "raft").is_dir() for i in range(3))
    # n1 lost its disk: the cluster exists, so n1 is not bootstrapped as a voter.
    (cfg.node_data_dir("n1") / "raft").rmdir()
    assert bootstrap_new_cluster(cfg) == []
    assert prepare_raft_dir(str(cfg.node_data_dir("n1") / "raft"), LOST) == CATCHING_UP_FILE
