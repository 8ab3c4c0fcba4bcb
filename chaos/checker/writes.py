"""Lost writes (``lost_writes``) and duplicate applications (``duplicate_applications``)
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

import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from statekeeper.chaos.checker.values import fmt_value, freeze
from statekeeper.chaos.history import Op, read_history

__all__ = ["DuplicateApplication", "LostWrite", "duplicate_applications", "lost_writes"]


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
            writers[(k, freeze(v))].append(op)
            if op.outcome == "ok":
                acked[k].append((op, v))
    lost: list[LostWrite] = []
    for key, final in final_reads.items():
        fv = freeze(final)
        ws = writers.get((key, fv), [])
        from_initial = freeze(initial.get(key)) == fv
        why: dict[int, tuple[Op, str]] = {}  # id(op) -> (op, why it is lost), first reason
        if not ws and not from_initial:
            lost.append(LostWrite(key, None, final, "final value was never written"))
        else:
            newest = max(
                [w.complete_time for w in ws] + ([-math.inf] if from_initial else [])
            )
            for op, _v in acked[key]:
                if op.invoke_time > newest:
                    why[id(op)] = (
                        op,
                        f"acknowledged write #{op.id} started after every write of the "
                        f"final value {fmt_value(final)} had completed",
                    )
        mod_rev = (final_revisions or {}).get(key)
        if mod_rev is not None and final is not None:  # an absent key has no mod_revision
            for op, _v in acked[key]:
                rev = op.output.get("revision")
                if op.f == "delete" and not op.output.get("deleted"):
                    continue  # a delete of nothing reports the current revision, wrote nothing
                if isinstance(rev, int) and rev > mod_rev:
                    reason = (
                        f"acknowledged write #{op.id} at revision {rev} but the final kv "
                        f"has mod_revision {mod_rev}"
                    )
                    why.setdefault(id(op), (op, reason))
        lost.extend(LostWrite(key, op, final, reason) for op, reason in why.values())
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
            fk = (k, freeze(v))
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
                seen[(op.key, freeze(op.output["value"]))][mr].append(op)
    extra: dict[tuple[str, Any], int] = {}
    for key, value in (final_reads or {}).items():
        mr = (final_revisions or {}).get(key)
        if value is not None and isinstance(mr, int):
            extra[(key, freeze(value))] = mr
            seen[(key, freeze(value))].setdefault(mr, [])
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
                f"value {fmt_value(raw.get(fk))} of one write observed at mod_revisions "
                f"{list(revs)}{where}: applied more than once",
            )
        )
    return found
