"""Local replicas of a CRDT key (``client.crdt.counter(key)`` and friends; docs/crdt.md).

A replica holds the CRDT's full state in memory (and, with ``path=``, in a local file),
applies every update to it at once (it never waits for, or even talks to, the cluster),
and keeps the deltas of the updates not yet in the store (*pending*). ``sync()`` merges
the pending deltas into the store (``crdt_merge``), then reads the store's state
(``crdt_get(state=True)``) and folds it in, so the replica sees every other replica's
synced updates. The replica's own updates are never lost by a sync: a failed merge
(Unavailable, Timeout, anything) puts its deltas back into pending for the next sync.

One sans-IO core, two drivers: a sync is a *plan* (a generator yielding the client calls
it needs, the steps of client/plan.py), driven by its ``run`` over a blocking Client
and ``arun`` over an AsyncClient: ``sync()`` returns the result on a Client and a
coroutine on an AsyncClient (``await replica.sync()``). The updates are plain methods on
both. A replica is thread-safe (one lock, never held across a network call).

The five things:

1. Consistency: strong eventual consistency. Replicas that have received the same updates
   have equal states, whatever the order; after every replica synced twice with no update
   in between (the first sync ships, the second pulls what the others shipped), all and
   the store hold the same value. The merge itself is a linearizable raft write.
2. ok / failed / unknown: ``sync()`` returns a :class:`SyncResult` (ok: the pending deltas
   are in the store and the store's state is folded in). It raises what the client raised
   (Unavailable, Timeout: unknown whether the merge landed; CrdtTypeMismatch,
   InvalidRequest: refused); then the deltas stay pending and the next sync sends them
   again, which is harmless: merging is idempotent, so nothing is ever counted twice.
3. Limits: the state must fit the server's value limit (1 MiB by default, else every sync
   fails with 413 ``value_too_large`` and the deltas stay pending); a register's or map's
   values are msgpack data (400 ``invalid_argument``, raised as InvalidRequest by the
   update, nothing applied). A replica id must belong to ONE replica at a time: two live
   replicas with one id (or one restarted without its file but with its old id) can lose
   each other's updates. The default id (a fresh uuid4, kept in the file) is safe.
4. Key layout: the CRDT is the kv value of its key (client/crdt/commands.py); the local
   file (client/crdt/replica_file.py) is msgpack ``{format, version, ns, key, type,
   replica_id, state, pending}`` (states in the model's canonical encoding), replaced
   atomically: written to a temporary file, fsynced, renamed over the old one, directory
   fsynced.
5. Chaos: chaos/crdt_workload.py runs counter replicas through every fault
   (chaos/checker/crdt.py: acknowledged <= store <= acknowledged + unknown, exact after a
   final sync); tests/integration/test_crdt.py syncs replicas across a partition.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeAlias

from ..errors import CrdtTypeMismatch, InvalidRequest
from ..plan import AgentPlan, Call, arun, run
from . import model
from .replica_file import ReplicaFileError, read_replica, write_replica

__all__ = [
    "CounterReplica",
    "GCounterReplica",
    "MVRegisterReplica",
    "MapReplica",
    "RegisterReplica",
    "Replica",
    "ReplicaFileError",
    "SetReplica",
    "SyncResult",
]


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What a sync did.

    Attributes:
        sent: pending deltas were merged into the store.
        changed: the merge changed the store (False: it held them already).
        revision: the store revision the store's state was read at.
        value: the replica's value after folding the store's state in.
    """

    sent: bool
    changed: bool
    revision: int
    value: Any


SyncPlan: TypeAlias = AgentPlan[SyncResult]


def _invalid(e: model.CrdtError) -> InvalidRequest:
    return InvalidRequest(e.message, code=e.code)


def _positive(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidRequest(f"n must be an int >= 1, not {n!r}", code="invalid_argument")
    return n


class Replica:
    """The core every replica type shares (see the module docstring); a subclass sets
    ``TYPE`` and adds the type's updates, each a call of :meth:`_update`."""

    TYPE: ClassVar[str] = ""

    def __init__(
        self,
        client: Any,
        key: str,
        *,
        replica_id: str | None = None,
        path: str | os.PathLike[str] | None = None,
        ns: str = "default",
        autosave: bool = True,
    ) -> None:
        if not isinstance(key, str):
            raise TypeError(f"key must be str, not {type(key).__name__}")
        if replica_id is not None and (not isinstance(replica_id, str) or not replica_id):
            raise TypeError(f"replica_id must be a non-empty str, not {replica_id!r}")
        self.client, self.key, self.ns, self.type = client, key, ns, self.TYPE
        self.path = Path(path) if path is not None else None
        self.autosave = autosave
        self._lock = threading.RLock()
        self._state: Any = model.empty(self.TYPE)
        self._pending: Any = None  # deltas not in the store yet (None: none)
        self._inflight: Any = None  # deltas a running sync is merging
        self.replica_id = replica_id or uuid.uuid4().hex
        if self.path is not None:
            if self.path.exists():
                self._load(replica_id)
            else:
                self.save()
        crdt_get = getattr(client, "crdt_get", None)
        self._async = inspect.iscoroutinefunction(crdt_get)

    # -- local state
    @property
    def value(self) -> Any:
        """The CRDT's value as this replica knows it."""
        with self._lock:
            return model.value(self.TYPE, self._state)

    @property
    def state(self) -> Any:
        """The full local state (model data; treat it as immutable)."""
        return self._state

    @property
    def pending(self) -> bool:
        """True while some local update is not known to be in the store."""
        with self._lock:
            return self._pending is not None or self._inflight is not None

    def _update(self, make_delta: Callable[[Any], Any]) -> None:
        """Apply the delta ``make_delta(state)`` returns, locally and to pending (all or
        nothing: a bad update raises InvalidRequest and changes nothing)."""
        with self._lock:
            try:
                delta = make_delta(self._state)
                state = model.merge(self.TYPE, self._state, delta)
                pending = (
                    delta if self._pending is None else model.merge(self.TYPE, self._pending, delta)
                )
            except model.CrdtError as e:
                raise _invalid(e) from None
            self._state, self._pending = state, pending
            if self.autosave:
                self.save()

    # -- sync
    def sync(self, *, full: bool = False) -> Any:
        """Merge the pending deltas (``full``: the whole local state, e.g. to restore a
        store that lost the key) into the store, then fold the store's state in.
        Returns a :class:`SyncResult` (a coroutine of it on an AsyncClient). On any
        error the deltas stay pending and the error is raised."""
        plan = self._sync_plan(full)
        return arun(self.client, plan) if self._async else run(self.client, plan)

    def _sync_plan(self, full: bool) -> SyncPlan:
        T = self.TYPE
        with self._lock:
            if self._inflight is not None:
                raise RuntimeError("a sync of this replica is already running")
            pending = self._pending
            shipping = self._state if full else pending
            self._inflight, self._pending = pending, None
        sent = changed = False
        revision = 0
        try:
            if shipping is not None:
                args = (self.key, T, model.encode(T, shipping))
                r = yield Call("crdt_merge", args, {"ns": self.ns})
                sent, changed, revision = True, r.changed, r.revision
        except BaseException:
            with self._lock:
                self._pending = self._joined(self._inflight, self._pending)
                self._inflight = None
            raise
        with self._lock:
            self._inflight = None
            if self.autosave:
                self.save()
        got = yield Call("crdt_get", (self.key,), {"ns": self.ns, "state": True, "default": None})
        with self._lock:
            if got is not None:
                if got.type != T:
                    raise CrdtTypeMismatch(
                        f"key {self.key!r} holds a {got.type}, this replica is a {T}",
                        code="crdt_type_mismatch",
                        details={"found": got.type},
                    )
                self._state = model.merge(T, self._state, got.state)
                revision = max(revision, got.revision)
                if self.autosave:
                    self.save()
            return SyncResult(sent, changed, revision, model.value(T, self._state))

    def _joined(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        return a if b is None else model.merge(self.TYPE, a, b)

    # -- persistence
    def save(self) -> None:
        """Write the replica to ``path`` atomically (tmp file, fsync, rename, directory
        fsync); a no-op without a path. Called after every change unless
        ``autosave=False``."""
        if self.path is None:
            return
        with self._lock:
            pending = self._joined(self._inflight, self._pending)
            fields = {"ns": self.ns, "key": self.key, "type": self.TYPE}
            write_replica(self.path, fields, self.replica_id, self._state, pending)

    def _load(self, replica_id: str | None) -> None:
        assert self.path is not None
        fields = {"ns": self.ns, "key": self.key, "type": self.TYPE}
        self.replica_id, self._state, self._pending = read_replica(self.path, fields, replica_id)

    def __repr__(self) -> str:
        where = f", path={str(self.path)!r}" if self.path is not None else ""
        return (
            f"{type(self).__name__}({self.key!r}, ns={self.ns!r}, "
            f"replica_id={self.replica_id!r}{where}, pending={self.pending})"
        )


class CounterReplica(Replica):
    """A PN-Counter: ``increment(n)``, ``decrement(n)``; ``value`` is an int."""

    TYPE = "pncounter"

    def increment(self, n: int = 1) -> None:
        n = _positive(n)
        self._update(lambda s: model.pncounter_add(s, self.replica_id, n))

    def decrement(self, n: int = 1) -> None:
        n = _positive(n)
        self._update(lambda s: model.pncounter_add(s, self.replica_id, -n))


class GCounterReplica(Replica):
    """A grow-only counter: ``increment(n)``; ``value`` is an int."""

    TYPE = "gcounter"

    def increment(self, n: int = 1) -> None:
        n = _positive(n)
        self._update(lambda s: model.gcounter_inc(s, self.replica_id, n))


class SetReplica(Replica):
    """An add-wins OR-Set of str | int | bytes: ``add(x)``, ``remove(x)`` (removes the
    adds this replica has seen; a concurrent add elsewhere wins), ``x in s``, ``len(s)``;
    ``value`` is the sorted list of members."""

    TYPE = "orset"

    def add(self, elem: Any) -> None:
        self._update(lambda s: model.orset_add(s, self.replica_id, elem))

    def remove(self, elem: Any) -> None:
        self._update(lambda s: model.orset_remove(s, elem))

    def __contains__(self, elem: Any) -> bool:
        return elem in self.value

    def __len__(self) -> int:
        return len(self.value)

    def __iter__(self) -> Any:
        return iter(self.value)


class _Clocked(Replica):
    """A replica that stamps LWW writes with the wall clock in ms (``clock``)."""

    def __init__(self, client: Any, key: str, *, clock: Callable[[], int] | None = None,
                 **kw: Any) -> None:  # fmt: skip
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        super().__init__(client, key, **kw)

    def _stamp(self, seen: int) -> int:
        """Now in ms, but after ``seen`` (the timestamp of the value this write replaces):
        a write after one it has seen wins over it even if this clock is behind."""
        return max(int(self._clock()), seen + 1)


def _lww_time(state: Any) -> int:
    t = state.get("t") if isinstance(state, dict) else None
    return t if isinstance(t, int) else 0


class RegisterReplica(_Clocked):
    """A last-writer-wins register: ``set(v)``; ``value`` (None until set). The latest
    (timestamp, replica id) wins; timestamps are the wall clock in ms, so replicas need
    roughly synchronized clocks (docs/crdt.md)."""

    TYPE = "lwwreg"

    def set(self, value: Any) -> None:
        self._update(
            lambda s: model.lwwreg_set(s, self.replica_id, value, self._stamp(_lww_time(s)))
        )


class MVRegisterReplica(Replica):
    """A multi-value register: ``set(v)`` replaces every value this replica has seen;
    concurrent sets on other replicas are all kept: ``values`` (``value``) lists them."""

    TYPE = "mvreg"

    def set(self, value: Any) -> None:
        self._update(lambda s: model.mvreg_set(s, self.replica_id, value))

    @property
    def values(self) -> list[Any]:
        return list(self.value)


class MapReplica(_Clocked):
    """An OR-Map of CRDT fields (str keys): ``increment(f, n)`` / ``decrement`` (a
    pncounter field), ``add(f, x)`` / ``discard(f, x)`` (an orset field), ``set(f, v)``
    (an lwwreg field), ``set_mv(f, v)`` (an mvreg field), ``update(f, T, fn)`` (any:
    ``fn(field_state)`` returns the field's delta), ``remove(f)``; ``value`` is a dict of
    the present fields' values, ``get(f, default)`` one of them."""

    TYPE = "ormap"

    def update(self, name: str, type_name: str, fn: Callable[[Any], Any]) -> None:
        """Update field ``name`` (of type ``type_name``) by the delta ``fn`` returns."""
        if not isinstance(name, str):
            raise TypeError(f"a map field is a str, not {type(name).__name__}")

        def delta(s: Any) -> Any:
            inner = fn(model.ormap_get(s, name, type_name))
            return model.ormap_update(s, self.replica_id, name, type_name, inner)

        self._update(delta)

    def increment(self, name: str, n: int = 1) -> None:
        n = _positive(n)
        self.update(name, "pncounter", lambda s: model.pncounter_add(s, self.replica_id, n))

    def decrement(self, name: str, n: int = 1) -> None:
        n = _positive(n)
        self.update(name, "pncounter", lambda s: model.pncounter_add(s, self.replica_id, -n))

    def add(self, name: str, elem: Any) -> None:
        self.update(name, "orset", lambda s: model.orset_add(s, self.replica_id, elem))

    def discard(self, name: str, elem: Any) -> None:
        self.update(name, "orset", lambda s: model.orset_remove(s, elem))

    def set(self, name: str, value: Any) -> None:
        self.update(
            name, "lwwreg",
            lambda s: model.lwwreg_set(s, self.replica_id, value, self._stamp(_lww_time(s))),
        )  # fmt: skip

    def set_mv(self, name: str, value: Any) -> None:
        self.update(name, "mvreg", lambda s: model.mvreg_set(s, self.replica_id, value))

    def remove(self, name: str) -> None:
        """Remove field ``name`` (the adds and updates this replica has seen of it)."""
        self._update(lambda s: model.ormap_remove(s, name))

    def get(self, name: str, default: Any = None) -> Any:
        return self.value.get(name, default)
