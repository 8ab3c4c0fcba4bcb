"""The fault registry, what each fault does to a (fake) cluster / network, and the
Toxiproxy wiring (against the embedded Toxiproxy-compatible server, loopback only)."""

from __future__ import annotations

import random

import pytest

from statekeeper.chaos import faults
from statekeeper.chaos.faults import FAULTS, SMOKE, FaultContext, ProxyNet, clock, get_fault

EXPECTED = {
    "none",
    "kill-leader", "kill-follower", "kill-random", "pause-leader", "rolling-restart",
    "kill-all", "wipe-follower", "lost-disk", "power-loss", "power-loss-install",
    "partition-leader", "partition-follower", "partition-majority-minority",
    "partition-bridge", "one-way-loss", "packet-loss",
    "proxy-latency", "proxy-bandwidth", "proxy-blackhole", "proxy-reset-peer",
    "proxy-slow-close", "proxy-limit-data", "proxy-slicer", "proxy-down",
    "crash-snapshot", "crash-install", "crash-follower-fsync", "clock-jump",
    "deposed-leader-snapshot", "disk-full", "membership", "membership-uncommitted",
    "quota-retry",
}  # fmt: skip


def test_registry_names_descriptions_topologies() -> None:
    assert set(FAULTS) == EXPECTED
    for name, cls in FAULTS.items():
        assert cls.name == name
        assert len(cls.description) > 20
        assert cls.topology in ("plain", "links", "proxy", "lazyfs", "smallfs")
        assert cls.kind in ("none", "process", "partition", "proxy", "failpoint", "clock", "disk")
        if cls.topology in ("plain", "proxy"):  # the others probe iptables / FUSE
            ok, why = cls.available()
            assert isinstance(ok, bool) and (ok or why)
    assert set(SMOKE) <= set(FAULTS)
    assert faults.fault_names() == [n for n in FAULTS if n != "none"]


def test_unknown_fault_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="kill-leader"):
        get_fault("kill-everything")


def test_partition_availability_follows_chaos_partition(monkeypatch) -> None:
    from statekeeper.chaos import partition

    monkeypatch.setattr(partition, "available", lambda: (False, "no iptables here"))
    assert FAULTS["partition-leader"].available() == (False, "no iptables here")
    assert FAULTS["kill-leader"].available() == (True, "")


def test_only_power_loss_may_lose_acknowledged_writes_and_only_without_fsync() -> None:
    for name in FAULTS:
        f = get_fault(name)
        assert not f.allows_loss("always")
        assert f.allows_loss("never") == name.startswith("power-loss")


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
    from statekeeper.chaos.toxiproxy import ToxiproxyServer

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


# -- failpoints, cluster shaping, crash watcher ------------------------------------------


def test_failpoint_specs_are_validated_by_the_nodes_own_parser() -> None:
    from statekeeper.node.failpoints import FailpointError

    assert faults.failpoint_spec({"snapshot-install": "50%exit", "snapshot-pack": "sleep(1)"}) == (
        "snapshot-install=50%exit;snapshot-pack=sleep(1)"
    )
    with pytest.raises(FailpointError):
        faults.failpoint_spec({"snapshot-after-renme": "exit"})  # a typo: refused here
    with pytest.raises(FailpointError):
        faults.failpoint_spec({"snapshot-install": "50%crash"})
    assert faults.exit_failpoints(
        {"a": "exit", "b": "3*exit", "c": "2.5%exit", "d": "sleep(0.2)", "e": "off"}
    ) == ["a", "b", "c"]


def test_every_failpoint_fault_arms_valid_failpoints_that_can_fire() -> None:
    from statekeeper.node import failpoints

    for name, cls in FAULTS.items():
        if not cls.failpoints:
            continue
        assert failpoints.parse(faults.failpoint_spec(cls.failpoints)), name
        assert set(cls.failpoints) <= set(failpoints.NAMES), name
        if cls.kind == "failpoint":  # crash scenarios: something must make nodes exit
            assert faults.exit_failpoints(cls.failpoints), name
    expected = {
        "crash-snapshot": {"snapshot-after-rename", "journal-prefix-drop", "journal-prefix-dropped"},
        "crash-install": {"snapshot-install"},
        "crash-follower-fsync": {"follower-after-fsync"},
    }
    for name, names in expected.items():
        assert set(faults.exit_failpoints(FAULTS[name].failpoints)) == names


def _cfg(n: int = 3):
    from statekeeper.node.config import local_cluster

    return local_cluster(size=n, secret="s")


def test_faults_shape_the_cluster_config_and_node_env(tmp_path) -> None:
    from statekeeper.node.config import validate

    base = _cfg()
    assert get_fault("kill-leader").configure(base) == base
    assert get_fault("kill-leader").node_env(base, tmp_path) == {}
    cfg = get_fault("crash-snapshot").configure(base)
    validate(cfg)  # still a valid config (pysyncobj needs snapshot_min_entries >= 2)
    assert cfg.raft.snapshot_min_entries == faults.TINY_SNAPSHOTS["snapshot_min_entries"] >= 2
    assert cfg.raft.snapshot_min_seconds <= 1 and cfg.raft.request_timeout == base.raft.request_timeout
    env = get_fault("crash-snapshot").node_env(cfg, tmp_path)
    assert set(env) == {"node-0", "node-1", "node-2"}
    assert all(e == {"STATEKEEPER_FAILPOINTS": faults.failpoint_spec(FAULTS["crash-snapshot"].failpoints)}
               for e in env.values())
    clock = get_fault("clock-jump").configure(base)
    assert clock.retention.idempotency_seconds == 3600 < base.retention.idempotency_seconds
    # Hour-sized jumps must reach past the (shortened) idempotency window.
    assert "+25h" in FAULTS["clock-jump"].JUMPS
    assert FAULTS["deposed-leader-snapshot"].min_nodes == 5
    assert FAULTS["deposed-leader-snapshot"].topology == "links"
    assert FAULTS["deposed-leader-snapshot"].workload_settings["serializable_share"] > 0.3


def test_clock_jump_env_and_offsets(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(clock, "find_libfaketime", lambda: "/x/libfaketime.so.1")
    f = get_fault("clock-jump")
    env = f.node_env(_cfg(), tmp_path)
    e = env["node-1"]
    assert e["LD_PRELOAD"] == "/x/libfaketime.so.1"
    assert e["DONT_FAKE_MONOTONIC"] == "1"  # raft timeouts must not jump
    assert e["FAKETIME_FORCE_MONOTONIC_FIX"] == "0"  # else CPython's GIL hand-off crawls
    assert e["FAKETIME_CACHE_DURATION"] == "1" and "FAKETIME_NO_CACHE" not in e
    assert e["PYTHONPATH"].split(":")[0].endswith("chaos/clockshim")  # the time.sleep fix
    path = tmp_path / "faketime" / "node-1"
    assert e["FAKETIME_TIMESTAMP_FILE"] == str(path) and path.read_text() == "+0\n"
    f.set_offset("node-1", "+25h")
    assert path.read_text() == "+25h\n"
    f.stop(ctx_for(FakeCluster()))
    assert path.read_text() == "+0\n"


def test_clock_jump_moves_a_follower_then_the_leader_and_resets(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(clock, "find_libfaketime", lambda: "/x/libfaketime.so.1")
    monkeypatch.setattr(clock.ClockJump, "MIN_STEP_S", 0.0)
    f = get_fault("clock-jump")
    f.node_env(_cfg(), tmp_path)
    seen = []
    monkeypatch.setattr(clock.time, "sleep", lambda s: seen.append(
        {n: p.read_text().strip() for n, p in f.files.items()}))
    ctx = ctx_for(FakeCluster(leader="node-1"), window=0.5)
    f.start(ctx)
    jumped = [(n, v) for snap in seen for n, v in snap.items() if v != "+0"]
    assert [n for n, _ in jumped][-2:] == ["node-1", "node-1"]  # the leader last
    assert jumped[0][0] != "node-1" and [v for _, v in jumped] == ["+25h", "-3h"] * 2
    assert all(len([v for v in snap.values() if v != "+0"]) == 1 for snap in seen)
    assert {p.read_text() for p in f.files.values()} == {"+0\n"}


def test_last_failpoint_names_the_latest_exit() -> None:
    log = (
        "failpoints enabled: a\nfailpoint snapshot-install: exiting (hit 3)\n--- starting\n"
        "failpoint journal-prefix-drop: exiting (hit 1)\n"
    )
    assert faults.last_failpoint(log) == "journal-prefix-drop"
    assert faults.last_failpoint("nothing here") is None


class _ExitingCluster:
    """LocalCluster enough for CrashWatcher: nodes 'exit' with a status and a log line."""

    def __init__(self) -> None:
        self.node_ids = ["node-0", "node-1", "node-2"]
        self.pids = {n: 100 + i for i, n in enumerate(self.node_ids)}
        self.last_exit: dict[str, tuple[int, int]] = {}
        self.logs = {n: "" for n in self.node_ids}
        self.started: list[str] = []
        self.next_pid = 200

    def exit(self, nid: str, code: int, failpoint: str | None = None) -> None:
        self.last_exit[nid] = (self.pids.pop(nid), code)
        if failpoint:
            self.logs[nid] += f"failpoint {failpoint}: exiting (hit 1)\n"

    def pid(self, nid):
        return self.pids.get(nid)

    def log_tail(self, nid, lines=40):
        return self.logs[nid]

    def start_node(self, nid, env=None):
        self.started.append(nid)
        self.pids[nid] = self.next_pid
        self.next_pid += 1


def test_crash_watcher_restarts_failpoint_exits_only_and_counts_them() -> None:
    c = _ExitingCluster()
    w = faults.CrashWatcher(c, log=lambda m: None)  # type: ignore[arg-type]
    c.exit("node-1", 86, "snapshot-after-rename")
    c.exit("node-2", -9)  # killed by a fault: its business
    w.poll()
    w.poll()  # the same exit is handled once
    assert c.started == ["node-1"] and w.restarts == 1
    c.exit("node-1", 86, "journal-prefix-drop")
    c.exit("node-0", 1)  # a real crash: reported, not hidden by a restart
    w.poll()
    assert c.started == ["node-1", "node-1"]
    assert dict(w.crashes) == {"snapshot-after-rename": 1, "journal-prefix-drop": 1}
    assert w.by_node == {"node-1": 2} and w.unexpected == [("node-0", 1)]
    assert w.settle(0.1)
    v = w.verdict(["snapshot-after-rename", "journal-prefix-drop"])
    assert v.status == "PASS" and "snapshot-after-rename 1" in v.value
    v = w.verdict(["snapshot-after-rename", "journal-prefix-drop", "journal-prefix-dropped"])
    assert v.status == "UNKNOWN" and "journal-prefix-dropped" in v.detail
    v = faults.CrashWatcher(c).verdict(["snapshot-install"])
    assert v.status == "FAIL" and "tested nothing" in v.detail and v.value == "snapshot-install 0"


def test_crash_watcher_retries_a_restart_that_failed() -> None:
    from statekeeper.cluster.supervisor import NodeStartError

    c = _ExitingCluster()
    fails = [NodeStartError("port busy")]
    real = c.start_node

    def flaky(nid, env=None):
        if fails:
            raise fails.pop()
        real(nid)

    c.start_node = flaky  # type: ignore[method-assign]
    w = faults.CrashWatcher(c, log=lambda m: None)  # type: ignore[arg-type]
    c.exit("node-0", 86, "snapshot-install")
    w.poll()
    assert c.started == [] and w.restarts == 0 and w.crashes["snapshot-install"] == 1
    assert w.settle(1.0)  # polls again: the restart goes through now
    assert c.started == ["node-0"] and w.restarts == 1 and w.crashes["snapshot-install"] == 1


def test_start_cluster_resumes_after_a_failpoint_exit_during_start() -> None:
    """Seen in a suite run: node-0 took a snapshot and exited at snapshot-after-rename
    while the ordered start still waited for node-1; the scenario died with NodeStartError."""
    from statekeeper.cluster.supervisor import NodeStartError

    c = _ExitingCluster()
    ups: list[int] = []

    def up(timeout=90.0):
        ups.append(1)
        if len(ups) == 1:
            c.exit("node-0", 86, "snapshot-after-rename")
            raise NodeStartError("node-0 exited with code 86 before it was live")

    c.up = up  # type: ignore[attr-defined]
    w = faults.CrashWatcher(c, log=lambda m: None)  # type: ignore[arg-type]
    faults.start_cluster(c, w)  # type: ignore[arg-type]
    assert len(ups) == 2 and c.started == ["node-0"] and dict(w.crashes) == {"snapshot-after-rename": 1}

    c2 = _ExitingCluster()

    def broken_up(timeout=90.0):
        raise NodeStartError("node-1 exited with code 1 before it was live")

    c2.up = broken_up  # type: ignore[attr-defined]
    c2.exit("node-1", 1)
    w2 = faults.CrashWatcher(c2, log=lambda m: None)  # type: ignore[arg-type]
    w2.poll()
    with pytest.raises(NodeStartError):
        faults.start_cluster(c2, w2)  # type: ignore[arg-type]
    with pytest.raises(NodeStartError):
        faults.start_cluster(c2, None)  # type: ignore[arg-type]
