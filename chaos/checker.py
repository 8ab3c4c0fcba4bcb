"""Consistency checks of a chaos history (see ``chaos.history`` for the format).

Linearizability (``check``)
===========================

Model: every key is a register holding a value or ``None`` (absent); the store starts
with every key absent (or ``initial``).

- ``put(k, v)`` sets ``v``; ``get(k)`` must return the value.
- ``delete(k)`` sets ``None``. An acked delete that recorded its ``deleted`` count is
  checked by it: 1 = the key was present (value != ``None``) at the delete's point,
  0 = it was absent (and nothing changed), anything else is impossible for one key.
  Unknown deletes and deletes without a count are blind. Prefix / range deletes are
  rejected (``HistoryError``): the workload records none, and modeling one needs the
  set of keys it covered.
- ``cas(k, expect, new)`` succeeds iff the value equals ``expect`` (``None`` = expect the
  key absent) and then sets ``new``; a failed cas must see a value != ``expect`` (and,
  when the workload recorded the current value the server returned, exactly that value).
- ``txn``: all ``compare`` entries (``==`` / ``!=`` on values) hold -> the ``success``
  ops run in order, else the ``failure`` ops; ``get`` results are checked when recorded.
  A txn is one atomic multi-key op, so the keys it touches cannot be checked apart:
  keys connected by txns form one partition (union-find) whose state is the tuple of
  its keys' values.

The model compares values only: revisions, ``mod_revision`` and versions are not part
of it (``lost_writes`` / ``duplicate_applications`` and the chaos report's revision
checks use them). That is what makes it sound to take an unknown write out below: were
revisions modeled, every later op reporting a revision of its key would "observe" it.

Preparation, per op: ``fail`` ops are dropped (they did not happen); ``info`` (unknown)
reads - gets and txns without writes - are dropped (they constrain nothing); ``range``,
``compact``, serializable gets and gets at an old ``revision`` are ignored (not
linearizable by contract, and they write nothing). ``info`` writes are optional: they may
take effect once, at any point after their invoke (completion time +inf), or never.
Then two exact reductions of the unknown writes (``_reduce``), before partitioning:

- promotion (``_promote_observed``): an acked op that pins ``k = v`` (a get that read v,
  a successful cas expecting v, a txn compare or read) needs a write of v before it.
  If the only op that may write v to k is an unknown one (and v is not the initial
  value), it took effect - as a successful cas, the txn branch that writes v - before
  that op's completion: it becomes an acked op completing then. Every legal order of
  the history has it there, so the verdict is unchanged; with unique write values this
  turns nearly every unknown write somebody read into an ordinary acked one;
- pruning (``_prune_unobserved``): which ops may depend on a write ("observe" it,
  ``_Relevance``): ops that read or compare with a value it writes, and ops that learn
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
- canonical states (``_symmetry``): values no op of the partition reads or compares
  with are all replaced by one placeholder - no step can tell them apart, so states
  differing only there have the same continuations and share a memo entry;
- interchangeable unknown ops (``_symmetry``): unknown ops that are the same op up to
  unobserved written values, both available, can be swapped in any continuation, so
  only the first of each class is offered;
- forced moves: an acked read-only op that the current state satisfies is linearized
  with no alternatives tried (any success path stays valid with it moved first); so is
  an acked put / delete whose value no op left can see, over a value no op left can
  see (the common "overwritten unread" write: otherwise every order of such concurrent
  writes would be a separate configuration);
- stranded ops: a move that takes a key off a value that a pending acked op pins, when
  no op left may write that value again, is a dead end (that op can never come);
- dead unknown writes: once every op that may observe an unknown write is linearized
  (and no "!= e" observer can see e again), it is treated as never applied; so is an
  unknown cas (or txn whose failure branch writes nothing) once its expected value is
  gone for good (key off it, every write of it done): from then on it is a no-op;
- postponed unknown writes: an unknown write that only "!= e" observers still care about
  is only tried right before such an observer that needs it: an acked one that fails
  without it, or an unknown txn whose branch it flips (with one such write per key the
  observer compares, e.g. both keys of a txn).

Every distinct configuration is explored at most once; the search stops at its time
share or ``max_configurations`` and that partition's verdict is then ``"unknown"``,
never a guess. Rough costs (2 shared cores, measured, not promised): 16 clients, 5,000
ops over 10 keys, a few % unknown ops: well under a second; a workload-shaped 5,000-op
history over 4 txn key pairs with ~80 unknown writes per pair (a long soak): about a
second (it used to end "unknown"); all 16 clients on ONE key: seconds; the same without
failed-cas current values (many "!= e" facts): may end "unknown" - record them.
Proving a violation explores more than passing does, and shrinking it (below) takes
its own budget.
``Result.elapsed`` / ``PartitionResult.elapsed`` / ``Result.timing()`` say where the
time went.

Counterexamples: for a non-linearizable partition, ops are dropped while the rest stays
non-linearizable (within ``minimize_time_limit``): first a binary search for the shortest
failing prefix and the latest failing start, then chunks of halving size, delta-debugging
style. Only ops that cannot have made it linearizable are dropped: read-only ops, and
writes no remaining op may observe. Shrinking works on the ops as recorded (each try
is reduced and searched afresh: a write promoted in the full history may be unknown
again in the sub-history). Hence the sub-history proves the violation on its
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
from dataclasses import dataclass, field, replace
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
    # key -> the value the key certainly holds at the op's linearization point (reads,
    # a successful cas's expect, ...): a required op that pins a value written by one
    # unknown op only proves that op took effect (see ``_promote_observed``)
    pins: dict[str, set[Any]] = field(default_factory=dict)
    # For an unknown op: the acked ops it may have been (a cas that succeeded, a txn
    # that took one branch); once one of their writes is seen it was that one. Empty:
    # the same op with ``required`` set (an unknown put or delete).
    applied: tuple[_Prepared, ...] = ()
    # Latest time it can take effect: the op's completion, +inf for an unknown op,
    # an observer's completion once promoted.
    complete: float = math.nan
    # For an unknown op: (shape, ((key, written value), ...)). Two unknown ops with the
    # same shape and the same values, up to values no op observes, are interchangeable
    # in the search (see ``_search``); None: not compared.
    signature: tuple[Any, tuple[tuple[str, Any], ...]] | None = None
    # For an unknown cas / txn: (key, value) facts it needs to change anything (the
    # cas's expect, a txn's "==" compares when its failure branch writes nothing).
    inert_unless: tuple[tuple[str, Any], ...] = ()
    # A txn's branch in a state (True: the success ops), bound like make_step.
    make_branch: Callable[[dict[str, int], bool], Callable[[Any], bool]] | None = None

    def __post_init__(self) -> None:
        if math.isnan(self.complete):
            self.complete = self.op.complete_time

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

        sig = None if is_ok else (("put", key), ((key, v),))
        return _Prepared(op, is_ok, {key: {v}}, {}, {}, make_put, signature=sig)
    if f == "delete":
        return _prepare_delete(op, key)
    if f == "get":
        r = _freeze(out.get("value"))

        def make_get(idx, single):
            get, _ = _getter_setter(idx, single, key)
            return lambda s: s if get(s) == r else _INVALID

        return _Prepared(op, True, {}, {key: {r}}, {}, make_get, pins={key: {r}})
    if f == "cas":
        e, n = _freeze(inp.get("expect")), _freeze(inp.get("value"))

        def make_cas_ok(idx, single):
            get, put = _getter_setter(idx, single, key)
            return lambda s: put(s, n) if get(s) == e else _INVALID

        succeeded = _Prepared(op, True, {key: {n}}, {key: {e}}, {}, make_cas_ok, pins={key: {e}})
        if not is_ok:  # unknown: whatever the state says, or nothing (optional)

            def make_cas_info(idx, single):
                get, put = _getter_setter(idx, single, key)
                return lambda s: put(s, n) if get(s) == e else s

            # Once its value is seen it succeeded: then it is the acked version.
            return _Prepared(
                op,
                False,
                {key: {n}},
                {key: {e}},
                {},
                make_cas_info,
                applied=(succeeded,),
                signature=(("cas", key, e), ((key, n),)),
                inert_unless=((key, e),),
            )
        if out["succeeded"]:
            return succeeded
        if "value" in out:  # the server told us the current value
            c = _freeze(out["value"])

            def make_cas_seen(idx, single):
                get, _ = _getter_setter(idx, single, key)
                return lambda s: s if get(s) == c and c != e else _INVALID

            return _Prepared(op, True, {}, {key: {e, c}}, {}, make_cas_seen, pins={key: {c}})

        def make_cas_failed(idx, single):
            get, _ = _getter_setter(idx, single, key)
            return lambda s: s if get(s) != e else _INVALID

        return _Prepared(op, True, {}, {key: {e}}, {key: {e}}, make_cas_failed)
    if f == "txn":
        return _prepare_txn(op)
    raise HistoryError(f"op {op.id!r}: unknown op {f!r}")


def _prepare_delete(op: Op, key: str) -> _Prepared:
    """A single-key delete; an acked one with a ``deleted`` count is checked by it.

    ``deleted`` = 1: the key was present (a "!= absent" fact) and is now absent;
    ``deleted`` = 0: the key was absent, nothing changed (a read of "absent"); any
    other count is impossible for one key. Unknown deletes, and acked ones that did
    not record a count, are blind writes of "absent".
    """
    if op.input.get("prefix") or op.input.get("range_end") is not None:
        raise HistoryError(f"op {op.id!r}: prefix / range deletes are not modeled")
    count = op.output.get("deleted") if op.outcome == "ok" else None
    if isinstance(count, bool) or not isinstance(count, int):
        count = None  # not recorded

    def make_delete(idx, single):
        get, put = _getter_setter(idx, single, key)
        if count is None:
            return lambda s: put(s, None)
        if count == 1:
            return lambda s: put(s, None) if get(s) is not None else _INVALID
        if count == 0:
            return lambda s: s if get(s) is None else _INVALID
        return lambda s: _INVALID

    required = op.outcome == "ok"
    if count is None:
        sig = None if required else (("put", key), ((key, None),))
        return _Prepared(op, required, {key: {None}}, {}, {}, make_delete, signature=sig)
    if count == 1:
        return _Prepared(op, True, {key: {None}}, {key: {None}}, {key: {None}}, make_delete)
    if count == 0:
        return _Prepared(op, True, {}, {key: {None}}, {}, make_delete, pins={key: {None}})
    return _Prepared(op, True, {}, {key: {None}}, {}, make_delete)


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
    if not is_ok:
        # Once a value it writes is seen, the branch that writes it was taken.
        variants = tuple(
            _txn_prepared(op, cmps, success, failure, taken, []) for taken in (True, False)
        )
        shape = (
            "txn",
            tuple(cmps),
            tuple((bf, k) for bf, k, _v in success),
            tuple((bf, k) for bf, k, _v in failure),
        )
        written = tuple((k, v) for bf, k, v in success + failure if bf != "get")
        quiet = all(bf == "get" for bf, _k, _v in failure)  # results unknown: no-op
        return replace(
            _txn_prepared(op, cmps, success, failure, None, []),
            required=False,
            applied=variants,
            signature=(shape, written),
            inert_unless=tuple((k, v) for k, eq, v in cmps if eq) if quiet else (),
        )
    results = [_freeze(r) for r in out.get("results") or ()]
    return _txn_prepared(op, cmps, success, failure, out["succeeded"], results)


_Branch = list[tuple[str, str, Any]]  # (f, key, frozen value) per txn op


def _txn_prepared(
    op: Op,
    cmps: list[tuple[str, bool, Any]],
    success: _Branch,
    failure: _Branch,
    succeeded: bool | None,
    results: list[Any],
) -> _Prepared:
    """A txn's model: ``succeeded`` None = either branch (unknown outcome)."""
    chosen = [success, failure] if succeeded is None else [success if succeeded else failure]

    writes: dict[str, set[Any]] = defaultdict(set)
    observes: dict[str, set[Any]] = defaultdict(set)
    weak: dict[str, set[Any]] = defaultdict(set)
    for br in chosen:
        for bf, k, v in br:
            if bf != "get":
                writes[k].add(v)
    pins: dict[str, set[Any]] = defaultdict(set)
    read_first: set[str] = set()  # keys the chosen branch read (recorded) before writing
    if succeeded is not None:
        written: set[str] = set()
        for j, (bf, k, _v) in enumerate(chosen[0]):
            if bf == "get" and j < len(results):
                observes[k].add(results[j])
                if k not in written:
                    read_first.add(k)
                    pins[k].add(results[j])
            elif bf != "get":
                written.add(k)
    for k, eq, v in cmps:
        observes[k].add(v)
        # All compares held, or the only one failed: each tells the value exactly.
        if (succeeded is True and eq) or (succeeded is False and not eq and len(cmps) == 1):
            pins[k].add(v)
        # A "not equal" fact, unless a read of the key in the chosen branch (same atomic
        # state) pins the value: a failed "==", a successful "!=", any compare of an
        # unknown txn. (A failed "!=" says the key held v, or another compare failed:
        # it depends on a write of v itself, as ``observes`` has it.)
        if succeeded is None or succeeded is not eq:
            if k not in read_first:
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

    return _Prepared(
        op,
        True,
        dict(writes),
        dict(observes),
        dict(weak),
        make_txn,
        pins=dict(pins),
        make_branch=_txn_branch(cmps),
    )


def _txn_branch(cmps: list[tuple[str, bool, Any]]):
    """make_branch of a txn: whether its compares hold (the success branch runs)."""

    def make_branch(idx, single):
        cmp_i = [(0 if single else idx[k], eq, v) for k, eq, v in cmps]
        if single:
            return lambda s: all((s == v) == eq for _i, eq, v in cmp_i)
        return lambda s: all((s[i] == v) == eq for i, eq, v in cmp_i)

    return make_branch


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
    An acked op's "!= e" fact never depends on a write of e (had it seen e, it would
    have failed), only on the value before x.

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

    def strong_observers(self, x: _Prepared) -> Iterator[_Prepared]:
        """Ops that read or compare with a value x writes and may come after x."""
        t = x.op.invoke_time
        for k, vs in x.writes.items():
            for v in vs:
                for o in self.strong.get((k, v), ()):
                    if o is not x and o.complete >= t:
                        yield o

    def weak_observers(self, x: _Prepared) -> Iterator[tuple[_Prepared, str, Any]]:
        """(op, key, e): ops that learn "!= e" and could see e if x were left out."""
        t = x.op.invoke_time
        for k in x.writes:
            for o, e in self.weak.get(k, ()):
                if o is not x and o.complete >= t and self.until(k, e) >= t:
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
    """Drop unknown writes that no required op may observe, even through other
    unknown ops (see ``_Relevance``); returns (the ops kept, how many were dropped).

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
    rel = _Relevance(prepared, prepared, initial)
    # observer -> the unknown writes it may observe
    seen_by: dict[int, list[_Prepared]] = defaultdict(list)
    for x in prepared:
        if not _prunable(x):
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
    keep = [p for p in prepared if not _prunable(p) or id(p) in kept]
    return keep, len(prepared) - len(keep)


def _promote_observed(
    ops: list[_Prepared], initial: Mapping[str, Any]
) -> tuple[list[_Prepared], int]:
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
    writers: dict[tuple[str, Any], list[_Prepared]] = defaultdict(list)
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


def _reduce(
    ops: list[_Prepared], initial: Mapping[str, Any]
) -> tuple[list[_Prepared], int, int]:
    """Promote observed unknown writes, then prune unobserved ones: (ops, promoted, pruned).

    Both steps keep the verdict, so any sub-history may be reduced before a search.
    """
    ops, promoted = _promote_observed(ops, initial)
    ops, pruned = _prune_unobserved(ops, initial)
    return ops, promoted, pruned


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
    stale: list[_DeadRule]  # for unknown cas / txns: when they can no longer do anything
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
    ops: Sequence[_Prepared],
    writers: Mapping[tuple[str, Any], int],
    key_index: Mapping[str, int],
    listeners: dict[int, list[_DeadRule]],
    leaving: dict[tuple[int, Any], list[_DeadRule]],
) -> list[_DeadRule]:
    """When an unknown cas / txn can no longer do anything (registered for re-checks).

    One that needs k = e (``inert_unless``), once k != e and every write of e is done,
    can only be a no-op from then on: the same as never applying it. As a dead rule:
    its own (pending) bit keeps the condition "all writes of e done and the key off e"
    in force.
    """
    stale: list[_DeadRule] = []
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

    stale = _stale_rules(ops, writers, key_index, listeners, leaving)
    for x, p in enumerate(ops):
        acked_overwrite = p.required and p.op.f in ("put", "delete") and bool(p.writes)
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


def _symmetry(
    ops: Sequence[_Prepared], keys: Sequence[str]
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


def _bind(ops: Sequence[_Prepared], keys: Sequence[str]) -> list[Callable[[Any], Any]]:
    """The ops' model steps over a partition's state (its keys' values, in this order)."""
    idx = {k: i for i, k in enumerate(keys)}
    return [p.make_step(idx, len(keys) == 1) for p in ops]


def _decide(
    ops: list[_Prepared],
    init: Any,
    initial: Mapping[str, Any],
    deadline: float,
    max_configurations: int,
    track: bool = False,
) -> tuple[_SearchOutcome, list[_Prepared]]:
    """``_reduce`` then ``_search``; also returns the reduced ops (``best`` indexes them)."""
    reduced, _promoted, _pruned = _reduce(ops, initial)
    return _search(reduced, init, deadline, max_configurations, initial, track), reduced


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
    """Wing-Gong-Lowe search over ``ops`` (one partition, see the module docstring).

    ``init`` is the model's initial state, ``initial`` the same per key (frozen).
    """
    if not any(p.required for p in ops):
        return _SearchOutcome(True, 0, 0)
    return _Search(ops, init, initial).run(deadline, max_configurations, track)


def _links(
    ops: Sequence[_Prepared],
) -> tuple[list[int], list[int], list[int], list[bool], list[int]]:
    """The ops' calls and returns as one time-ordered doubly linked list (entry 0 is
    the head): (next, previous, op of each entry, is a call, call -> its return)."""
    events = []
    for i, p in enumerate(ops):
        events.append((p.op.invoke_time, 0, i))  # 0: calls sort before returns on ties
        events.append((p.complete, 1, i))
    events.sort()
    size = 2 * len(ops) + 2
    nxt = list(range(1, size + 1))
    prv = list(range(-1, size - 1))
    ent_op = [0] * size
    ent_call = [False] * size
    match = [0] * size
    call_at = [0] * len(ops)
    for pos, (_t, kind, i) in enumerate(events, start=1):
        ent_op[pos] = i
        if kind == 0:
            ent_call[pos] = True
            call_at[i] = pos
        else:
            match[call_at[i]] = pos
    return nxt, prv, ent_op, ent_call, match


class _Search:
    """One partition's search state: the linked list, the current configuration
    (state, linearized acked ops ``rlin``, linearized or dead unknown ops ``ilin``, as
    bit masks over op indices) and the precomputed shortcuts."""

    def __init__(self, ops: Sequence[_Prepared], init: Any, initial: Mapping[str, Any]):
        self.ops = ops
        self.required = [p.required for p in ops]
        self.required_left = sum(self.required)
        self.nxt, self.prv, self.ent_op, self.ent_call, self.match = _links(ops)
        keys = list(initial)  # the partition's keys, in state order
        self.single = single = len(keys) == 1
        kidx = {k: i for i, k in enumerate(keys)}
        self.steps = _bind(ops, keys)
        self.branch_of = [
            None if p.make_branch is None else p.make_branch(kidx, single) for p in ops
        ]
        self.canon, self.classes = _symmetry(ops, keys)
        rules = _rules(ops, initial, kidx)
        self.rules = rules
        self.has_rules = bool(rules.listeners or rules.leaving)
        # Postponing (below) moves an op later; a txn's branch depends on where it is.
        self.strong_mask = {x: m for x, m, _conds in rules.dead if ops[x].op.f != "txn"}
        self.key_at = [kidx[p.op.keys[0]] for p in ops]
        self.weak_keys = [set(p.weak) for p in ops]
        self.op_key = [p.op.keys[0] for p in ops]
        self.read_only = [p.read_only for p in ops]
        self.state, self.rlin, self.ilin = self.canon(init), 0, 0
        self.ilin = self.bury(0, 0, self.state, rules.dead + rules.stale)

    def invisible(self, rule: _DeadRule, lin: int, st: Any) -> bool:
        """The value the rule's op writes can no longer be seen (see _rules)."""
        _x, mask, conds = rule
        if mask & ~lin:
            return False
        single = self.single
        for om, wm, ki, e in conds:
            if om & ~lin and (wm & ~lin or (st if single else st[ki]) == e):
                return False
        return True

    def bury(self, rl: int, il: int, st: Any, to_check: Iterable[_DeadRule]) -> int:
        """Mark unknown ops that can no longer matter as done (see _rules)."""
        lin = rl | il
        pending = ~lin
        for rule in to_check:
            i, mask, conds = rule
            if mask & pending or (il >> i) & 1:
                continue  # cheap tests first: this runs for every rule, often
            if not conds or self.invisible(rule, lin, st):
                il |= 1 << i
                lin |= 1 << i
                pending = ~lin
        return il

    def stranded(self, left: list[tuple[int, Any]], st: Any, lin: int) -> bool:
        """A pending acked op needs a key to hold a value it no longer holds, and no op
        left may write that value again: it can never be linearized (dead end)."""
        pending = ~lin
        pinned, writers = self.rules.pinned, self.rules.writers
        for ki, b in left:
            if (st if self.single else st[ki]) == b:
                continue
            if pinned.get((ki, b), 0) & pending and not writers.get((ki, b), 0) & pending:
                return True
        return False

    def forced(self, i: int, lin: int) -> bool:
        """Acked op i may come now and nothing left can notice it (see candidates)."""
        state, steps = self.state, self.steps
        if self.read_only[i]:
            return steps[i](state) is not _INVALID
        rule = self.rules.unseen.get(i)
        if rule is None or not self.invisible(rule, lin, state):
            return False
        # An acked put / delete nobody left can see, over a value nobody left can see:
        # linearizing it changes nothing observable (if it may come now: a counted
        # delete may not).
        ki = self.key_at[i]
        cur = state if self.single else state[ki]
        return not self.rules.observers.get((ki, cur), 0) & ~lin and (
            steps[i](state) is not _INVALID
        )

    def candidates(self) -> list[tuple[int, ...]]:
        """The moves to try from the current configuration, in order.

        Calls before the first remaining return: no pending op completed before them.
        Required ops first, so configurations with fewer unknown ops applied get cached
        first and subsume the others (see the memo in ``run``). Dead unknown ops (bit
        set in ilin without being linearized) are never needed. An unknown write that
        only "!=" observers still care about ("weak-only": nothing left reads or
        compares with its value) is only worth applying right before such an observer
        that fails without it, or an unknown txn whose branch it may flip (anywhere else
        it could be moved up to that point or left out), so it is only offered in a move
        (x, observer), or (x, y, observer) when the observer needs a write of each of
        two keys (``chains``). A forced op (``forced``) is the only move: a success path that
        has it later stays valid with it moved first. Of the unknown ops of one class
        (``_symmetry``) only the first is offered.
        """
        req: list[tuple[int, ...]] = []
        opt: list[tuple[int, ...]] = []
        postponed: list[int] = []
        offered: set[Any] = set()
        ilin, required, classes = self.ilin, self.required, self.classes
        ent_op, nxt = self.ent_op, self.nxt
        lin = self.rlin | ilin
        e = nxt[0]
        while self.ent_call[e]:
            i = ent_op[e]
            if required[i]:
                if self.forced(i, lin):
                    return [(e,)]
                req.append((e,))
            elif not (ilin >> i) & 1 and classes[i] not in offered:
                if classes[i] is not None:
                    offered.add(classes[i])
                mask = self.strong_mask.get(i)
                if mask is not None and not mask & ~lin:
                    postponed.append(e)
                else:
                    opt.append((e,))
            e = nxt[e]
        if not postponed:
            return req + opt
        return req + self.chains(req + opt, postponed) + opt

    def chains(
        self, observers: list[tuple[int, ...]], postponed: list[int]
    ) -> list[tuple[int, ...]]:
        """Moves (x.., o): postponed writes of distinct keys o has "!=" facts about, then
        o (an observer may need one write per key: a txn comparing two keys)."""
        weak_keys, op_key, ent_op = self.weak_keys, self.op_key, self.ent_op
        out: list[tuple[int, ...]] = []
        for (c,) in observers:
            wk = weak_keys[ent_op[c]]
            if not wk:
                continue
            by_key: dict[str, list[int]] = defaultdict(list)
            for x in postponed:
                if op_key[ent_op[x]] in wk:
                    by_key[op_key[ent_op[x]]].append(x)
            groups = list(by_key.values())
            for r in range(1, len(groups) + 1):
                for chosen in itertools.combinations(groups, r):
                    out += [(*xs, c) for xs in itertools.product(*chosen)]
        return out

    def pointless_chain(self, move: tuple[int, ...]) -> bool:
        """(x.., o) where o does not need all of the postponed writes x right now.

        An acked observer that is fine without one of them does not need it; an unknown
        one (a txn) needs them if together they flip its branch and no fewer of them
        do the same. A write not needed could as well wait for the next op that needs
        it (nothing reads its value), or never happen.
        """
        steps, ent_op = self.steps, self.ent_op
        o = ent_op[move[-1]]
        xs = [ent_op[e] for e in move[:-1]]

        def after(chosen: Sequence[int]) -> Any:
            st = self.state
            for i in chosen:
                st = steps[i](st)
                if st is _INVALID:
                    break
            return st

        subsets = [c for r in range(len(xs)) for c in itertools.combinations(xs, r)]
        if self.required[o]:
            return any(
                (st := after(c)) is not _INVALID and steps[o](st) is not _INVALID
                for c in subsets
            )
        branch = self.branch_of[o]
        if branch is None:
            return False
        full = after(xs)
        if full is _INVALID:
            return True
        flipped = branch(full)
        return any(
            (st := after(c)) is not _INVALID and branch(st) == flipped for c in subsets
        )

    def apply(self, move: tuple[int, ...]) -> tuple[Any, int, int] | None:
        """(state, rlin, ilin) after the move, or None if the model rejects it or it
        leads nowhere (a stranded op)."""
        new, new_r, new_i = self.state, self.rlin, self.ilin
        single, rules = self.single, self.rules
        to_check: list[_DeadRule] = []
        left: list[tuple[int, Any]] = []  # (key index, value) the move took a key off
        for entry in move:
            i = self.ent_op[entry]
            before = new
            new = self.steps[i](new)
            if new is _INVALID:
                return None
            if not self.read_only[i]:
                new = self.canon(new)
                if new != before:
                    if single:
                        left.append((0, before))
                    else:
                        left += [(ki, b) for ki, b in enumerate(before) if b != new[ki]]
            if self.required[i]:
                new_r |= 1 << i
            else:
                new_i |= 1 << i
            if self.has_rules:
                to_check += rules.listeners.get(i, ())
        if left and self.stranded(left, new, new_r | new_i):
            return None
        if self.has_rules:
            for kb in left:  # a key left a value: "!= e" observers may stop caring
                to_check += rules.leaving.get(kb, ())
        if to_check:
            new_i = self.bury(new_r, new_i, new, to_check)
        return new, new_r, new_i

    def link(self, move: tuple[int, ...], unlink: bool) -> None:
        """Take the move's calls and returns out of the list, or put them back (dancing
        links: in reverse order)."""
        nxt, prv, match, required = self.nxt, self.prv, self.match, self.required
        for entry in move if unlink else reversed(move):
            i = self.ent_op[entry]
            r = match[entry]
            if unlink:
                p, q = prv[entry], nxt[entry]
                nxt[p], prv[q] = q, p
                p, q = prv[r], nxt[r]
                nxt[p], prv[q] = q, p
            else:
                nxt[prv[r]] = r
                prv[nxt[r]] = r
                nxt[prv[entry]] = entry
                prv[nxt[entry]] = entry
            if required[i]:
                self.required_left += -1 if unlink else 1

    def run(self, deadline: float, max_configurations: int, track: bool) -> _SearchOutcome:
        """Depth-first search with the memo; see the module docstring.

        Memo: (linearized required ops, state) -> the sets of linearized info ops seen
        with it. Config (R, s, I) is skipped when (R, s, I') was seen with I' a subset
        of I: every continuation from (R, s, I) is open to (R, s, I') too (it can leave
        the extra unknown ops out; they never block, returning at +inf), so I' is at
        least as good. With no info ops this is plain Lowe memoization.
        """
        cache: dict[tuple[int, Any], list[int]] = {}
        configurations = 0
        # (call entries linearized by the move, configuration before it)
        path: list[tuple[tuple[int, ...], Any, int, int]] = []
        best: list[int] = []
        frames: list[list[Any]] = [[self.candidates(), 0]]
        it = 0
        clock = time.monotonic
        while True:
            if (it & 0x3FF) == 0 and clock() > deadline:  # on the first step, every 1024
                return _SearchOutcome(UNKNOWN, configurations, it, best, "time limit")
            it += 1
            frame = frames[-1]
            cands, k = frame
            if k == len(cands):
                # Nothing more to try here (a pending op's return is next): undo a move.
                frames.pop()
                if not path:
                    return _SearchOutcome(False, configurations, it, best)
                move, self.state, self.rlin, self.ilin = path.pop()
                self.link(move, unlink=False)
                continue
            frame[1] = k + 1
            move = cands[k]
            if len(move) > 1 and self.pointless_chain(move):
                continue
            after = self.apply(move)
            if after is None:
                continue
            new, new_r, new_i = after
            seen = cache.get((new_r, new))
            if seen is None:
                cache[(new_r, new)] = [new_i]
            elif any(m | new_i == new_i for m in seen):
                continue
            else:
                seen.append(new_i)
            configurations += 1
            if configurations > max_configurations:
                return _SearchOutcome(UNKNOWN, configurations, it, best, "configuration limit")
            path.append((move, self.state, self.rlin, self.ilin))
            self.state, self.rlin, self.ilin = after
            self.link(move, unlink=True)
            if self.required_left == 0:
                return _SearchOutcome(True, configurations, it, best)
            if track and sum(len(step[0]) for step in path) > len(best):
                best = [self.ent_op[e] for step in path for e in step[0]]
            frames.append([self.candidates(), 0])


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
        out, _reduced = _decide(candidate, init, initial, deadline, max_configurations)
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
    minimize_elapsed: float = 0.0  # seconds spent shrinking and explaining a failure

    @property
    def total_elapsed(self) -> float:
        """Seconds spent on this partition: search, then shrinking if it failed."""
        return self.elapsed + self.minimize_elapsed


@dataclass
class Result:
    """Overall verdict: False if any partition fails, else "unknown" if any timed out."""

    valid: Verdict
    per_key: dict[str, PartitionResult]
    partitions: list[PartitionResult]
    stats: dict[str, Any]
    elapsed: float = 0.0  # seconds for the whole check (preparation, search, shrinking)

    @property
    def group_elapsed(self) -> dict[tuple[str, ...], float]:
        """Seconds per key group (partition), search plus shrinking."""
        return {p.keys: p.total_elapsed for p in self.partitions}

    def timing(self) -> str:
        """One line for the chaos report: ``checker: N groups, X s (slowest ...)``."""
        n = len(self.partitions)
        line = f"checker: {n} group{'' if n == 1 else 's'}, {self.elapsed:.2f} s"
        slow = sorted(self.partitions, key=lambda p: -p.total_elapsed)[:3]
        if slow:
            shown = "; ".join(f"{','.join(p.keys)} {p.total_elapsed:.2f} s" for p in slow)
            line += f" (slowest: {shown})"
        return line

    def report(self) -> str:
        """Text for the chaos report: the verdict, the timing, every failing partition."""
        s = self.stats
        lines = [
            f"linearizability: {self.valid} ({s['checked']} ops in {s['partitions']} "
            f"partition(s) checked in {s['elapsed']:.2f} s; {s['dropped_failed']} failed and "
            f"{s['dropped_unknown_reads']} unknown reads dropped, "
            f"{s['promoted_observed_info_writes']} observed unknown writes promoted, "
            f"{s['pruned_unobserved_info_writes']} unobserved unknown writes pruned)",
            self.timing(),
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
    time_limit: float = 5.0,
) -> str:
    single = len(keys) == 1
    deadline = time.monotonic() + time_limit
    out, reduced = _decide(ops, init, initial, deadline, max_configurations, track=True)
    kind = "a minimal" if minimal else "a reduced (shrinking ran out of time)"
    lines = [
        f"NOT LINEARIZABLE: key{'s' if not single else ''} {', '.join(keys)} - "
        f"{kind} failing sub-history of {len(ops)} of {total_ops} ops "
        f"(times in ms since the history's first invoke):",
        render_history([p.op for p in ops], t0=t0),
    ]
    if out.verdict is False:
        steps = _bind(reduced, list(initial))
        state = init
        for i in out.best:
            state = steps[i](state)
        placed = {reduced[i].op.id for i in out.best}
        order = ", ".join(f"#{reduced[i].op.id}" for i in out.best) or "nothing"
        shown = (
            _fmt(state)
            if single
            else ", ".join(f"{k}={_fmt(v)}" for k, v in zip(keys, state, strict=True))
        )
        left = [f"#{p.op.id}" for p in reduced if p.required and p.op.id not in placed]
        lines.append(
            f"  longest legal order found: {order}; then {keys[0] if single else 'state'}"
            f" = {shown}, and none of {', '.join(left)} can come next"
        )
    return "\n".join(lines)


def _prepare_all(ops: list[Op], stats: dict[str, Any]) -> list[_Prepared]:
    """The ops the model checks (see the module docstring), counting what is dropped."""
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
    return prepared


@dataclass
class _Budget:
    """Deadlines shared by the partitions of one ``check``."""

    search_deadline: float
    minimize_time_limit: float
    max_configurations: int
    t0: int
    minimize_deadline: float | None = None


def _check_partition(
    group: list[_Prepared],
    original: list[_Prepared],
    initial: Mapping[str, Any],
    n_left: int,
    budget: _Budget,
) -> PartitionResult:
    """Search one partition (``group``: reduced ops; ``original``: the same, unreduced)."""
    keys = tuple(sorted({k for p in group for k in p.op.keys}))
    init_map = {k: initial.get(k) for k in keys}
    init = init_map[keys[0]] if len(keys) == 1 else tuple(init_map.values())
    t = time.monotonic()
    share = max(0.0, (budget.search_deadline - t) / n_left)
    out = _search(group, init, t + share, budget.max_configurations, init_map)
    part = PartitionResult(
        keys=keys,
        valid=out.verdict,
        ops=len(group),
        elapsed=time.monotonic() - t,
        configurations=out.configurations,
        reason=out.reason,
    )
    if out.verdict is False:
        t = time.monotonic()
        # One shared shrinking budget, started at the first failure. Shrinking works on
        # the unreduced ops (each try is reduced again): the counterexample must fail
        # on its own, whatever promoted an unknown write in the full history.
        if budget.minimize_deadline is None:
            budget.minimize_deadline = t + budget.minimize_time_limit
        small, minimal = _minimize(
            original, init, init_map, budget.minimize_deadline, budget.max_configurations
        )
        part.counterexample = [p.op for p in small]
        part.minimal = minimal
        part.explanation = _explain(
            keys,
            len(group),
            small,
            init,
            init_map,
            minimal,
            budget.t0,
            budget.max_configurations,
            min(5.0, budget.minimize_time_limit),
        )
        part.minimize_elapsed = time.monotonic() - t
    return part


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
    the values keys hold before the history (default: all absent). The result says
    how long it took, per partition and in total (``Result.elapsed``, ``timing()``).
    """
    started = time.monotonic()
    ops = read_history(history) if isinstance(history, str | os.PathLike) else list(history)
    t0 = min((o.invoke_time for o in ops), default=0)
    stats: dict[str, Any] = {
        "ops": len(ops),
        "dropped_failed": sum(o.outcome == "fail" for o in ops),
        "dropped_unknown_reads": 0,
        "ignored": 0,
    }
    unreduced = _prepare_all(ops, stats)
    frozen_initial = {k: _freeze(v) for k, v in (initial or {}).items()}
    prepared, stats["promoted_observed_info_writes"], stats["pruned_unobserved_info_writes"] = (
        _reduce(unreduced, frozen_initial)
    )
    stats["checked"] = len(prepared)
    by_op = {id(p.op): p for p in unreduced}

    groups = sorted(_partitions(prepared), key=len)
    stats["partitions"] = len(groups)
    budget = _Budget(started + time_limit, minimize_time_limit, max_configurations, t0)
    results = [
        _check_partition(group, [by_op[id(p.op)] for p in group], frozen_initial, n_left, budget)
        for n_left, group in zip(range(len(groups), 0, -1), groups, strict=True)
    ]

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
    elapsed = time.monotonic() - started
    stats["elapsed"] = elapsed
    return Result(valid=valid, per_key=per_key, partitions=results, stats=stats, elapsed=elapsed)


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
