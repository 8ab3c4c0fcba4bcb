"""Conflict-free replicated data types: the pure model (client/crdt/model.py) shared by the
node's `merge` op and the client's local replicas (client/crdt/replica.py, made by
``client.crdt.counter(key)`` and friends; docs/crdt.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statekeeper.client.crdt.model import TYPES, CrdtError

if TYPE_CHECKING:
    from statekeeper.client.crdt.replica import (
        CounterReplica,
        GCounterReplica,
        MapReplica,
        MVRegisterReplica,
        RegisterReplica,
        Replica,
        ReplicaFileError,
        SetReplica,
        SyncResult,
    )

__all__ = [
    "TYPES",
    "CounterReplica",
    "CrdtError",
    "GCounterReplica",
    "MVRegisterReplica",
    "MapReplica",
    "RegisterReplica",
    "Replica",
    "ReplicaFileError",
    "SetReplica",
    "SyncResult",
]


def __getattr__(name: str) -> Any:
    # Lazy: the node imports client.crdt.model (the merge rules) and must not load the
    # replicas, which bring the agent layer's plan runner with them (client/__init__.py).
    if name in __all__:
        from statekeeper.client.crdt import replica

        value = getattr(replica, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
