"""The vocabulary of the stream checker (chaos/checker/streams.py has the rules' statement
and the entry point, chaos/checker/stream_rules.py one function per rule): a final
stream's events, a violation, a logical append and the final stream indexed.

Below both modules, which import it: the rules used to import these from streams.py,
whose entry point imported the rules back from inside a function.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from statekeeper.chaos.history import Op

Ev = tuple[int, Any, Any]  # (seq, event id or None, data)


@dataclass(frozen=True)
class StreamViolation:
    rule: str
    stream: str
    message: str
    ops: tuple[int | str, ...] = ()

    def describe(self) -> str:
        return f"[{self.rule}] {self.stream}: {self.message}"


@dataclass(eq=False)
class Append:
    """One logical append: the ops sharing its events, and where they ended up."""

    stream: str
    ids: tuple[str, ...]
    data: dict[str, Any]
    ops: list[Op] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)  # final seq of each present id, in order

    @property
    def present(self) -> bool:
        return bool(self.seqs)

    @property
    def appliers(self) -> list[Op]:
        return [o for o in self.ops if o.outcome == "info" or (o.outcome == "ok" and appended(o))]

    @property
    def lo(self) -> float:
        """Earliest time it can have been applied: its first applier's invoke."""
        return min((o.invoke_time for o in self.appliers), default=math.inf)

    def label(self) -> str:
        ops = ", ".join(f"#{o.id}" for o in self.ops)
        shown = ", ".join(self.ids[:3]) + (", ..." if len(self.ids) > 3 else "")
        return f"append [{shown}] ({ops})"


def appended(op: Op) -> bool:
    """An ok append answer that appended at least one event (not all duplicates)."""
    dups = op.output.get("duplicates") or []
    return op.output.get("first_seq") is not None or not all(dups)


class StreamIndex:
    """The final content of one stream, indexed by seq and by event id."""

    def __init__(self, name: str, events: Sequence[Ev]) -> None:
        self.name = name
        self.events = [(int(s), i, d) for s, i, d in events]
        self.by_seq: dict[int, Ev] = {}
        self.by_id: dict[Any, list[int]] = defaultdict(list)
        for ev in self.events:
            self.by_seq.setdefault(ev[0], ev)
            if ev[1] is not None:
                self.by_id[ev[1]].append(ev[0])

    @property
    def last_seq(self) -> int:
        return max(self.by_seq, default=0)

    def seq_of(self, event_id: str) -> int | None:
        seqs = self.by_id.get(event_id)
        return seqs[0] if seqs else None
