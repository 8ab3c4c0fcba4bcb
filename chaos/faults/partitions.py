"""Packet-level partitions: iptables rules on per-link loopback addresses
(``chaos.partition``; the cluster is built with the ``links`` topology)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from statekeeper.chaos.faults.base import Fault, FaultContext, FaultError

if TYPE_CHECKING:
    from statekeeper.chaos.partition import Partitioner

__all__ = [
    "OneWayLoss",
    "PacketLoss",
    "PartitionBridge",
    "PartitionFollower",
    "PartitionLeader",
    "PartitionMajorityMinority",
]


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
    watch_target = "leader"
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
    watch_target = "follower"
    description = "cut every raft link of one follower (iptables DROP, both directions)"

    def start(self, ctx: FaultContext) -> str:
        victim = ctx.follower()
        self.net(ctx).isolate(victim)
        ctx.mark()
        return f"isolated {victim} (follower)"


class PartitionMajorityMinority(_Partition):
    name = "partition-majority-minority"
    watch_target = "random"
    description = (
        "split the nodes at random into a minority and a majority (with 3 nodes: one "
        "random node alone, leader or not)"
    )

    def start(self, ctx: FaultContext) -> str:
        nodes = list(ctx.node_ids)
        ctx.rng.shuffle(nodes)
        if "random" in ctx.planned:  # plan() chose the node the minority starts with
            nodes.remove(ctx.any_node())
            nodes.insert(0, ctx.any_node())
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
    watch_target = "leader"
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
    watch_target = "leader"
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
