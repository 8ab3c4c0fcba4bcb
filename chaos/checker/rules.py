"""Facts the search precomputes per partition for its refinements: when an unknown
write stops mattering (dead, stale), when an acked write can no longer be seen
(``visibility_rules``), which values no op observes and which unknown ops are interchangeable
(``symmetry``). What each refinement does, and why it keeps the search exact, is in
:mod:`chaos.checker.search`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statekeeper.chaos.checker.model import Prepared
from statekeeper.chaos.checker.reductions import Relevance, prunable

# (x, mask of strong observers, [(weak observers, writers of e, key index, e)])
DeadRule = tuple[int, int, list[tuple[int, int, int, Any]]]


@dataclass
class _Rules:
    """Precomputed facts for the search's shortcuts (see ``visibility_rules``)."""

    dead: list[DeadRule]  # for unknown writes: when they stop mattering
    # which dead rules to re-check when an op is linearized / when a key leaves a value
    listeners: dict[int, list[DeadRule]]
    leaving: dict[tuple[int, Any], list[DeadRule]]
    unseen: dict[int, DeadRule]  # for acked puts / deletes: when nobody can see them
    observers: dict[tuple[int, Any], int]  # (key index, value) -> ops comparing with it
    stale: list[DeadRule]  # for unknown cas / txns: when they can no longer do anything
    # (key index, value) -> required ops that need the key to hold it / ops writing it
    pinned: dict[tuple[int, Any], int]
    writers: dict[tuple[int, Any], int]


def _bits(mask: int) -> Iterator[int]:
    """The indices of the set bits of ``mask``."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _stale_rules(
    ops: Sequence[Prepared],
    writers: Mapping[tuple[str, Any], int],
    key_index: Mapping[str, int],
    listeners: dict[int, list[DeadRule]],
    leaving: dict[tuple[int, Any], list[DeadRule]],
) -> list[DeadRule]:
    """When an unknown cas / txn can no longer do anything (registered for re-checks).

    One that needs k = e (``inert_unless``), once k != e and every write of e is done,
    can only be a no-op from then on: the same as never applying it. As a dead rule:
    its own (pending) bit keeps the condition "all writes of e done and the key off e"
    in force.
    """
    stale: list[DeadRule] = []
    for x, p in enumerate(ops):
        if p.required:
            continue
        for k, e in p.inert_unless:
            wm = writers.get((k, e), 0)
            rule = (x, 0, [(1 << x, wm, key_index[k], e)])
            stale.append(rule)
            leaving[(key_index[k], e)].append(rule)
            for o in _bits(wm):
                listeners[o].append(rule)
    return stale


def visibility_rules(
    ops: Sequence[Prepared], initial: Mapping[str, Any], key_index: Mapping[str, int]
) -> _Rules:
    """When a write's value can no longer be seen by the ops left.

    For a write x: every op in ``mask`` (those that may read or compare with a value x
    writes) is linearized, and for every condition (observers, writers, key, e) - ops
    that only learn "value != e" - either those observers are linearized too, or every
    write of e is and the key does not hold e now (so the value before x can never be
    e again). Then, as in ``_prune_unobserved``, swapping x's value for the one before it
    changes nothing any op left can notice: an unknown x can be treated as never
    applied ("dead"), and an acked put / delete x is as good as a read that changes
    nothing if the value it overwrites is unseen too (so it is linearized at once).
    """
    rel = Relevance(ops, ops, initial)
    index = {id(p): i for i, p in enumerate(ops)}
    writers: dict[tuple[str, Any], int] = defaultdict(int)
    observers: dict[tuple[int, Any], int] = defaultdict(int)
    for o, q in enumerate(ops):
        for k, vs in q.writes.items():
            for v in vs:
                writers[(k, v)] |= 1 << o
        for k, vs in q.observes.items():
            for v in vs:
                observers[(key_index[k], v)] |= 1 << o
    dead: list[DeadRule] = []
    unseen: dict[int, DeadRule] = {}
    listeners: dict[int, list[DeadRule]] = defaultdict(list)
    leaving: dict[tuple[int, Any], list[DeadRule]] = defaultdict(list)

    stale = _stale_rules(ops, writers, key_index, listeners, leaving)
    for x, p in enumerate(ops):
        acked_overwrite = p.required and p.op.f in ("put", "delete") and bool(p.writes)
        if not (prunable(p) or acked_overwrite):
            continue
        mask = 0
        for o in rel.strong_observers(p):
            mask |= 1 << index[id(o)]
        weak: dict[tuple[str, Any], int] = defaultdict(int)
        for o, k, e in rel.weak_observers(p):
            weak[(k, e)] |= 1 << index[id(o)]
        conds = [(om, writers[(k, e)], key_index[k], e) for (k, e), om in weak.items()]
        # Check first the conditions most likely to keep x visible: those about the
        # values written last.
        conds.sort(key=lambda c: -c[1].bit_length())
        if acked_overwrite:
            unseen[x] = (x, mask, conds)
            continue
        rule = (x, mask, conds)
        dead.append(rule)
        # A rule can only start to hold when one of these ops is linearized, or when
        # (all writes of e done) the key moves off e.
        watched = mask
        for om, wm, ki, e in conds:
            watched |= om | wm
            leaving[(ki, e)].append(rule)
        for o in _bits(watched):
            listeners[o].append(rule)
    pinned: dict[tuple[int, Any], int] = defaultdict(int)
    for o, q in enumerate(ops):
        if q.required:
            for k, vs in q.pins.items():
                for v in vs:
                    pinned[(key_index[k], v)] |= 1 << o
    by_index = {(key_index[k], v): m for (k, v), m in writers.items()}
    return _Rules(
        dead,
        dict(listeners),
        dict(leaving),
        unseen,
        dict(observers),
        stale,
        dict(pinned),
        by_index,
    )


class _Unseen:
    """The value of a key when no op ever reads or compares with it (one per search)."""

    def __repr__(self) -> str:
        return "<a value nobody observes>"


_UNSEEN = _Unseen()


def symmetry(
    ops: Sequence[Prepared], keys: Sequence[str]
) -> tuple[Callable[[Any], Any], list[Any]]:
    """(canon, classes): two exact reductions of the search space.

    ``canon`` maps a state to one where every value that no op of the partition reads or
    compares with is replaced by ``_UNSEEN``. A model step only tests the state for
    equality with values it observes (get results, cas expects, compares, "absent" for
    counted deletes), so two states that differ only in unobserved values allow exactly
    the same continuations: memoizing the canonical state merges them.

    ``classes[i]`` (unknown ops only, else None): ops of one class write the same
    values up to unobserved ones and are otherwise the same op. Two of them that are
    both available (invoked, not applied) can be swapped in any continuation (each
    may still take effect at any later point), so the search offers one per class.
    """
    idx = {k: i for i, k in enumerate(keys)}
    seen: list[set[Any]] = [set() for _ in keys]
    for p in ops:
        for k, vs in p.observes.items():
            seen[idx[k]] |= vs
    if len(keys) == 1:
        (only,) = seen

        def canon(s: Any) -> Any:
            return s if s in only else _UNSEEN

    else:

        def canon(s: Any) -> Any:
            return tuple(v if v in seen[i] else _UNSEEN for i, v in enumerate(s))

    classes: list[Any] = []
    for p in ops:
        if p.required or p.signature is None:
            classes.append(None)
            continue
        shape, written = p.signature
        norm = tuple((k, v if v in seen[idx[k]] else _UNSEEN) for k, v in written)
        classes.append((shape, norm))
    return canon, classes
