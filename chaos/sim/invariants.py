"""Invariants checked after every step of a simulated run (scenario.py calls check()).

- one leader per term: no two nodes are ever leader in the same term (Raft's Election
  Safety), across restarts too;
- committed entries never change: every entry any node applies at index i is the same
  bytes as every other entry applied at i, by any node, in any incarnation (applying
  means committed, so this is Raft's State Machine Safety at the level the node acts on);
- applied state is a function of the committed log: two nodes, or two incarnations of
  one, that have applied the same index hold the same revision and replicated clock
  there (cheap, every step); the final check compares whole stores (workload.py);
- members follow the committed configuration: once the cluster settles, every node
  reports the member set the committed log says (check_members, end of run).
A violation is reported once, with the step and the nodes involved.
"""

from __future__ import annotations

import hashlib

SHOWN = 12  # violations reported in full


class Invariants:
    def __init__(self) -> None:
        self.violations: list[str] = []
        self.more = 0  # violations past the first SHOWN, counted only
        self._seen: set[str] = set()
        self.leader_of_term: dict[int, str] = {}
        self.entry_at: dict[int, tuple[bytes, str]] = {}  # index -> (digest, who applied it first)
        self.state_at: dict[
            int, tuple[int, int, str]
        ] = {}  # applied index -> (revision, clock, who)
        # incarnation ("n0#2") -> applied_log entries checked; not id(SimNode): a freed
        # incarnation's address is reused by a new one, whose entries were then skipped
        self._consumed: dict[str, int] = {}

    def _violate(self, key: str, text: str) -> None:
        if key in self._seen:
            return
        self._seen.add(key)
        if len(self.violations) < SHOWN:
            self.violations.append(text)
        else:  # one broken entry breaks every later one: the first SHOWN say where
            self.more += 1

    def check(self, step: int, nodes) -> None:
        for node in nodes:
            self._leadership(step, node)
            self._entries(step, node)
            self._state(step, node)

    def _leadership(self, step: int, node) -> None:
        if not node.raft.is_leader():
            return
        term = node.raft.status().term
        other = self.leader_of_term.setdefault(term, node.node_id)
        if other != node.node_id:
            self._violate(
                f"leader/{term}",
                f"step {step}: two leaders in term {term}: {other} and {node.node_id}",
            )

    def _entries(self, step: int, node) -> None:
        start = self._consumed.get(node.process.name, 0)
        log = node.applied_log
        for index, payload in log[start:]:
            digest = hashlib.blake2b(payload, digest_size=12).digest()
            first = self.entry_at.setdefault(index, (digest, node.process.name))
            if first[0] != digest:
                self._violate(
                    f"entry/{index}",
                    f"step {step}: entry {index} applied by {node.process.name} differs from the one {first[1]} applied",
                )
        self._consumed[node.process.name] = len(log)

    def _state(self, step: int, node) -> None:
        sm = node.sm
        index, revision, clock = sm.applied_index, sm.revision, sm.clock_ms
        first = self.state_at.setdefault(index, (revision, clock, node.process.name))
        if first[:2] != (revision, clock):
            self._violate(
                f"state/{index}",
                f"step {step}: at applied index {index} {node.process.name} has revision {revision} clock {clock}, "
                f"{first[2]} had revision {first[0]} clock {first[1]}",
            )

    def check_members(self, nodes, expected: set[str]) -> None:
        for node in nodes:
            have = {m.id for m in node.raft.members()}
            if have != expected:
                self._violate(
                    f"members/{node.node_id}",
                    f"after the run {node.process.name} reports members {sorted(have)}, the log says {sorted(expected)}",
                )
