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

from .cache import Cache
from .cache_core import CacheLag
from .effect_plan import EffectContext, EffectRecord
from .effects import AsyncEffects, Effects
from .errors import (
    ArchiveCorrupt,
    Archived,
    ArchiveUrlRefused,
    CacheStale,
    Compacted,
    Conflict,
    CrdtTypeMismatch,
    EffectClaimLost,
    EffectInProgress,
    EffectResultLost,
    ExpectationFailed,
    FenceMismatch,
    InsufficientStorage,
    InvalidRequest,
    LeaseNotFound,
    LockHeld,
    LockNotHeld,
    LockTimeout,
    NotFound,
    PermissionDenied,
    StatekeeperError,
    StreamNotFound,
    Timeout,
    TlsError,
    Unauthenticated,
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
from .lock import AsyncLock, Lock
from .lock_results import LockAcquired, LockInfo, LockList, LockReleased, LockWaiter
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
    from .aio_cache import AsyncCache

__all__ = [
    "AppendResult",
    "AppendedEvent",
    "ArchiveCorrupt",
    "ArchiveUrlRefused",
    "Archived",
    "AsyncBatch",
    "AsyncCache",
    "AsyncClient",
    "AsyncEffects",
    "AsyncLease",
    "AsyncLock",
    "Batch",
    "Cache",
    "CacheLag",
    "CacheStale",
    "Client",
    "CompactResult",
    "Compacted",
    "Compare",
    "Conflict",
    "DeleteResult",
    "EffectClaimLost",
    "EffectContext",
    "EffectInProgress",
    "EffectRecord",
    "EffectResultLost",
    "Effects",
    "Event",
    "ExpectationFailed",
    "FenceMismatch",
    "InsufficientStorage",
    "InvalidRequest",
    "KeepaliveResult",
    "KeyValue",
    "Lease",
    "LeaseGrant",
    "LeaseInfo",
    "LeaseList",
    "LeaseNotFound",
    "LeaseState",
    "Lock",
    "LockAcquired",
    "LockHeld",
    "CrdtTypeMismatch",
    "LockInfo",
    "LockList",
    "LockNotHeld",
    "LockReleased",
    "LockTimeout",
    "LockWaiter",
    "NotFound",
    "Ops",
    "PermissionDenied",
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
    "TlsError",
    "Unauthenticated",
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
    if name == "AsyncCache":
        from .aio_cache import AsyncCache

        return AsyncCache
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
