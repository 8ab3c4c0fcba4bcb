"""Counterexamples: for a non-linearizable partition, ops are dropped while the rest stays
non-linearizable (within ``minimize_time_limit``): first a binary search for the shortest
failing prefix and the latest failing start, then chunks of halving size, delta-debugging
style. Only ops that cannot have made it linearizable are dropped: read-only ops, and
writes no remaining op may observe. Shrinking works on the ops as recorded (each try
is reduced and searched afresh: a write promoted in the full history may be unknown
again in the sub-history). Hence the sub-history proves the violation on its
own: it is non-linearizable, and so is every history containing it. It is rendered one op
per line (``render_history``), followed by the longest legal order the search found.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from statekeeper.chaos.checker.model import Prepared
from statekeeper.chaos.checker.reductions import Relevance
from statekeeper.chaos.checker.search import reduce_and_search


def _droppable(
    chunk: Sequence[Prepared], rest: Sequence[Prepared], initial: Mapping[str, Any]
) -> list[Prepared]:
    """The ops of ``chunk`` whose removal cannot make a linearizable history bad.

    They are taken out one by one: read-only ops, then writes that no op still present
    may observe (``Relevance``; only acked writes in ``rest`` count as certain
    overwrites, the kept part of ``chunk`` might not be there).
    """
    rel = Relevance([*rest, *chunk], rest, initial)
    present = {id(p) for p in rest} | {id(p) for p in chunk}
    out = [p for p in chunk if p.read_only]
    for p in out:
        present.discard(id(p))
    left = [p for p in chunk if not p.read_only]
    while left:
        free = [x for x in left if not rel.observed(x, present)]
        if not free:
            break
        for x in free:
            present.discard(id(x))
        out.extend(free)
        left = [x for x in left if id(x) in present]
    return out


def minimize_ops(
    ops: list[Prepared],
    init: Any,
    initial: Mapping[str, Any],
    deadline: float,
    max_configurations: int,
) -> tuple[list[Prepared], bool]:
    """Shrink a non-linearizable op list; returns (ops, reached a fixpoint in time).

    Every step drops only ops that cannot have made the history linearizable
    (``_droppable``) and keeps the result only if it is still non-linearizable, so the
    result proves the violation on its own.
    """
    def cut(base: list[Prepared], lo: int, hi: int) -> list[Prepared] | None:
        """base without what can go of base[lo:hi], if that still fails; else None."""
        part = _droppable(base[lo:hi], base[:lo] + base[hi:], initial)
        if not part or time.monotonic() > deadline:
            return None
        gone = {id(p) for p in part}
        candidate = [p for p in base if id(p) not in gone]
        out, _reduced = reduce_and_search(candidate, init, initial, deadline, max_configurations)
        # unknown counts as "maybe fine": keep the ops
        return candidate if out.verdict is False else None

    current = sorted(ops, key=lambda p: p.op.invoke_time)
    # Cut down to a window around the violation first (binary searches for the
    # shortest failing prefix, then the latest failing start): dropping scattered reads
    # makes a failing search explore more (fewer constraints), so it goes last.
    base, lo, hi = current, 1, len(current)
    while lo < hi:
        mid = (lo + hi) // 2
        smaller = cut(base, mid, len(base))
        if smaller is not None:
            current, hi = smaller, mid
        else:
            lo = mid + 1
    base, lo, hi = current, 0, len(current)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        smaller = cut(base, 0, mid)
        if smaller is not None:
            current, lo = smaller, mid
        else:
            hi = mid - 1
    # Then delta-debugging style: drop chunks of halving size until nothing goes.
    while True:
        before = len(current)
        chunk = max(1, len(current) // 2)
        while True:
            i = len(current)
            while i > 0:  # from the end: later ops are usually irrelevant
                if time.monotonic() > deadline:
                    return current, False
                lo = max(0, i - chunk)
                smaller = cut(current, lo, i)
                if smaller is not None:
                    current = smaller
                i = lo
            if chunk == 1:
                break
            chunk = max(1, chunk // 2)
        if len(current) == before:
            return current, time.monotonic() <= deadline
