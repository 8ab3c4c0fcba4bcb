"""The chaos lock check: concurrent lockers doing fenced writes (``chaos.lock_workload``)
must never have two holders whose fenced writes both land interleaved.

Pure (no network). Inputs:

- the history (``chaos.history``): the lockers' ``lock_acquire`` ops (ok: ``fence``, when
  the client learned it holds the lock = the completion time), their ``fenced_put`` ops
  (invoke: ``key``, ``value``, ``fence``; ok: ``revision``; fail: ``error`` =
  ``fence_mismatch`` with the server's ``holder_fence``; info: unknown) and their
  ``lock_release`` ops;
- the *truth* (:class:`chaos.checker.watch.WatchTruth`, read by ``chaos.watch_reads``
  after the run, the cluster healed and converged): the change history of the shared key
  from the lockers' start revision up to the final revision (from the compact revision
  + 1 if the start was compacted away: revisions below ``start_revision`` are not
  covered and the rules that need the truth skip them).

A fenced write *landed* when it was acknowledged, or when its outcome is unknown and its
value is in the truth (values are unique: ``L{locker}-f{fence}-c{n}``; the landing
revision is the truth's).

The rules, one name each (``LockViolation.rule``):

``order``
    landed writes, in commit-revision order, carry non-decreasing fences: once a write
    with fence g landed, no write with a fence f < g lands after it (two holders whose
    fenced writes both land interleaved).
``fences``
    fences only grow in real time: an acquisition's fence is greater than the fence of
    every acquisition that completed before it was invoked; no two acquisitions share one.
``acknowledged``
    an acknowledged write is in the truth at its revision, with its value (where the
    truth covers that revision).
``refused``
    a write that definitely failed (``fence_mismatch``, any other refusal) is never in
    the truth.
``unfenced``
    every landed write carries the fence of an acquisition its own locker completed before
    it invoked the write, and commits above that fence (the waiter key existed); every
    change of the key in the truth is a write of the history (nothing else writes it).
``stale``
    a *stale holder* is an acquisition that another locker's acquisition with a greater
    fence completed while it still believed it held the lock (it invoked a write or its
    release after that): its writes invoked after the newer acquisition completed are
    never acknowledged (the server must refuse them: ``fence_mismatch``) and never land.

``check_locks`` returns a :class:`LockResult`: the violations and the counts the report
shows (acquisitions, writes ok / refused / unknown, handovers, the most would-be holders
at once, stale holders and what happened to their writes).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from statekeeper.chaos.checker.watch import WatchTruth
from statekeeper.chaos.history import Op

__all__ = ["LOSS_RULES", "RULES", "LockResult", "LockViolation", "check_locks", "landed_writes"]

RULES = ("order", "fences", "acknowledged", "refused", "unfenced", "stale")
# Rules a loss of acknowledged entries (power loss with fsync=never: allowed by the
# contract) can break: a lost acquisition's fence may be issued again, a lost write leaves
# the order. A refused write still never lands, and every landed write was fenced.
LOSS_RULES = frozenset({"order", "fences", "acknowledged", "stale"})
NS = 1_000_000_000


@dataclass(frozen=True)
class LockViolation:
    rule: str
    message: str
    ops: tuple[int | str, ...] = ()

    def describe(self) -> str:
        return f"[{self.rule}] {self.message}"


@dataclass
class LockResult:
    violations: list[LockViolation] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    unread: bool = False  # the truth could not be read: only the history rules ran

    @property
    def ok(self) -> bool:
        return not self.violations and not self.unread

    def summary(self) -> str:
        s = self.stats
        return (
            f"{s.get('lockers', 0)} lockers: {s.get('acquisitions', 0)} acquisitions, "
            f"{s.get('handovers', 0)} handovers; fenced writes {s.get('writes_ok', 0)} ok / "
            f"{s.get('writes_refused', 0)} refused / {s.get('writes_unknown', 0)} unknown "
            f"({s.get('unknown_landed', 0)} of them landed); at most "
            f"{s.get('max_holders', 0)} would-be holders at once; {s.get('stale_holders', 0)} "
            f"stale holders ({s.get('stale_paused', 0)} after a pause of the locker's own), whose {s.get('stale_writes', 0)} late writes were "
            f"{s.get('stale_refused', 0)} refused / {s.get('stale_ok', 0)} ok / "
            f"{s.get('stale_unknown', 0)} unknown; truth: {s.get('truth_changes', 0)} "
            f"changes of the key in revisions {s.get('truth_from', '-')}..{s.get('truth_to', '-')}"
        )


@dataclass(frozen=True)
class _Landed:
    op: Op
    revision: int
    fence: Any


def _fence_of(op: Op) -> Any:
    return op.input.get("fence")


def _truth_values(truth: WatchTruth | None, key: str) -> dict[Any, list[int]]:
    """value -> the revisions at which the truth put it on ``key``."""
    out: dict[Any, list[int]] = {}
    if truth is None or truth.changes is None:
        return out
    for rev, changes in truth.changes.items():
        for k, kind, value in changes:
            if k == key and kind == "put":
                out.setdefault(value, []).append(rev)
    return out


def landed_writes(writes: Sequence[Op], truth: WatchTruth | None, key: str) -> list[_Landed]:
    """The writes that landed (module docstring), in revision order."""
    seen = _truth_values(truth, key)
    out = []
    for op in writes:
        if op.outcome == "ok" and isinstance(op.output.get("revision"), int):
            out.append(_Landed(op, op.output["revision"], _fence_of(op)))
        elif op.outcome == "info" and seen.get(op.input.get("value")):
            out.append(_Landed(op, min(seen[op.input["value"]]), _fence_of(op)))
    return sorted(out, key=lambda w: w.revision)


def order(landed: Sequence[_Landed]) -> list[LockViolation]:
    """Rule ``order``: fences never go down along the commit order."""
    found = []
    top: _Landed | None = None
    for w in landed:
        if top is not None and w.fence < top.fence:
            found.append(
                LockViolation(
                    "order",
                    f"#{w.op.id} (p{w.op.process}) with fence {w.fence} landed at revision "
                    f"{w.revision}, after #{top.op.id} (p{top.op.process}) with fence "
                    f"{top.fence} had landed at revision {top.revision}: two holders' fenced "
                    "writes interleaved",
                    (w.op.id, top.op.id),
                )
            )
        if top is None or w.fence > top.fence:
            top = w
    return found


def fences(acquired: Sequence[Op]) -> list[LockViolation]:
    """Rule ``fences``: fences grow in real time, and no two acquisitions share one."""
    found = []
    by_fence: dict[Any, Op] = {}
    for a in acquired:
        f = a.output["fence"]
        if f in by_fence:
            b = by_fence[f]
            found.append(
                LockViolation("fences", f"#{b.id} and #{a.id} both acquired fence {f}", (b.id, a.id))
            )
        by_fence.setdefault(f, a)
    done = sorted(acquired, key=lambda o: o.complete_time)
    best: Op | None = None
    i = 0
    for a in sorted(acquired, key=lambda o: o.invoke_time):
        while i < len(done) and done[i].complete_time < a.invoke_time:
            if best is None or done[i].output["fence"] > best.output["fence"]:
                best = done[i]
            i += 1
        if best is not None and a.output["fence"] <= best.output["fence"]:
            found.append(
                LockViolation(
                    "fences",
                    f"#{a.id} (p{a.process}) acquired fence {a.output['fence']}, but #{best.id} "
                    f"(p{best.process}) had acquired fence {best.output['fence']} before it "
                    "was invoked: fences went back",
                    (a.id, best.id),
                )
            )
    return found


def acknowledged(writes: Sequence[Op], truth: WatchTruth, key: str) -> list[LockViolation]:
    """Rule ``acknowledged``: every ok write is in the truth at its revision."""
    found = []
    changes = truth.changes or {}
    for op in writes:
        rev = op.output.get("revision")
        if op.outcome != "ok" or not isinstance(rev, int) or not truth.covers(rev):
            continue
        at = [c for c in changes.get(rev, []) if c[0] == key]
        if ("put", op.input.get("value")) not in [(c[1], c[2]) for c in at]:
            found.append(
                LockViolation(
                    "acknowledged",
                    f"#{op.id} (p{op.process}, fence {_fence_of(op)}) was acknowledged at "
                    f"revision {rev} writing {op.input.get('value')!r}, but the key's history "
                    f"has {at or 'no change'} there",
                    (op.id,),
                )
            )
    return found


def refused(writes: Sequence[Op], truth: WatchTruth, key: str) -> list[LockViolation]:
    """Rule ``refused``: a failed write never appears in the truth."""
    seen = _truth_values(truth, key)
    return [
        LockViolation(
            "refused",
            f"#{op.id} (p{op.process}, fence {_fence_of(op)}) failed "
            f"({op.output.get('error')}), but its value {op.input.get('value')!r} is in the "
            f"key's history at revision {seen[op.input.get('value')][0]}",
            (op.id,),
        )
        for op in writes
        if op.outcome == "fail" and seen.get(op.input.get("value"))
    ]


def unfenced(
    landed: Sequence[_Landed], acquired: Sequence[Op], writes: Sequence[Op],
    truth: WatchTruth | None, key: str,
) -> list[LockViolation]:  # fmt: skip
    """Rule ``unfenced``: landed writes carry a fence their locker acquired, and commit
    above it; the truth holds no change the history did not write."""
    found = []
    mine = {(a.process, a.output["fence"]): a for a in acquired}
    for w in landed:
        a = mine.get((w.op.process, w.fence))
        why = None
        if a is None:
            why = "no acquisition of that locker returned that fence"
        elif a.complete_time > w.op.invoke_time:
            why = f"it was invoked before #{a.id} had acquired that fence"
        elif w.revision <= w.fence:
            why = "it committed at or below the fence's own revision"
        if why:
            found.append(
                LockViolation(
                    "unfenced",
                    f"#{w.op.id} (p{w.op.process}) with fence {w.fence} landed at revision "
                    f"{w.revision}, but {why}",
                    (w.op.id,),
                )
            )
    written = {op.input.get("value") for op in writes}
    for value, revs in sorted(_truth_values(truth, key).items(), key=lambda kv: kv[1]):
        if value not in written:
            found.append(
                LockViolation(
                    "unfenced",
                    f"the key's history has {value!r} at revision {revs[0]}, which no fenced "
                    "write of the history wrote",
                )
            )
    return found


def holds(acquired: Sequence[Op], ops: Sequence[Op]) -> list[tuple[Op, float]]:
    """(acquisition, when its locker last acted as the holder: the latest invoke of a
    write or release with its fence, or the acquisition itself)."""
    last: dict[tuple[int, Any], float] = {}
    for op in ops:
        if op.f in ("fenced_put", "lock_release"):
            k = (op.process, op.input.get("fence"))
            last[k] = max(last.get(k, 0.0), op.invoke_time)
    return [(a, max(a.complete_time, last.get((a.process, a.output["fence"]), 0.0))) for a in acquired]


def stale(
    acquired: Sequence[Op], writes: Sequence[Op], spans: Sequence[tuple[Op, float]],
    landed: Sequence[_Landed], stats: dict[str, Any],
) -> list[LockViolation]:  # fmt: skip
    """Rule ``stale`` (and its counts): a holder's writes invoked after a newer fence's
    acquisition completed are refused or unknown, and never land."""
    found: list[LockViolation] = []
    landed_ops = {w.op for w in landed}
    holders = paused = 0
    late_writes: list[Op] = []
    for a, until in spans:
        f = a.output["fence"]
        newer = [b for b in acquired if b.output["fence"] > f and b.process != a.process]
        since = min((b.complete_time for b in newer), default=None)
        if since is None or since >= until:
            continue
        holders += 1
        late = [
            w for w in writes
            if w.process == a.process and _fence_of(w) == f and w.invoke_time > since
        ]  # fmt: skip
        late_writes += late
        paused += any(w.input.get("paused") for w in late)
        for w in late:
            if w.outcome == "ok" or w in landed_ops:
                found.append(
                    LockViolation(
                        "stale",
                        f"#{w.id} (p{w.process}) wrote with "
                        f"fence {f} after a newer holder had acquired the lock "
                        f"{(w.invoke_time - since) / NS:.2f} s before it was invoked, and it "
                        + ("was acknowledged" if w.outcome == "ok" else "landed"),
                        (w.id,),
                    )
                )
    stats["stale_holders"] = holders
    stats["stale_paused"] = paused  # of them: the locker's own simulated pause
    stats["stale_writes"] = len(late_writes)
    stats["stale_refused"] = sum(w.outcome == "fail" for w in late_writes)
    stats["stale_ok"] = sum(w.outcome == "ok" for w in late_writes)
    stats["stale_unknown"] = sum(w.outcome == "info" for w in late_writes)
    return found


def _max_overlap(spans: Iterable[tuple[Op, float]]) -> int:
    edges = sorted(
        [(a.complete_time, 1) for a, _ in spans] + [(until, -1) for _, until in spans],
        key=lambda e: (e[0], -e[1]),
    )
    best = cur = 0
    for _, d in edges:
        cur += d
        best = max(best, cur)
    return best


def check_locks(ops: Iterable[Op], truth: WatchTruth | None, key: str) -> LockResult:
    """Every rule of the module docstring over the lockers' ops of ``ops``."""
    ops = list(ops)
    acq_all = [o for o in ops if o.f == "lock_acquire"]
    acquired = [o for o in acq_all if o.outcome == "ok" and isinstance(o.output.get("fence"), int)]
    writes = [o for o in ops if o.f == "fenced_put" and o.key == key]
    res = LockResult(unread=truth is None or truth.changes is None)
    use = None if res.unread else truth
    landed = landed_writes(writes, use, key)
    spans = holds(acquired, ops)
    st = res.stats
    st.update(
        lockers=len({o.process for o in acq_all}),
        acquisitions=len(acquired),
        acquire_failed=sum(o.outcome == "fail" for o in acq_all),
        acquire_unknown=sum(o.outcome == "info" for o in acq_all),
        writes_ok=sum(o.outcome == "ok" for o in writes),
        writes_refused=sum(o.output.get("error") == "fence_mismatch" for o in writes),
        writes_failed=sum(o.outcome == "fail" for o in writes),
        writes_unknown=sum(o.outcome == "info" for o in writes),
        unknown_landed=sum(w.op.outcome == "info" for w in landed),
        landed=len(landed),
        handovers=sum(a.fence != b.fence for a, b in zip(landed, landed[1:], strict=False)),
        max_holders=_max_overlap(spans),
        releases=sum(o.f == "lock_release" and o.outcome == "ok" for o in ops),
    )
    bad = order(landed) + fences(acquired) + unfenced(landed, acquired, writes, use, key)
    bad += stale(acquired, writes, spans, landed, st)
    if use is not None:
        bad += acknowledged(writes, use, key) + refused(writes, use, key)
        st.update(
            truth_changes=sum(len(c) for c in (use.changes or {}).values()),
            truth_from=use.start_revision,
            truth_to=use.final_revision,
        )
    res.violations = bad
    return res
