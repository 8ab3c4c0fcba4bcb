"""The register model of the linearizability check, and the preparation of ops for it.

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
``compact``, stream ops (``chaos.checker.streams``), serializable gets and gets at an old ``revision`` are ignored (not
linearizable by contract, and they write nothing). ``info`` writes are optional: they may
take effect once, at any point after their invoke (completion time +inf), or never.
The unknown writes are then reduced (:mod:`chaos.checker.reductions`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from statekeeper.chaos.checker.values import freeze
from statekeeper.chaos.history import HistoryError, Op

INVALID = object()  # a model step that is not allowed (None is a legal state: absent)
# streams: .streams; the lockers' ops: .locks; the CRDT replicas' ops: .crdt
_IGNORED_FS = frozenset(
    {"range", "compact", "append", "read_stream", "lock_acquire", "lock_release", "fenced_put"}
    | {"crdt_add", "crdt_sync", "crdt_read"}
)


@dataclass(eq=False)
class Prepared:
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
    applied: tuple[Prepared, ...] = ()
    # Latest time it can take effect: the op's completion, +inf for an unknown op,
    # an observer's completion once promoted.
    complete: float = math.nan
    # For an unknown op: (shape, ((key, written value), ...)). Two unknown ops with the
    # same shape and the same values, up to values no op observes, are interchangeable
    # in the search (see ``search_partition``); None: not compared.
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


def _prepare(op: Op) -> Prepared:
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
        v = freeze(inp.get("value"))

        def make_put(idx, single):
            _, put = _getter_setter(idx, single, key)
            return lambda s: put(s, v)

        sig = None if is_ok else (("put", key), ((key, v),))
        return Prepared(op, is_ok, {key: {v}}, {}, {}, make_put, signature=sig)
    if f == "delete":
        return _prepare_delete(op, key)
    if f == "get":
        r = freeze(out.get("value"))

        def make_get(idx, single):
            get, _ = _getter_setter(idx, single, key)
            return lambda s: s if get(s) == r else INVALID

        return Prepared(op, True, {}, {key: {r}}, {}, make_get, pins={key: {r}})
    if f == "cas":
        e, n = freeze(inp.get("expect")), freeze(inp.get("value"))

        def make_cas_ok(idx, single):
            get, put = _getter_setter(idx, single, key)
            return lambda s: put(s, n) if get(s) == e else INVALID

        succeeded = Prepared(op, True, {key: {n}}, {key: {e}}, {}, make_cas_ok, pins={key: {e}})
        if not is_ok:  # unknown: whatever the state says, or nothing (optional)

            def make_cas_info(idx, single):
                get, put = _getter_setter(idx, single, key)
                return lambda s: put(s, n) if get(s) == e else s

            # Once its value is seen it succeeded: then it is the acked version.
            return Prepared(
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
            c = freeze(out["value"])

            def make_cas_seen(idx, single):
                get, _ = _getter_setter(idx, single, key)
                return lambda s: s if get(s) == c and c != e else INVALID

            return Prepared(op, True, {}, {key: {e, c}}, {}, make_cas_seen, pins={key: {c}})

        def make_cas_failed(idx, single):
            get, _ = _getter_setter(idx, single, key)
            return lambda s: s if get(s) != e else INVALID

        return Prepared(op, True, {}, {key: {e}}, {key: {e}}, make_cas_failed)
    if f == "txn":
        return _prepare_txn(op)
    raise HistoryError(f"op {op.id!r}: unknown op {f!r}")


def _prepare_delete(op: Op, key: str) -> Prepared:
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
            return lambda s: put(s, None) if get(s) is not None else INVALID
        if count == 0:
            return lambda s: s if get(s) is None else INVALID
        return lambda s: INVALID

    required = op.outcome == "ok"
    if count is None:
        sig = None if required else (("put", key), ((key, None),))
        return Prepared(op, required, {key: {None}}, {}, {}, make_delete, signature=sig)
    if count == 1:
        return Prepared(op, True, {key: {None}}, {key: {None}}, {key: {None}}, make_delete)
    if count == 0:
        return Prepared(op, True, {}, {key: {None}}, {}, make_delete, pins={key: {None}})
    return Prepared(op, True, {}, {key: {None}}, {}, make_delete)


def _prepare_txn(op: Op) -> Prepared:
    inp, out = op.input, op.output
    is_ok = op.outcome == "ok"
    cmps = []
    for c in inp.get("compare") or ():
        cop = c.get("op", "==")
        if cop not in ("==", "!="):
            raise HistoryError(f"op {op.id!r}: txn compare op {cop!r} is not modeled")
        cmps.append((c["key"], cop == "==", freeze(c.get("value"))))

    def branch(name: str) -> list[tuple[str, str, Any]]:
        ops = []
        for b in inp.get(name) or ():
            bf = b.get("f") or b.get("op")
            if bf not in ("put", "delete", "get"):
                raise HistoryError(f"op {op.id!r}: txn op {bf!r} is not modeled")
            ops.append((bf, b["key"], freeze(b.get("value")) if bf == "put" else None))
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
    results = [freeze(r) for r in out.get("results") or ()]
    return _txn_prepared(op, cmps, success, failure, out["succeeded"], results)


_Branch = list[tuple[str, str, Any]]  # (f, key, frozen value) per txn op


def _txn_prepared(
    op: Op,
    cmps: list[tuple[str, bool, Any]],
    success: _Branch,
    failure: _Branch,
    succeeded: bool | None,
    results: list[Any],
) -> Prepared:
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
                return INVALID
            for j, (bf, i, v) in enumerate(succ_i if ok else fail_i):
                if bf == "put":
                    cur[i] = v
                elif bf == "delete":
                    cur[i] = None
                elif check_reads and j < len(results) and cur[i] != results[j]:
                    return INVALID
            return cur[0] if single else tuple(cur)

        return step

    return Prepared(
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


def prepare_all(ops: list[Op], stats: dict[str, Any]) -> list[Prepared]:
    """The ops the model checks (see the module docstring), counting what is dropped."""
    prepared: list[Prepared] = []
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
