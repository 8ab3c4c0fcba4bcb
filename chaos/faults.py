"""The named faults of the chaos suite.

Each fault is a small class: ``start(ctx)`` injects it and returns what it did (one
line), ``stop(ctx)`` heals it (idempotent; the runner calls it in a ``finally``, also on
Ctrl-C). ``topology`` says what the cluster must be built with:

- ``plain``: nodes on loopback, nothing in between (process faults);
- ``links``: one loopback address per directed raft link, for iptables (``chaos.partition``);
- ``proxy``: every raft link and every client link through its own Toxiproxy proxy;
- ``lazyfs``: every node's data directory on one LazyFS mount (power loss).

``available()`` says whether the fault can run on this machine, and if not, why.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from cluster.supervisor import LocalCluster, SupervisorError

if TYPE_CHECKING:
    from chaos.lazyfs import LazyFS
    from chaos.partition import Partitioner

__all__ = [
    "FAULTS",
    "Fault",
    "FaultContext",
    "FaultError",
    "ProxyNet",
    "SMOKE",
    "fault_names",
    "get_fault",
]


class FaultError(RuntimeError):
    """A fault could not be injected or healed."""


# ----------------------------------------------------------------------------- proxies


class ProxyNet:
    """Toxiproxy proxies for a cluster: one per directed raft link, one per client link.

    Raft: between two nodes there is one TCP connection, dialled by one of them; node i
    dials node j through proxy ``raft-i-j``. Data travelling a -> b is therefore either
    the ``upstream`` stream of ``raft-a-b`` (a dialled) or the ``downstream`` stream of
    ``raft-b-a`` (b dialled); a toxic for "a -> b" goes on both, so it works whoever
    dials. Clients reach node i through ``client-i``.

    Works against any Toxiproxy-compatible API (the embedded one or a real one) through
    the ``toxiproxy-python`` client, which keeps its API address process-wide.
    """

    def __init__(self, url: str, prefix: str) -> None:
        from toxiproxy import Toxiproxy

        from chaos.toxiproxy import configure_client

        configure_client(url)
        self.url = url
        self.prefix = prefix
        self._api = Toxiproxy()
        self.raft: dict[tuple[int, int], Any] = {}
        self.client: dict[int, Any] = {}
        self._toxics: list[tuple[Any, str]] = []
        self._disabled: list[Any] = []

    def _create(self, name: str, upstream: str) -> Any:
        full = f"{self.prefix}-{name}"
        stale = self._api.get_proxy(full)
        if stale is not None:  # left over by an interrupted run against a real Toxiproxy
            stale.destroy()
        return self._api.create(upstream=upstream, name=full, listen="127.0.0.1:0")

    def setup(self, raft_addrs: Sequence[str], http_addrs: Sequence[str]) -> None:
        """Create the proxies (before the nodes start: the config names their ports)."""
        n = len(raft_addrs)
        for i in range(n):
            for j in range(n):
                if i != j:
                    self.raft[(i, j)] = self._create(f"raft-{i}-{j}", raft_addrs[j])
            self.client[i] = self._create(f"client-{i}", http_addrs[i])

    def raft_dial(self, i: int, peer_ids: Sequence[str]) -> tuple[tuple[str, str], ...]:
        """Node i's ``raft_dial``: every peer through its proxy."""
        return tuple(
            (peer_ids[j], self.raft[(i, j)].listen) for j in range(len(peer_ids)) if j != i
        )

    def client_urls(self) -> list[str]:
        return [f"http://{self.client[i].listen}" for i in sorted(self.client)]

    def streams(self, a: int, b: int) -> list[tuple[Any, str]]:
        """(proxy, stream) pairs that carry raft data from node a to node b."""
        return [(self.raft[(a, b)], "upstream"), (self.raft[(b, a)], "downstream")]

    def add(self, proxy: Any, stream: str, toxic_type: str, **attributes: int) -> None:
        name = f"chaos_{toxic_type}_{stream}"
        proxy.add_toxic(type=toxic_type, stream=stream, name=name, attributes=attributes)
        self._toxics.append((proxy, name))

    def degrade_link(self, a: int, b: int, toxic_type: str, **attributes: int) -> None:
        """A toxic on the raft data a -> b (one direction)."""
        for proxy, stream in self.streams(a, b):
            self.add(proxy, stream, toxic_type, **attributes)

    def degrade_client(self, i: int, toxic_type: str, **attributes: int) -> None:
        """A toxic on both directions of the client link to node i."""
        for stream in ("upstream", "downstream"):
            self.add(self.client[i], stream, toxic_type, **attributes)

    def disable(self, proxy: Any) -> None:
        proxy.disable()
        self._disabled.append(proxy)

    def heal(self) -> None:
        """Remove every toxic this object added and re-enable disabled proxies."""
        errors = []
        for proxy, name in reversed(self._toxics):
            try:
                proxy.destroy_toxic(name)
            except Exception as e:  # noqa: BLE001 - keep healing the rest
                errors.append(f"{proxy.name}/{name}: {e}")
        self._toxics.clear()
        for proxy in self._disabled:
            try:
                proxy.enable()
            except Exception as e:  # noqa: BLE001
                errors.append(f"enable {proxy.name}: {e}")
        self._disabled.clear()
        if errors:
            raise FaultError("could not heal every proxy: " + "; ".join(errors))

    def close(self) -> None:
        """Heal, then delete our proxies."""
        with contextlib.suppress(Exception):
            self.heal()
        for proxy in [*self.raft.values(), *self.client.values()]:
            with contextlib.suppress(Exception):
                proxy.destroy()
        self.raft.clear()
        self.client.clear()


# ----------------------------------------------------------------------------- context


@dataclass
class FaultContext:
    """What a fault may act on."""

    cluster: LocalCluster
    rng: random.Random
    log: Callable[[str], None] = print
    window: float = 10.0  # planned seconds between start() and stop()
    proxies: ProxyNet | None = None
    partitioner: Partitioner | None = None
    lazyfs: LazyFS | None = None
    # When the fault took effect (monotonic ns), set by start() via mark(): finding the
    # leader and adding rules takes time that must not count towards the RTO.
    injected_ns: int | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    def mark(self) -> None:
        """The fault is in effect now (called once by start(), right after injecting)."""
        if self.injected_ns is None:
            self.injected_ns = time.monotonic_ns()

    @property
    def node_ids(self) -> list[str]:
        return self.cluster.node_ids

    def index(self, node_id: str) -> int:
        return self.node_ids.index(node_id)

    def leader(self, timeout: float = 15.0) -> str:
        """The current leader (waits for one; a node that says it leads)."""
        deadline = time.monotonic() + timeout
        while True:
            for nid in self.node_ids:
                st = self.cluster.status(nid)
                if st and st.get("role") == "leader":
                    return nid
            if time.monotonic() > deadline:
                raise FaultError(f"no leader within {timeout:.0f} s")
            time.sleep(0.1)

    def follower(self, leader: str | None = None) -> str:
        leader = leader or self.leader()
        return self.rng.choice([n for n in self.node_ids if n != leader])

    def restart(self, node_id: str, wait: str = "live") -> None:
        """Start a stopped node; wait until it is live (or ready)."""
        lc = self.cluster
        if not lc.is_running(node_id):
            lc.start_node(node_id)
        if wait == "ready":
            lc.start_and_wait(node_id, timeout=90.0)
        else:
            lc.wait_live(node_id, timeout=60.0)


def _kill_many(lc: LocalCluster, node_ids: Sequence[str]) -> None:
    """SIGKILL several nodes at (nearly) the same instant, then reap them."""
    pids = {nid: lc.pid(nid) for nid in node_ids}
    for pid in pids.values():
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    for nid in node_ids:
        lc.kill_node(nid)  # waits until gone, clears the pid file


def _start_all(ctx: FaultContext) -> None:
    """Start every stopped node (all at once: a lone node cannot become ready)."""
    for nid in ctx.node_ids:
        if not ctx.cluster.is_running(nid):
            ctx.cluster.start_node(nid)
    for nid in ctx.node_ids:
        ctx.cluster.wait_live(nid, timeout=60.0)


# ------------------------------------------------------------------------------ faults


class Fault:
    """Base class: override start() / stop(); class attributes describe the fault."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "process"  # process | partition | proxy | none
    topology: ClassVar[str] = "plain"  # plain | links | proxy | lazyfs
    description: ClassVar[str] = ""

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if cls.topology == "links":
            from chaos.partition import available

            return available()
        if cls.topology == "lazyfs":
            from chaos.lazyfs import available

            return available()
        if cls.topology == "proxy":
            try:
                import toxiproxy  # noqa: F401
            except ImportError as e:
                return False, f"toxiproxy-python is not installed ({e})"
        return True, ""

    def allows_loss(self, fsync: str) -> bool:
        """Whether losing acknowledged writes is within the contract for this fault."""
        return False

    def start(self, ctx: FaultContext) -> str:
        raise NotImplementedError

    def stop(self, ctx: FaultContext) -> None:
        pass


class NoFault(Fault):
    name = "none"
    kind = "none"
    description = "no fault: a control run of the workload and checks"

    def start(self, ctx: FaultContext) -> str:
        ctx.mark()
        return "nothing"


class _KillOne(Fault):
    target = "leader"

    def __init__(self) -> None:
        self.victim: str | None = None

    def pick(self, ctx: FaultContext) -> str:
        if self.target == "leader":
            return ctx.leader()
        if self.target == "follower":
            return ctx.follower()
        return ctx.rng.choice(ctx.node_ids)

    def start(self, ctx: FaultContext) -> str:
        was_leader = ctx.leader()
        self.victim = self.pick(ctx)
        ctx.cluster.kill_node(self.victim)
        role = "leader" if self.victim == was_leader else "follower"
        ctx.mark()
        return f"SIGKILL {self.victim} ({role}); restart at heal"

    def stop(self, ctx: FaultContext) -> None:
        if self.victim is not None:
            ctx.restart(self.victim)


class KillLeader(_KillOne):
    name = "kill-leader"
    target = "leader"
    description = "SIGKILL the leader; restart it when the fault window ends"


class KillFollower(_KillOne):
    name = "kill-follower"
    target = "follower"
    description = "SIGKILL one follower; restart it when the fault window ends"


class KillRandom(_KillOne):
    name = "kill-random"
    target = "random"
    description = "SIGKILL a random node (seeded); restart it when the fault window ends"


class PauseLeader(Fault):
    name = "pause-leader"
    description = (
        "SIGSTOP the leader for the fault window (longer than the election timeout), "
        "then SIGCONT: a frozen old leader wakes up in a new term"
    )

    def __init__(self) -> None:
        self.victim: str | None = None

    def start(self, ctx: FaultContext) -> str:
        self.victim = ctx.leader()
        ctx.cluster.pause_node(self.victim)
        ctx.mark()
        return f"SIGSTOP {self.victim} (leader) for {ctx.window:.1f} s"

    def stop(self, ctx: FaultContext) -> None:
        if self.victim is not None:
            with contextlib.suppress(SupervisorError):  # it died meanwhile: nothing to resume
                ctx.cluster.resume_node(self.victim)


class RollingRestart(Fault):
    name = "rolling-restart"
    description = (
        "restart every node in turn (SIGTERM, start, wait until ready), followers first, "
        "the leader last"
    )

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        order = [n for n in ctx.node_ids if n != leader] + [leader]
        ctx.mark()  # the first SIGTERM follows at once
        for nid in order:
            ctx.log(f"rolling restart: {nid}")
            ctx.cluster.restart_node(nid, stop_timeout=15.0, ready_timeout=90.0)
        return f"restarted {', '.join(order)} one by one"

    def stop(self, ctx: FaultContext) -> None:
        for nid in ctx.node_ids:
            ctx.restart(nid)


class KillAll(Fault):
    name = "kill-all"
    description = "SIGKILL every node at once; restart them all when the fault window ends"

    def start(self, ctx: FaultContext) -> str:
        _kill_many(ctx.cluster, ctx.node_ids)
        ctx.mark()
        return f"SIGKILL {', '.join(ctx.node_ids)}; restart at heal"

    def stop(self, ctx: FaultContext) -> None:
        _start_all(ctx)


class WipeFollower(Fault):
    name = "wipe-follower"
    description = (
        "SIGKILL a follower, delete its data directory and start it again empty: it "
        "rejoins and must be caught up by the leader"
    )

    def __init__(self) -> None:
        self.victim: str | None = None

    def start(self, ctx: FaultContext) -> str:
        self.victim = ctx.follower()
        ctx.cluster.kill_node(self.victim)
        ctx.mark()
        ctx.cluster.wipe_node(self.victim)
        ctx.restart(self.victim)
        return f"SIGKILL {self.victim} (follower), wiped its data, restarted it empty"

    def stop(self, ctx: FaultContext) -> None:
        if self.victim is not None:
            ctx.restart(self.victim)


class PowerLoss(Fault):
    name = "power-loss"
    topology = "lazyfs"
    description = (
        "every node loses power at once: SIGKILL all, then LazyFS drops every write not "
        "yet fsynced; restart all when the fault window ends"
    )

    def allows_loss(self, fsync: str) -> bool:
        return fsync == "never"  # the README: power loss may lose the last moments

    def start(self, ctx: FaultContext) -> str:
        if ctx.lazyfs is None:
            raise FaultError("power-loss needs the cluster on a LazyFS mount")
        _kill_many(ctx.cluster, ctx.node_ids)
        ctx.mark()  # power is off from here; the crash only decides what the disk kept
        before = ctx.lazyfs.status()
        ctx.lazyfs.crash()
        return (
            f"SIGKILL {', '.join(ctx.node_ids)} and power cut (dropped "
            f"{before.get('dirty_bytes', '?')} unsynced bytes in "
            f"{before.get('dirty_files', '?')} files); restart at heal"
        )

    def stop(self, ctx: FaultContext) -> None:
        _start_all(ctx)


# -- partitions (iptables) ------------------------------------------------------------


class _Partition(Fault):
    kind = "partition"
    topology = "links"

    def net(self, ctx: FaultContext) -> Partitioner:
        if ctx.partitioner is None:
            raise FaultError("partitions need the cluster built with per-link addresses")
        return ctx.partitioner

    def stop(self, ctx: FaultContext) -> None:
        if ctx.partitioner is not None:
            ctx.partitioner.heal()


class PartitionLeader(_Partition):
    name = "partition-leader"
    description = "cut every raft link of the leader (iptables DROP, both directions)"

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        self.net(ctx).isolate(leader)
        ctx.mark()
        return (
            f"isolated {leader} (leader) from {', '.join(n for n in ctx.node_ids if n != leader)}"
        )


class PartitionFollower(_Partition):
    name = "partition-follower"
    description = "cut every raft link of one follower (iptables DROP, both directions)"

    def start(self, ctx: FaultContext) -> str:
        victim = ctx.follower()
        self.net(ctx).isolate(victim)
        ctx.mark()
        return f"isolated {victim} (follower)"


class PartitionMajorityMinority(_Partition):
    name = "partition-majority-minority"
    description = (
        "split the nodes at random into a minority and a majority (with 3 nodes: one "
        "random node alone, leader or not)"
    )

    def start(self, ctx: FaultContext) -> str:
        nodes = list(ctx.node_ids)
        ctx.rng.shuffle(nodes)
        k = max(1, (len(nodes) - 1) // 2)
        minority, majority = nodes[:k], nodes[k:]
        leader = ctx.leader()
        self.net(ctx).split(minority, majority)
        ctx.mark()
        return (
            f"minority {minority} | majority {majority} "
            f"(leader was {leader}, in the {'minority' if leader in minority else 'majority'})"
        )


class PartitionBridge(_Partition):
    name = "partition-bridge"
    description = (
        "two halves that cannot talk, and one bridge node that sees both (with 3 nodes: "
        "the leader and one follower are cut apart, the other follower sees both)"
    )

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        bridge = ctx.follower(leader)
        rest = [n for n in ctx.node_ids if n not in (leader, bridge)]
        side_a = [leader] + rest[: (len(rest) - 1) // 2]
        side_b = [n for n in rest if n not in side_a]
        self.net(ctx).split(side_a, side_b)
        ctx.mark()
        return f"{side_a} x {side_b} cut; {bridge} bridges both"


class OneWayLoss(_Partition):
    name = "one-way-loss"
    description = (
        "drop every packet FROM the leader to the others (one direction only): it still "
        "hears the followers but they no longer hear it"
    )

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        for other in ctx.node_ids:
            if other != leader:
                self.net(ctx).cut(leader, other, one_way=True)
        ctx.mark()
        return f"dropping packets {leader} (leader) -> others"


class PacketLoss(_Partition):
    name = "packet-loss"
    probability = 0.3
    description = "drop 30% of the packets on every raft link at random (-m statistic)"

    def start(self, ctx: FaultContext) -> str:
        nodes = ctx.node_ids
        for i, a in enumerate(nodes):
            for b in nodes[i + 1 :]:
                self.net(ctx).cut(a, b, probability=self.probability)
        ctx.mark()
        return f"{self.probability:.0%} random packet loss on every raft link"


# -- toxiproxy ------------------------------------------------------------------------


class _Proxy(Fault):
    kind = "proxy"
    topology = "proxy"

    def net(self, ctx: FaultContext) -> ProxyNet:
        if ctx.proxies is None:
            raise FaultError("proxy faults need the cluster built behind Toxiproxy")
        return ctx.proxies

    def links_of(self, ctx: FaultContext, node: str) -> Iterator[tuple[int, int]]:
        """Both directions of every raft link of `node`, as index pairs."""
        i = ctx.index(node)
        for j in range(len(ctx.node_ids)):
            if j != i:
                yield i, j
                yield j, i

    def all_links(self, ctx: FaultContext) -> Iterator[tuple[int, int]]:
        n = len(ctx.node_ids)
        return ((i, j) for i in range(n) for j in range(n) if i != j)

    def stop(self, ctx: FaultContext) -> None:
        if ctx.proxies is not None:
            ctx.proxies.heal()


class ProxyLatency(_Proxy):
    name = "proxy-latency"
    description = (
        "latency 120 ms +- 80 ms jitter on every raft link, 50 ms +- 50 ms on every client link"
    )

    def start(self, ctx: FaultContext) -> str:
        net = self.net(ctx)
        for a, b in self.all_links(ctx):
            net.degrade_link(a, b, "latency", latency=120, jitter=80)
        for i in net.client:
            net.degrade_client(i, "latency", latency=50, jitter=50)
        ctx.mark()
        return "latency toxics on every link"


class _LeaderLinkToxic(_Proxy):
    """One toxic on every raft link of the leader; subclasses only name it."""

    toxic: str = ""
    attributes: dict[str, int] = {}
    what: str = ""

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        for a, b in self.links_of(ctx, leader):
            self.net(ctx).degrade_link(a, b, self.toxic, **self.attributes)
        ctx.mark()
        return f"{self.what} on {leader}'s (leader) raft links"


class ProxyBandwidth(_LeaderLinkToxic):
    name = "proxy-bandwidth"
    description = "the leader's raft links limited to 8 KB/s each way (replication lags)"
    toxic, attributes, what = "bandwidth", {"rate": 8}, "bandwidth 8 KB/s"


class ProxyBlackhole(_LeaderLinkToxic):
    name = "proxy-blackhole"
    description = (
        "timeout toxic (timeout 0) on the leader's raft links: data silently vanishes, "
        "connections stay open"
    )
    toxic, attributes, what = "timeout", {"timeout": 0}, "blackhole (timeout 0)"


class ProxyResetPeer(_Proxy):
    name = "proxy-reset-peer"
    description = (
        "reset_peer toxic on the leader's raft links and its client link: every "
        "connection is reset (RST) as soon as data flows"
    )

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        net = self.net(ctx)
        for a, b in self.links_of(ctx, leader):
            net.degrade_link(a, b, "reset_peer", timeout=0)
        net.degrade_client(ctx.index(leader), "reset_peer", timeout=0)
        ctx.mark()
        return f"connection resets on {leader}'s (leader) raft and client links"


class ProxySlowClose(_Proxy):
    name = "proxy-slow-close"
    description = (
        "slow_close toxic (3 s) on the leader's raft links, then SIGKILL the leader: the "
        "followers see its connections close 3 s late; restart at heal"
    )

    def __init__(self) -> None:
        self.victim: str | None = None

    def start(self, ctx: FaultContext) -> str:
        self.victim = ctx.leader()
        for a, b in self.links_of(ctx, self.victim):
            self.net(ctx).degrade_link(a, b, "slow_close", delay=3000)
        ctx.cluster.kill_node(self.victim)
        ctx.mark()
        return f"slow_close 3 s on {self.victim}'s links, then SIGKILL {self.victim} (leader)"

    def stop(self, ctx: FaultContext) -> None:
        try:
            super().stop(ctx)
        finally:
            if self.victim is not None:
                ctx.restart(self.victim)


class ProxyLimitData(_Proxy):
    name = "proxy-limit-data"
    description = (
        "limit_data toxic: every raft connection is closed after 32 KiB and every client "
        "connection after 64 KiB (constant reconnects, cut-off messages)"
    )

    def start(self, ctx: FaultContext) -> str:
        net = self.net(ctx)
        for a, b in self.all_links(ctx):
            net.degrade_link(a, b, "limit_data", bytes=32 * 1024)
        for i in net.client:
            net.degrade_client(i, "limit_data", bytes=64 * 1024)
        ctx.mark()
        return "limit_data on every link"


class ProxySlicer(_Proxy):
    name = "proxy-slicer"
    description = (
        "slicer toxic on every raft and client link: the byte stream arrives in ~64-byte "
        "pieces, 0.2 ms apart (message framing under fragmentation)"
    )

    def start(self, ctx: FaultContext) -> str:
        net = self.net(ctx)
        for a, b in self.all_links(ctx):
            net.degrade_link(a, b, "slicer", average_size=64, size_variation=32, delay=200)
        for i in net.client:
            net.degrade_client(i, "slicer", average_size=64, size_variation=32, delay=200)
        ctx.mark()
        return "slicer on every link"


class ProxyDown(_Proxy):
    name = "proxy-down"
    description = (
        "take down the proxies of the leader's raft links and of its client link "
        "(connections dropped, new ones refused)"
    )

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        net = self.net(ctx)
        i = ctx.index(leader)
        for (a, b), proxy in net.raft.items():
            if i in (a, b):
                net.disable(proxy)
        net.disable(net.client[i])
        ctx.mark()
        return f"proxies of {leader} (leader) down"


# ----------------------------------------------------------------------------- registry

FAULTS: dict[str, type[Fault]] = {
    cls.name: cls
    for cls in (
        NoFault,
        KillLeader,
        KillFollower,
        KillRandom,
        PauseLeader,
        RollingRestart,
        KillAll,
        WipeFollower,
        PowerLoss,
        PartitionLeader,
        PartitionFollower,
        PartitionMajorityMinority,
        PartitionBridge,
        OneWayLoss,
        PacketLoss,
        ProxyLatency,
        ProxyBandwidth,
        ProxyBlackhole,
        ProxyResetPeer,
        ProxySlowClose,
        ProxyLimitData,
        ProxySlicer,
        ProxyDown,
    )
}

# The CI subset (`chaos suite --smoke`): one of each family, a few minutes in all.
SMOKE: tuple[str, ...] = ("kill-leader", "pause-leader", "partition-leader", "proxy-blackhole")


def fault_names(include_none: bool = False) -> list[str]:
    return [n for n in FAULTS if include_none or n != "none"]


def get_fault(name: str) -> Fault:
    try:
        return FAULTS[name]()
    except KeyError:
        raise KeyError(
            f"unknown fault {name!r}; known: {', '.join(fault_names(include_none=True))}"
        ) from None
