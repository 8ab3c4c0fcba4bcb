"""The run: for each group, `rounds` rounds, each system on a fresh cluster per round.

Order (rounds.round_order): group by group; within a group round 0 runs the systems as
given, round 1 rotated by one, and so on. One cluster at a time, never two under load
together. A system runs only the groups its `System.compare_groups` names (Redis: the
append rows); the append rows are a group of their own, on fresh clusters.
A system failing in one round records `failed` for that round's rows and the run goes on:
the other rounds and the other system still count.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from statekeeper.benchmarks.compare.measure import (
    Settings,
    run_cold_start,
    run_failover,
    run_kv_group,
)
from statekeeper.benchmarks.compare.rounds import Measure, Row, round_order
from statekeeper.benchmarks.compare.workloads import Workload
from statekeeper.benchmarks.systems import System, get_system_class


def make_rows(groups: Sequence[str], s: Settings, workloads: Sequence[Workload]) -> dict[str, Row]:
    rows: dict[str, Row] = {w.key: Row(w.key, w.label, "ops") for w in workloads}
    if "failover" in groups:
        rows["failover"] = Row(
            "failover",
            f"failover: leader SIGKILL -> first put ({s.failover_trials} trials x {s.rounds})",
            "time",
        )
    if "cold-start" in groups:
        n = f"{s.keys_cold_start:,}"
        rows["cold-start"] = Row("cold-start", f"cold start, {n} keys -> ready", "time")
        rows["rss-loaded"] = Row("rss-loaded", f"RSS, {n} keys (largest member)", "memory")
        rows["rss-restarted"] = Row("rss-restarted", f"RSS, {n} keys (restarted member)", "memory")
    return rows


def group_workloads(group: str, workloads: Sequence[Workload]) -> list[Workload]:
    """The rows of a run group: 'append' the append rows, 'kv' every other key-value row."""
    return [w for w in workloads if (w.kind == "append") == (group == "append")]


def group_plan(groups: Sequence[str], workloads: Sequence[Workload]) -> list[tuple[str, list[str]]]:
    """(group, row keys) in the order they run."""
    plan: list[tuple[str, list[str]]] = []
    for group in ("kv", "append"):
        if rows := group_workloads(group, workloads):
            plan.append((group, [w.key for w in rows]))
    if "failover" in groups:
        plan.append(("failover", ["failover"]))
    if "cold-start" in groups:
        plan.append(("cold-start", ["cold-start", "rss-loaded", "rss-restarted"]))
    return plan


def group_steps(group: str, s: Settings, workloads: Sequence[Workload]) -> int:
    """Progress-bar steps one system takes for one group in one round."""
    if group in ("kv", "append"):
        return len(group_workloads(group, workloads))
    return {"failover": s.failover_trials, "cold-start": 2}[group]


def takes_part(system: str, group: str) -> bool:
    """Whether `system` runs `group` (kv/append: any of its rows' kinds; see compare_groups)."""
    wanted = get_system_class(system).compare_groups
    return wanted is None or group in wanted


def total_steps(
    groups: Sequence[str], s: Settings, workloads: Sequence[Workload], systems: Sequence[str]
) -> int:
    """The bar's total: every step of every group, system and round."""
    return s.rounds * sum(
        group_steps(g, s, workloads) * sum(takes_part(n, g) for n in systems)
        for g, _ in group_plan(groups, workloads)
    )


async def run_compare(
    systems: Sequence[str],
    groups: Sequence[str],
    s: Settings,
    *,
    workloads: Sequence[Workload],
    data_dir: Path,
    bar: Any,
) -> list[Row]:
    rows = make_rows(groups, s, workloads)
    for group, keys in group_plan(groups, workloads):
        members = [n for n in systems if takes_part(n, group)]
        for r in range(s.rounds):
            for name in round_order(members, r):
                tag = f"{name} r{r + 1}/{s.rounds}"
                bar.set_description(f"{tag}: starting a 3-node cluster ({group})")
                t_group = time.monotonic()
                start_n = getattr(bar, "n", 0)
                try:
                    got = await _run_group_on(
                        get_system_class(name), name, tag, group, s, workloads, data_dir, bar
                    )
                except Exception as e:  # noqa: BLE001 - one failure must not lose the rest
                    why = f"{type(e).__name__}: {e}"
                    bar.write(f"{tag} ({group}) failed: {why}")
                    got = {}
                    for k in keys:
                        got[k] = Measure(failed=why)
                for k in keys:
                    rows[k].put(name, r, s.rounds, got.get(k) or Measure(failed="not measured"))
                # Keep the bar's total honest when a group ended early.
                left = group_steps(group, s, workloads) - (getattr(bar, "n", 0) - start_n)
                if left > 0:
                    bar.update(left)
                bar.write(f"{tag}: {group} done in {time.monotonic() - t_group:.0f}s")
    return list(rows.values())


async def _run_group_on(
    cls: type[System],
    name: str,
    tag: str,
    group: str,
    s: Settings,
    workloads: Sequence[Workload],
    data_dir: Path,
    bar: Any,
) -> dict[str, Measure]:
    """One group on one fresh cluster of `cls`: row key -> Measure."""
    with tempfile.TemporaryDirectory(prefix=f"compare-{name}-", dir=data_dir) as workdir:
        async with cls.managed_cluster(Path(workdir), fsync="always", quiet=True) as control:
            extra = {"max_connections": s.max_clients} if name == "statekeeper" else {}
            system = cls(control.endpoints, **extra)
            try:
                await system.setup()
                if group in ("kv", "append"):
                    rows = group_workloads(group, workloads)
                    return await run_kv_group(system, rows, s, bar, tag, control)
                if group == "failover":
                    return {"failover": await run_failover(system, control, s, bar, tag)}
                return await run_cold_start(system, control, s, bar, tag)
            finally:
                await system.teardown()
