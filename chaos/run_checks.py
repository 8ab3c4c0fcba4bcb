"""The verdicts of one chaos run once its workload stopped (``chaos.runner``): replicas
converge, then, with the cluster down, the history's checks (linearizability, lost and
duplicated writes, revisions, reads against acknowledged writes, event streams, the
watchers against the prefix's change history: ``chaos.checker.watch``, the lockers'
fenced writes: ``chaos.checker.locks``, the CRDT replicas: ``chaos.checker.crdt``) and its
metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statekeeper.chaos import checker
from statekeeper.chaos.checker import watch as watch_checker
from statekeeper.chaos.checker.crdt import LOSS_RULES as CRDT_LOSS_RULES
from statekeeper.chaos.checker.crdt import check_crdt
from statekeeper.chaos.checker.locks import LOSS_RULES as LOCK_LOSS_RULES
from statekeeper.chaos.checker.locks import check_locks
from statekeeper.chaos.checker.streams import LOSS_RULES, check_streams
from statekeeper.chaos.convergence import (
    compare_replicas,
    idle_nodes,
    judged_since,
    read_replicas,
    revision_conflicts,
    served_by,
)
from statekeeper.chaos.crdt_workload import CrdtRun
from statekeeper.chaos.faults import Fault
from statekeeper.chaos.history import read_history
from statekeeper.chaos.lock_workload import LockRun
from statekeeper.chaos.report import (
    ALLOWED,
    FAIL,
    INFO,
    PASS,
    UNKNOWN,
    RunResult,
    Verdict,
    compute_metrics,
    revision_regressions,
)
from statekeeper.chaos.run_setup import NS, Say
from statekeeper.chaos.stream_reads import StreamReads
from statekeeper.chaos.watch_workload import WatchRun
from statekeeper.node.config import ClusterConfig

if TYPE_CHECKING:
    from statekeeper.chaos.runner import RunOptions

__all__ = ["EVERY_NODE_GRACE_S", "check_run", "converge", "every_node_verdict"]

# A node must answer writes and linearizable reads again for ops invoked this long after
# the heal (restarts, elections and catch-up by snapshot take less).
EVERY_NODE_GRACE_S = 3.0
# ... and this long after a failpoint restart of it (it is ready in ~0.6 s here), for ops
# in a window of at least EVERY_NODE_WINDOW_S before the workload ends.
RESTART_GRACE_S = 1.5
EVERY_NODE_WINDOW_S = 1.5


def converge(
    cfg: ClusterConfig, ns: str, result: RunResult, event: Say
) -> list[tuple[str, Any, int, str]]:
    """The "replicas converge" verdict; returns every kv read, for the revision check."""
    urls = {n.id: cfg.url(n.id) for n in cfg.nodes}
    states, waited = read_replicas(urls, ns, timeout=20.0)
    conv = compare_replicas(states)
    event(
        f"replicas: {'identical' if conv.ok else 'DIFFER'} ({conv.keys} keys; {conv.positions}; "
        f"waited {waited:.1f} s for equal positions)"
    )
    result.replica_diffs = conv.problems + [d.describe() for d in conv.diffs[:50]]
    detail = "; ".join(conv.problems)
    if conv.diffs:
        shown = ", ".join(d.key for d in conv.diffs[:10])
        more = f" and {len(conv.diffs) - 10} more" if len(conv.diffs) > 10 else ""
        detail = (detail + "; " if detail else "") + f"keys differ: {shown}{more}"
    result.verdicts.append(
        Verdict(
            "replicas converge",
            PASS if conv.ok else FAIL,
            f"{len(states)} nodes, {conv.keys} keys"
            + ("" if conv.ok else f", {len(conv.diffs)} differ"),
            detail or conv.positions,
        )
    )
    return [
        (key, kv[0], kv[3], f"convergence read on {s.node}")
        for s in states
        for key, kv in (s.kvs or {}).items()
    ]


def check_run(
    opts: RunOptions,
    fault: Fault,
    result: RunResult,
    history_path: Path,
    values: dict[str, Any],
    revisions: dict[str, int],
    t0: int,
    end: int,
    fault_start: int | None,
    heal: int | None,
    say: Say,
    replica_reads: Sequence[tuple[str, Any, int, str]] = (),
    node_ids: Sequence[str] = (),
    *,
    streams: StreamReads | None = None,
    watch: WatchRun | None = None,
    locks: LockRun | None = None,
    crdt: CrdtRun | None = None,
    restarts: Mapping[str, Sequence[int]] | None = None,
) -> None:
    """Every verdict of the run onto ``result``. ``restarts``: node -> monotonic_ns of
    each failpoint restart (the CrashWatcher's), for the every-node check."""
    say("   checking the history ...")
    ops = read_history(history_path)
    allowed = fault.allows_loss(opts.fsync)
    lin = checker.check(ops, time_limit=opts.check_time_limit)
    result.checker_report = lin.report()
    st = lin.stats
    if lin.valid is True:
        status, value = PASS, f"yes ({st['checked']} ops, {st['partitions']} partitions)"
    elif lin.valid is False:
        bad = sorted({k for p in lin.partitions if p.valid is False for k in p.keys})
        status, value = (ALLOWED if allowed else FAIL), f"NO: violation on {', '.join(bad)}"
    else:
        status, value = UNKNOWN, "unknown (checker ran out of time / memory)"
    result.verdicts.insert(
        0, Verdict("linearizable", status, value, f"checked in {st['elapsed']:.1f} s")
    )
    lost = checker.lost_writes(ops, values, final_revisions=revisions)
    result.lost = [f"{w.key}: {w.reason}" for w in lost[:50]]
    result.verdicts.insert(
        1,
        Verdict(
            "lost acknowledged writes",
            PASS if not lost else (ALLOWED if allowed else FAIL),
            str(len(lost)),
            "allowed by the contract: power loss with fsync=never" if lost and allowed else "",
        ),
    )
    dups = checker.duplicate_applications(ops, values, final_revisions=revisions)
    result.duplicates = [d.reason for d in dups[:50]]
    result.verdicts.insert(
        2, Verdict("duplicate applications", FAIL if dups else PASS, str(len(dups)))
    )
    regs = revision_regressions(ops)
    t_first = min((o.invoke_time for o in ops), default=t0)
    result.regressions = [
        f"#{g.op.id} {g.op.f} (p{g.op.process}, invoked at {(g.op.invoke_time - t_first) / NS:.2f} s) "
        f"answered at revision {g.revision}, but #{g.floor_op.id} had completed at revision "
        f"{g.floor} before it started"
        for g in regs[:20]
    ] + ([f"... and {len(regs) - 20} more"] if len(regs) > 20 else [])
    result.verdicts.insert(
        3,
        Verdict(
            "store revision never went back",
            PASS if not regs else (ALLOWED if allowed else FAIL),
            str(len(regs)),
            f"{len(regs)} ops saw an older revision than one already acknowledged" if regs else "",
        ),
    )
    conflicts = revision_conflicts(ops, replica_reads)
    result.divergent = conflicts
    result.verdicts.insert(
        4,
        Verdict(
            "reads agree with acknowledged writes",
            PASS if not conflicts else (ALLOWED if allowed else FAIL),
            str(len(conflicts)),
            "every kv read (any node, any consistency) is the write acknowledged at its "
            "mod_revision"
            if not conflicts
            else conflicts[0],
        ),
    )
    if streams is not None:
        result.verdicts.insert(5, stream_verdict(ops, streams, result, allowed))
    if watch is not None:
        result.verdicts.insert(
            5 + (streams is not None), watch_verdict(ops, watch, result, allowed)
        )
    if locks is not None:
        at = 5 + (streams is not None) + (watch is not None)
        result.verdicts.insert(at, lock_verdict(ops, locks, result, allowed))
    if crdt is not None:
        at = 5 + (streams is not None) + (watch is not None) + (locks is not None)
        result.verdicts.insert(at, crdt_verdict(ops, crdt, result, allowed))
    # The final reads' process, the lockers' and the CRDT clients' (checked by the lock
    # and CRDT verdicts alone).
    skip = [opts.clients, *range(opts.clients + 1, opts.clients + 1 + opts.lockers)]
    skip += crdt.processes if crdt is not None else []
    per_node = served_by(ops, exclude_processes=skip)
    result.verdicts.append(
        Verdict(
            "ops served per node",
            INFO,
            ", ".join(
                f"{n} {c['writes']}w/{c['reads']}r/{c['serializable']}s"
                for n, c in per_node.items()
            )
            or "-",
            "ok writes / linearizable reads / serializable reads answered by each node",
        )
    )
    m = compute_metrics(
        ops, t0=t0, end=end, fault_start=fault_start, heal=heal, exclude_processes=skip
    )
    result.metrics = m
    if heal is not None:
        recovered = m.recovery_write_s is not None and m.recovery_read_s is not None
        result.verdicts.append(
            Verdict(
                "serves again after the heal",
                PASS if recovered else FAIL,
                f"write after {_s(m.recovery_write_s)}, read after {_s(m.recovery_read_s)}",
                "" if recovered else "no ok write or read was invoked and completed after the heal",
            )
        )
        every = every_node_verdict(ops, node_ids, heal, end, skip, restarts or {})
        if every is not None:
            result.verdicts.append(every)
    result.verdicts += [
        Verdict("RTO (first ok write)", INFO, _s(m.rto_write_s), "from fault start"),
        Verdict("RTO (first ok linearizable read)", INFO, _s(m.rto_read_s), "from fault start"),
        Verdict(
            "error rate",
            INFO,
            f"{100 * m.error_rate:.1f}% overall"
            + (
                f", {100 * m.fault_error_rate:.1f}% in the fault window"
                if m.fault_error_rate is not None
                else ""
            ),
            f"{m.ok} ok, {m.fail} fail, {m.info} unknown; {m.throughput_ok:.0f} ok ops/s",
        ),
    ]


def every_node_verdict(
    ops: Sequence[Any],
    node_ids: Sequence[str],
    heal: int,
    end: int,
    skip: Sequence[int],
    restarts: Mapping[str, Sequence[int]],
) -> Verdict | None:
    """"every node serves after the heal": each node answered an ok write and an ok
    linearizable read among ops invoked EVERY_NODE_GRACE_S after the heal, or
    RESTART_GRACE_S after its last failpoint restart (CrashWatcher.restart_times),
    whichever is later; clients send a share of their ops to each node. None if the run
    left too little time after the heal to judge."""
    grace, window = int(EVERY_NODE_GRACE_S * NS), int(EVERY_NODE_WINDOW_S * NS)
    # The window ends with the last op the clients invoked, not when the workload was
    # stopped (that waits for the ops in flight): a short run has no ops in between.
    skipped = set(skip)
    end = min(end, max((op.invoke_time for op in ops if op.process not in skipped), default=end))
    if end - (heal + grace) < window:
        return None
    since, unjudged = judged_since(
        node_ids, heal + grace, end, restarts, int(RESTART_GRACE_S * NS), window
    )
    idle = idle_nodes(ops, list(since), since, exclude_processes=skip)
    notes = [
        f"{n} answered no ok {' or '.join(k)} for ops invoked {EVERY_NODE_GRACE_S:g} s or "
        f"more after the heal ({RESTART_GRACE_S:g} s after its last restart)"
        for n, k in idle.items()
    ] + [
        f"{n} not judged: restarted at a failpoint {(end - t) / NS:.1f} s before the end"
        for n, t in unjudged.items()
    ]
    return Verdict(
        "every node serves after the heal",
        FAIL if idle else (PASS if since else INFO),
        f"{len(since) - len(idle)}/{len(since)} nodes",
        "; ".join(notes),
    )


def stream_verdict(
    ops: Sequence[Any], streams: StreamReads, result: RunResult, allowed: bool
) -> Verdict:
    """The "event streams" verdict (chaos.checker.streams); keeps the violations and the
    counts on ``result``. With ``allowed`` (power loss, fsync=never), violations a loss
    of acknowledged entries explains are ALLOWED; the others (gaps, duplicates, events
    nobody appended, torn appends, replicas that differ) still FAIL."""
    res = check_streams(ops, streams.final, replicas=streams.replicas or None)
    result.stream_stats = dict(res.stats)
    bad = res.violations
    result.streams = [v.describe() for v in bad[:50]] + (
        [f"... and {len(bad) - 50} more"] if len(bad) > 50 else []
    )
    fatal = [v for v in bad if not (allowed and v.rule in LOSS_RULES)]
    unread = sorted(set(res.unread) | set(streams.missing))
    if unread:
        result.streams.insert(0, f"not read at the end: {', '.join(unread)}")
    status = FAIL if fatal or unread else (ALLOWED if bad else PASS)
    st = res.stats
    value = (
        violation_counts(bad) + f"; {st['events']} events, {st['appends_ok']} ok appends, "
        f"{st['duplicates_answered']} answered duplicate"
    )
    detail = res.summary()
    if unread:
        detail = f"could not read {', '.join(unread)} at the end; " + detail
    elif bad:
        detail = f"{bad[0].describe()}; " + detail
    return Verdict("event streams", status, value, detail)


def watch_verdict(ops: Sequence[Any], watch: WatchRun, result: RunResult, allowed: bool) -> Verdict:
    """The "watch" verdict (chaos.checker.watch); keeps the violations and the counts on
    ``result``. With ``allowed`` (power loss, fsync=never), violations a loss of
    acknowledged entries explains are ALLOWED; order, duplicates, progress and frames
    still FAIL. A truth that could not be read is a FAIL: nothing was compared to it."""
    res = watch_checker.check_watch(ops, watch.logs, watch.truth, watch.prefix)
    result.watch_stats = dict(res.stats)
    bad = res.violations
    result.watch = [v.describe() for v in bad[:50]] + (
        [f"... and {len(bad) - 50} more"] if len(bad) > 50 else []
    )
    fatal = [v for v in bad if not (allowed and v.rule in watch_checker.LOSS_RULES)]
    if res.unread:
        why = watch.truth.error if watch.truth is not None else "not read"
        result.watch.insert(0, f"the cluster's change history of the prefix was not read: {why}")
    status = FAIL if fatal or res.unread else (ALLOWED if bad else PASS)
    st = res.stats
    value = (
        violation_counts(bad)
        + f"; {st['events']} events, {st['progress']} progress frames, {st['resumes']} resumes"
    )
    detail = res.summary()
    if res.unread:
        detail = f"{result.watch[0]}; " + detail
    elif bad:
        detail = f"{bad[0].describe()}; " + detail
    return Verdict("watch", status, value, detail)


def lock_verdict(ops: Sequence[Any], locks: LockRun, result: RunResult, allowed: bool) -> Verdict:
    """The "locks" verdict (chaos.checker.locks): never two holders whose fenced writes
    both land interleaved, fences grow, acknowledged writes are in the key's history and
    refused ones never; keeps the violations and the counts on ``result``. With
    ``allowed`` (power loss, fsync=never) violations a loss of acknowledged entries
    explains are ALLOWED; ``refused`` and ``unfenced`` still FAIL. A truth that could not be read
    is a FAIL: the writes were not compared to it."""
    res = check_locks(ops, locks.truth, locks.key)
    result.lock_stats = dict(res.stats)
    bad = res.violations
    result.locks = [v.describe() for v in bad[:50]] + (
        [f"... and {len(bad) - 50} more"] if len(bad) > 50 else []
    )
    if res.unread:
        why = locks.truth.error if locks.truth is not None else "not read"
        result.locks.insert(0, f"the lock key's history was not read: {why}")
    fatal = [v for v in bad if not (allowed and v.rule in LOCK_LOSS_RULES)]
    status = FAIL if fatal or res.unread else (ALLOWED if bad else PASS)
    st = res.stats
    value = (
        violation_counts(bad) + f"; {st['acquisitions']} acquisitions, {st['writes_ok']} ok / "
        f"{st['writes_refused']} refused / {st['writes_unknown']} unknown fenced writes, "
        f"{st['stale_holders']} stale holders"
    )
    detail = res.summary()
    if result.locks:
        detail = f"{result.locks[0]}; " + detail
    return Verdict("locks", status, value, detail)


def crdt_verdict(ops: Sequence[Any], crdt: CrdtRun, result: RunResult, allowed: bool) -> Verdict:
    """The "crdt" verdict (chaos.checker.crdt): the shared counter's store value between
    the acknowledged and the acknowledged + unknown increments before the final syncs,
    exactly their total after them, on every replica too, and a repeated merge changes
    nothing; keeps the violations and the counts on ``result``. With ``allowed`` (power
    loss, fsync=never) a broken bound is ALLOWED; the rest still FAILs."""
    res = check_crdt(ops, crdt.key)
    result.crdt_stats = dict(res.stats)
    bad = res.violations
    result.crdt = [v.describe() for v in bad[:50]] + (
        [f"... and {len(bad) - 50} more"] if len(bad) > 50 else []
    )
    fatal = [v for v in bad if not (allowed and v.rule in CRDT_LOSS_RULES)]
    status = FAIL if fatal else (ALLOWED if bad else PASS)
    st = res.stats
    value = (
        violation_counts(bad) + f"; {st['adds']} adds (total {st['total']}) on "
        f"{st['replicas']} replicas, syncs {st['syncs_ok']} ok / {st['syncs_fail']} refused / "
        f"{st['syncs_unknown']} unknown; store {st.get('before', '-')} in "
        f"[{st.get('lower', '-')}, {st.get('upper', '-')}] before the final syncs, "
        f"{st.get('after', '-')} after"
    )
    detail = res.summary()
    if bad:
        detail = f"{bad[0].describe()}; " + detail
    return Verdict("crdt", status, value, detail)


def _s(x: float | None) -> str:
    return "never" if x is None else f"{x:.2f} s"


def violation_counts(bad: list) -> str:
    """ "3 violations (2 gap, 1 order)": how many, by rule."""
    by_rule: dict[str, int] = {}
    for v in bad:
        by_rule[v.rule] = by_rule.get(v.rule, 0) + 1
    rules = ", ".join(f"{n} {r}" for r, n in sorted(by_rule.items()))
    return f"{len(bad)} violations" + (f" ({rules})" if bad else "")
