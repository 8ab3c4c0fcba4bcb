"""Crash points: failpoints (node/failpoints.py) armed on every node from the start make
nodes exit at named steps of compaction, replication and snapshot installs; the runner's
:class:`~chaos.faults.failpoints.CrashWatcher` restarts them, with the failpoints armed
until the heal and switched off after it (a node still armed at the heal may crash once
more; it comes back clean)."""

from __future__ import annotations

import time

from chaos.faults.base import RESTORED, Fault, FaultContext, log_since, log_size
from chaos.faults.failpoints import TINY_SNAPSHOTS, failpoint_spec
from chaos.report import INFO, PASS, UNKNOWN, Verdict

__all__ = ["CrashFollowerFsync", "CrashInstall", "CrashSnapshot"]


class _FailpointFault(Fault):
    """Failpoints armed on every node from its start (the warmup included), tiny snapshot
    thresholds so compaction runs about once a second on every node; the runner's
    CrashWatcher restarts a node within ~0.1 s of exiting at a failpoint, without the
    failpoints once the fault is healed."""

    kind = "failpoint"
    raft_settings = TINY_SNAPSHOTS

    def start(self, ctx: FaultContext) -> str:
        ctx.mark()
        w = ctx.watcher
        so_far = f"; {sum(w.crashes.values())} crashes so far" if w is not None else ""
        return f"failpoints armed on every node since start: {failpoint_spec(self.failpoints)}{so_far}"

    def stop(self, ctx: FaultContext) -> None:
        if ctx.watcher is not None:
            ctx.watcher.disarm()

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        restores = {
            nid: len(RESTORED.findall(log_since(ctx.cluster, nid, 0))) for nid in ctx.node_ids
        }
        return [
            Verdict(
                "snapshots installed from the leader",
                INFO,
                str(sum(restores.values())),
                ", ".join(f"{n} {c}" for n, c in restores.items()),
            )
        ]


class CrashSnapshot(_FailpointFault):
    name = "crash-snapshot"
    description = (
        "every node exits (status 86) with 10% probability at each of three compaction "
        "steps: snapshot renamed into place, rewritten journal fsynced but not renamed, "
        "journal renamed but its directory not fsynced; snapshots about once a second; "
        "crashed nodes restart at once"
    )
    failpoints = {
        "snapshot-after-rename": "10%exit",
        "journal-prefix-drop": "10%exit",
        "journal-prefix-dropped": "10%exit",
    }


class CrashFollowerFsync(_FailpointFault):
    name = "crash-follower-fsync"
    description = (
        "a follower exits (status 86) right after fsyncing an AppendEntries and before "
        "answering the leader (0.4% of its replies, every node); crashed nodes restart at once"
    )
    failpoints = {"follower-after-fsync": "0.4%exit"}


class CrashInstall(_FailpointFault):
    name = "crash-install"
    description = (
        "one follower is killed again and again, wiped (every other time kept down instead "
        "while the leader compacts past it), so each restart needs a snapshot; a node "
        "exits (status 86) at 60% of the snapshot installs, after the snapshot is on disk "
        "and before the state machine is restored from it"
    )
    failpoints = {"snapshot-install": "60%exit"}
    behind_s = 1.5  # down long enough for the leader to compact past it (~1 s period)
    wiped_s = 0.3  # a wiped node needs a snapshot anyway
    install_s = 3.0  # wait this long for the install (the watcher restarts crashes)

    def __init__(self) -> None:
        self.victim: str | None = None
        self.rounds = 0

    def start(self, ctx: FaultContext) -> str:
        lc = ctx.cluster
        self.victim = ctx.follower()
        ctx.notes["victim_log_offset"] = log_size(lc, self.victim)
        deadline = time.monotonic() + ctx.window - 0.5
        ctx.mark()
        while self.rounds == 0 or time.monotonic() + 1.5 < deadline:
            self.rounds += 1
            wiped = self.rounds % 2 == 1
            lc.kill_node(self.victim)
            if wiped:
                lc.wipe_node(self.victim)
            time.sleep(self.wiped_s if wiped else self.behind_s)
            offset = log_size(lc, self.victim)
            lc.start_node(self.victim)
            # Until it installed a snapshot (it may exit at the failpoint first: the
            # watcher starts it again and it asks for the snapshot again) or gave up.
            until = min(deadline, time.monotonic() + self.install_s)
            while time.monotonic() < until:
                if RESTORED.search(log_since(lc, self.victim, offset)):
                    break
                time.sleep(0.1)
            ctx.log(
                f"round {self.rounds}: {self.victim} "
                f"{'wiped' if wiped else f'kept down {self.behind_s:g} s'}, restarted; "
                f"{'installed a snapshot' if RESTORED.search(log_since(lc, self.victim, offset)) else 'no snapshot installed yet'}"
            )
        return f"{self.rounds} rounds of kill / wipe or keep down / restart of {self.victim} (follower)"

    def stop(self, ctx: FaultContext) -> None:
        super().stop(ctx)
        if self.victim is None:
            return
        if ctx.watcher is not None:
            ctx.watcher.settle(5.0)
        if not ctx.cluster.is_running(self.victim):
            ctx.restart(self.victim)

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        if self.victim is None:
            return []
        text = log_since(ctx.cluster, self.victim, ctx.notes.get("victim_log_offset", 0))
        restores = len(RESTORED.findall(text))
        crashed = text.count("failpoint snapshot-install: exiting")
        return [
            Verdict(
                "follower caught up by snapshots",
                PASS if restores + crashed else UNKNOWN,
                f"{restores} restored, {crashed} crashed mid-install",
                f"{self.victim}, {self.rounds} rounds"
                + ("" if restores + crashed else ": it never needed a snapshot (nothing tested)"),
            )
        ]
