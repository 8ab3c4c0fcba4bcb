"""The membership fault: the cluster grows from its N nodes to N + 2 and shrinks back while
the workload runs, through the same code as `statekeeper cluster add-node / remove-node`
(cluster/members.py). The second removal removes the leader: leadership is handed to the
last node added, then that node is removed (the leader refuses to remove itself, hands
leadership on, and the removal goes to the next leader).

The run ends with the original members, so the runner's final reads, replica convergence
and checks see the cluster it started. ``verify`` checks every node agrees on that set."""

from __future__ import annotations

import time

from chaos.faults.base import Fault, FaultContext, FaultError
from chaos.report import FAIL, PASS, Verdict
from client.auth_tokens import root_token
from cluster.members import MemberChangeError, Membership

__all__ = ["MembershipChange"]


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
        lc = ctx.cluster
        return Membership(
            lc.config_path,
            say=lambda m: ctx.log(f"membership: {m}"),
            node_command=lc.node_command,
            env=lc._extra_env,
            token=root_token(lc.config.secret),
        )

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
