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
from .ops import Compare as Compare
from .ops import Ops as Ops
from .ops import compare as compare
from .ops import ops as ops

if TYPE_CHECKING:
    from .aio import AsyncBatch as AsyncBatch
    from .aio import AsyncClient as AsyncClient
    from .cache.aio import AsyncCache as AsyncCache
    from .cache.core import CacheLag as CacheLag
    from .cache.sync import Cache as Cache
    from .effects.ledger import AsyncEffects as AsyncEffects
    from .effects.ledger import Effects as Effects
    from .effects.plan import EffectContext as EffectContext
    from .effects.plan import EffectRecord as EffectRecord
    from .errors import ArchiveCorrupt as ArchiveCorrupt
    from .errors import Archived as Archived
    from .errors import ArchiveUrlRefused as ArchiveUrlRefused
    from .errors import CacheStale as CacheStale
    from .errors import Compacted as Compacted
    from .errors import Conflict as Conflict
    from .errors import CrdtTypeMismatch as CrdtTypeMismatch
    from .errors import EffectClaimLost as EffectClaimLost
    from .errors import EffectInProgress as EffectInProgress
    from .errors import EffectResultLost as EffectResultLost
    from .errors import ExpectationFailed as ExpectationFailed
    from .errors import FenceMismatch as FenceMismatch
    from .errors import InsufficientStorage as InsufficientStorage
    from .errors import InvalidRequest as InvalidRequest
    from .errors import LeaseNotFound as LeaseNotFound
    from .errors import LockHeld as LockHeld
    from .errors import LockNotHeld as LockNotHeld
    from .errors import LockTimeout as LockTimeout
    from .errors import NotFound as NotFound
    from .errors import PermissionDenied as PermissionDenied
    from .errors import StatekeeperError as StatekeeperError
    from .errors import StreamNotFound as StreamNotFound
    from .errors import Timeout as Timeout
    from .errors import TlsError as TlsError
    from .errors import Unauthenticated as Unauthenticated
    from .errors import Unavailable as Unavailable
    from .errors import WatchOverflow as WatchOverflow
    from .idempotency.commands import IdempotencyStatus as IdempotencyStatus
    from .leases.keeper import AsyncLease as AsyncLease
    from .leases.keeper import Lease as Lease
    from .leases.results import KeepaliveResult as KeepaliveResult
    from .leases.results import LeaseGrant as LeaseGrant
    from .leases.results import LeaseInfo as LeaseInfo
    from .leases.results import LeaseList as LeaseList
    from .leases.results import LeaseState as LeaseState
    from .leases.results import RevokeResult as RevokeResult
    from .locks.lock import AsyncLock as AsyncLock
    from .locks.lock import Lock as Lock
    from .locks.results import LockAcquired as LockAcquired
    from .locks.results import LockInfo as LockInfo
    from .locks.results import LockList as LockList
    from .locks.results import LockReleased as LockReleased
    from .locks.results import LockWaiter as LockWaiter
    from .results import AppendedEvent as AppendedEvent
    from .results import AppendResult as AppendResult
    from .results import CompactResult as CompactResult
    from .results import DeleteResult as DeleteResult
    from .results import Event as Event
    from .results import KeyValue as KeyValue
    from .results import RangeResult as RangeResult
    from .results import StreamEvent as StreamEvent
    from .results import StreamInfo as StreamInfo
    from .results import StreamList as StreamList
    from .results import StreamPage as StreamPage
    from .results import TxnResult as TxnResult
    from .results import WriteResult as WriteResult
    from .retry import RetryPolicy as RetryPolicy
    from .sync import Batch as Batch
    from .sync import Client as Client
    from .watch.core import WatchEvent as WatchEvent
    from .watch.core import WatchProgress as WatchProgress

# Each lazy export, by the submodule that defines it: the one table a new export is added to
# (with its import in the TYPE_CHECKING block above, for type checkers and IDEs;
# tests/unit/test_client_lazy.py checks the two agree and that every export resolves).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "aio": ("AsyncBatch", "AsyncClient"),
    "cache.aio": ("AsyncCache",),
    "cache.core": ("CacheLag",),
    "cache.sync": ("Cache",),
    "effects.ledger": ("AsyncEffects", "Effects"),
    "effects.plan": ("EffectContext", "EffectRecord"),
    "errors": (
        "ArchiveCorrupt",
        "ArchiveUrlRefused",
        "Archived",
        "CacheStale",
        "Compacted",
        "Conflict",
        "CrdtTypeMismatch",
        "EffectClaimLost",
        "EffectInProgress",
        "EffectResultLost",
        "ExpectationFailed",
        "FenceMismatch",
        "InsufficientStorage",
        "InvalidRequest",
        "LeaseNotFound",
        "LockHeld",
        "LockNotHeld",
        "LockTimeout",
        "NotFound",
        "PermissionDenied",
        "StatekeeperError",
        "StreamNotFound",
        "Timeout",
        "TlsError",
        "Unauthenticated",
        "Unavailable",
        "WatchOverflow",
    ),
    "idempotency.commands": ("IdempotencyStatus",),
    "leases.keeper": ("AsyncLease", "Lease"),
    "leases.results": (
        "KeepaliveResult",
        "LeaseGrant",
        "LeaseInfo",
        "LeaseList",
        "LeaseState",
        "RevokeResult",
    ),
    "locks.lock": ("AsyncLock", "Lock"),
    "locks.results": ("LockAcquired", "LockInfo", "LockList", "LockReleased", "LockWaiter"),
    "results": (
        "AppendResult",
        "AppendedEvent",
        "CompactResult",
        "DeleteResult",
        "Event",
        "KeyValue",
        "RangeResult",
        "StreamEvent",
        "StreamInfo",
        "StreamList",
        "StreamPage",
        "TxnResult",
        "WriteResult",
    ),
    "retry": ("RetryPolicy",),
    "sync": ("Batch", "Client"),
    "watch.core": ("WatchEvent", "WatchProgress"),
}
_SUBMODULE_OF: dict[str, str] = {name: mod for mod, names in _EXPORTS.items() for name in names}
__all__ = sorted(["Compare", "Ops", "compare", "ops", *_SUBMODULE_OF])


def __getattr__(name: str) -> Any:
    module = _SUBMODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
