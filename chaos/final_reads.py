"""The final reads of a chaos run: a linearizable read of every key once the cluster is
healed and the workload stopped, recorded in the history."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from statekeeper.chaos.history import HistoryWriter
from statekeeper.client import RetryPolicy, StatekeeperError

__all__ = ["final_reads"]


async def _final_reads_async(
    endpoints: Sequence[str],
    keys: Sequence[str],
    history: HistoryWriter | None,
    process: int,
    ns: str,
    deadline: float,
) -> tuple[dict[str, Any], dict[str, int], list[str]]:
    from statekeeper.client import AsyncClient

    values: dict[str, Any] = {}
    revisions: dict[str, int] = {}
    missing: list[str] = []
    policy = RetryPolicy(max_attempts=1000, deadline=max(1.0, deadline - time.monotonic()))
    async with AsyncClient(list(endpoints), ns=ns, timeout=3.0, retry=policy) as c:
        for key in keys:
            op_id = history.invoke(process, "get", key) if history else None
            try:
                kv = await c.get(key, default=None)
            except StatekeeperError as e:
                missing.append(key)
                if history:
                    history.info(op_id, error=e.code)
                continue
            if kv is None:
                values[key] = None
                if history:
                    history.ok(op_id, value=None)
            else:
                values[key] = kv.text
                revisions[key] = kv.mod_revision
                if history:
                    history.ok(
                        op_id, value=kv.text, revision=kv.revision, mod_revision=kv.mod_revision
                    )
    return values, revisions, missing


def final_reads(
    endpoints: Sequence[str],
    keys: Sequence[str],
    *,
    history: HistoryWriter | None = None,
    process: int = 10_000,
    ns: str = "chaos",
    timeout: float = 60.0,
) -> tuple[dict[str, Any], dict[str, int], list[str]]:
    """Linearizable read of every key, retried until ``timeout``; recorded in ``history``.

    Returns (key -> value or None, key -> mod_revision, keys that could not be read).
    """
    return asyncio.run(
        _final_reads_async(endpoints, keys, history, process, ns, time.monotonic() + timeout)
    )
