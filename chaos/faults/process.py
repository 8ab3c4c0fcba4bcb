"""Process faults: SIGKILL, SIGSTOP, rolling restarts, a wiped follower, a lost disk
while another node is down, and the power loss of every node at once (LazyFS)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence

from chaos.faults.base import Fault, FaultContext, FaultError
from chaos.report import Verdict
from cluster.supervisor import LocalCluster, SupervisorError

__all__ = [
    "KillAll",
    "KillFollower",
    "KillLeader",
    "KillRandom",
    "LostDisk",
    "PauseLeader",
    "PowerLoss",
    "RollingRestart",
    "WipeFollower",
]


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


class _KillOne(Fault):
    target = "leader"

    def __init__(self) -> None:
        self.victim: str | None = None

    def pick(self, ctx: FaultContext) -> str:
        if self.target == "leader":
            return ctx.leader()
        if self.target == "follower":
            return ctx.follower()
        return ctx.any_node()

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
    watch_target = "leader"
    target = "leader"
    description = "SIGKILL the leader; restart it when the fault window ends"


class KillFollower(_KillOne):
    name = "kill-follower"
    watch_target = "follower"
    target = "follower"
    description = "SIGKILL one follower; restart it when the fault window ends"


class KillRandom(_KillOne):
    name = "kill-random"
    watch_target = "random"
    target = "random"
    description = "SIGKILL a random node (seeded); restart it when the fault window ends"


class PauseLeader(Fault):
    name = "pause-leader"
    watch_target = "leader"
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
    watch_target = "follower"
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


class LostDisk(Fault):
    name = "lost-disk"
    watch_target = "follower"
    description = (
        "a follower loses its whole data dir while the other follower is down: writes go "
        "on (leader + that follower), then both stop, the wiped one and the one behind "
        "restart, and the leader only later. Before issue 26 the wiped node voted at once "
        "and the one behind won without the writes it lacked; now nobody is elected until "
        "the leader is back, and the wiped node votes again only once caught up"
    )
    # Writes the follower that is down lacks; then the two restarted nodes on their own
    # (a wrong election took well under a second), as fractions of the window.
    acked_share, alone_share = 0.3, 0.3

    def __init__(self) -> None:
        self.wiped: str | None = None
        self.behind: str | None = None
        self.leader: str | None = None

    def start(self, ctx: FaultContext) -> str:
        lc = ctx.cluster
        self.leader = ctx.leader()
        self.wiped = ctx.follower(self.leader)
        self.behind = next(n for n in ctx.node_ids if n not in (self.leader, self.wiped))
        lc.kill_node(self.behind)
        ctx.mark()
        time.sleep(self.acked_share * ctx.window)  # acknowledged by leader + wiped only
        _kill_many(lc, [self.wiped, self.leader])
        lc.wipe_node(self.wiped)  # all of it but node.log: raft (term, vote, log) and db
        for nid in (self.wiped, self.behind):
            lc.start_node(nid)
        for nid in (self.wiped, self.behind):
            lc.wait_live(nid, timeout=60.0)
        time.sleep(self.alone_share * ctx.window)
        ctx.restart(self.leader)
        return (
            f"SIGKILL {self.behind}; writes to {self.leader} + {self.wiped}; SIGKILL both, "
            f"wiped {self.wiped}, restarted it with {self.behind}, {self.leader} later"
        )

    def stop(self, ctx: FaultContext) -> None:
        _start_all(ctx)

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        """The wiped node caught up and votes again (/v1/status voter)."""
        if self.wiped is None:
            return []
        st = ctx.cluster.status(self.wiped) or {}
        voter = st.get("voter")
        return [
            Verdict(
                "wiped node votes again",
                "PASS" if voter else "FAIL",
                f"{self.wiped} voter={voter}",
                "a node without raft state votes only once caught up (node/raft/catchup.py)",
            )
        ]


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
