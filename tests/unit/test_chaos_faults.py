"""The fault registry, what each fault does to a (fake) cluster / network, and the
Toxiproxy wiring (against the embedded Toxiproxy-compatible server, loopback only)."""

from __future__ import annotations

import random

import pytest

from chaos import faults
from chaos.faults import FAULTS, SMOKE, FaultContext, ProxyNet, get_fault

EXPECTED = {
    "none",
    "kill-leader", "kill-follower", "kill-random", "pause-leader", "rolling-restart",
    "kill-all", "wipe-follower", "power-loss",
    "partition-leader", "partition-follower", "partition-majority-minority",
    "partition-bridge", "one-way-loss", "packet-loss",
    "proxy-latency", "proxy-bandwidth", "proxy-blackhole", "proxy-reset-peer",
    "proxy-slow-close", "proxy-limit-data", "proxy-slicer", "proxy-down",
}  # fmt: skip


def test_registry_names_descriptions_topologies() -> None:
    assert set(FAULTS) == EXPECTED
    for name, cls in FAULTS.items():
        assert cls.name == name
        assert len(cls.description) > 20
        assert cls.topology in ("plain", "links", "proxy", "lazyfs")
        assert cls.kind in ("none", "process", "partition", "proxy")
        if cls.topology in ("plain", "proxy"):  # the others probe iptables / FUSE
            ok, why = cls.available()
            assert isinstance(ok, bool) and (ok or why)
    assert set(SMOKE) <= set(FAULTS)
    assert faults.fault_names() == [n for n in FAULTS if n != "none"]


def test_unknown_fault_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="kill-leader"):
        get_fault("kill-everything")


def test_partition_availability_follows_chaos_partition(monkeypatch) -> None:
    import chaos.partition

    monkeypatch.setattr(chaos.partition, "available", lambda: (False, "no iptables here"))
    assert FAULTS["partition-leader"].available() == (False, "no iptables here")
    assert FAULTS["kill-leader"].available() == (True, "")


def test_only_power_loss_may_lose_acknowledged_writes_and_only_without_fsync() -> None:
    for name in FAULTS:
        f = get_fault(name)
        assert not f.allows_loss("always")
        assert f.allows_loss("never") == (name == "power-loss")


# -- fakes --------------------------------------------------------------------------


class FakeCluster:
    def __init__(self, leader: str = "node-1") -> None:
        self.node_ids = ["node-0", "node-1", "node-2"]
        self.leader = leader
        self.running = set(self.node_ids)
        self.paused: set[str] = set()
        self.calls: list[tuple[str, str]] = []

    def status(self, nid):
        if nid not in self.running or nid in self.paused:
            return None
        return {"role": "leader" if nid == self.leader else "follower"}

    def leader_id(self):
        return self.leader

    def kill_node(self, nid):
        self.calls.append(("kill", nid))
        was = nid in self.running
        self.running.discard(nid)
        return was

    def pid(self, nid):
        return None  # _kill_many then relies on kill_node

    def start_node(self, nid):
        self.calls.append(("start", nid))
        self.running.add(nid)

    def is_running(self, nid):
        return nid in self.running

    def wait_live(self, nid, timeout=0):
        assert nid in self.running

    def pause_node(self, nid):
        self.calls.append(("pause", nid))
        self.paused.add(nid)

    def resume_node(self, nid):
        self.calls.append(("resume", nid))
        self.paused.discard(nid)

    def wipe_node(self, nid):
        assert nid not in self.running
        self.calls.append(("wipe", nid))


class FakePartitioner:
    def __init__(self) -> None:
        self.cuts: list[tuple[str, str, bool, float | None]] = []

    def cut(self, a, b, *, one_way=False, probability=None):
        self.cuts.append((a, b, one_way, probability))

    def isolate(self, node, others=None):
        for o in ["node-0", "node-1", "node-2"]:
            if o != node:
                self.cut(node, o)

    def split(self, side_a, side_b):
        for x in side_a:
            for y in side_b:
                self.cut(x, y)

    def heal(self):
        self.cuts.clear()


def ctx_for(cluster, **kw) -> FaultContext:
    return FaultContext(cluster=cluster, rng=random.Random(7), log=lambda m: None, **kw)


def test_kill_leader_kills_the_leader_and_restarts_it_at_heal() -> None:
    c = FakeCluster(leader="node-2")
    ctx = ctx_for(c)
    f = get_fault("kill-leader")
    assert "SIGKILL node-2 (leader)" in f.start(ctx)
    assert ctx.injected_ns is not None
    assert not c.is_running("node-2")
    f.stop(ctx)
    assert c.calls == [("kill", "node-2"), ("start", "node-2")]


def test_kill_follower_never_picks_the_leader() -> None:
    for seed in range(10):
        c = FakeCluster(leader="node-0")
        ctx = FaultContext(cluster=c, rng=random.Random(seed), log=lambda m: None)
        get_fault("kill-follower").start(ctx)
        assert c.calls[0][1] != "node-0"


def test_pause_leader_resumes_and_kill_all_restarts_everyone() -> None:
    c = FakeCluster()
    ctx = ctx_for(c)
    f = get_fault("pause-leader")
    f.start(ctx)
    assert c.paused == {"node-1"}
    f.stop(ctx)
    f.stop(ctx)  # healing twice is harmless
    assert not c.paused
    c = FakeCluster()
    ctx = ctx_for(c)
    f = get_fault("kill-all")
    f.start(ctx)
    assert not c.running
    f.stop(ctx)
    assert c.running == set(c.node_ids)


def test_wipe_follower_kills_wipes_and_restarts() -> None:
    c = FakeCluster(leader="node-0")
    ctx = ctx_for(c)
    get_fault("wipe-follower").start(ctx)
    (k, victim), (w, v2), (s, v3) = c.calls
    assert (k, w, s) == ("kill", "wipe", "start") and victim == v2 == v3 != "node-0"


def test_partitions_cut_what_they_say() -> None:
    c = FakeCluster(leader="node-1")
    net = FakePartitioner()
    ctx = ctx_for(c, partitioner=net)
    get_fault("partition-leader").start(ctx)
    assert sorted((a, b) for a, b, *_ in net.cuts) == [("node-1", "node-0"), ("node-1", "node-2")]
    get_fault("partition-leader").stop(ctx)
    assert net.cuts == []
    get_fault("one-way-loss").start(ctx)
    assert all(a == "node-1" and one_way for a, _b, one_way, _p in net.cuts) and len(net.cuts) == 2
    net.heal()
    get_fault("partition-bridge").start(ctx)
    assert len(net.cuts) == 1 and "node-1" in net.cuts[0][:2]  # leader cut from one follower
    net.heal()
    get_fault("packet-loss").start(ctx)
    assert len(net.cuts) == 3 and {p for *_, p in net.cuts} == {0.3}
    net.heal()
    get_fault("partition-majority-minority").start(ctx)
    assert len(net.cuts) == 2  # one node alone against the other two


def test_partition_fault_without_link_addresses_is_an_error() -> None:
    with pytest.raises(faults.FaultError, match="per-link"):
        get_fault("partition-leader").start(ctx_for(FakeCluster()))


# -- Toxiproxy wiring -----------------------------------------------------------------


@pytest.fixture
def proxynet():
    pytest.importorskip("toxiproxy")
    from chaos.toxiproxy import ToxiproxyServer

    with ToxiproxyServer() as server:
        net = ProxyNet(server.url, prefix="t")
        # Upstreams that do not exist: nothing connects in these tests.
        net.setup(
            ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"],
            ["127.0.0.1:4", "127.0.0.1:5", "127.0.0.1:6"],
        )
        try:
            yield net
        finally:
            net.close()


def _toxics(proxy) -> dict[str, str]:
    return {name: t.stream for name, t in proxy.toxics().items()}


def test_proxynet_one_proxy_per_directed_link_and_client_link(proxynet) -> None:
    assert sorted(proxynet.raft) == [(i, j) for i in range(3) for j in range(3) if i != j]
    assert proxynet.raft[(0, 2)].upstream == "127.0.0.1:3"
    assert proxynet.client[1].upstream == "127.0.0.1:5"
    dial = proxynet.raft_dial(0, ["node-0", "node-1", "node-2"])
    assert [peer for peer, _ in dial] == ["node-1", "node-2"]
    assert dial[0][1] == proxynet.raft[(0, 1)].listen
    assert all(u.startswith("http://127.0.0.1:") for u in proxynet.client_urls())


def test_one_direction_of_a_raft_link_is_degraded_on_both_proxies(proxynet) -> None:
    # Data 0 -> 1 travels upstream on raft-0-1 (0 dialled) or downstream on raft-1-0.
    proxynet.degrade_link(0, 1, "timeout", timeout=0)
    assert _toxics(proxynet.raft[(0, 1)]) == {"chaos_timeout_upstream": "upstream"}
    assert _toxics(proxynet.raft[(1, 0)]) == {"chaos_timeout_downstream": "downstream"}
    assert _toxics(proxynet.raft[(0, 2)]) == {}
    proxynet.heal()
    assert all(_toxics(p) == {} for p in proxynet.raft.values())


def test_proxy_faults_add_toxics_and_heal_removes_them(proxynet) -> None:
    c = FakeCluster(leader="node-0")
    ctx = ctx_for(c, proxies=proxynet)
    for name in ("proxy-blackhole", "proxy-bandwidth", "proxy-reset-peer", "proxy-latency",
                 "proxy-limit-data", "proxy-slicer"):  # fmt: skip
        f = get_fault(name)
        f.start(ctx)
        touched = {k for k, p in proxynet.raft.items() if _toxics(p)}
        if name in ("proxy-latency", "proxy-limit-data", "proxy-slicer"):
            assert touched == set(proxynet.raft), name
        else:  # only the leader's (node-0) links, both directions
            assert touched == {k for k in proxynet.raft if 0 in k}, name
        f.stop(ctx)
        assert all(_toxics(p) == {} for p in [*proxynet.raft.values(), *proxynet.client.values()])
    f = get_fault("proxy-down")
    f.start(ctx)
    api = proxynet._api.proxies()
    down = {name for name, p in api.items() if not p.enabled}
    assert down == {"t-raft-0-1", "t-raft-1-0", "t-raft-0-2", "t-raft-2-0", "t-client-0"}
    f.stop(ctx)
    assert all(p.enabled for p in proxynet._api.proxies().values())
