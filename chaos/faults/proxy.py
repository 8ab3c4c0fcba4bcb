"""Link faults through Toxiproxy: :class:`ProxyNet` (a proxy per directed raft link and
per client link) and the ``proxy-*`` faults that put toxics on them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from statekeeper.chaos.faults.base import Fault, FaultContext, FaultError

__all__ = [
    "ProxyBandwidth",
    "ProxyBlackhole",
    "ProxyDown",
    "ProxyLatency",
    "ProxyLimitData",
    "ProxyNet",
    "ProxyResetPeer",
    "ProxySlicer",
    "ProxySlowClose",
]


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

        from statekeeper.chaos.toxiproxy import configure_client

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

    def client_urls(self, scheme: str = "http") -> list[str]:
        return [f"{scheme}://{self.client[i].listen}" for i in sorted(self.client)]

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


class _EveryLinkToxic(_Proxy):
    """One toxic on every raft link and every client link; subclasses only name it."""

    toxic: str = ""
    raft_attributes: dict[str, int] = {}
    client_attributes: dict[str, int] = {}
    what: str = ""

    def start(self, ctx: FaultContext) -> str:
        net = self.net(ctx)
        for a, b in self.all_links(ctx):
            net.degrade_link(a, b, self.toxic, **self.raft_attributes)
        for i in net.client:
            net.degrade_client(i, self.toxic, **self.client_attributes)
        ctx.mark()
        return f"{self.what} on every link"


class ProxyLatency(_EveryLinkToxic):
    name = "proxy-latency"
    description = (
        "latency 120 ms +- 80 ms jitter on every raft link, 50 ms +- 50 ms on every client link"
    )
    toxic, what = "latency", "latency toxics"
    raft_attributes = {"latency": 120, "jitter": 80}
    client_attributes = {"latency": 50, "jitter": 50}


class _LeaderLinkToxic(_Proxy):
    """One toxic on every raft link of the leader; subclasses only name it."""

    watch_target = "leader"

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
    watch_target = "leader"
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
    watch_target = "leader"
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


class ProxyLimitData(_EveryLinkToxic):
    name = "proxy-limit-data"
    description = (
        "limit_data toxic: every raft connection is closed after 32 KiB and every client "
        "connection after 64 KiB (constant reconnects, cut-off messages)"
    )
    toxic = what = "limit_data"
    raft_attributes = {"bytes": 32 * 1024}
    client_attributes = {"bytes": 64 * 1024}


class ProxySlicer(_EveryLinkToxic):
    name = "proxy-slicer"
    description = (
        "slicer toxic on every raft and client link: the byte stream arrives in ~64-byte "
        "pieces, 0.2 ms apart (message framing under fragmentation)"
    )
    toxic = what = "slicer"
    raft_attributes = client_attributes = {"average_size": 64, "size_variation": 32, "delay": 200}


class ProxyDown(_Proxy):
    name = "proxy-down"
    watch_target = "leader"
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
