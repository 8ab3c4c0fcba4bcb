"""statekeeper client: a Raft-replicated key-value store for the state of AI agents.

Blocking::

    from client import Client, NotFound
    with Client(["http://127.0.0.1:7000", "http://127.0.0.1:7001"], ns="agent-42") as c:
        c.put("memory/plan", "step 1")
        print(c.get("memory/plan").text)

asyncio (same methods, awaited)::

    from client import AsyncClient
    async with AsyncClient("http://127.0.0.1:7000") as c:
        await c.put("memory/plan", b"step 1")

Every write carries an idempotency key reused across retries, so a write retried after a
timeout or a lost connection takes effect once. See docs/protocol.md for the wire format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    Compacted,
    Conflict,
    ExpectationFailed,
    InvalidRequest,
    LeaseNotFound,
    NotFound,
    StatekeeperError,
    StreamNotFound,
    Timeout,
    Unavailable,
    WatchOverflow,
)
from .lease_keeper import AsyncLease, Lease
from .lease_results import (
    KeepaliveResult,
    LeaseGrant,
    LeaseInfo,
    LeaseList,
    LeaseState,
    RevokeResult,
)
from .ops import Compare, Ops, compare, ops
from .results import (
    AppendedEvent,
    AppendResult,
    CompactResult,
    DeleteResult,
    Event,
    KeyValue,
    RangeResult,
    StreamEvent,
    StreamInfo,
    StreamList,
    StreamPage,
    TxnResult,
    WriteResult,
)
from .retry import RetryPolicy
from .sync import Batch, Client
from .watch import WatchEvent, WatchProgress

if TYPE_CHECKING:
    from .aio import AsyncBatch, AsyncClient

__all__ = [
    "AppendResult",
    "AppendedEvent",
    "AsyncBatch",
    "AsyncClient",
    "AsyncLease",
    "Batch",
    "Client",
    "CompactResult",
    "Compacted",
    "Compare",
    "Conflict",
    "DeleteResult",
    "Event",
    "ExpectationFailed",
    "InvalidRequest",
    "KeepaliveResult",
    "KeyValue",
    "Lease",
    "LeaseGrant",
    "LeaseInfo",
    "LeaseList",
    "LeaseNotFound",
    "LeaseState",
    "NotFound",
    "Ops",
    "RangeResult",
    "RetryPolicy",
    "RevokeResult",
    "StatekeeperError",
    "StreamEvent",
    "StreamInfo",
    "StreamList",
    "StreamNotFound",
    "StreamPage",
    "Timeout",
    "TxnResult",
    "Unavailable",
    "WatchEvent",
    "WatchOverflow",
    "WatchProgress",
    "WriteResult",
    "compare",
    "ops",
]


def __getattr__(name: str) -> Any:
    # client.aio (asyncio, httptools) is imported only by code that uses the async client.
    if name in ("AsyncClient", "AsyncBatch"):
        from . import aio

        return getattr(aio, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
