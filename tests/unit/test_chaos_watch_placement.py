"""Where the chaos watchers start (issue 12): w0 on the node the run's fault will hit, so
that the fault exercises the watch resume path, w1 on another node. The fault's victim is
chosen before the run (FaultContext.plan) and the fault then hits that node."""

from __future__ import annotations

import random

import pytest

from statekeeper.chaos.faults import FaultContext
from statekeeper.chaos.faults.partitions import PartitionMajorityMinority
from statekeeper.chaos.faults.process import KillFollower, KillLeader, KillRandom, WipeFollower
from statekeeper.chaos.faults.registry import FAULTS
from statekeeper.chaos.watch_workload import Watchers, watcher_nodes
from statekeeper.chaos.workload_config import WorkloadConfig

IDS = ["node-0", "node-1", "node-2"]


class FakeCluster:
    def __init__(self, leader: str = "node-1") -> None:
        self.node_ids = list(IDS)
        self.leader = leader
        self.killed: list[str] = []

    def status(self, nid: str) -> dict:
        return {"role": "leader" if nid == self.leader else "follower"}

    def kill_node(self, nid: str) -> None:
        self.killed.append(nid)


class FakeNet:
    def __init__(self) -> None:
        self.splits: list[tuple[list[str], list[str]]] = []

    def split(self, a: list[str], b: list[str]) -> None:
        self.splits.append((a, b))


def ctx(cluster: FakeCluster, seed: int = 7, **kw) -> FaultContext:
    return FaultContext(cluster=cluster, rng=random.Random(seed), log=lambda m: None, **kw)  # type: ignore[arg-type]


def test_w0_starts_on_the_target_and_w1_on_the_next_node() -> None:
    assert watcher_nodes(IDS, "node-2", 2) == ["node-2", "node-0"]
    assert watcher_nodes(IDS, "node-0", 2) == ["node-0", "node-1"]
    assert watcher_nodes(IDS, "node-1", 4) == ["node-1", "node-2", "node-0", "node-1"]
    # No single victim (kill-all, packet-loss, crash-snapshot, ...): w_i on node i.
    assert watcher_nodes(IDS, None, 2) == ["node-0", "node-1"]
    assert watcher_nodes(["node-0"], None, 2) == ["node-0", "node-0"]
    with pytest.raises(ValueError):
        watcher_nodes(IDS, "node-9", 2)


def test_each_watcher_tries_its_start_node_first_then_the_ring() -> None:
    urls = [f"http://127.0.0.1:{p}" for p in (1, 2, 3)]
    w = Watchers(urls, IDS, WorkloadConfig(watchers=2), target="node-2")
    assert w.first == ["node-2", "node-0"]
    assert w._start_at == [2, 0]
    w = Watchers(urls, IDS, WorkloadConfig(watchers=2))
    assert w.first == ["node-0", "node-1"]


@pytest.mark.parametrize("seed", range(8))
def test_the_planned_follower_is_the_one_the_fault_hits(seed: int) -> None:
    for cls in (KillFollower, WipeFollower):
        lc = FakeCluster()
        c = ctx(lc, seed)
        target = c.plan(cls.watch_target)
        assert target != "node-1" and target in IDS
        if cls is KillFollower:
            f = cls()
            f.start(c)
            assert lc.killed == [target] and f.victim == target
        assert c.follower() == target  # again and again: the plan is kept


def test_a_planned_follower_that_became_leader_is_not_picked() -> None:
    lc = FakeCluster("node-1")
    c = ctx(lc)
    target = c.plan("follower")
    lc.leader = target  # an election during the warmup
    assert c.follower() not in (target,)


def test_leader_random_and_no_target() -> None:
    lc = FakeCluster("node-2")
    c = ctx(lc)
    assert c.plan("leader") == "node-2"
    f = KillLeader()
    f.start(c)
    assert lc.killed == ["node-2"]
    lc2 = FakeCluster()
    c2 = ctx(lc2, 3)
    target = c2.plan("random")
    f2 = KillRandom()
    f2.start(c2)
    assert lc2.killed == [target]
    assert c.plan(None) is None
    with pytest.raises(ValueError):
        c.plan("everyone")


@pytest.mark.parametrize("seed", range(6))
def test_the_minority_of_a_random_split_is_the_planned_node(seed: int) -> None:
    net = FakeNet()
    c = ctx(FakeCluster(), seed, partitioner=net)
    target = c.plan(PartitionMajorityMinority.watch_target)
    PartitionMajorityMinority().start(c)
    ((minority, majority),) = net.splits
    assert minority == [target] and sorted(minority + majority) == IDS


def test_every_fault_names_a_known_target() -> None:
    targets = {name: cls.watch_target for name, cls in FAULTS.items()}
    assert set(targets.values()) <= {None, "leader", "follower", "random"}
    for name in ("kill-leader", "pause-leader", "partition-leader", "proxy-blackhole"):
        assert targets[name] == "leader", name
    for name in ("kill-follower", "wipe-follower", "partition-follower", "crash-install"):
        assert targets[name] == "follower", name
    for name in ("kill-all", "power-loss", "packet-loss", "crash-snapshot", "none"):
        assert targets[name] is None, name
