"""The vocabulary of the watch checker (chaos/checker/watch.py has the rules' statement and
the entry point, chaos/checker/watch_rules.py one function per rule): a change, a
violation, what a watcher saw, the truth read back from the cluster, a write of the
history.

Below both modules, which import it: the rules used to import these from watch.py, whose
entry point imported the rules back from inside a function.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from statekeeper.chaos.history import Op

Change = tuple[str, str, Any]  # (key, "put" | "delete", value text; None for a delete)


@dataclass(frozen=True)
class WatchViolation:
    rule: str
    watcher: str  # the watcher's name, or "cluster" for the truth
    message: str
    ops: tuple[int | str, ...] = ()

    def describe(self) -> str:
        return f"[{self.rule}] {self.watcher}: {self.message}"


@dataclass
class WatcherLog:
    """What one watcher saw, in order. ``records`` holds tuples:

    ``("connect", t, node, from_revision, reason)``  a connection attempt: the first
        (reason None) and each resume (reason: the error that ended the previous one)
    ``("frame", t, kind, revision)``  a frame as the node sent it ("events", "progress",
        "error"), before the client's own de-duplication
    ``("event", t, revision, key, type, value)``  an event delivered to the application
    ``("progress", t, revision)``  a progress frame delivered to the application
    ``("end", t, error)``  the watch ended by itself (gave up, compacted, a bug)

    ``t`` is ``time.monotonic_ns()`` of the run (the history's clock).
    """

    name: str
    start_revision: int
    records: list[tuple[Any, ...]] = field(default_factory=list)

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [r for r in self.records if r[0] == kind]

    @property
    def reach(self) -> int:
        """How far it got: the highest revision delivered (event or progress)."""
        return max(
            (r[2] for r in self.records if r[0] in ("event", "progress")),
            default=self.start_revision - 1,
        )

    @property
    def resumes(self) -> int:
        return max(0, len(self.of("connect")) - 1)

    @property
    def end(self) -> str | None:
        ends = self.of("end")
        return ends[-1][2] if ends else None

    def groups(self) -> list[tuple[int, list[tuple[Any, ...]]]]:
        """The delivered events as frames: (revision, its events), consecutive events of
        one revision together (the client yields a frame's events one after another)."""
        out: list[tuple[int, list[tuple[Any, ...]]]] = []
        for r in self.records:
            if r[0] != "event":
                continue
            if out and out[-1][0] == r[2]:
                out[-1][1].append(r)
            else:
                out.append((r[2], [r]))
        return out


@dataclass
class WatchTruth:
    """The prefix's change history read back from the cluster after the run (see the
    module docstring); ``changes`` None: it could not be read (``error`` says why)."""

    prefix: str
    start_revision: int  # first revision covered (the watchers' start, or compact + 1)
    final_revision: int  # the revision of the linearizable read of the prefix at the end
    changes: dict[int, list[Change]] | None = None
    initial: dict[str, Any] | None = None  # range at start_revision - 1
    final: dict[str, Any] | None = None  # range at final_revision
    samples: dict[int, dict[str, Any]] = field(default_factory=dict)  # range at revisions
    error: str | None = None

    def covers(self, revision: int) -> bool:
        return self.changes is not None and self.start_revision <= revision <= self.final_revision


@dataclass(frozen=True)
class Write:
    """The change one write op makes (or may make) to one key of the prefix."""

    op: Op
    key: str
    type: str  # "put" | "delete"
    value: Any  # None for a delete

    @property
    def acknowledged(self) -> bool:
        """It certainly happened, at ``revision``."""
        if self.op.outcome != "ok":
            return False
        out = self.op.output
        if self.op.f in ("cas", "txn"):
            return bool(out.get("succeeded"))
        if self.op.f == "delete":
            return bool(out.get("deleted"))
        return True

    @property
    def revision(self) -> int | None:
        r = self.op.output.get("revision")
        return r if isinstance(r, int) else None

    @property
    def possible(self) -> bool:
        """It may have happened: acknowledged, or of unknown outcome."""
        return self.acknowledged or self.op.outcome == "info"

    def change(self) -> Change:
        return (self.key, self.type, self.value)


def by_revision(records: Iterable[tuple[Any, ...]]) -> dict[int, list[Change]]:
    """revision -> the changes of the ``event`` records at it."""
    out: dict[int, list[Change]] = defaultdict(list)
    for r in records:
        if r[0] == "event":
            out[r[2]].append((r[3], r[4], r[5]))
    return dict(out)
