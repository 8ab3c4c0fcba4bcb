"""Conflict-free replicated data types: the pure model (client/crdt/model.py) shared by the
node's `merge` op and the client's local replicas (client/crdt/replica.py, made by
``client.crdt.counter(key)`` and friends; docs/crdt.md)."""

from client.crdt.model import TYPES, CrdtError
from client.crdt.replica import (
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
