"""Consistency checks of a chaos history (see ``chaos.history`` for the format).

Linearizability (``check``)
===========================

Model: every key is a register holding a value or ``None`` (absent); the store starts
with every key absent (or ``initial``).

- ``put(k, v)`` sets ``v``; ``delete(k)`` sets ``None``; ``get(k)`` must return the value.
- ``cas(k, expect, new)`` succeeds iff the value equals ``expect`` (``None`` = expect the
  key absent) and then sets ``new``; a failed cas must see a value != ``expect`` (and,
  when the workload recorded the current value the server returned, exactly that value).
- ``txn``: all ``compare`` entries (``==`` / ``!=`` on values) hold -> the ``success``
  ops run in order, else the ``failure`` ops; ``get`` results are checked when recorded.
  A txn is one atomic multi-key op, so the keys it touches cannot be checked apart:
  keys connected by txns form one partition (union-find) whose state is the tuple of
  its keys' values.

Preparation, per op: ``fail`` ops are dropped (they did not happen); ``info`` (unknown)
reads - gets and txns without writes - are dropped (they constrain nothing); ``range``,
``compact``, serializable gets and gets at an old ``revision`` are ignored (not
linearizable by contract, and they write nothing). ``info`` writes are optional: they may
take effect once, at any point after their invoke (completion time +inf), or never.

Which ops may depend on a write ("observe" it, ``_Relevance``): ops that read or compare
with a value it writes, and ops that only learn "value != e" (a failed cas that did not
record the current value, txn compares) unless every write of e is certainly overwritten
before the write is invoked. Ops that complete before its invoke never do. An unknown
write nobody may observe is pruned up front: in any linearization it can be taken out
without changing what any other op sees, so the verdict is the same without it.

P-compositionality: linearizability is local, so each partition is checked on its own,
smallest first, each with an even share of the remaining ``time_limit`` (sequentially:
the search is CPU-bound and threads would only share the GIL). A partition of many keys
joined by txns is searched as one (the state is a tuple) and costs far more than its
keys would apart: keep txns within small fixed key groups.

Search (per partition): Wing & Gong's backtracking search with Lowe's memoization. The
ops' call and return events sit in one time-ordered doubly linked list (calls before
returns at equal times, i.e. ties count as concurrent). The calls before the first
remaining return are the candidates: no pending op completed before they were invoked.
Linearizing one (if the model accepts it) unlinks its call and return and goes deeper;
when no candidate works the last choice is undone. The history is linearizable as soon
as every ``ok`` op is linearized (unknown ops left over are taken as never applied).
Refinements, each keeping the search exact:

- memo with subsumption: configurations are (linearized acked ops, state, linearized
  unknown ops I); one is skipped if the same acked ops and state were reached before
  with a subset of I (having applied fewer unknown ops can only leave more options);
- forced moves: an acked read-only op that the current state satisfies is linearized
  with no alternatives tried (any success path stays valid with it moved first); so is
  an acked put / delete whose value no op left can see, over a value no op left can
  see (the common "overwritten unread" write: otherwise every order of such concurrent
  writes would be a separate configuration);
- dead unknown writes: once every op that may observe an unknown write is linearized
  (and no "!= e" observer can see e again), it is treated as never applied;
- postponed unknown writes: an unknown write that only "!= e" observers still care about
  is only tried right before such an observer that needs it.

Every distinct configuration is explored at most once; the search stops at its time
share or ``max_configurations`` and that partition's verdict is then ``"unknown"``,
never a guess. Rough costs (2 cores): 16 clients, 5,000 ops over 10 keys, a few % unknown
ops: well under a second; all 16 clients on ONE key: seconds; the same without failed-cas
current values (many "!= e" facts): may end "unknown" - record them.

Counterexamples: for a non-linearizable partition, ops are dropped while the rest stays
non-linearizable (within ``minimize_time_limit``): first a binary search for the shortest
failing prefix and the latest failing start, then chunks of halving size, delta-debugging
style. Only ops that cannot have made it linearizable are dropped: read-only ops, and
writes no remaining op may observe. Hence the sub-history proves the violation on its
own: it is non-linearizable, and so is every history containing it. It is rendered one op
per line (``render_history``), followed by the longest legal order the search found.

Lost writes (``lost_writes``) and duplicate applications (``duplicate_applications``)
=================================================================================

These read a final value per key (read once the cluster is healed and clients stopped)
and rely on the workload recording:

- unique write values: every put / cas / txn put writes a value no other logical write
  uses (e.g. ``f"{process}-{op id}"``); ``None`` (delete) is the only shared value;
- ``revision`` on every ok write, ``mod_revision`` (of the returned kv) on every ok get
  (and on failed cas ops that record the current value), and the final read's
  ``mod_revision`` per key (``final_revisions``);
- an ``idempotency_key`` on every write; a workload-level retry of the same logical write
  is a new op with the same idempotency key.

For the linearizability check the same unique values make counterexamples sharp, and two
more habits keep the search fast: record the current value a failed cas gets back with
``compare_failed`` (``value`` on the completion), and let txn failure branches ``get``
the compared keys (``results``) - both turn "value != e" facts into plain reads.

A write is *lost* when it was acknowledged (``ok``) but the final value is older than it:
every op that could have written the final value completed before the write was invoked
(value-based; sound with any values, only sharp with unique ones), or the write's
acknowledged revision is above the final kv's ``mod_revision`` (revision-based).

A write is *applied twice* when one logical write (one idempotency key, one unique value)
shows up at two different revisions: ops sharing an idempotency key acknowledged with
different revisions (a retry was applied instead of replayed), or the written value
observed (write ack, gets, final read) with two different ``mod_revision`` values - its
effect appeared twice. The linearizability check also catches the value-level symptom
(a value seen, overwritten, then seen again).
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from chaos.history import HistoryError, Op, read_history

__all__ = [
    "UNKNOWN",
    "DuplicateApplication",
    "LostWrite",
    "PartitionResult",
    "Result",
    "Verdict",
    "check",
    "duplicate_applications",
    "lost_writes",
    "render_history",
]

UNKNOWN: Literal["unknown"] = "unknown"
Verdict = bool | Literal["unknown"]

_INVALID = object()  # a model step that is not allowed (None is a legal state: absent)
_IGNORED_FS = frozenset({"range", "compact"})


# ------------------------------------------------------------------------------ values


def _freeze(value: Any) -> Any:
    """A hashable, comparable stand-in for a JSON value (lists/dicts become tuples)."""
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return ("\0dict", tuple(sorted((str(k), _freeze(v)) for k, v in value.items())))
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def _fmt(value: Any) -> str:
    if value is None:
        return "absent"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


# ---------------------------------------------------------------------- op compilation


@dataclass(eq=False)
class _Prepared:
    """An op ready for the model: what it writes / observes, and its model step."""

    op: Op
    required: bool  # ok ops must be linearized; info writes may be left out
    # key -> frozen values this op may write / takes as evidence of the current value
    writes: dict[str, set[Any]]
    observes: dict[str, set[Any]]
    # key -> values x where the op only learns "value != x" (a failed cas that did not
    # record the current value, txn compares): an earlier write's removal could flip it
    weak: dict[str, set[Any]]
    make_step: Callable[[dict[str, int], bool], Callable[[Any], Any]]
    step: Callable[[Any], Any] | None = None

    @property
    def read_only(self) -> bool:
        return not self.writes


def _getter_setter(idx: dict[str, int], single: bool, key: str):
    if single:
        return (lambda s: s), (lambda s, v: v)
    i = idx[key]
    return (lambda s: s[i]), (lambda s, v: s[:i] + (v,) + s[i + 1 :])


def _prepare(op: Op) -> _Prepared:
    """Translate an op into model terms. Raises HistoryError for what the model lacks."""
    f, inp, out = op.f, op.input, op.output
    is_ok = op.outcome == "ok"
    if is_ok and f in ("cas", "txn") and not isinstance(out.get("succeeded"), bool):
        raise HistoryError(f"op {op.id!r}: ok {f} without a bool 'succeeded'")
    if is_ok and f == "get" and "value" not in out:
        raise HistoryError(f"op {op.id!r}: ok get without a read value")
    if f in ("put", "delete", "get", "cas"):
        if op.key is None:
            raise HistoryError(f"op {op.id!r}: {f} needs exactly one key")
        key = op.key
    if f == "put":
        v = _freeze(inp.get("value"))

        def make_put(idx, single):
            _, put = _getter_setter(idx, single, key)
            return lambda s: put(s, v)

        return _Prepared(op, is_ok, {key: {v}}, {}, {}, make_put)
    if f == "delete":
        if inp.get("prefix"):
            raise HistoryError(f"op {op.id!r}: prefix deletes are not modeled")

        def make_delete(idx, single):
            _, put = _getter_setter(idx, single, key)
            return lambda s: put(s, None)

        return _Prepared(op, is_ok, {key: {None}}, {}, {}, make_delete)
    if f == "get":
        r = _freeze(out.get("value"))

        def make_get(idx, single):
            get, _ = _getter_setter(idx, single, key)
            return lambda s: s if get(s) == r else _INVALID

        return _Prepared(op, True, {}, {key: {r}}, {}, make_get)
    if f == "cas":
        e, n = _freeze(inp.get("expect")), _freeze(inp.get("value"))
        if not is_ok:  # unknown: whatever the state says, or nothing (optional)

            def make_cas_info(idx, single):
                get, put = _getter_setter(idx, single, key)
                return lambda s: put(s, n) if get(s) == e else s

            return _Prepared(op, False, {key: {n}}, {key: {e}}, {}, make_cas_info)
        if out["succeeded"]:

            def make_cas_ok(idx, single):
                get, put = _getter_setter(idx, single, key)
                return lambda s: put(s, n) if get(s) == e else _INVALID

            return _Prepared(op, True, {key: {n}}, {key: {e}}, {}, make_cas_ok)
        if "value" in out:  # the server told us the current value
            c = _freeze(out["value"])

            def make_cas_seen(idx, single):
                get, _ = _getter_setter(idx, single, key)
                return lambda s: s if get(s) == c and c != e else _INVALID

            return _Prepared(op, True, {}, {key: {e, c}}, {}, make_cas_seen)

        def make_cas_failed(idx, single):
            get, _ = _getter_setter(idx, single, key)
            return lambda s: s if get(s) != e else _INVALID

        return _Prepared(op, True, {}, {key: {e}}, {key: {e}}, make_cas_failed)
    if f == "txn":
        return _prepare_txn(op)
    raise HistoryError(f"op {op.id!r}: unknown op {f!r}")


def _prepare_txn(op: Op) -> _Prepared:
    inp, out = op.input, op.output
    is_ok = op.outcome == "ok"
    cmps = []
    for c in inp.get("compare") or ():
        cop = c.get("op", "==")
        if cop not in ("==", "!="):
            raise HistoryError(f"op {op.id!r}: txn compare op {cop!r} is not modeled")
        cmps.append((c["key"], cop == "==", _freeze(c.get("value"))))

    def branch(name: str) -> list[tuple[str, str, Any]]:
        ops = []
        for b in inp.get(name) or ():
            bf = b.get("f") or b.get("op")
            if bf not in ("put", "delete", "get"):
                raise HistoryError(f"op {op.id!r}: txn op {bf!r} is not modeled")
            ops.append((bf, b["key"], _freeze(b.get("value")) if bf == "put" else None))
        return ops

    success, failure = branch("success"), branch("failure")
    succeeded: bool | None = out["succeeded"] if is_ok else None
    results = [_freeze(r) for r in out.get("results") or ()] if is_ok else []
    chosen = [success, failure] if succeeded is None else [success if succeeded else failure]

    writes: dict[str, set[Any]] = defaultdict(set)
    observes: dict[str, set[Any]] = defaultdict(set)
    weak: dict[str, set[Any]] = defaultdict(set)
    for br in chosen:
        for bf, k, v in br:
            if bf != "get":
                writes[k].add(v)
    read_first: set[str] = set()  # keys the chosen branch read (recorded) before writing
    if succeeded is not None:
        written: set[str] = set()
        for j, (bf, k, _v) in enumerate(chosen[0]):
            if bf == "get" and j < len(results):
                observes[k].add(results[j])
                if k not in written:
                    read_first.add(k)
            elif bf != "get":
                written.add(k)
    for k, eq, v in cmps:
        observes[k].add(v)
        # Only a successful "==" pins the value, or a read of the key in the chosen
        # branch (same atomic state); anything else is a "not equal" fact.
        if not (succeeded is True and eq) and k not in read_first:
            weak[k].add(v)

    def make_txn(idx, single):
        cmp_i = [(0 if single else idx[k], eq, v) for k, eq, v in cmps]
        succ_i = [(bf, 0 if single else idx[k], v) for bf, k, v in success]
        fail_i = [(bf, 0 if single else idx[k], v) for bf, k, v in failure]
        check_reads = succeeded is not None

        def step(s):
            cur = [s] if single else list(s)
            ok = all((cur[i] == v) == eq for i, eq, v in cmp_i)
            if succeeded is not None and ok != succeeded:
                return _INVALID
            for j, (bf, i, v) in enumerate(succ_i if ok else fail_i):
                if bf == "put":
                    cur[i] = v
                elif bf == "delete":
                    cur[i] = None
                elif check_reads and j < len(results) and cur[i] != results[j]:
                    return _INVALID
            return cur[0] if single else tuple(cur)

        return step

    return _Prepared(op, is_ok, dict(writes), dict(observes), dict(weak), make_txn)


def _linearizable_relevant(op: Op) -> bool:
    """False for ops that cannot change any verdict (see the module docstring)."""
    if op.outcome == "fail" or op.f in _IGNORED_FS:
        return False
    if op.f == "get":
        if op.outcome != "ok":
            return False
        if op.input.get("consistency") == "serializable" or op.input.get("revision"):
            return False
    return True


class _Relevance:
    """Which ops may depend on an earlier write's value ("observe" it).

    Removing a write x from a linearization changes the value that the ops after it
    (up to the next write of its key) see, from x's value to the value p before x.
    Op o cares if it observes one of x's values (reads it, compares with it), or if it
    only learns "value != e" (``weak``) and p could be e. p cannot be e when every
    write of e (and the initial value, if it is e) is certainly overwritten before x:
    some acknowledged write with another value starts after it completed and completes
    before x is invoked, so it sits between them in every linearization.
    Ops that complete before x's invoke precede x in every linearization: never.

    ``ops`` are all ops that may be present; ``overwriters`` those certainly present.
    """

    def __init__(
        self,
        ops: Iterable[_Prepared],
        overwriters: Iterable[_Prepared],
        initial: Mapping[str, Any],
    ) -> None:
        self.initial = initial
        self.writers: dict[tuple[str, Any], list[_Prepared]] = defaultdict(list)
        self.strong: dict[tuple[str, Any], list[_Prepared]] = defaultdict(list)
        self.weak: dict[str, list[tuple[_Prepared, Any]]] = defaultdict(list)
        for p in ops:
            for k, vs in p.writes.items():
                for v in vs:
                    self.writers[(k, v)].append(p)
            for k, vs in p.observes.items():
                for v in vs:
                    self.strong[(k, v)].append(p)
            for k, es in p.weak.items():
                for e in es:
                    self.weak[k].append((p, e))
        acked: dict[str, list[tuple[int, float, set[Any]]]] = defaultdict(list)
        for p in overwriters:
            if p.required:
                for k, vs in p.writes.items():
                    acked[k].append((p.op.invoke_time, p.op.complete_time, vs))
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
                self._overwritten_at(key, value, p.op.complete_time if p.required else math.inf)
                for p in self.writers.get(ck, ())
            ]
            if self.initial.get(key) == value:
                ends.append(self._overwritten_at(key, value, -math.inf))
            self._until[ck] = max(ends, default=-math.inf)
        return self._until[ck]

    def strong_observers(self, x: _Prepared) -> Iterator[_Prepared]:
        """Ops that read or compare with a value x writes and may come after x."""
        t = x.op.invoke_time
        for k, vs in x.writes.items():
            for v in vs:
                for o in self.strong.get((k, v), ()):
                    if o is not x and o.op.complete_time >= t:
                        yield o

    def weak_observers(self, x: _Prepared) -> Iterator[tuple[_Prepared, str, Any]]:
        """(op, key, e): ops that learn "!= e" and could see e if x were left out."""
        t = x.op.invoke_time
        for k in x.writes:
            for o, e in self.weak.get(k, ()):
                if o is not x and o.op.complete_time >= t and self.until(k, e) >= t:
                    yield o, k, e

    def observed(self, x: _Prepared, present: set[int]) -> bool:
        """Whether an op in ``present`` (ids of _Prepared) may depend on x's value."""
        return any(id(o) in present for o in self.strong_observers(x)) or any(
            id(o) in present for o, _k, _e in self.weak_observers(x)
        )


def _prunable(x: _Prepared) -> bool:
    # Only unknown ops may be left out (their ``writes`` cover every branch of a txn).
    return not x.required and bool(x.writes)


def _prune_unobserved(
    prepared: list[_Prepared], initial: Mapping[str, Any]
) -> tuple[list[_Prepared], int]:
    """Drop unknown writes that no op may observe (see ``_Relevance``).

    In any linearization such a write can be taken out without changing what the
    other ops see (an unknown cas that then would succeed can be left out, it is
    optional too), and an unknown write may be left out anyway: the verdict is unchanged.
    """
    pruned = 0
    while True:
        rel = _Relevance(prepared, prepared, initial)
        present = {id(p) for p in prepared}
        keep = [x for x in prepared if not _prunable(x) or rel.observed(x, present)]
        pruned += len(prepared) - len(keep)
        if len(keep) == len(prepared):
            return keep, pruned
        prepared = keep  # a pruned unknown cas observed nothing more: try again


# (x, mask of strong observers, [(weak observers, writers of e, key index, e)])
_DeadRule = tuple[int, int, list[tuple[int, int, int, Any]]]


@dataclass
class _Rules:
    """Precomputed facts for the search's shortcuts (see ``_rules``)."""

    dead: list[_DeadRule]  # for unknown writes: when they stop mattering
    # which dead rules to re-check when an op is linearized / when a key leaves a value
    listeners: dict[int, list[_DeadRule]]
    leaving: dict[tuple[int, Any], list[_DeadRule]]
    unseen: dict[int, _DeadRule]  # for acked puts / deletes: when nobody can see them
    observers: dict[tuple[int, Any], int]  # (key index, value) -> ops comparing with it


def _rules(
    ops: Sequence[_Prepared], initial: Mapping[str, Any], key_index: Mapping[str, int]
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
    rel = _Relevance(ops, ops, initial)
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
    dead: list[_DeadRule] = []
    unseen: dict[int, _DeadRule] = {}
    listeners: dict[int, list[_DeadRule]] = defaultdict(list)
    leaving: dict[tuple[int, Any], list[_DeadRule]] = defaultdict(list)

    def bits(mask: int) -> Iterator[int]:
        while mask:
            low = mask & -mask
            yield low.bit_length() - 1
            mask ^= low

    for x, p in enumerate(ops):
        acked_overwrite = p.required and p.op.f in ("put", "delete")
        if not (_prunable(p) or acked_overwrite):
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
        for o in bits(watched):
            listeners[o].append(rule)
    return _Rules(dead, dict(listeners), dict(leaving), unseen, dict(observers))


@dataclass
class _SearchOutcome:
    verdict: Verdict
    configurations: int
    steps: int
    best: list[int] = field(default_factory=list)  # longest partial linearization (indices)
    reason: str = ""


def _search(
    ops: Sequence[_Prepared],
    init: Any,
    deadline: float,
    max_configurations: int,
    initial: Mapping[str, Any],
    track: bool = False,
) -> _SearchOutcome:
    """Wing-Gong-Lowe search over ``ops`` (steps already bound to the partition).

    ``init`` is the model's initial state, ``initial`` the same per key (frozen).
    """
    n = len(ops)
    required = [p.required for p in ops]
    required_left = sum(required)
    if required_left == 0:
        return _SearchOutcome(True, 0, 0)
    events = []
    for i, p in enumerate(ops):
        events.append((p.op.invoke_time, 0, i))  # 0: calls sort before returns on ties
        events.append((p.op.complete_time, 1, i))
    events.sort()
    size = 2 * n + 2
    head = 0
    nxt = list(range(1, size + 1))
    prv = list(range(-1, size - 1))
    ent_op = [0] * size
    ent_call = [False] * size
    match = [0] * size  # call entry -> its return entry
    call_at = [0] * n
    for pos, (_t, kind, i) in enumerate(events, start=1):
        ent_op[pos] = i
        if kind == 0:
            ent_call[pos] = True
            call_at[i] = pos
        else:
            match[call_at[i]] = pos
    steps = [p.step for p in ops]
    keys = list(initial)  # the partition's keys, in state order
    single = len(keys) == 1
    rules = _rules(ops, initial, {k: i for i, k in enumerate(keys)})
    dead_rules, listeners, leaving, unseen, observers = (
        rules.dead,
        rules.listeners,
        rules.leaving,
        rules.unseen,
        rules.observers,
    )
    # Postponing (below) moves an op later; a txn's branch depends on where it is.
    strong_mask = {x: mask for x, mask, _conds in dead_rules if ops[x].op.f != "txn"}
    key_at = [0 if single else keys.index(p.op.keys[0]) for p in ops]

    def invisible(rule: _DeadRule, lin: int, st: Any) -> bool:
        # The written value can no longer be seen (see _rules).
        _x, mask, conds = rule
        if mask & ~lin:
            return False
        for om, wm, ki, e in conds:
            if om & ~lin and (wm & ~lin or (st if single else st[ki]) == e):
                return False
        return True
    weak_keys = [set(p.weak) for p in ops]
    op_key = [p.op.keys[0] for p in ops]
    read_only = [p.read_only for p in ops]

    def candidates() -> list[tuple[int, ...]]:
        # Calls before the first remaining return: no pending op completed before them.
        # Required ops first, so configurations with fewer unknown ops applied get
        # cached first and subsume the others (see the memo below). Dead unknown ops
        # (bit set in ilin without being linearized) are never needed. An unknown write
        # that only "!=" observers still care about ("weak-only": nothing left reads or
        # compares with its value) is only worth applying right before such an observer
        # that fails without it, or an unknown txn whose branch it may flip (anywhere
        # else it could be moved up to that point or left out), so it is only offered
        # as a pair (x, observer).
        # An acked read-only op that the current state satisfies is forced: a success
        # path that has it later stays valid with it moved first (it changes nothing,
        # and nothing pending must precede it), so no alternative is worth trying.
        req: list[tuple[int, ...]] = []
        opt: list[tuple[int, ...]] = []
        postponed: list[int] = []
        lin = rlin | ilin
        e = nxt[head]
        while ent_call[e]:
            i = ent_op[e]
            if required[i]:
                if read_only[i] and steps[i](state) is not _INVALID:
                    return [(e,)]
                rule = unseen.get(i)
                if rule is not None and invisible(rule, lin, state):
                    # An acked put / delete nobody left can see, over a value nobody
                    # left can see: linearizing it changes nothing observable, so it
                    # is forced like a read.
                    cur = state if single else state[key_at[i]]
                    if not observers.get((key_at[i], cur), 0) & ~lin:
                        return [(e,)]
                req.append((e,))
            elif not (ilin >> i) & 1:
                mask = strong_mask.get(i)
                if mask is not None and not mask & ~lin:
                    postponed.append(e)
                else:
                    opt.append((e,))
            e = nxt[e]
        if not postponed:
            return req + opt
        pairs = [
            (x, c[0])
            for c in req + opt
            if weak_keys[ent_op[c[0]]]
            for x in postponed
            if op_key[ent_op[x]] in weak_keys[ent_op[c[0]]]
        ]
        return req + pairs + opt

    def bury(rl: int, il: int, st: Any, to_check: Iterable[_DeadRule]) -> int:
        # Mark unknown ops that can no longer matter as done (see _rules).
        lin = rl | il
        pending = ~lin
        for rule in to_check:
            i, mask, conds = rule
            if mask & pending or (il >> i) & 1:
                continue  # cheap tests first: this runs for every rule, often
            if not conds or invisible(rule, lin, st):
                il |= 1 << i
                lin |= 1 << i
                pending = ~lin
        return il

    # Memo: (linearized required ops, state) -> the sets of linearized info ops seen
    # with it. Config (R, s, I) is skipped when (R, s, I') was seen with I' a subset
    # of I: every continuation from (R, s, I) is open to (R, s, I') too (it can leave
    # the extra unknown ops out; they never block, returning at +inf), so I' is at
    # least as good. With no info ops this is plain Lowe memoization.
    cache: dict[tuple[int, Any], list[int]] = {}
    configurations = 0
    # (call entries linearized by the move, state before, ilin before)
    path: list[tuple[tuple[int, ...], Any, int]] = []
    best: list[int] = []
    state, rlin, ilin = init, 0, 0
    ilin = bury(rlin, ilin, state, dead_rules)
    frames: list[list[Any]] = [[candidates(), 0]]
    it = 0
    clock = time.monotonic
    while True:
        if (it & 0x3FF) == 0 and clock() > deadline:  # on the first step, then every 1024
            return _SearchOutcome(UNKNOWN, configurations, it, best, "time limit")
        it += 1
        frame = frames[-1]
        cands, k = frame
        if k == len(cands):
            # Nothing more to try here (a pending op's return is next): undo a move.
            frames.pop()
            if not path:
                return _SearchOutcome(False, configurations, it, best)
            move, state, ilin = path.pop()
            for entry in reversed(move):
                i = ent_op[entry]
                if required[i]:
                    rlin ^= 1 << i
                    required_left += 1
                r = match[entry]
                nxt[prv[r]] = r
                prv[nxt[r]] = r
                nxt[prv[entry]] = entry
                prv[nxt[entry]] = entry
            continue
        frame[1] = k + 1
        move = cands[k]
        new, new_r, new_i = state, rlin, ilin
        if len(move) == 2:
            o = ent_op[move[1]]
            # An acked observer that is fine without the write does not need it; an
            # unknown one (a txn) may take another branch with it, so it always pairs.
            if required[o] and steps[o](state) is not _INVALID:
                continue
        to_check: list[_DeadRule] = []
        for entry in move:
            i = ent_op[entry]
            before = new
            new = steps[i](new)
            if new is _INVALID:
                break
            if required[i]:
                new_r |= 1 << i
            else:
                new_i |= 1 << i
            if dead_rules:
                to_check += listeners.get(i, ())
                if new != before:
                    if single:
                        to_check += leaving.get((0, before), ())
                    else:
                        for ki, (b, a) in enumerate(zip(before, new, strict=True)):
                            if b != a:
                                to_check += leaving.get((ki, b), ())
        if new is _INVALID:
            continue
        if to_check:
            new_i = bury(new_r, new_i, new, to_check)
        key = (new_r, new)
        seen = cache.get(key)
        if seen is None:
            cache[key] = [new_i]
        elif any(m | new_i == new_i for m in seen):
            continue
        else:
            seen.append(new_i)
        configurations += 1
        if configurations > max_configurations:
            return _SearchOutcome(UNKNOWN, configurations, it, best, "configuration limit")
        path.append((move, state, ilin))
        state, ilin = new, new_i
        for entry in move:
            if required[ent_op[entry]]:
                required_left -= 1
            # unlink the call and its return (dancing links; relinked in reverse order)
            r = match[entry]
            p, q = prv[entry], nxt[entry]
            nxt[p], prv[q] = q, p
            p, q = prv[r], nxt[r]
            nxt[p], prv[q] = q, p
        rlin = new_r
        if required_left == 0:
            return _SearchOutcome(True, configurations, it, best)
        if track and sum(map(len, (m for m, _, _ in path))) > len(best):
            best = [ent_op[e] for m, _, _ in path for e in m]
        frames.append([candidates(), 0])


# --------------------------------------------------------------------- minimization


def _droppable(
    chunk: Sequence[_Prepared], rest: Sequence[_Prepared], initial: Mapping[str, Any]
) -> list[_Prepared]:
    """The ops of ``chunk`` whose removal cannot make a linearizable history bad.

    They are taken out one by one: read-only ops, then writes that no op still present
    may observe (``_Relevance``; only acked writes in ``rest`` count as certain
    overwrites, the kept part of ``chunk`` might not be there).
    """
    rel = _Relevance([*rest, *chunk], rest, initial)
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


def _minimize(
    ops: list[_Prepared],
    init: Any,
    initial: Mapping[str, Any],
    deadline: float,
    max_configurations: int,
) -> tuple[list[_Prepared], bool]:
    """Shrink a non-linearizable op list; returns (ops, reached a fixpoint in time).

    Every step drops only ops that cannot have made the history linearizable
    (``_droppable``) and keeps the result only if it is still non-linearizable, so the
    result proves the violation on its own.
    """
    def cut(base: list[_Prepared], lo: int, hi: int) -> list[_Prepared] | None:
        """base without what can go of base[lo:hi], if that still fails; else None."""
        part = _droppable(base[lo:hi], base[:lo] + base[hi:], initial)
        if not part or time.monotonic() > deadline:
            return None
        gone = {id(p) for p in part}
        candidate = [p for p in base if id(p) not in gone]
        out = _search(candidate, init, deadline, max_configurations, initial)
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


# --------------------------------------------------------------------------- rendering


def _describe(op: Op) -> str:
    inp, out, ok = op.input, op.output, op.outcome == "ok"
    if op.f == "put":
        return f"put({op.key}, {_fmt(inp.get('value'))})"
    if op.f == "delete":
        return f"delete({op.key})"
    if op.f == "get":
        return f"get({op.key}) -> {_fmt(out.get('value')) if ok else '?'}"
    if op.f == "cas":
        head = f"cas({op.key}, {_fmt(inp.get('expect'))} -> {_fmt(inp.get('value'))})"
        if not ok:
            return f"{head} -> ?"
        if out.get("succeeded"):
            return f"{head} -> succeeded"
        seen = f" (current {_fmt(out['value'])})" if "value" in out else ""
        return f"{head} -> failed{seen}"
    if op.f == "txn":

        def branch(name: str) -> str:
            parts = []
            for b in inp.get(name) or ():
                bf = b.get("f") or b.get("op")
                arg = f", {_fmt(b.get('value'))}" if bf == "put" else ""
                parts.append(f"{bf}({b.get('key')}{arg})")
            return "; ".join(parts) or "-"

        cond = " && ".join(
            f"{c['key']} {c.get('op', '==')} {_fmt(c.get('value'))}" for c in inp.get("compare") or ()
        )
        text = f"txn(if {cond or 'true'} then {branch('success')} else {branch('failure')})"
        if not ok:
            return f"{text} -> ?"
        res = out.get("results")
        shown = f" results {[_fmt(r) for r in res]}" if res else ""
        return f"{text} -> {'succeeded' if out.get('succeeded') else 'failed'}{shown}"
    return f"{op.f}({', '.join(op.keys)})"


def render_history(ops: Iterable[Op], *, t0: int | None = None) -> str:
    """One line per op, by invoke time: process, id, op, [invoke .. complete] ms, outcome.

    Times are milliseconds relative to ``t0`` (default: the first invoke shown).
    """
    ops = sorted(ops, key=lambda o: (o.invoke_time, str(o.id)))
    if not ops:
        return "(no ops)"
    base = min(o.invoke_time for o in ops) if t0 is None else t0
    lines = []
    for op in ops:
        start = (op.invoke_time - base) / 1e6
        if op.complete_time == math.inf:
            end = "?"
            note = "info (unknown)"
            if op.end_time is not None:
                note += f", client gave up at {(op.end_time - base) / 1e6:.3f} ms"
        else:
            end = f"{(op.complete_time - base) / 1e6:.3f}"
            note = op.outcome
        rev = op.output.get("revision")
        if rev is not None and op.outcome == "ok":
            note += f" rev={rev}"
        lines.append(
            f"  p{op.process:<3} #{str(op.id):<8} {_describe(op):<48} "
            f"{start:>11.3f} .. {end:>11} ms  {note}"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------ results


@dataclass
class PartitionResult:
    """Verdict for one partition (one key, or keys joined by txns)."""

    keys: tuple[str, ...]
    valid: Verdict
    ops: int  # ops the search considered (after dropping / pruning)
    elapsed: float  # seconds spent searching (minimization not included)
    configurations: int  # distinct (linearized set, state) pairs explored
    reason: str = ""  # why "unknown"
    counterexample: list[Op] | None = None  # minimal failing sub-history (valid is False)
    minimal: bool = False  # the counterexample is 1-minimal (shrinking finished in time)
    explanation: str = ""  # human-readable rendering of the counterexample


@dataclass
class Result:
    """Overall verdict: False if any partition fails, else "unknown" if any timed out."""

    valid: Verdict
    per_key: dict[str, PartitionResult]
    partitions: list[PartitionResult]
    stats: dict[str, Any]

    def report(self) -> str:
        """Text for the chaos report: the verdict and every failing partition."""
        s = self.stats
        lines = [
            f"linearizability: {self.valid} ({s['checked']} ops in {s['partitions']} "
            f"partition(s) checked in {s['elapsed']:.2f} s; {s['dropped_failed']} failed and "
            f"{s['dropped_unknown_reads']} unknown reads dropped, "
            f"{s['pruned_unobserved_info_writes']} unobserved unknown writes pruned)"
        ]
        for part in self.partitions:
            if part.valid is False:
                lines.append(part.explanation)
            elif part.valid == UNKNOWN:
                lines.append(
                    f"keys {', '.join(part.keys)}: unknown ({part.reason}; {part.ops} ops, "
                    f"{part.configurations} configurations)"
                )
        return "\n".join(lines)


# -------------------------------------------------------------------------------- check


def _partitions(prepared: list[_Prepared]) -> list[list[_Prepared]]:
    parent: dict[str, str] = {}

    def find(k: str) -> str:
        while parent.setdefault(k, k) != k:
            parent[k] = parent[parent[k]]  # path halving
            k = parent[k]
        return k

    for p in prepared:
        keys = p.op.keys
        root = find(keys[0])
        for k in keys[1:]:
            other = find(k)
            if other != root:
                parent[other] = root
    groups: dict[str, list[_Prepared]] = defaultdict(list)
    for p in prepared:
        groups[find(p.op.keys[0])].append(p)
    return list(groups.values())


def _explain(
    keys: tuple[str, ...],
    total_ops: int,
    ops: list[_Prepared],
    init: Any,
    initial: Mapping[str, Any],
    minimal: bool,
    t0: int,
    max_configurations: int,
) -> str:
    single = len(keys) == 1
    out = _search(ops, init, time.monotonic() + 5.0, max_configurations, initial, track=True)
    kind = "a minimal" if minimal else "a reduced (shrinking ran out of time)"
    lines = [
        f"NOT LINEARIZABLE: key{'s' if not single else ''} {', '.join(keys)} - "
        f"{kind} failing sub-history of {len(ops)} of {total_ops} ops "
        f"(times in ms since the history's first invoke):",
        render_history([p.op for p in ops], t0=t0),
    ]
    if out.verdict is False:
        state = init
        for i in out.best:
            state = ops[i].step(state)
        placed = {ops[i].op.id for i in out.best}
        order = ", ".join(f"#{ops[i].op.id}" for i in out.best) or "nothing"
        shown = (
            _fmt(state)
            if single
            else ", ".join(f"{k}={_fmt(v)}" for k, v in zip(keys, state, strict=True))
        )
        left = [f"#{p.op.id}" for p in ops if p.required and p.op.id not in placed]
        lines.append(
            f"  longest legal order found: {order}; then {keys[0] if single else 'state'}"
            f" = {shown}, and none of {', '.join(left)} can come next"
        )
    return "\n".join(lines)


def check(
    history: Iterable[Op] | str | os.PathLike[str],
    time_limit: float = 30.0,
    *,
    initial: Mapping[str, Any] | None = None,
    minimize_time_limit: float = 10.0,
    max_configurations: int = 2_000_000,
) -> Result:
    """Check a history for linearizability against the register-per-key model.

    ``time_limit`` bounds the search over all partitions (small partitions go first,
    each gets an even share of what is left); ``minimize_time_limit`` separately bounds
    the shrinking of counterexamples; ``max_configurations`` bounds memory per
    partition. A partition that hits a bound is ``"unknown"``. ``initial`` gives
    the values keys hold before the history (default: all absent).
    """
    started = time.monotonic()
    ops = read_history(history) if isinstance(history, str | os.PathLike) else list(history)
    initial = dict(initial or {})
    t0 = min((o.invoke_time for o in ops), default=0)
    stats: dict[str, Any] = {
        "ops": len(ops),
        "dropped_failed": sum(o.outcome == "fail" for o in ops),
        "dropped_unknown_reads": 0,
        "ignored": 0,
    }
    prepared: list[_Prepared] = []
    for op in ops:
        if op.outcome == "fail":
            continue
        if not _linearizable_relevant(op):
            if op.f == "get":
                stats["dropped_unknown_reads" if op.outcome == "info" else "ignored"] += 1
            else:
                stats["ignored"] += 1
            continue
        if not op.keys:
            raise HistoryError(f"op {op.id!r} names no key")
        p = _prepare(op)
        if p.read_only and not p.required:  # an unknown txn that writes nothing
            stats["dropped_unknown_reads"] += 1
            continue
        prepared.append(p)
    frozen_initial = {k: _freeze(v) for k, v in initial.items()}
    prepared, stats["pruned_unobserved_info_writes"] = _prune_unobserved(prepared, frozen_initial)
    stats["checked"] = len(prepared)

    groups = sorted(_partitions(prepared), key=len)
    stats["partitions"] = len(groups)
    results: list[PartitionResult] = []
    search_deadline = started + time_limit
    minimize_deadline: float | None = None
    for n_left, group in zip(range(len(groups), 0, -1), groups, strict=True):
        keys = tuple(sorted({k for p in group for k in p.op.keys}))
        idx = {k: i for i, k in enumerate(keys)}
        single = len(keys) == 1
        for p in group:
            p.step = p.make_step(idx, single)
        init_map = {k: frozen_initial.get(k) for k in keys}
        init = init_map[keys[0]] if single else tuple(init_map.values())
        t = time.monotonic()
        budget = max(0.0, (search_deadline - t) / n_left)
        out = _search(group, init, t + budget, max_configurations, init_map)
        part = PartitionResult(
            keys=keys,
            valid=out.verdict,
            ops=len(group),
            elapsed=time.monotonic() - t,
            configurations=out.configurations,
            reason=out.reason,
        )
        if out.verdict is False:
            # One shared shrinking budget, started at the first failure.
            if minimize_deadline is None:
                minimize_deadline = time.monotonic() + minimize_time_limit
            small, minimal = _minimize(
                group, init, init_map, minimize_deadline, max_configurations
            )
            part.counterexample = [p.op for p in small]
            part.minimal = minimal
            part.explanation = _explain(
                keys, len(group), small, init, init_map, minimal, t0, max_configurations
            )
        results.append(part)

    per_key = {k: part for part in results for k in part.keys}
    for k in sorted({k for o in ops for k in o.keys} - per_key.keys()):
        # Every op on it was dropped (failed, unknown reads, ...): nothing to violate.
        per_key[k] = PartitionResult(keys=(k,), valid=True, ops=0, elapsed=0.0, configurations=0)
    if any(part.valid is False for part in results):
        valid: Verdict = False
    elif any(part.valid == UNKNOWN for part in results):
        valid = UNKNOWN
    else:
        valid = True
    stats["configurations"] = sum(part.configurations for part in results)
    stats["elapsed"] = time.monotonic() - started
    return Result(valid=valid, per_key=per_key, partitions=results, stats=stats)


# ---------------------------------------------------------------- lost / duplicated


@dataclass(frozen=True)
class LostWrite:
    """An acknowledged write whose effect is missing from the final state."""

    key: str
    op: Op | None  # None: the final value itself was never written by anyone
    final_value: Any
    reason: str


@dataclass(frozen=True)
class DuplicateApplication:
    """One logical write whose effect shows up more than once."""

    key: str | None
    idempotency_key: str | None
    value: Any
    revisions: tuple[int, ...]
    ops: tuple[Op, ...]
    reason: str


def _effects(op: Op) -> list[tuple[str, Any]]:
    """(key, raw value) pairs an op may have written (None = deleted); [] if none."""
    if op.outcome == "fail":
        return []
    inp, out, ok = op.input, op.output, op.outcome == "ok"
    if op.f == "put" and op.key is not None:
        return [(op.key, inp.get("value"))]
    if op.f == "delete" and op.key is not None:
        return [(op.key, None)]
    if op.f == "cas" and op.key is not None:
        return [(op.key, inp.get("value"))] if (not ok or out.get("succeeded")) else []
    if op.f == "txn":
        if ok:
            branches = ["success" if out.get("succeeded") else "failure"]
        else:
            branches = ["success", "failure"]
        effects = []
        for name in branches:
            for b in inp.get(name) or ():
                bf = b.get("f") or b.get("op")
                if bf == "put":
                    effects.append((b["key"], b.get("value")))
                elif bf == "delete":
                    effects.append((b["key"], None))
        return effects
    return []


def _as_ops(history: Iterable[Op] | str | os.PathLike[str]) -> list[Op]:
    return read_history(history) if isinstance(history, str | os.PathLike) else list(history)


def lost_writes(
    history: Iterable[Op] | str | os.PathLike[str],
    final_reads: Mapping[str, Any],
    *,
    final_revisions: Mapping[str, int] | None = None,
    initial: Mapping[str, Any] | None = None,
) -> list[LostWrite]:
    """Acknowledged writes missing from the final state.

    ``final_reads``: key -> value read after the run (None = absent), for every key the
    workload wrote; ``final_revisions``: key -> that kv's ``mod_revision`` (optional).

    Value-based: the final value must have been written by some op (or be the initial
    value); if every op that may have written it completed before an acknowledged
    write was invoked, that write was lost (nothing can have re-written the final value
    after it). Sound for any values, sharp only for unique ones (with shared values the
    latest writer of the value hides older losses). Revision-based: an acknowledged
    write whose ``revision`` is above the final kv's ``mod_revision`` was lost.
    """
    ops = _as_ops(history)
    initial = initial or {}
    writers: dict[tuple[str, Any], list[Op]] = defaultdict(list)
    acked: dict[str, list[tuple[Op, Any]]] = defaultdict(list)
    for op in ops:
        for k, v in _effects(op):
            writers[(k, _freeze(v))].append(op)
            if op.outcome == "ok":
                acked[k].append((op, v))
    lost: list[LostWrite] = []
    for key, final in final_reads.items():
        fv = _freeze(final)
        ws = writers.get((key, fv), [])
        from_initial = _freeze(initial.get(key)) == fv
        flagged: set[int] = set()
        if not ws and not from_initial:
            lost.append(LostWrite(key, None, final, "final value was never written"))
        else:
            newest = max(
                [w.complete_time for w in ws] + ([-math.inf] if from_initial else [])
            )
            for op, _v in acked[key]:
                if op.invoke_time > newest:
                    flagged.add(id(op))
                    lost.append(
                        LostWrite(
                            key,
                            op,
                            final,
                            f"acknowledged write #{op.id} started after every write of the "
                            f"final value {_fmt(final)} had completed",
                        )
                    )
        mod_rev = (final_revisions or {}).get(key)
        if mod_rev is None or final is None:
            continue  # an absent key has no mod_revision to compare with
        for op, _v in acked[key]:
            rev = op.output.get("revision")
            if op.f == "delete" and not op.output.get("deleted"):
                continue  # a delete of nothing reports the current revision, wrote nothing
            if isinstance(rev, int) and rev > mod_rev and id(op) not in flagged:
                flagged.add(id(op))
                lost.append(
                    LostWrite(
                        key,
                        op,
                        final,
                        f"acknowledged write #{op.id} at revision {rev} but the final kv "
                        f"has mod_revision {mod_rev}",
                    )
                )
    return lost


def duplicate_applications(
    history: Iterable[Op] | str | os.PathLike[str],
    final_reads: Mapping[str, Any] | None = None,
    *,
    final_revisions: Mapping[str, int] | None = None,
) -> list[DuplicateApplication]:
    """Logical writes applied more than once.

    1. Ops sharing an ``idempotency_key`` (workload-level retries) must all be answered
       with the same ``revision`` (the store replays the stored result); two different
       revisions mean the retry was applied again.
    2. A value written by exactly one logical write (unique value) must be observed at a
       single ``mod_revision``: its write ack's ``revision``, the ``mod_revision`` of gets
       (and failed cas ops) that returned it, and the final read's. Two different
       revisions mean the write took effect twice.
    """
    ops = _as_ops(history)
    found: list[DuplicateApplication] = []

    by_idem: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        ik = op.input.get("idempotency_key")
        if ik is not None and op.outcome == "ok":
            by_idem[ik].append(op)
    for ik, group in by_idem.items():
        revs = {o.output["revision"] for o in group if isinstance(o.output.get("revision"), int)}
        if len(revs) > 1:
            found.append(
                DuplicateApplication(
                    group[0].key,
                    ik,
                    group[0].input.get("value"),
                    tuple(sorted(revs)),
                    tuple(group),
                    f"idempotency key {ik} acknowledged at revisions {sorted(revs)}: "
                    "a retry was applied instead of replayed",
                )
            )

    # (key, value) -> logical writers (idempotency key, else the op itself)
    logical: dict[tuple[str, Any], set[Any]] = defaultdict(set)
    raw: dict[tuple[str, Any], Any] = {}
    seen: dict[tuple[str, Any], dict[int, list[Op]]] = defaultdict(lambda: defaultdict(list))
    for op in ops:
        for k, v in _effects(op):
            if v is None:
                continue  # absent has no mod_revision
            fk = (k, _freeze(v))
            raw[fk] = v
            logical[fk].add(op.input.get("idempotency_key") or ("op", op.id))
            rev = op.output.get("revision")
            if op.outcome == "ok" and isinstance(rev, int):
                seen[fk][rev].append(op)
        if op.outcome == "ok" and op.key is not None and (
            op.f == "get" or (op.f == "cas" and not op.output.get("succeeded"))
        ):
            mr = op.output.get("mod_revision")
            if "value" in op.output and op.output["value"] is not None and isinstance(mr, int):
                seen[(op.key, _freeze(op.output["value"]))][mr].append(op)
    extra: dict[tuple[str, Any], int] = {}
    for key, value in (final_reads or {}).items():
        mr = (final_revisions or {}).get(key)
        if value is not None and isinstance(mr, int):
            extra[(key, _freeze(value))] = mr
            seen[(key, _freeze(value))].setdefault(mr, [])
    for fk, by_rev in seen.items():
        if len(by_rev) < 2 or len(logical.get(fk, ())) != 1:
            continue  # one revision, or the value is not unique: nothing to conclude
        (writer,) = logical[fk]
        revs = tuple(sorted(by_rev))
        where = " (including the final read)" if fk in extra else ""
        found.append(
            DuplicateApplication(
                fk[0],
                writer if isinstance(writer, str) else None,
                raw.get(fk),
                revs,
                tuple(o for r in revs for o in by_rev[r]),
                f"value {_fmt(raw.get(fk))} of one write observed at mod_revisions "
                f"{list(revs)}{where}: applied more than once",
            )
        )
    return found
