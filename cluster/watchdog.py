"""The decisions of `statekeeper cluster supervise`, without I/O: probes and a clock in,
actions out (cluster/supervise.py polls the nodes and carries the actions out).

Per node, from what one poll saw (`Probe`: is a process running, did /v1/health/live
answer 200, and if not, why):

    up        live; a failed probe of a running node counts, and `failures` failures in a
              row (a stuck raft loop answers 503 not_live, a frozen process nothing) mean
              kill it and restart; a process that is gone means restart at once
    waiting   restart scheduled at `restart_at` (backoff)
    starting  restarted; it has `start_grace` seconds to answer live (a big journal or a
              snapshot takes a while), and is killed and rescheduled if it does not; a
              process that dies meanwhile is rescheduled at once
    gave_up   `max_restarts` restarts in a row did not help: left alone, said once

Backoff: restarts "in a row" are those that follow a start less than `stable_seconds`
ago. The first restart of a streak happens at once; then the delay doubles from
`backoff_initial` up to `backoff_max` (1, 2, 4, ... 60 s). A node that stayed live for
`stable_seconds` starts a new streak. The delay keeps a node that dies right after every
start (a bad disk, a config it cannot load) from spinning a core and flooding its log.

Every action carries the reason, which the loop logs: why a node was restarted is the
first thing an operator asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ActionKind = Literal["kill", "restart", "backoff", "recovered", "give_up"]


@dataclass(frozen=True)
class Probe:
    running: bool  # a process of this node exists
    live: bool  # GET /v1/health/live answered 200
    detail: str = ""  # why not live, e.g. "HTTP 503 not_live: ..." or "process exited (code -9)"


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    node_id: str
    reason: str
    delay: float = 0.0  # backoff: seconds until the restart


@dataclass(frozen=True)
class Policy:
    failures: int = 3
    start_grace: float = 60.0
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    stable_seconds: float = 60.0
    max_restarts: int = 0  # restarts in a row before giving up; 0: never give up

    def __post_init__(self) -> None:
        if self.failures < 1 or self.max_restarts < 0:
            raise ValueError("failures must be >= 1 and max_restarts >= 0")
        if not 0 < self.backoff_initial <= self.backoff_max:
            raise ValueError("need 0 < backoff_initial <= backoff_max")
        if self.start_grace <= 0 or self.stable_seconds <= 0:
            raise ValueError("start_grace and stable_seconds must be > 0")

    def delay(self, streak: int) -> float:
        """Seconds before the streak-th restart in a row (1-based)."""
        if streak <= 1:
            return 0.0
        return min(self.backoff_max, self.backoff_initial * 2 ** (streak - 2))


@dataclass
class _Node:
    phase: Literal["up", "waiting", "starting", "gave_up"] = "up"
    failures: int = 0
    streak: int = 0  # restarts in a row (see the module docstring)
    restart_at: float = 0.0
    started_at: float | None = None  # last restart by us (None: running before we began)
    reason: str = ""  # why the pending restart


class Watchdog:
    """Decides, poll by poll, which nodes to kill and restart (see the module docstring)."""

    def __init__(self, node_ids: list[str], policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        self.nodes = {nid: _Node() for nid in node_ids}

    def step(self, now: float, probes: dict[str, Probe]) -> list[Action]:
        """Actions for this poll, in order; kill and restart must be carried out."""
        actions: list[Action] = []
        for nid, probe in probes.items():
            actions += self._observe(nid, self.nodes[nid], probe, now)
        return actions

    def start_failed(self, node_id: str, now: float, reason: str) -> list[Action]:
        """The restart could not even spawn the process (e.g. its port is taken)."""
        return self._schedule(node_id, self.nodes[node_id], now, f"start failed: {reason}")

    def _observe(self, nid: str, n: _Node, probe: Probe, now: float) -> list[Action]:
        p = self.policy
        if n.phase == "gave_up":
            return []
        if probe.live:
            out = []
            if n.phase == "starting":
                took = now - (now if n.started_at is None else n.started_at)
                out.append(Action("recovered", nid, f"live again {took:.1f} s after restart"))
            elif n.phase == "waiting":  # someone else started it meanwhile
                out.append(Action("recovered", nid, "live again (restarted by someone else)"))
            n.phase, n.failures = "up", 0
            if n.started_at is not None and now - n.started_at >= p.stable_seconds:
                n.streak = 0
            return out
        if n.phase == "waiting":
            if now < n.restart_at:
                return []
            n.phase, n.started_at, n.failures = "starting", now, 0
            return [Action("restart", nid, n.reason)]
        if n.phase == "starting":
            if not probe.running:
                return self._schedule(nid, n, now, f"died while starting: {probe.detail}")
            if n.started_at is not None and now - n.started_at > p.start_grace:
                reason = f"not live {p.start_grace:g} s after restart: {probe.detail}"
                return [Action("kill", nid, reason), *self._schedule(nid, n, now, reason)]
            return []
        # up
        if not probe.running:
            return self._schedule(nid, n, now, probe.detail or "no process")
        n.failures += 1
        if n.failures < p.failures:
            return []
        reason = f"not live for {n.failures} probes in a row: {probe.detail}"
        return [Action("kill", nid, reason), *self._schedule(nid, n, now, reason)]

    def _schedule(self, nid: str, n: _Node, now: float, reason: str) -> list[Action]:
        p = self.policy
        recent = n.started_at is not None and now - n.started_at < p.stable_seconds
        n.streak = n.streak + 1 if recent else 1
        if p.max_restarts and n.streak > p.max_restarts:
            n.phase = "gave_up"
            return [
                Action(
                    "give_up",
                    nid,
                    f"{reason}; {p.max_restarts} restarts in a row did not help: "
                    "leaving it down (see its node.log)",
                )
            ]
        delay = p.delay(n.streak)
        n.phase, n.restart_at, n.reason = "waiting", now + delay, reason
        nth = f"restart {n.streak} in a row" if n.streak > 1 else "first restart"
        out = [Action("backoff", nid, f"{reason}; {nth}, in {delay:g} s", delay)]
        if delay == 0:
            n.phase, n.started_at, n.failures = "starting", now, 0
            out.append(Action("restart", nid, reason))
        return out
