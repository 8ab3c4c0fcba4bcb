"""``check``: linearizability of a history, partition by partition.

P-compositionality: linearizability is local, so each partition is checked on its own,
smallest first, each with an even share of the remaining ``time_limit`` (sequentially:
the search is CPU-bound and threads would only share the GIL). A partition of many keys
joined by txns is searched as one (the state is a tuple) and costs far more than its
keys would apart: keep txns within small fixed key groups.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from statekeeper.chaos.checker.minimize import minimize_ops
from statekeeper.chaos.checker.model import Prepared, prepare_all
from statekeeper.chaos.checker.reductions import reduce_unknown_writes
from statekeeper.chaos.checker.results import PartitionResult, Result, explain
from statekeeper.chaos.checker.search import search_partition
from statekeeper.chaos.checker.values import UNKNOWN, Verdict, freeze
from statekeeper.chaos.history import Op, read_history

__all__ = ["check"]


def _partitions(prepared: list[Prepared]) -> list[list[Prepared]]:
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
    groups: dict[str, list[Prepared]] = defaultdict(list)
    for p in prepared:
        groups[find(p.op.keys[0])].append(p)
    return list(groups.values())


@dataclass
class _Budget:
    """Deadlines shared by the partitions of one ``check``."""

    search_deadline: float
    minimize_time_limit: float
    max_configurations: int
    t0: int
    minimize_deadline: float | None = None


def _check_partition(
    group: list[Prepared],
    original: list[Prepared],
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
    out = search_partition(group, init, t + share, budget.max_configurations, init_map)
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
        small, minimal = minimize_ops(
            original, init, init_map, budget.minimize_deadline, budget.max_configurations
        )
        part.counterexample = [p.op for p in small]
        part.minimal = minimal
        part.explanation = explain(
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
    unreduced = prepare_all(ops, stats)
    frozen_initial = {k: freeze(v) for k, v in (initial or {}).items()}
    prepared, stats["promoted_observed_info_writes"], stats["pruned_unobserved_info_writes"] = (
        reduce_unknown_writes(unreduced, frozen_initial)
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
