"""statekeeper client: a Raft-replicated key-value store for the state of AI agents.

Blocking::

    from statekeeper import Client, NotFound
    with Client(["http://127.0.0.1:7000", "http://127.0.0.1:7001"], ns="agent-42") as c:
        c.put("memory/plan", "step 1")
        print(c.get("memory/plan").text)

asyncio (same methods, awaited)::

    from statekeeper import AsyncClient
    async with AsyncClient("http://127.0.0.1:7000") as c:
        await c.put("memory/plan", b"step 1")

Every write carries an idempotency key reused across retries, so a write retried after a
timeout or a lost connection takes effect once. See docs/protocol.md for the wire format.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Why lazy: the node imports the client's pure pieces (client/crdt/model.py, the CRDT merge
# rules; client/auth/tokens.py, the token format), and importing any submodule runs this
# file first. Eager imports here loaded the sync client (urllib3), caches, effects, leases,
# locks and the agent layer into every node: 0.2 of the 0.39 s of
# `python -X importtime -c "import node.store"`. .ci/server_imports.py (run by .ci/run and
# tests/unit/test_server_imports.py) keeps the node free of the client's transports.
#
# `ops` stays eager: it is also the name of the submodule client/ops.py, and the first
# `import client.ops` anywhere would bind the package attribute to the module, never
# reaching __getattr__. Importing it here binds the function, as before (it is pure:
# errors, results, wire).
from .ops import Compare, Ops, compare, ops

if TYPE_CHECKING:
    from .aio import AsyncBatch, AsyncClient
    from .cache.aio import AsyncCache
    from .cache.core import CacheLag
    from .cache.sync import Cache
    from .effects.ledger import AsyncEffects, Effects
    from .effects.plan import EffectContext, EffectRecord
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
    from .leases.keeper import AsyncLease, Lease
    from .leases.results import (
        KeepaliveResult,
        LeaseGrant,
        LeaseInfo,
        LeaseList,
        LeaseState,
        RevokeResult,
    )
    from .locks.lock import AsyncLock, Lock
    from .locks.results import LockAcquired, LockInfo, LockList, LockReleased, LockWaiter
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
    from .watch.core import WatchEvent, WatchProgress

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

# name -> the submodule that defines it; the TYPE_CHECKING block above says the same for
# type checkers and IDEs (tests/unit/test_client_lazy.py: every export resolves and is bound
# for type checkers).
_SUBMODULE_OF: dict[str, str] = {
    "Cache": "cache.sync",
    "CacheLag": "cache.core",
    "EffectContext": "effects.plan",
    "EffectRecord": "effects.plan",
    "AsyncEffects": "effects.ledger",
    "Effects": "effects.ledger",
    "ArchiveCorrupt": "errors",
    "Archived": "errors",
    "ArchiveUrlRefused": "errors",
    "CacheStale": "errors",
    "Compacted": "errors",
    "Conflict": "errors",
    "CrdtTypeMismatch": "errors",
    "EffectClaimLost": "errors",
    "EffectInProgress": "errors",
    "EffectResultLost": "errors",
    "ExpectationFailed": "errors",
    "FenceMismatch": "errors",
    "InsufficientStorage": "errors",
    "InvalidRequest": "errors",
    "LeaseNotFound": "errors",
    "LockHeld": "errors",
    "LockNotHeld": "errors",
    "LockTimeout": "errors",
    "NotFound": "errors",
    "PermissionDenied": "errors",
    "StatekeeperError": "errors",
    "StreamNotFound": "errors",
    "Timeout": "errors",
    "TlsError": "errors",
    "Unauthenticated": "errors",
    "Unavailable": "errors",
    "WatchOverflow": "errors",
    "AsyncLease": "leases.keeper",
    "Lease": "leases.keeper",
    "KeepaliveResult": "leases.results",
    "LeaseGrant": "leases.results",
    "LeaseInfo": "leases.results",
    "LeaseList": "leases.results",
    "LeaseState": "leases.results",
    "RevokeResult": "leases.results",
    "AsyncLock": "locks.lock",
    "Lock": "locks.lock",
    "LockAcquired": "locks.results",
    "LockInfo": "locks.results",
    "LockList": "locks.results",
    "LockReleased": "locks.results",
    "LockWaiter": "locks.results",
    "AppendedEvent": "results",
    "AppendResult": "results",
    "CompactResult": "results",
    "DeleteResult": "results",
    "Event": "results",
    "KeyValue": "results",
    "RangeResult": "results",
    "StreamEvent": "results",
    "StreamInfo": "results",
    "StreamList": "results",
    "StreamPage": "results",
    "TxnResult": "results",
    "WriteResult": "results",
    "RetryPolicy": "retry",
    "AsyncBatch": "aio",
    "AsyncClient": "aio",
    "AsyncCache": "cache.aio",
    "Batch": "sync",
    "Client": "sync",
    "WatchEvent": "watch.core",
    "WatchProgress": "watch.core",
}


def __getattr__(name: str) -> Any:
    module = _SUBMODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
