"""The membership fault: the cluster grows from its N nodes to N + 2 and shrinks back while
the workload runs, through the same code as `statekeeper cluster add-node / remove-node`
(cluster/members.py). The second removal removes the leader: leadership is handed to the
last node added, then that node is removed (the leader refuses to remove itself, hands
leadership on, and the removal goes to the next leader).

The run ends with the original members, so the runner's final reads, replica convergence
and checks see the cluster it started. ``verify`` checks every node agrees on that set."""

from __future__ import annotations

import time

from statekeeper.chaos.faults.base import Fault, FaultContext, FaultError
from statekeeper.chaos.report import FAIL, PASS, Verdict
from statekeeper.client.auth.tokens import root_token
from statekeeper.cluster.members import MemberChangeError, Membership

__all__ = ["MembershipChange", "UncommittedMemberChange"]


def membership_of(ctx: FaultContext) -> Membership:
    """cluster/members.py's Membership of the run's cluster, with the root token."""
    lc = ctx.cluster
    return Membership(
        lc.config_path,
        say=lambda m: ctx.log(f"membership: {m}"),
        node_command=lc.node_command,
        env=lc._extra_env,
        token=root_token(lc.config.secret),
    )


class MembershipChange(Fault):
    name = "membership"
    kind = "process"
    description = (
        "add two nodes online (add-node), then remove them (remove-node), the second one "
        "while it leads; one change at a time through the raft log"
    )

    def __init__(self) -> None:
        self.original: list[str] = []
        self.added: list[str] = []
        self.timings: dict[str, float] = {}

    def _membership(self, ctx: FaultContext) -> Membership:
        return membership_of(ctx)

    def start(self, ctx: FaultContext) -> str:
        m = self._membership(ctx)
        self.original = [n.id for n in m.cfg.nodes]
        for _ in range(2):
            t = time.monotonic()
            node = m.new_node()
            m.add_node(node)
            self.added.append(node.id)
            self.timings[f"add {node.id}"] = time.monotonic() - t
            ctx.mark()
        first, last = self.added
        t = time.monotonic()
        m.remove_node(first)
        self.timings[f"remove {first}"] = time.monotonic() - t
        self.timings[f"transfer to {last}"] = m.transfer_leader(last)
        t = time.monotonic()
        m.remove_node(last)  # the leader
        self.timings[f"remove {last} (leader)"] = time.monotonic() - t
        took = ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items())
        return f"grew to {len(self.original) + 2} and back to {len(self.original)}: {took}"

    def stop(self, ctx: FaultContext) -> None:
        """After an error: remove whatever was added and is still configured."""
        m = self._membership(ctx)
        for node_id in reversed(self.added):
            if node_id in {n.id for n in m.cfg.nodes}:
                try:
                    m.remove_node(node_id)
                except MemberChangeError as e:
                    m.lc.kill_node(node_id)  # the runner's teardown knows only the first nodes
                    raise FaultError(f"could not remove {node_id} again: {e}") from e

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        m = self._membership(ctx)
        want = sorted(self.original)
        seen = {
            nid: sorted(x["id"] for x in st.get("members", ())) for nid, st in m.statuses().items()
        }
        wrong = {nid: ids for nid, ids in seen.items() if ids != want}
        detail = "; ".join(f"{nid} has {ids}" for nid, ids in wrong.items())
        ok = not wrong and len(seen) == len(want) and len(self.added) == 2
        value = f"{len(seen)}/{len(want)} nodes agree on {', '.join(want)}"
        return [Verdict("members after the changes", PASS if ok else FAIL, value, detail)]


def _member_ids(status: dict) -> list[str]:
    return sorted(x["id"] for x in status.get("members", ()))


class UncommittedMemberChange(Fault):
    """A membership change that never commits must leave no trace (issue 26, items 1-2).

    The leader L is cut off, then asked to remove a follower V: it appends the change,
    which cannot commit, and loses its term. The other two elect, and leadership goes to
    V (the node L's log removed). L is restarted while still cut off (its journal ends in
    the removal; it snapshots within a second: snapshot_min_seconds 1), the network heals,
    V's log replaces L's stale entry, and L is restarted once more. Before the fix L's
    snapshot carried the removal (it came back at the second restart), and L, its log
    ending in "remove V", refused V's connections, so V could not correct it.

    verify: every node reports the original members (the committed configuration), and
    L and V, 2 of the 3 members, elect a leader with the third stopped."""

    name = "membership-uncommitted"
    kind = "partition"
    topology = "links"
    watch_target = "leader"
    description = (
        "cut the leader off, have it append a removal it cannot commit, restart it "
        "while cut off, heal with the removed node leading, restart it again"
    )
    raft_settings = {"snapshot_min_seconds": 1}

    def __init__(self) -> None:
        self.original: list[str] = []
        self.cut_off = self.removed = self.third = ""

    def start(self, ctx: FaultContext) -> str:
        if ctx.partitioner is None:
            raise FaultError("this fault needs the cluster built with per-link addresses")
        m = membership_of(ctx)
        self.original = sorted(n.id for n in m.cfg.nodes)
        leader = self.cut_off = ctx.leader()
        self.removed = ctx.follower(leader)
        self.third = next(n for n in ctx.node_ids if n not in (leader, self.removed))
        ctx.partitioner.isolate(leader)
        ctx.mark()
        status, answer = m.ask(leader, "/v1/cluster/members/remove", {"id": self.removed}, 10.0)
        now = m.statuses().get(leader, {})
        if self.removed in _member_ids(now):
            raise FaultError(
                f"{leader} did not append the removal of {self.removed} "
                f"(HTTP {status}: {answer.get('error')})"
            )
        deadline = time.monotonic() + 30.0
        m.leader(deadline, exclude=leader)
        m.transfer_leader(self.removed)
        lc = ctx.cluster
        lc.kill_node(leader)
        ctx.restart(leader)
        time.sleep(2.0)  # cut off, its log ending in the removal: it snapshots (1 s)
        ctx.partitioner.heal()
        dropped = time.monotonic() + 20.0
        while self.removed not in _member_ids(m.statuses().get(leader, {})):
            if time.monotonic() > dropped:  # verify() reports it
                ctx.log(f"{leader} still lacks {self.removed} 20 s after the heal")
                break
            time.sleep(0.2)
        lc.kill_node(leader)
        ctx.restart(leader, wait="ready")
        return (
            f"{leader} (leader) cut off, appended 'remove {self.removed}' "
            f"(HTTP {status}), restarted cut off; healed with {self.removed} leading; "
            f"{leader} dropped the change and restarted again"
        )

    def stop(self, ctx: FaultContext) -> None:
        if ctx.partitioner is not None:
            ctx.partitioner.heal()

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        m = membership_of(ctx)
        seen = {nid: _member_ids(st) for nid, st in m.statuses().items()}
        wrong = {nid: ids for nid, ids in seen.items() if ids != self.original}
        agree = Verdict(
            "members are the committed configuration",
            FAIL if wrong or len(seen) != len(self.original) else PASS,
            f"{len(seen) - len(wrong)}/{len(self.original)} nodes report "
            f"{', '.join(self.original)}",
            "; ".join(f"{nid} has {ids}" for nid, ids in wrong.items()),
        )
        if not self.third:
            return [agree, Verdict("2 of 3 members elect", FAIL, "not run", "start() failed")]
        return [agree, self._pair_elects(ctx, m)]

    def _pair_elects(self, ctx: FaultContext, m: Membership) -> Verdict:
        """The third node leads, then stops: the pair must hold a new election, and its
        leader must keep its term (check-quorum steps down a leader that hears no one)."""
        name = "2 of 3 members elect"
        pair = f"{self.cut_off} + {self.removed}"
        try:
            m.transfer_leader(self.third)
        except MemberChangeError as e:
            return Verdict(name, FAIL, f"could not hand leadership to {self.third}", str(e))
        ctx.cluster.stop_node(self.third)
        try:
            t = time.monotonic()
            first = m.leader(t + 20.0, exclude=self.third)["node_id"]
            took = time.monotonic() - t
            time.sleep(2.0)  # a few check-quorum periods
            still = m.leader(time.monotonic() + 5.0, exclude=self.third)["node_id"]
            return Verdict(
                name,
                PASS,
                f"{first} elected by {pair} {took:.1f} s after {self.third} (leading) "
                f"stopped; {still} leads 2 s later",
            )
        except MemberChangeError as e:
            return Verdict(name, FAIL, f"no lasting leader of {pair} within 20 s", str(e))
        finally:
            ctx.restart(self.third, wait="ready")
