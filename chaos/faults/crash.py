"""Crash points: failpoints (node/failpoints.py) armed on every node from the start make
nodes exit at named steps of compaction, replication and snapshot installs; the runner's
:class:`~chaos.faults.failpoints.CrashWatcher` restarts them, with the failpoints armed
until the heal and switched off after it (a node still armed at the heal may crash once
more; it comes back clean)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from statekeeper.chaos.faults.base import (
    RESTORED,
    Fault,
    FaultContext,
    log_since,
    log_size,
    snapshot_last_index,
)
from statekeeper.chaos.faults.failpoints import TINY_SNAPSHOTS, failpoint_spec
from statekeeper.chaos.report import INFO, PASS, UNKNOWN, Verdict

__all__ = [
    "CrashFollowerFsync",
    "CrashInstall",
    "CrashSnapshot",
    "InstallRound",
    "read_install_round",
]


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
        return (
            f"failpoints armed on every node since start: {failpoint_spec(self.failpoints)}{so_far}"
        )

    def stop(self, ctx: FaultContext) -> None:
        if ctx.watcher is not None:
            ctx.watcher.disarm()

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        restores = {
            nid: len(RESTORED.findall(log_since(ctx.cluster, nid, 0))) for nid in ctx.node_ids
        }
        return [
            Verdict(
                # The log line is the same for both: see read_install_round.
                "snapshots restored (installed from the leader, or the node's own at start)",
                INFO,
                str(sum(restores.values())),
                ", ".join(f"{n} {c}" for n, c in restores.items()),
            )
        ]


class CrashSnapshot(_FailpointFault):
    name = "crash-snapshot"
    description = (
        "every node exits (status 86) at one of three compaction steps, each reached and "
        "fired on 11% of compactions: snapshot renamed into place, rewritten journal fsynced "
        "but not renamed, journal renamed but its directory not fsynced; snapshots about "
        "once a second; crashed nodes restart at once"
    )
    # The steps run in order, so a step is only reached when the ones before it did not
    # fire. With 10% at each, the third fired on 0.9 * 0.9 * 10% = 8.1% of compactions and
    # stayed silent in a smoke run now and then (an UNKNOWN verdict: "never fired"). Each
    # probability is raised to make every step fire on 11% of compactions:
    # 11%, 11 / 89 = 12.36%, 11 / 78 = 14.1%.
    failpoints = {
        "snapshot-after-rename": "11%exit",
        "journal-prefix-drop": "12.36%exit",
        "journal-prefix-dropped": "14.1%exit",
    }


class CrashFollowerFsync(_FailpointFault):
    name = "crash-follower-fsync"
    description = (
        "a follower exits (status 86) right after fsyncing an AppendEntries and before "
        "answering the leader (0.4% of its replies, every node); crashed nodes restart at once"
    )
    failpoints = {"follower-after-fsync": "0.4%exit"}


_STARTING = re.compile(r"^--- .* starting ", re.M)
_INSTALL_CRASH = "failpoint snapshot-install: exiting"
_READY = re.compile(r"ready [\d.]+ s after start")


@dataclass
class InstallRound:
    """What one restart of the victim (and the CrashWatcher's restarts after a failpoint
    exit) did, read from the victim's log: see :func:`read_install_round`."""

    installs: list[int] = field(default_factory=list)  # snapshots from the leader, restored
    crashes: int = 0  # installs that exited at the failpoint (on disk, not restored)
    local: list[int] = field(default_factory=list)  # the node's own snapshot, restored at start
    ready: bool = False  # the last process of the round got ready (caught up)
    # Restarts after a crash at the failpoint that restored the snapshot the crash left on
    # disk: the node came back from the crashed install.
    recovered: int = 0

    @property
    def received(self) -> int:
        """Snapshots received from the leader: each one drew the 60% (crashed or not)."""
        return len(self.installs) + self.crashes


def read_install_round(text: str, local_snapshot: int | None) -> InstallRound:
    """Classify the victim's log since the fault restarted it. ``local_snapshot`` is the
    last index of the snapshot on its disk at that restart (None: wiped).

    "restoring state machine from snapshot at index N" is logged for two different things:
    a snapshot installed from the leader (which hit the failpoint first and survived the
    draw), and, at start, the node's own snapshot file when RocksDB is behind it. The
    second is no install and draws nothing: the node's own snapshot after a SIGKILL, and
    always after a crash at the failpoint (the received snapshot is on disk, the state
    machine was never restored from it), which is what the CrashWatcher's restart loads
    first. Counting those as installs is what made crash-install look like a failpoint
    firing on 2 of ~9 installs. Only whole lines are read (the log is being written)."""
    text = text[: text.rfind("\n") + 1]
    out = InstallRound()
    ends = [m.start() for m in _STARTING.finditer(text)]
    if not ends or ends[0] != 0:
        ends.insert(0, 0)
    segments = [text[a:b] for a, b in zip(ends, [*ends[1:], len(text)], strict=True)]
    after_crash = False
    for seg in segments:
        restores = [int(m.group(1)) for m in RESTORED.finditer(seg)]
        own = local_snapshot if not after_crash else None
        if restores and (after_crash or (own is not None and restores[0] == own)):
            out.local.append(restores.pop(0))
            out.recovered += int(after_crash)
        out.installs.extend(restores)
        after_crash = _INSTALL_CRASH in seg
        out.crashes += seg.count(_INSTALL_CRASH)
        out.ready = bool(_READY.search(seg))
    return out


class CrashInstall(_FailpointFault):
    name = "crash-install"
    watch_target = "follower"
    description = (
        "one follower is killed again and again, wiped (every other time kept down instead "
        "while the leader compacts past it), so each restart needs a snapshot; a node "
        "exits (status 86) at 60% of the snapshot installs, after the snapshot is on disk "
        "and before the state machine is restored from it"
    )
    failpoints = {"snapshot-install": "60%exit"}
    behind_s = 1.5  # down long enough for the leader to compact past it (~1 s period)
    wiped_s = 0.3  # a wiped node needs a snapshot anyway
    # Per start of the victim (the fault's or the watcher's): a node takes 2-3 s to start
    # on 2 busy cores before it can even ask for the snapshot.
    install_s = 6.0
    # While the failpoint has not fired yet, go on past the window for at most this long
    # (each round draws once more at 60%): a run that never crashed tested nothing.
    overtime_s = 10.0

    def __init__(self) -> None:
        self.victim: str | None = None
        self.rounds = 0
        self.seen = InstallRound()  # summed over the rounds

    def start(self, ctx: FaultContext) -> str:
        lc = ctx.cluster
        self.victim = ctx.follower()
        ctx.notes["victim_log_offset"] = log_size(lc, self.victim)
        deadline = time.monotonic() + ctx.window - 0.5
        ctx.mark()
        while (
            self.rounds == 0
            or time.monotonic() + 1.5 < deadline
            or (self.seen.crashes == 0 and time.monotonic() + 1.5 < deadline + self.overtime_s)
        ):
            # Past the window: a round only because the failpoint has not fired yet.
            overtime = self.rounds > 0 and time.monotonic() + 1.5 >= deadline
            self.rounds += 1
            wiped = self.rounds % 2 == 1
            lc.kill_node(self.victim)
            if wiped:
                lc.wipe_node(self.victim)
            time.sleep(self.wiped_s if wiped else self.behind_s)
            offset = log_size(lc, self.victim)
            own = snapshot_last_index(lc.data_dir(self.victim))
            lc.start_node(self.victim)
            crashes_before = self.seen.crashes
            hard = deadline if crashes_before else deadline + self.overtime_s
            r = self._round(lc, offset, own, hard)
            self.seen.installs += r.installs
            self.seen.crashes += r.crashes
            self.seen.local += r.local
            ctx.log(
                f"round {self.rounds}: {self.victim} "
                f"{'wiped' if wiped else f'kept down {self.behind_s:g} s'}, restarted; "
                f"{r.received} snapshots received ({r.crashes} crashed at the failpoint, "
                f"{len(r.installs)} installed), {len(r.local)} own snapshots restored at start"
                + (" (an extra round: the failpoint had not fired yet)" if overtime else "")
            )
        return (
            f"{self.rounds} rounds of kill / wipe or keep down / restart of {self.victim} "
            f"(follower): {self.seen.received} snapshots received, {self.seen.crashes} crashed"
        )

    def _round(self, lc: Any, offset: int, own: int | None, hard: float) -> InstallRound:
        """Wait until the victim installed a snapshot from the leader (it drew "no"), or
        exited at the failpoint and the watcher's restart of it restored the snapshot the
        crash left on disk (it drew "exit" and came back), or got ready without needing a
        snapshot: one draw per round, so that rounds (wiped / kept down) alternate. At most
        install_s per start, and never past ``hard``."""
        assert self.victim is not None
        starts, until = 1, time.monotonic() + self.install_s
        while True:
            r = read_install_round(log_since(lc, self.victim, offset), own)
            now = time.monotonic()
            if r.installs or r.ready or r.recovered or now >= min(until, hard):
                return r
            if r.crashes >= starts:  # the watcher starts it again: give that one its time
                starts, until = r.crashes + 1, time.monotonic() + self.install_s
            time.sleep(0.1)

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
        crashed = text.count(_INSTALL_CRASH)  # the whole window, the heal's restarts included
        s = self.seen
        return [
            Verdict(
                "follower caught up by snapshots",
                PASS if s.received + crashed else UNKNOWN,
                f"{s.received} snapshots received from the leader: {len(s.installs)} installed, "
                f"{s.crashes} crashed mid-install",
                f"{self.victim}, {self.rounds} rounds; {len(s.local)} own snapshots restored at "
                f"start (no install); {crashed} failpoint exits in its log"
                + ("" if s.received + crashed else ": it never needed a snapshot (nothing tested)"),
            )
        ]
