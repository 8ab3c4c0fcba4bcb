"""Measuring one point of a scaling sweep against a running statekeeper cluster: the bulk
loader, the closed-loop put/get runs (benchmarks/harness.py), the history reads, and the
on-disk size of a member's data dir.

Keys are a lazy KeyRange ("<prefix><index, 8 digits>"), not a list: 10 million Python
strings would take about 650 MB of the benchmark's own memory on the machine it measures.
Values are random bytes (incompressible, so RocksDB's compression cannot flatter a point).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from statekeeper.benchmarks.compare.measure import LOAD_BATCH
from statekeeper.benchmarks.compare.progress import BarStream, LoadProgress
from statekeeper.benchmarks.harness import LoadResult, Op, run_load
from statekeeper.benchmarks.load import key_op
from statekeeper.benchmarks.reclaim_report import du
from statekeeper.benchmarks.scaling.points import Stat
from statekeeper.benchmarks.systems import StatekeeperSystem


class _LazyKeys(Sequence[str]):
    """A read-only sequence of keys made on demand by `_key(i)` (0 <= i < len)."""

    def _key(self, i: int) -> str:
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        n = len(self)
        if isinstance(i, slice):
            return [self._key(j) for j in range(*i.indices(n))]
        if not -n <= i < n:
            raise IndexError(i)
        return self._key(i % n)


class KeyRange(_LazyKeys):
    """Keys prefix + f"{i:08d}" for lo <= i < hi."""

    def __init__(self, prefix: str, lo: int, hi: int) -> None:
        if not 0 <= lo <= hi:
            raise ValueError("need 0 <= lo <= hi")
        self.prefix, self.lo, self.hi = prefix, lo, hi

    def __len__(self) -> int:
        return self.hi - self.lo

    def _key(self, i: int) -> str:
        return f"{self.prefix}{self.lo + i:08d}"


class Repeated(_LazyKeys):
    """`keys` `times` times over: several overwrite rounds as one bulk load, so the rounds'
    batches run concurrently instead of one round's single batch at a time."""

    def __init__(self, keys: Sequence[str], times: int) -> None:
        self.keys, self.times = keys, times

    def __len__(self) -> int:
        return len(self.keys) * self.times

    def _key(self, i: int) -> str:
        return self.keys[i % len(self.keys)]


@dataclass(frozen=True)
class Settings:
    window: float  # measured seconds per run
    warmup: float  # unmeasured seconds before each run
    clients: tuple[int, ...] = (1, 16)
    load_batch: int = LOAD_BATCH  # keys per bulk request (capped by the server's limit)
    load_concurrency: int = StatekeeperSystem.bulk_concurrency


def stat(result: LoadResult) -> Stat:
    return Stat(result.p50_ms, result.p99_ms, result.ops_per_s, result.error_count)


async def load(
    system: StatekeeperSystem,
    keys: Sequence[str],
    value: bytes,
    s: Settings,
    bar: Any,
    batch: int | None = None,
) -> float:
    """Write every key of `keys` with concurrent batch requests of up to `batch` keys
    (default s.load_batch); return (and show) the keys/s."""
    batch = system.bulk_batch(batch or s.load_batch, value)
    progress = LoadProgress(bar, len(keys), "loading")
    t0 = time.perf_counter()
    await system.bulk_populate(
        keys, value, batch=batch, concurrency=s.load_concurrency, progress=progress
    )
    took = max(time.perf_counter() - t0, 1e-9)
    rate = len(keys) / took
    bar.write(
        f"loaded {len(keys):,} keys of {len(value)} B in {took:.1f} s: {rate:,.0f} keys/s "
        f"({s.load_concurrency} loaders, {batch} keys per request)"
    )
    return rate


async def _run(op: Op, clients: int, s: Settings, bar: Any, label: str) -> Stat:
    bar.set_description(label)
    result = await run_load(
        op,
        clients=clients,
        duration=s.window,
        warmup=s.warmup,
        progress=BarStream(bar),
        label=label,
    )
    return stat(result)


async def measure_kv(
    system: StatekeeperSystem,
    keys: Sequence[str],
    value: bytes,
    s: Settings,
    bar: Any,
    label: str,
) -> dict[str, Stat]:
    """Linearizable gets, then puts (same value size), at each client count, over `keys`.

    Gets first: the puts add versions, and the history sweep reads right after this."""
    out: dict[str, Stat] = {}
    for kind in ("get", "put"):
        op = key_op(system, kind, keys, value, "linearizable")
        for c in s.clients:
            out[f"{kind}@{c}"] = await _run(op, c, s, bar, f"{label}: {kind} @{c}")
    return out


async def current_revision(system: StatekeeperSystem) -> int:
    """The store's revision now (a linearizable one-key range answers it)."""
    page = await system.range_page(None, 1)
    return int(page.revision)


async def measure_history_reads(
    system: StatekeeperSystem,
    keys: Sequence[str],
    revisions: tuple[int, int],
    s: Settings,
    bar: Any,
    label: str,
    rng: random.Random | None = None,
) -> dict[str, Stat]:
    """At 1 client: a random key at a random revision in [lo, hi] (what an agent's "state
    as of step N" costs), and a 100-key range from a random key (latest revision)."""
    lo, hi = revisions
    n = len(keys)
    rng = rng or random.Random()
    rand, randint = rng.random, rng.randint

    async def get_rev() -> object:
        return await system.get_at(keys[int(rand() * n)], randint(lo, hi))

    async def range100() -> object:
        return await system.range_page(keys[int(rand() * n)], 100)

    return {
        "get_rev@1": await _run(get_rev, 1, s, bar, f"{label}: get at past revision @1"),
        "range100@1": await _run(range100, 1, s, bar, f"{label}: range 100 @1"),
    }


def dir_bytes(path: Path | None) -> int | None:
    """Bytes the files under `path` take on disk (like du), None if there is no such dir."""
    if path is None or not path.exists():
        return None
    return du(path)


def random_value(size: int) -> bytes:
    return os.urandom(size)
