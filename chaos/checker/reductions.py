"""Two exact reductions of the unknown writes (``reduce_unknown_writes``), after preparation
(:mod:`chaos.checker.model`) and before partitioning:
- promotion (``_promote_observed``): an acked op that pins ``k = v`` (a get that read v,
  a successful cas expecting v, a txn compare or read) needs a write of v before it.
  If the only op that may write v to k is an unknown one (and v is not the initial
  value), it took effect - as a successful cas, the txn branch that writes v - before
  that op's completion: it becomes an acked op completing then. Every legal order of
  the history has it there, so the verdict is unchanged; with unique write values this
  turns nearly every unknown write somebody read into an ordinary acked one;
- pruning (``_prune_unobserved``): which ops may depend on a write ("observe" it,
  ``Relevance``): ops that read or compare with a value it writes, and ops that learn
  "value != e" (a failed cas that did not record the current value, a txn compare, a
  delete that found the key, whose count says "!= absent") unless every write of e is
  certainly overwritten before the write is invoked. Ops that complete before its invoke
  never do. The unknown writes kept are the least set K such that every unknown write an
  acked op or a member of K may observe is in K; all others are taken out at once. In
  any legal order, removing them changes nothing an acked op or a member of K sees (an
  op that now sees another value saw one of them last, and would observe it), and an
  unknown op may always be left out; so the verdict is unchanged. A delete count makes
  a write observable (that is the "!= absent" fact): an unknown put just before a
  delete that reported ``deleted=1`` may be the only explanation of that count.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from statekeeper.chaos.checker.model import Prepared


class Relevance:
    """Which ops may depend on an earlier write's value ("observe" it).

    Removing a write x from a linearization changes the value that the ops after it
    (up to the next write of its key) see, from x's value to the value p before x.
    Op o cares if it observes one of x's values (reads it, compares with it), or if it
    only learns "value != e" (``weak``) and p could be e. p cannot be e when every
    write of e (and the initial value, if it is e) is certainly overwritten before x:
    some acknowledged write with another value starts after it completed and completes
    before x is invoked, so it sits between them in every linearization.
    Ops that complete before x's invoke precede x in every linearization: never.
    An acked op's "!= e" fact never depends on a write of e (had it seen e, it would
    have failed), only on the value before x.

    ``ops`` are all ops that may be present; ``overwriters`` those certainly present.
    """

    def __init__(
        self,
        ops: Iterable[Prepared],
        overwriters: Iterable[Prepared],
        initial: Mapping[str, Any],
    ) -> None:
        self.initial = initial
        self.writers: dict[tuple[str, Any], list[Prepared]] = defaultdict(list)
        self.strong: dict[tuple[str, Any], list[Prepared]] = defaultdict(list)
        self.weak: dict[str, list[tuple[Prepared, Any]]] = defaultdict(list)
        for p in ops:
            for k, vs in p.writes.items():
                for v in vs:
                    self.writers[(k, v)].append(p)
            for k, vs in p.observes.items():
                if p.required:
                    # A "!= e" fact of an acked op cannot depend on a write of e: had
                    # it seen e, it would have failed.
                    vs = (vs - p.weak.get(k, set())) | p.pins.get(k, set())
                for v in vs:
                    self.strong[(k, v)].append(p)
            for k, es in p.weak.items():
                for e in es:
                    self.weak[k].append((p, e))
        acked: dict[str, list[tuple[int, float, set[Any]]]] = defaultdict(list)
        for p in overwriters:
            if p.required:
                for k, vs in p.writes.items():
                    acked[k].append((p.op.invoke_time, p.complete, vs))
        self.acked = {k: sorted(ws, key=lambda w: w[0]) for k, ws in acked.items()}
        self.acked_invokes = {k: [w[0] for w in ws] for k, ws in self.acked.items()}
        self._until: dict[tuple[str, Any], float] = {}

    def _overwritten_at(self, key: str, value: Any, after: float) -> float:
        """Earliest completion of an acked write of another value invoked after ``after``."""
        best = math.inf
        writes = self.acked.get(key, [])
        start = bisect.bisect_right(self.acked_invokes.get(key, []), after)
        for invoke, complete, vs in itertools.islice(writes, start, None):
            if invoke >= best:
                break  # sorted by invoke, and complete >= invoke
            if value not in vs and complete < best:
                best = complete
        return best

    def until(self, key: str, value: Any) -> float:
        """Time after which ``key`` can no longer hold ``value`` just before a write."""
        ck = (key, value)
        if ck not in self._until:
            ends = [
                self._overwritten_at(key, value, p.complete if p.required else math.inf)
                for p in self.writers.get(ck, ())
            ]
            if self.initial.get(key) == value:
                ends.append(self._overwritten_at(key, value, -math.inf))
            self._until[ck] = max(ends, default=-math.inf)
        return self._until[ck]

    def strong_observers(self, x: Prepared) -> Iterator[Prepared]:
        """Ops that read or compare with a value x writes and may come after x."""
        t = x.op.invoke_time
        for k, vs in x.writes.items():
            for v in vs:
                for o in self.strong.get((k, v), ()):
                    if o is not x and o.complete >= t:
                        yield o

    def weak_observers(self, x: Prepared) -> Iterator[tuple[Prepared, str, Any]]:
        """(op, key, e): ops that learn "!= e" and could see e if x were left out."""
        t = x.op.invoke_time
        for k in x.writes:
            for o, e in self.weak.get(k, ()):
                if o is not x and o.complete >= t and self.until(k, e) >= t:
                    yield o, k, e

    def observed(self, x: Prepared, present: set[int]) -> bool:
        """Whether an op in ``present`` (ids of Prepared) may depend on x's value."""
        return any(id(o) in present for o in self.strong_observers(x)) or any(
            id(o) in present for o, _k, _e in self.weak_observers(x)
        )


def prunable(x: Prepared) -> bool:
    # Only unknown ops may be left out (their ``writes`` cover every branch of a txn).
    return not x.required and bool(x.writes)


def _prune_unobserved(
    prepared: list[Prepared], initial: Mapping[str, Any]
) -> tuple[list[Prepared], int]:
    """Drop unknown writes that no required op may observe, even through other
    unknown ops (see ``Relevance``); returns (the ops kept, how many were dropped).

    Kept: the least set K of unknown writes such that every unknown write that a
    required op or a member of K may observe is in K (found from the required ops,
    following "may observe" edges backwards). Taking all the others (D) out of a legal
    order leaves a legal order: an op that now sees another value saw the value of
    some x in D last, and now sees that of the latest write before it that stays
    (or the initial value); if it reads or compares with x's value, it observes x,
    and if it only learns "!= e" and now sees e, it is one of x's "!=" observers
    (no certain overwrite of e sits between that write and x: those are acked, and
    stay). Either way x would be in K if the op is required or in K. So required ops
    and K behave as before (an unknown cas in K keeps its effect), and the rest are
    gone, which an unknown op may always be. Conversely an order without D is legal
    for the full history. A cycle of unknown ops observing only each other (e.g.
    two never-applied txns comparing with each other's values) is dropped whole.
    """
    rel = Relevance(prepared, prepared, initial)
    # observer -> the unknown writes it may observe
    seen_by: dict[int, list[Prepared]] = defaultdict(list)
    for x in prepared:
        if not prunable(x):
            continue
        for o in rel.strong_observers(x):
            seen_by[id(o)].append(x)
        for o, _k, _e in rel.weak_observers(x):
            seen_by[id(o)].append(x)
    kept: set[int] = set()
    todo = [id(p) for p in prepared if p.required]
    while todo:
        for x in seen_by.get(todo.pop(), ()):
            if id(x) not in kept:
                kept.add(id(x))
                todo.append(id(x))
    keep = [p for p in prepared if not prunable(p) or id(p) in kept]
    return keep, len(prepared) - len(keep)


def _promote_observed(
    ops: list[Prepared], initial: Mapping[str, Any]
) -> tuple[list[Prepared], int]:
    """Unknown writes whose value a required op must have seen: make them required.

    A required op o that pins ``k = v`` (a get that read v, a successful cas expecting
    v, ...) needs a write of v before it. If exactly one op x may write v to k, x is
    unknown and v is not k's initial value, every legal order applies x (with that
    effect: an unknown cas as a successful one) before o, hence before o's completion.
    So x becomes a required op completing at the earliest such o: the legal orders of
    the new history are exactly those of the old one that apply x before o, i.e. all
    of them, and the verdict is unchanged. Observers that completed before x was
    invoked are skipped (x cannot serve them; they fail either way). A promoted cas
    pins its expected value in turn, so chains of unknown cas ops are followed.
    Returns (ops with the promoted ones replaced, how many were promoted).
    """
    writers: dict[tuple[str, Any], list[Prepared]] = defaultdict(list)
    for p in ops:
        for k, vs in p.writes.items():
            for v in vs:
                writers[(k, v)].append(p)
    current = {id(p): p for p in ops}
    queue = [p for p in ops if p.required and p.pins]
    while queue:
        o = queue.pop()
        for k, vs in o.pins.items():
            for v in vs:
                ws = writers.get((k, v), ())
                if len(ws) != 1 or ws[0].required or initial.get(k) == v:
                    continue
                x = ws[0]
                now = current[id(x)]
                if now is o or o.complete < x.op.invoke_time or o.complete >= now.complete:
                    continue
                fits = [a for a in x.applied if v in a.writes.get(k, ())]
                now = replace(
                    fits[0] if len(fits) == 1 else x, required=True, complete=o.complete
                )
                current[id(x)] = now
                queue.append(now)
    promoted = [current[id(p)] for p in ops]
    return promoted, sum(q is not p for p, q in zip(ops, promoted, strict=True))


def reduce_unknown_writes(
    ops: list[Prepared], initial: Mapping[str, Any]
) -> tuple[list[Prepared], int, int]:
    """Promote observed unknown writes, then prune unobserved ones: (ops, promoted, pruned).

    Both steps keep the verdict, so any sub-history may be reduced before a search.
    """
    ops, promoted = _promote_observed(ops, initial)
    ops, pruned = _prune_unobserved(ops, initial)
    return ops, promoted, pruned
