"""Reading event streams whole: the workload's readers, and the final reads of a chaos
run (``chaos.runner``) that ``chaos.checker.streams`` checks the history against.

``final_stream_reads``: once the faults healed and the workload stopped, a linearizable
read of every stream through the cluster, forward from seq 1, page by page (every page at
the first page's revision), recorded in the history like the kv final reads.
``replica_stream_reads``: after the replicas converged, each node's own copy
(``consistency="serializable"``, ``min_revision`` = the final reads' revision, so a
node that is behind waits for it): the checker's ``replica`` rule compares them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statekeeper.chaos.history import HistoryWriter
from statekeeper.client import RetryPolicy, StatekeeperError

__all__ = [
    "StreamReads",
    "final_stream_reads",
    "read_whole",
    "read_stream_copies",
    "replica_stream_reads",
    "run_final_streams",
    "seen",
]

Ev = tuple[int, Any, Any]  # (seq, id, data), as chaos.checker.streams takes them


@dataclass
class StreamReads:
    """What the end of a run read: stream -> events (linearizable, through the
    cluster), the highest revision served, the streams that could not be read, and
    node -> stream -> events (None: the node could not be read)."""

    final: dict[str, list[Ev]] = field(default_factory=dict)
    revision: int = 0
    missing: list[str] = field(default_factory=list)
    replicas: dict[str, dict[str, list[Ev]] | None] = field(default_factory=dict)


def seen(events: Sequence[Any]) -> list[list[Any]]:
    """[seq, id, data] of each StreamEvent, as the history records them."""
    return [[e.seq, e.id, e.text] for e in events]


async def read_whole(
    c: Any, stream: str, page_size: int, **options: Any
) -> tuple[Any, list[Any], int]:
    """(first page, every event from seq 1, pages) of ``stream`` on the AsyncClient
    ``c``; ``options`` (consistency, min_revision) go with every page."""
    page = first = await c.read_stream(stream, start=1, limit=page_size, **options)
    events, pages = list(page.events), 1
    while page.more:
        page = await c.read_stream(
            stream, continuation=page.continuation, limit=page_size, **options
        )
        events += page.events
        pages += 1
    return first, events, pages


async def _final_async(
    endpoints: Sequence[str],
    streams: Sequence[str],
    history: HistoryWriter | None,
    process: int,
    ns: str,
    page_size: int,
    deadline: float,
) -> StreamReads:
    from statekeeper.client import AsyncClient

    out = StreamReads()
    policy = RetryPolicy(max_attempts=1000, deadline=max(1.0, deadline - time.monotonic()))
    async with AsyncClient(list(endpoints), ns=ns, timeout=3.0, retry=policy) as c:
        for stream in streams:
            op_id = (
                history.invoke(process, "read_stream", stream=stream, start=1, direction="forward")
                if history
                else None
            )
            try:
                first, events, pages = await read_whole(c, stream, page_size)
            except StatekeeperError as e:
                out.missing.append(stream)
                if history:
                    history.info(op_id, error=e.code)
                continue
            rows = seen(events)
            out.final[stream] = [(s, i, d) for s, i, d in rows]
            out.revision = max(out.revision, first.revision)
            if history:
                history.ok(
                    op_id,
                    revision=first.revision,
                    last_seq=first.last_seq,
                    events=rows,
                    pages=pages,
                )
    return out


def final_stream_reads(
    endpoints: Sequence[str],
    streams: Sequence[str],
    *,
    history: HistoryWriter | None = None,
    process: int = 10_000,
    ns: str = "chaos",
    page_size: int = 200,
    timeout: float = 60.0,
) -> StreamReads:
    """Linearizable read of every stream whole, retried until ``timeout``; recorded in
    ``history`` (process ``process``, like the kv final reads)."""
    return asyncio.run(
        _final_async(
            endpoints, streams, history, process, ns, page_size, time.monotonic() + timeout
        )
    )


async def _node_copy(
    url: str, streams: Sequence[str], ns: str, page_size: int, revision: int, timeout: float
) -> dict[str, list[Ev]] | None:
    from statekeeper.client import AsyncClient

    policy = RetryPolicy(max_attempts=1000, deadline=timeout)
    copies: dict[str, list[Ev]] = {}
    try:
        async with AsyncClient([url], ns=ns, timeout=3.0, retry=policy, prefer_leader=False) as c:
            for stream in streams:
                _first, events, _pages = await read_whole(
                    c, stream, page_size, consistency="serializable", min_revision=revision
                )
                copies[stream] = [(s, i, d) for s, i, d in seen(events)]
    except (StatekeeperError, OSError):
        return None
    return copies


def replica_stream_reads(
    urls: Mapping[str, str],
    streams: Sequence[str],
    revision: int,
    *,
    ns: str = "chaos",
    page_size: int = 200,
    timeout: float = 20.0,
) -> dict[str, dict[str, list[Ev]] | None]:
    """node -> its own copy of every stream (serializable, at least at ``revision``), or
    None when the node could not be read within ``timeout``."""

    async def all_nodes() -> dict[str, dict[str, list[Ev]] | None]:
        got = await asyncio.gather(
            *(_node_copy(u, streams, ns, page_size, revision, timeout) for u in urls.values())
        )
        return dict(zip(urls, got, strict=True))

    return asyncio.run(all_nodes())


def run_final_streams(
    cfg: Any, wcfg: Any, history: HistoryWriter, process: int
) -> StreamReads | None:
    """The final linearizable read of every stream (None: the run had no streams)."""
    names = wcfg.stream_names()
    if not names:
        return None
    return final_stream_reads(cfg.http_urls(), names, history=history, process=process, ns=wcfg.ns)


def read_stream_copies(
    cfg: Any, ns: str, streams: StreamReads, event: Callable[[str], None]
) -> None:
    """Every node's own copy of the streams, once the replicas converged."""
    names = list(streams.final)
    urls = {n.id: cfg.url(n.id) for n in cfg.nodes}
    streams.replicas = replica_stream_reads(urls, names, streams.revision, ns=ns)
    read = sum(copy is not None for copy in streams.replicas.values())
    event(
        f"final stream reads: {len(names)} streams, "
        f"{sum(len(e) for e in streams.final.values())} events"
        + (f" (unreadable: {', '.join(streams.missing)})" if streams.missing else "")
        + f"; copies read from {read}/{len(urls)} nodes"
    )
