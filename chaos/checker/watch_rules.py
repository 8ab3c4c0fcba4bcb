"""The rules of :mod:`chaos.checker.watch`, one function per invariant (that module's
docstring states each one and why it must hold). Each returns the violations it found,
as :class:`~chaos.checker.watch.WatchViolation`."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from statekeeper.chaos.checker.stream_rules import fmt_seqs
from statekeeper.chaos.checker.watch_model import (
    Change,
    WatcherLog,
    WatchTruth,
    WatchViolation,
    Write,
    by_revision,
)

__all__ = [
    "Explainer",
    "acknowledged",
    "content",
    "duplicates",
    "frames",
    "gaps",
    "incomplete",
    "order",
    "progress",
    "truth_consistent",
]

CLUSTER = "cluster"


def _v(rule: str, who: str, msg: str, *writes: Write) -> WatchViolation:
    return WatchViolation(rule, who, msg, tuple(w.op.id for w in writes))


def _show(changes: Sequence[Change] | None) -> str:
    if not changes:
        return "nothing"
    return ", ".join(
        f"{t} {k}" + (f"={v!r}" if t == "put" else "") for k, t, v in sorted(changes, key=str)
    )


# ------------------------------------------------------------ one watcher on its own


def order(w: WatcherLog) -> list[WatchViolation]:
    """``order``: delivered event revisions never go down."""
    found, top = [], None
    for r in w.of("event"):
        if top is not None and r[2] < top:
            found.append(_v("order", w.name, f"revision {r[2]} ({r[3]}) delivered after {top}"))
        top = r[2] if top is None else max(top, r[2])
    return found


def duplicates(w: WatcherLog) -> list[WatchViolation]:
    """``duplicate``: one frame per revision, each key at most once in it."""
    found, seen = [], set()
    for rev, events in w.groups():
        if rev in seen:
            found.append(_v("duplicate", w.name, f"revision {rev} delivered in two frames"))
        seen.add(rev)
        twice = sorted(k for k, n in Counter(e[3] for e in events).items() if n > 1)
        if twice:
            found.append(
                _v("duplicate", w.name, f"revision {rev} delivers {', '.join(twice)} twice")
            )
    return found


def progress(w: WatcherLog) -> list[WatchViolation]:
    """``progress``: progress never goes back; nothing comes at or below a progress."""
    found = []
    pos, promised = w.start_revision - 1, None
    for r in w.records:
        if r[0] == "event":
            if promised is not None and r[2] <= promised:
                found.append(
                    _v(
                        "progress",
                        w.name,
                        f"event at revision {r[2]} ({r[3]}) after a progress frame at "
                        f"{promised} said everything up to it had been sent",
                    )
                )
            pos = max(pos, r[2])
        elif r[0] == "progress":
            if r[2] < pos:
                found.append(
                    _v("progress", w.name, f"progress at revision {r[2]} after position {pos}")
                )
            promised = r[2] if promised is None else max(promised, r[2])
            pos = max(pos, r[2])
    return found


def frames(w: WatcherLog) -> list[WatchViolation]:
    """``frames``: each connection resumes at the delivered position + 1 and the node's
    frames on it ascend from there."""
    found = []
    pos = w.start_revision - 1
    conn_pos, node, n = pos, "?", 0
    for r in w.records:
        kind = r[0]
        if kind == "connect":
            n, node, start = n + 1, r[2], r[3]
            if start != pos + 1:
                found.append(
                    _v(
                        "frames",
                        w.name,
                        f"connection #{n} (to {node}) started at revision {start}, but the "
                        f"last delivered position was {pos}: it should resume at {pos + 1}",
                    )
                )
            conn_pos = start - 1
        elif kind == "frame" and r[2] in ("events", "progress"):
            rev = r[3]
            if rev < conn_pos or (r[2] == "events" and rev == conn_pos):
                found.append(
                    _v(
                        "frames",
                        w.name,
                        f"{node} sent a{'n' if r[2] == 'events' else ''} {r[2]} frame at "
                        f"revision {rev} after {conn_pos} on connection #{n}",
                    )
                )
            conn_pos = max(conn_pos, rev)
        elif kind in ("event", "progress"):
            pos = max(pos, r[2])
    return found


def incomplete(w: WatcherLog, final: int | None) -> list[WatchViolation]:
    """``incomplete``: no error ended the watch, and it reached the final revision."""
    found = []
    if w.end is not None:
        found.append(
            _v("incomplete", w.name, f"the watch ended with {w.end} at revision {w.reach}")
        )
    if final is not None and w.reach < final:
        found.append(
            _v(
                "incomplete",
                w.name,
                f"got to revision {w.reach}; the run's final revision is {final}",
            )
        )
    return found


# ------------------------------------------------------------ against the truth


def gaps(w: WatcherLog, truth: WatchTruth) -> list[WatchViolation]:
    """``gap``: every truth revision from the start up to the watcher's reach is delivered."""
    assert truth.changes is not None
    lo, hi = max(w.start_revision, truth.start_revision), min(w.reach, truth.final_revision)
    got = {r[2] for r in w.of("event")}
    missing = sorted(r for r in truth.changes if lo <= r <= hi and r not in got)
    if not missing:
        return []
    first = missing[0]
    return [
        _v(
            "gap",
            w.name,
            f"{len(missing)} revisions never delivered: {fmt_seqs(missing)} (at {first}: "
            f"{_show(truth.changes[first])})",
        )
    ]


def content(w: WatcherLog, truth: WatchTruth) -> list[WatchViolation]:
    """``content``: a delivered revision has exactly the truth's changes at it."""
    assert truth.changes is not None
    found = []
    for rev, got in sorted(by_revision(w.records).items()):
        want = truth.changes.get(rev)
        if want is None or not truth.covers(rev) or set(got) == set(want):
            continue  # not a revision of the truth: ``phantom``'s business
        found.append(
            _v(
                "content",
                w.name,
                f"revision {rev} delivered {_show(got)}; the cluster's history has {_show(want)}",
            )
        )
    return found


def truth_consistent(truth: WatchTruth) -> list[WatchViolation]:
    """``truth``: the changes replayed onto the start range give the sampled ranges and
    the final one; no key twice at a revision, no delete of a missing key."""
    assert truth.changes is not None
    found: list[WatchViolation] = []
    state = dict(truth.initial) if truth.initial is not None else None
    points = sorted(set(truth.changes) | set(truth.samples))
    for rev in points:
        changes = truth.changes.get(rev, [])
        twice = sorted(k for k, n in Counter(c[0] for c in changes).items() if n > 1)
        if twice:
            found.append(_v("truth", CLUSTER, f"revision {rev} changes {', '.join(twice)} twice"))
        if state is None:
            continue
        for key, typ, value in changes:
            if typ == "delete" and key not in state:
                found.append(_v("truth", CLUSTER, f"revision {rev} deletes {key}, absent then"))
            if typ == "delete":
                state.pop(key, None)
            else:
                state[key] = value
        if rev in truth.samples and truth.samples[rev] != state:
            found.append(_differs(f"the range at revision {rev}", truth.samples[rev], state))
    if state is not None and truth.final is not None and truth.final != state:
        found.append(
            _differs(f"the final range (revision {truth.final_revision})", truth.final, state)
        )
    return found


def _differs(what: str, read: dict[str, Any], replayed: dict[str, Any]) -> WatchViolation:
    keys = sorted(k for k in set(read) | set(replayed) if read.get(k) != replayed.get(k))
    shown = ", ".join(f"{k}: {read.get(k)!r} vs {replayed.get(k)!r}" for k in keys[:5])
    return _v(
        "truth", CLUSTER, f"{what} differs from the replayed changes (read vs replayed: {shown})"
    )


# ------------------------------------------------------------ against the history


class Explainer:
    """``phantom``: which write op of the history may have made a change at a revision."""

    def __init__(self, writes: Sequence[Write]) -> None:
        self.puts: dict[tuple[str, Any], list[Write]] = defaultdict(list)
        self.deletes: dict[str, list[Write]] = defaultdict(list)
        for w in writes:
            if w.type == "put":
                self.puts[(w.key, w.value)].append(w)
            else:
                self.deletes[w.key].append(w)

    def why_not(self, rev: int, change: Change) -> str | None:
        """None if an op of the history may have made ``change`` at ``rev``; else why not."""
        key, typ, value = change
        cands = self.puts.get((key, value), []) if typ == "put" else self.deletes.get(key, [])
        what = f"{typ} {key}" + (f"={value!r}" if typ == "put" else "") + f" at revision {rev}"
        if not cands:
            return f"{what}: no op of the history wrote it"
        if any(w.possible and (not w.acknowledged or w.revision == rev) for w in cands):
            return None
        acked = [w for w in cands if w.acknowledged]
        if acked:
            at = ", ".join(f"#{w.op.id} at {w.revision}" for w in acked[:3])
            return f"{what}: acknowledged at another revision ({at})"
        ids = ", ".join(f"#{w.op.id} {w.op.outcome}" for w in cands[:3])
        return f"{what}: no op that wrote it can have applied it ({ids})"

    def truth(self, truth: WatchTruth) -> list[WatchViolation]:
        assert truth.changes is not None
        found = []
        for rev in sorted(truth.changes):
            for change in truth.changes[rev]:
                why = self.why_not(rev, change)
                if why is not None:
                    found.append(_v("phantom", CLUSTER, f"the cluster's history has {why}"))
        return found

    def delivered(self, w: WatcherLog, truth: WatchTruth | None) -> list[WatchViolation]:
        """Delivered revisions the truth lacks; where the truth does not reach, delivered
        changes no op explains."""
        found, extra = [], []
        for rev, got in sorted(by_revision(w.records).items()):
            if truth is not None and truth.covers(rev):
                assert truth.changes is not None
                if rev not in truth.changes:
                    extra.append(rev)
                continue
            for change in got:
                why = self.why_not(rev, change)
                if why is not None:
                    found.append(_v("phantom", w.name, f"delivered {why}"))
        if extra:
            found.insert(
                0,
                _v(
                    "phantom",
                    w.name,
                    f"delivered {len(extra)} revisions at which the prefix did not change "
                    f"(the cluster's history has none): {fmt_seqs(extra)}",
                ),
            )
        return found


def acknowledged(
    writes: Sequence[Write], watchers: Sequence[WatcherLog], truth: WatchTruth | None
) -> list[WatchViolation]:
    """``acknowledged``: every acknowledged change is in the truth at its revision; when
    the truth lacks it, every watcher that covered its revision delivered it."""
    found = []
    delivered = {w.name: by_revision(w.records) for w in watchers}
    for x in writes:
        rev = x.revision
        if not x.acknowledged or rev is None:
            continue
        what = f"{x.type} {x.key}" + (f"={x.value!r}" if x.type == "put" else "")
        if truth is not None and truth.covers(rev):
            assert truth.changes is not None
            there = truth.changes.get(rev)
            if there is not None and x.change() in there:
                continue  # watchers are held to the truth by gap / content
            found.append(
                _v(
                    "acknowledged",
                    CLUSTER,
                    f"#{x.op.id} {what} acknowledged at revision {rev} is not in the "
                    f"cluster's history (at {rev}: {_show(there)})",
                    x,
                )
            )
        for w in watchers:
            if w.start_revision <= rev <= w.reach:
                got = delivered[w.name].get(rev)
                if got is None or x.change() not in got:
                    found.append(
                        _v(
                            "acknowledged",
                            w.name,
                            f"#{x.op.id} {what} acknowledged at revision {rev} was not "
                            f"delivered (at {rev}: {_show(got)})",
                            x,
                        )
                    )
    return found
