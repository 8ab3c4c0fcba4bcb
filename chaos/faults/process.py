"""Process faults: SIGKILL, SIGSTOP, rolling restarts, a wiped follower, a lost disk
while another node is down, and the power loss of every node at once (LazyFS), also right
after a follower's snapshot install."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence

from statekeeper.chaos.faults.base import (
    Fault,
    FaultContext,
    FaultError,
    log_since,
    log_size,
    snapshot_last_index,
)
from statekeeper.chaos.faults.failpoints import FAILPOINTS_ENV, TINY_SNAPSHOTS, failpoint_spec
from statekeeper.chaos.report import FAIL, PASS, UNKNOWN, Verdict
from statekeeper.cluster.supervisor import LocalCluster, SupervisorError

__all__ = [
    "KillAll",
    "KillFollower",
    "KillLeader",
    "KillRandom",
    "LostDisk",
    "PauseLeader",
    "PowerLoss",
    "PowerLossInstall",
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


_AT_INSTALL = {"snapshot-install": "exit"}  # node/failpoints.py: right after the rename
_INSTALL_EXIT = "failpoint snapshot-install: exiting"  # what it logs


class PowerLossInstall(Fault):
    """A follower that needs a snapshot is started with the failpoint snapshot-install=exit:
    it receives the leader's snapshot, renames it over its snapshot.bin and exits before
    loading it (the directory not yet synced), as a power cut there would. The others write
    on for a moment (on ext4 / XFS their fsyncs commit the pending rename: LazyFS namespace
    "journal"), then every node loses power. The follower must start from what its disk
    kept, catch up and serve; no acknowledged write may be lost.

    Before the fix (issue 26) the snapshot was renamed before anything synced it: after the
    cut snapshot.bin was 0 bytes and the follower failed at every start."""

    name = "power-loss-install"
    topology = "lazyfs"
    lazyfs_namespace = "journal"
    raft_settings = TINY_SNAPSHOTS  # the leader compacts past a stopped follower in ~1 s
    watch_target = "follower"
    description = (
        "a follower needing a snapshot exits right after the install renamed it into place "
        "(failpoint snapshot-install), the others write on, then every node loses power "
        "(LazyFS drops what was not fsynced); restart all when the fault window ends"
    )
    behind_s = 1.5  # down long enough for the leader to compact past it
    install_s = 12.0  # per round: start (2-3 s on 2 busy cores), snapshot, exit
    rounds_max = 4  # a round whose follower needed no snapshot is tried again
    commit_s = 1.0  # the others' fsyncs after the exit commit its rename (ordered metadata)

    def __init__(self) -> None:
        self.victim: str | None = None
        self.rounds = 0
        self.fired = False
        self.received: int | None = None  # last index of the snapshot renamed into place
        self.kept: int | None = None  # last index of the victim's snapshot after the cut

    def allows_loss(self, fsync: str) -> bool:
        return fsync == "never"  # as power-loss

    def start(self, ctx: FaultContext) -> str:
        if ctx.lazyfs is None:
            raise FaultError("power-loss-install needs the cluster on a LazyFS mount")
        lc = ctx.cluster
        self.victim = ctx.follower()
        while not self.fired and self.rounds < self.rounds_max:
            self.rounds += 1
            self.fired = self._round(ctx)
        if self.fired:
            self.received = snapshot_last_index(lc.data_dir(self.victim))
            time.sleep(self.commit_s)
        _kill_many(lc, ctx.node_ids)
        ctx.mark()  # power is off from here
        before = ctx.lazyfs.status()
        ctx.lazyfs.crash()
        self.kept = snapshot_last_index(lc.data_dir(self.victim))
        how = (
            f"exited right after renaming a received snapshot into place (round {self.rounds})"
            if self.fired
            else f"never needed a snapshot in {self.rounds} rounds"
        )
        return (
            f"{self.victim} (follower) {how}; power cut of every node (dropped "
            f"{before.get('dirty_bytes', '?')} unsynced bytes); {self.victim}'s snapshot.bin "
            f"covered index {self.received} before the cut, {self.kept} after; restart at heal"
        )

    def _round(self, ctx: FaultContext) -> bool:
        """Stop the victim, let the leader compact past it, start it with the failpoint:
        True once it exited there; False if it got ready without needing a snapshot."""
        assert self.victim is not None
        lc = ctx.cluster
        lc.kill_node(self.victim)
        time.sleep(self.behind_s)
        offset = log_size(lc, self.victim)
        lc.start_node(self.victim, env={FAILPOINTS_ENV: failpoint_spec(_AT_INSTALL)})
        deadline = time.monotonic() + self.install_s
        while time.monotonic() < deadline:
            if _INSTALL_EXIT in log_since(lc, self.victim, offset):
                lc.kill_node(self.victim)  # reaps it (it exited)
                return True
            if lc.is_running(self.victim) and lc.is_ready(self.victim):
                break
            time.sleep(0.1)
        ctx.log(f"round {self.rounds}: {self.victim} did not exit at the install; again")
        return False

    def stop(self, ctx: FaultContext) -> None:
        _start_all(ctx)  # without the failpoint: it was armed for one start only

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        if self.victim is None:
            return []
        lc = ctx.cluster
        serving = lc.is_running(self.victim) and lc.is_ready(self.victim)
        if not self.fired:
            status = UNKNOWN
        else:
            status = PASS if serving and self.kept is not None else FAIL
        return [
            Verdict(
                "follower back after a power cut right after its snapshot install's rename",
                status,
                f"{self.victim} {'ready' if serving else 'NOT ready'}; snapshot.bin after the "
                f"cut: {'unreadable or missing' if self.kept is None else f'index {self.kept}'} "
                f"(received: index {self.received})",
                f"{self.rounds} rounds; the failpoint "
                + ("fired" if self.fired else "never fired: nothing tested"),
            )
        ]
