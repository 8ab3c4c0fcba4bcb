"""node/raft/data_dir.py: which starts vote at once (a new cluster) and which catch up first
(no raft state: a lost disk, a new member), and that the decision survives a restart."""

from __future__ import annotations

from pathlib import Path

from statekeeper.node.config import ClusterConfig, NodeConfig
from statekeeper.node.raft.data_dir import CATCHING_UP_FILE, bootstrap_new_cluster, prepare_raft_dir


def _cluster(base: Path) -> ClusterConfig:
    nodes = tuple(
        NodeConfig(id=f"n{i}", host="127.0.0.1", raft_port=9000 + i, http_port=9100 + i)
        for i in range(3)
    )
    return ClusterConfig(nodes=nodes, data_dir=str(base), secret="s")


def test_an_empty_start_catches_up_and_a_restart_before_it_did_still_does(tmp_path: Path) -> None:
    raft = tmp_path / "n0" / "raft"
    assert prepare_raft_dir(str(raft), new_cluster=False)
    assert (raft / CATCHING_UP_FILE).exists()
    assert prepare_raft_dir(str(raft), new_cluster=False)  # restarted before catching up
    assert prepare_raft_dir(str(raft), new_cluster=True)  # the flag does not undo it
    (raft / CATCHING_UP_FILE).unlink()  # what catchup.py does once caught up
    assert not prepare_raft_dir(str(raft), new_cluster=False)


def test_a_new_cluster_member_votes_at_once(tmp_path: Path) -> None:
    raft = tmp_path / "n0" / "raft"
    assert not prepare_raft_dir(str(raft), new_cluster=True)
    assert raft.is_dir() and not (raft / CATCHING_UP_FILE).exists()


def test_a_start_that_crashed_while_creating_the_raft_dir_starts_over(tmp_path: Path) -> None:
    staging = tmp_path / "raft.new"
    staging.mkdir()  # crashed before the rename: no raft dir, so still no raft state
    assert prepare_raft_dir(str(tmp_path / "raft"), new_cluster=False)
    assert (tmp_path / "raft" / CATCHING_UP_FILE).exists() and not staging.exists()


def test_bootstrap_only_when_no_node_has_raft_state(tmp_path: Path) -> None:
    cfg = _cluster(tmp_path)
    assert bootstrap_new_cluster(cfg) == ["n0", "n1", "n2"]
    assert all((cfg.node_data_dir(f"n{i}") / "raft").is_dir() for i in range(3))
    # n1 lost its disk: the cluster exists, so n1 is not bootstrapped as a voter.
    (cfg.node_data_dir("n1") / "raft").rmdir()
    assert bootstrap_new_cluster(cfg) == []
    assert prepare_raft_dir(str(cfg.node_data_dir("n1") / "raft"), new_cluster=False)
