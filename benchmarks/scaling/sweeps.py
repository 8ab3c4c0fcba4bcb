"""The three scaling sweeps, each on its own fresh 3-node cluster (fsync=always):

- size: one cluster grown in place (load to 10k keys, measure, load to 100k, measure, ...),
  256 B values; at each size also a follower restarted (SIGTERM, as benchmarks.compare's
  cold start) and timed to ready, every member's RSS and data dir size.
- value: one cluster, a separate key set per value size (64 B .. 1 MiB); after each size
  the history is compacted so the next point's disk and reads do not carry it.
- history: one cluster, HISTORY_KEYS keys overwritten until each holds H + 1 versions,
  measured at each H with the history kept (retention.history_revisions raised so none is
  compacted); also reads at a past revision and 100-key ranges.

Each cluster runs with the storage quota raised to what the disk has (quota_bytes is 2 GiB
by default, etcd's; 10M keys of 256 B hold ~2.6 GB of values alone), otherwise defaults.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from statekeeper.benchmarks.cluster_control import ClusterControl
from statekeeper.benchmarks.restart import members_rss, restart_follower
from statekeeper.benchmarks.scaling.measure import (
    KeyRange,
    Repeated,
    Settings,
    current_revision,
    dir_bytes,
    load,
    measure_history_reads,
    measure_kv,
    random_value,
)
from statekeeper.benchmarks.scaling.points import MIB, Point, format_bytes, value_keys
from statekeeper.benchmarks.systems import StatekeeperSystem

SIZE_VALUE = 256
VALUE_SWEEP_KEYS = 2000
VALUE_SWEEP_BUDGET = 256 * MIB  # bytes of values per point: 256 keys at 1 MiB
HISTORY_KEYS = 1000
NO_QUOTA = 1 << 50  # capped by the node at what the disk has (usage + free - reserve)
HISTORY_KEPT = 1 << 40  # revisions: nothing is compacted during the history sweep


def _configure(history: bool) -> Callable[[Any], Any]:
    def configure(cfg: Any) -> Any:
        cfg = dataclasses.replace(
            cfg, storage=dataclasses.replace(cfg.storage, quota_bytes=NO_QUOTA)
        )
        if history:
            retention = dataclasses.replace(cfg.retention, history_revisions=HISTORY_KEPT)
            cfg = dataclasses.replace(cfg, retention=retention)
        return cfg

    return configure


@asynccontextmanager
async def cluster(
    data_dir: Path, name: str, *, history: bool = False
) -> AsyncIterator[tuple[ClusterControl, StatekeeperSystem]]:
    """A fresh local cluster in a temp dir under `data_dir`, and a system connected to it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"scaling-{name}-", dir=data_dir) as workdir:
        async with StatekeeperSystem.managed_cluster(
            Path(workdir), fsync="always", quiet=True, configure=_configure(history)
        ) as control:
            # Enough connections that the pool never caps 16 clients or the loaders.
            system = StatekeeperSystem(control.endpoints, max_connections=64)
            await system.setup()
            try:
                yield control, system
            finally:
                await system.teardown()


def _mib(n: int | None) -> float | None:
    return None if n is None else n / MIB


def _per_member(values: dict[str, int | None]) -> str:
    return " / ".join("-" if v is None else f"{v / MIB:,.0f}" for v in values.values())


def disk_extra(control: ClusterControl) -> dict[str, float | str | None]:
    sizes = {m: dir_bytes(control.data_dir(m)) for m in control.members}
    known = [v for v in sizes.values() if v is not None]
    return {
        "data dir MiB (largest)": _mib(max(known)) if known else None,
        "data dir MiB per member": _per_member(sizes),
    }


async def size_sweep(sizes: Sequence[int], s: Settings, data_dir: Path, bar: Any) -> list[Point]:
    points: list[Point] = []
    value = random_value(SIZE_VALUE)
    async with cluster(data_dir, "size") as (control, system):
        loaded = 0
        for n in sizes:
            bar.set_description(f"size: loading to {n:,} keys")
            rate = await load(system, KeyRange("s", loaded, n), value, s, bar)
            loaded = n
            p = Point(f"{n:,} keys", n)
            p.stats = await measure_kv(system, KeyRange("s", 0, n), value, s, bar, f"{n:,} keys")
            p.extra["load keys/s"] = rate
            p.extra.update(await _restart_extra(control))
            p.extra.update(disk_extra(control))
            points.append(p)
            bar.update(1)
    return points


async def _restart_extra(control: ClusterControl) -> dict[str, float | str | None]:
    await control.wait_ready(timeout=900.0)  # every member caught up before the restart
    rss = members_rss(control)
    known = [v for v in rss.values() if v is not None]
    restart = await restart_follower(control)
    return {
        "restart to ready s": restart.seconds,
        "RSS MiB (largest)": _mib(max(known)) if known else None,
        "RSS MiB per member": _per_member(rss),
        "RSS MiB restarted": _mib(restart.rss_after),
    }


async def value_sweep(sizes: Sequence[int], s: Settings, data_dir: Path, bar: Any) -> list[Point]:
    points: list[Point] = []
    async with cluster(data_dir, "value") as (control, system):
        for size in sizes:
            label = format_bytes(size)
            n = value_keys(size, VALUE_SWEEP_KEYS, VALUE_SWEEP_BUDGET)
            keys = KeyRange(f"v{size}/", 0, n)
            value = random_value(size)
            bar.set_description(f"value: loading {n:,} keys of {label}")
            await load(system, keys, value, s, bar)
            p = Point(label, size)
            p.stats = await measure_kv(system, keys, value, s, bar, label)
            p.extra["keys"] = f"{n:,}"
            put16 = p.stats.get("put@16")
            p.extra["put 16 clients MiB/s"] = None if put16 is None else put16.ops_s * size / MIB
            p.extra.update(disk_extra(control))
            # Drop this point's overwritten versions before the next point writes larger ones.
            await system.compact(await current_revision(system))
            points.append(p)
            bar.update(1)
    return points


async def history_sweep(
    depths: Sequence[int], s: Settings, data_dir: Path, bar: Any
) -> list[Point]:
    points: list[Point] = []
    value = random_value(SIZE_VALUE)
    keys = KeyRange("h", 0, HISTORY_KEYS)
    async with cluster(data_dir, "history", history=True) as (control, system):
        first = await current_revision(system) + 1
        await load(system, keys, value, s, bar)
        # From here on every key exists: a read at any later revision finds a version.
        every_key = await current_revision(system)
        written = 1  # versions of every key written by the loader so far
        for h in sorted(depths):
            bar.set_description(f"history: writing to {h + 1} versions per key")
            if h + 1 > written:
                # One round per request: a request never holds one key twice.
                rounds = Repeated(keys, h + 1 - written)
                await load(system, rounds, value, s, bar, batch=len(keys))
                written = h + 1
            now = await current_revision(system)
            p = Point(f"H={h} ({h + 1} version{'s' if h else ''})", h + 1)
            # The measured puts of earlier points added versions too: count them all.
            p.extra["versions per key (mean)"] = (now - first + 1) / len(keys)
            revs = (every_key, now)
            p.stats = await measure_history_reads(system, keys, revs, s, bar, p.label)
            p.stats.update(await measure_kv(system, keys, value, s, bar, p.label))
            p.extra.update(disk_extra(control))
            points.append(p)
            bar.update(1)
    return points
