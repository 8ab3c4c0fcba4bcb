"""The truth the chaos watchers are checked against (``chaos.checker.watch``): the change
history of the watched prefix, read back from the cluster at the end of a run.

Read once the faults healed, the workload stopped, every node was ready and the replicas
converged (``chaos.runner``), through a fresh client on the nodes' own addresses (no
proxy), patient enough to wait for a leader:

1. a linearizable range of the prefix: the final state, and its revision F (the final
   revision: nothing writes the prefix any more);
2. a fresh watch of the prefix from the watchers' start revision, collected up to F (a
   progress frame at or above F ends it): one revision -> its changes. If the start was
   compacted away (a long soak), from the compact revision + 1 instead;
3. the prefix's range at the start revision - 1 and at up to ``samples`` revisions of the
   history (seeded choice, the last change's always among them): the checker replays the
   changes onto the first and must get the others (``truth`` rule), which ties the change
   log the watch reads to the MVCC history ranges read.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from statekeeper.chaos.checker.watch import Change, WatchTruth
from statekeeper.client import AsyncClient, Compacted, RetryPolicy, StatekeeperError
from statekeeper.client.watch.core import WatchEvent

__all__ = ["final_watch_reads"]


async def _range(c: AsyncClient, prefix: str, revision: int | None = None) -> tuple[int, dict]:
    """(revision, key -> value text) of the whole prefix, at ``revision`` (None: now)."""
    page = await c.range(prefix, revision=revision)
    kvs, rev = list(page.kvs), page.revision
    while page.more:
        page = await c.range(prefix, continuation=page.continuation, revision=rev)
        kvs += page.kvs
    return rev, {kv.key: _text(kv.value) for kv in kvs}


def _text(value: bytes) -> Any:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return repr(value)


async def _changes(
    c: AsyncClient, prefix: str, start: int, final: int, timeout: float
) -> dict[int, list[Change]]:
    """revision -> changes of the prefix in [start, final], by a fresh watch."""
    out: dict[int, list[Change]] = defaultdict(list)
    if start > final:
        return {}
    watch = c.watch(prefix, start_revision=start, progress=0.2, progress_events=True)
    try:
        async with asyncio.timeout(timeout):
            async for item in watch:
                if item.revision > final:
                    break
                if isinstance(item, WatchEvent):
                    value = _text(item.kv.value) if item.type == "put" else None
                    out[item.revision].append((item.key, item.type, value))
                elif item.revision >= final:
                    break
    finally:
        await watch.aclose()
    return dict(out)


async def _truth(
    endpoints: Sequence[str], prefix: str, start: int, ns: str, samples: int, seed: int,
    timeout: float,
) -> WatchTruth:  # fmt: skip
    policy = RetryPolicy(max_attempts=1000, deadline=timeout)
    truth = WatchTruth(prefix, start, 0)
    async with AsyncClient(list(endpoints), ns=ns, timeout=3.0, retry=policy) as c:
        try:
            truth.final_revision, truth.final = await _range(c, prefix)
            try:
                changes = await _changes(c, prefix, start, truth.final_revision, timeout)
            except Compacted as e:
                truth.start_revision = e.compact_revision + 1
                changes = await _changes(
                    c, prefix, truth.start_revision, truth.final_revision, timeout
                )
            before = truth.start_revision - 1
            truth.initial = (await _range(c, prefix, before))[1] if before > 0 else {}
            revs = sorted(changes)
            picked = set(random.Random(seed).sample(revs, min(samples, len(revs))))
            for rev in sorted(picked | set(revs[-1:])):
                truth.samples[rev] = (await _range(c, prefix, rev))[1]
            truth.changes = changes
        except StatekeeperError as e:
            truth.error = f"{e.code}: {e}"
        except TimeoutError:
            truth.error = f"the change history did not arrive within {timeout:g} s"
    return truth


def final_watch_reads(
    endpoints: Sequence[str],
    prefix: str,
    start_revision: int,
    *,
    ns: str = "chaos",
    samples: int = 20,
    seed: int = 7,
    timeout: float = 60.0,
) -> WatchTruth:
    """The truth (module docstring); ``changes`` is None (and ``error`` set) when it could
    not be read."""
    return asyncio.run(_truth(endpoints, prefix, start_revision, ns, samples, seed, timeout))
