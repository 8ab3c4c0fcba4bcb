"""The chaos CRDT check: replicas of one shared counter (``chaos.crdt_workload``) synced
through faults must lose no increment and count none twice.

Pure (no network). Input: the history's ``crdt_add`` ops (a local increment ``n`` of
``replica``, always ok), ``crdt_sync`` ops (invoke: ``replica``, ``total`` = the replica's
own count when the sync started; ok / fail / info; ``final`` on the syncs after the run)
and ``crdt_read`` ops (the store's ``value`` and per-replica ``counts``, read once before
the final syncs, ``final: "before"``, and once after them, ``final: "after"``).

A sync ships the replica's pending deltas, which carry its own count (a G-Counter entry is
a maximum, not an increment), so an acknowledged sync with ``total`` t means the store
holds at least t of that replica from then on, and the store can never hold more of it
than the largest ``total`` of a sync invoked so far, acknowledged or unknown.

The rules, one name each (``CrdtViolation.rule``):

``bounds``
    the read before the final syncs: for every replica, acknowledged <= its count in the
    store <= acknowledged + unknown (the largest ``total`` of the syncs that completed ok
    before the read was invoked, and of the ok or unknown syncs invoked before it
    completed); so is the value, the sum; the store holds no replica nobody ran and no
    decrement.
``exact``
    the read after the final syncs equals the total of every increment ever made.
``converged``
    every replica's value after its second final sync (each first shipped its whole
    state, then pulled the others') equals that total.
``idempotent``
    the third final sync, which ships the whole state once more, changes nothing
    (``changed`` False, no new revision): a repeated merge counts nothing twice.
``refused``
    no sync was refused (``fail``): merging a valid delta never conflicts.
``final``
    every replica completed its final syncs and both final reads answered.

``check_crdt`` returns a :class:`CrdtResult`: the violations and the counts the report
shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from statekeeper.chaos.checker.locks import LockViolation
from statekeeper.chaos.history import Op

__all__ = ["LOSS_RULES", "RULES", "CrdtResult", "CrdtViolation", "check_crdt"]

RULES = ("bounds", "exact", "converged", "idempotent", "refused", "final")
# A loss of acknowledged entries (power loss with fsync=never: allowed by the contract)
# can break only the bound: the final syncs ship every replica's whole state again, so
# the store ends exact anyway.
LOSS_RULES = frozenset({"bounds"})
CRDT_FS = frozenset({"crdt_add", "crdt_sync", "crdt_read"})


# A rule broken, by which ops: the same record as the lock checker's.
CrdtViolation = LockViolation


@dataclass
class CrdtResult:
    violations: list[CrdtViolation] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        s = self.stats
        return (
            f"{s.get('replicas', 0)} replicas: {s.get('adds', 0)} local adds (total "
            f"{s.get('total', 0)}); syncs {s.get('syncs_ok', 0)} ok / {s.get('syncs_fail', 0)} "
            f"refused / {s.get('syncs_unknown', 0)} unknown, {s.get('unchanged', 0)} merges "
            f"changed nothing; store before the final syncs {s.get('before', '-')} within "
            f"[{s.get('lower', '-')}, {s.get('upper', '-')}], after {s.get('after', '-')}"
        )


def _last_ok(ops: Iterable[Op], f: str, final: Any) -> Op | None:
    found = [o for o in ops if o.f == f and o.outcome == "ok" and o.input.get("final") == final]
    return found[-1] if found else None


def _bounds(syncs: Sequence[Op], read: Op) -> tuple[dict[str, int], dict[str, int]]:
    """Per replica: (acknowledged, acknowledged + unknown) as of ``read``."""
    lower: dict[str, int] = {}
    upper: dict[str, int] = {}
    for o in syncs:
        rid, total = o.input.get("replica"), o.input.get("total")
        if not isinstance(rid, str) or not isinstance(total, int) or o.outcome == "fail":
            continue
        if o.outcome == "ok" and o.complete_time < read.invoke_time:
            lower[rid] = max(lower.get(rid, 0), total)
        if o.invoke_time < read.complete_time:
            upper[rid] = max(upper.get(rid, 0), total)
    return lower, upper


def _check_bounds(syncs: Sequence[Op], read: Op, made: dict[str, int], out: list) -> dict:
    lower, upper = _bounds(syncs, read)
    counts = read.output.get("counts") or {}
    for rid in sorted(set(made) | set(counts)):
        got, lo, hi = counts.get(rid, 0), lower.get(rid, 0), upper.get(rid, 0)
        if rid not in made:
            out.append(CrdtViolation("bounds", f"the store counts {got} for replica {rid!r}, "
                                     "which no client ran", (read.id,)))  # fmt: skip
        elif not lo <= got <= hi:
            out.append(CrdtViolation(
                "bounds", f"the store counts {got} for replica {rid!r} before the final "
                f"syncs; its acknowledged syncs put it at >= {lo}, all its syncs at <= {hi}",
                (read.id,),
            ))  # fmt: skip
    if read.output.get("negative"):
        out.append(CrdtViolation(
            "bounds", f"the store holds decrements {read.output['negative']} (none was made)",
            (read.id,),
        ))  # fmt: skip
    value = read.output.get("value") or 0
    lo, hi = sum(lower.values()), sum(upper.values())
    if not lo <= value <= hi:
        out.append(CrdtViolation(
            "bounds", f"the store's value {value} before the final syncs is outside "
            f"[{lo} acknowledged, {hi} acknowledged + unknown]", (read.id,),
        ))  # fmt: skip
    return {"before": value, "lower": lo, "upper": hi}


def _check_final(syncs: Sequence[Op], made: dict[str, int], total: int, out: list) -> None:
    for rid in sorted(made):
        mine = [o for o in syncs if o.input.get("replica") == rid]
        for rnd in (1, 2, 3):
            if _last_ok(mine, "crdt_sync", rnd) is None:
                out.append(CrdtViolation("final", f"replica {rid!r}: final sync {rnd} never "
                                         "succeeded"))  # fmt: skip
        second = _last_ok(mine, "crdt_sync", 2)
        if second is not None and second.output.get("pulled", True):
            if second.output.get("value") != total:
                out.append(CrdtViolation(
                    "converged", f"replica {rid!r} holds {second.output.get('value')} after "
                    f"its final syncs, not the total of every increment, {total}",
                    (second.id,),
                ))  # fmt: skip
        third = _last_ok(mine, "crdt_sync", 3)
        if third is not None and third.output.get("changed"):
            out.append(CrdtViolation(
                "idempotent", f"replica {rid!r}: shipping its whole state a second time "
                f"changed the store (revision {third.output.get('revision')})", (third.id,),
            ))  # fmt: skip


def check_crdt(ops: Iterable[Op], key: str) -> CrdtResult:
    """Every rule of the module docstring over the CRDT ops of ``ops`` on ``key``."""
    mine = [o for o in ops if o.f in CRDT_FS and o.key == key]
    res, out = CrdtResult(), []
    adds = [o for o in mine if o.f == "crdt_add" and o.outcome == "ok"]
    syncs = [o for o in mine if o.f == "crdt_sync"]
    made: dict[str, int] = {}
    for o in adds:
        rid = o.input.get("replica")
        made[rid] = made.get(rid, 0) + int(o.input.get("n", 0))
    total = sum(made.values())
    workload = [o for o in syncs if o.input.get("final") is None]
    res.stats = {
        "replicas": len(made), "adds": len(adds), "total": total,
        "syncs_ok": sum(o.outcome == "ok" for o in workload),
        "syncs_fail": sum(o.outcome == "fail" for o in workload),
        "syncs_unknown": sum(o.outcome == "info" for o in workload),
        "full": sum(bool(o.input.get("full")) for o in workload),
        "unchanged": sum(o.outcome == "ok" and o.output.get("sent") is True
                         and o.output.get("changed") is False for o in workload),
    }  # fmt: skip
    for o in syncs:
        if o.outcome == "fail":
            out.append(CrdtViolation("refused", f"sync #{o.id} of replica "
                                     f"{o.input.get('replica')!r} was refused: "
                                     f"{o.output.get('error')}", (o.id,)))  # fmt: skip
    before, after = _last_ok(mine, "crdt_read", "before"), _last_ok(mine, "crdt_read", "after")
    if before is None:
        out.append(CrdtViolation("final", "the store was not read before the final syncs"))
    else:
        res.stats.update(_check_bounds(syncs, before, made, out))
    if after is None:
        out.append(CrdtViolation("final", "the store was not read after the final syncs"))
    else:
        res.stats["after"] = after.output.get("value")
        if (after.output.get("value") or 0) != total:
            out.append(CrdtViolation(
                "exact", f"the store holds {after.output.get('value')} after the final "
                f"syncs, not the total of every increment, {total}", (after.id,),
            ))  # fmt: skip
    _check_final(syncs, made, total, out)
    res.violations = out
    return res
