"""The CRDT operations of both clients (docs/crdt.md; docs/protocol.md, "CRDTs"), defined
once like every operation (see client/commands.py, whose :class:`commands.Commands`
inherits them), their requests, and ``client.crdt``, the accessor that makes local
replicas (client/crdt/replica.py).

``crdt_merge(key, T, state)`` (POST /v1/crdt/merge) folds a delta or a whole state of CRDT
type ``T`` into the one stored at ``key``; ``crdt_get(key, state=False)`` (POST
/v1/crdt/get) reads its value (and, asked, its state). ``client.crdt.merge`` /
``client.crdt.get`` are the same calls; ``client.crdt.counter(key)`` and friends make
replicas. The five things:

1. Consistency: a merge is a raft write like put; merging is commutative, associative and
   idempotent, so concurrent merges never conflict (no CAS loop) and every node ends with
   the same state. ``crdt_get`` is linearizable by default (serializable + min_revision
   like get).
2. ok / failed / unknown: ok = the merge is in the store (``changed`` False: the store
   already held all of it, no new revision). Failed: InvalidRequest (bad state, 400;
   too large, 413), CrdtTypeMismatch (409: the key holds another type or a plain value);
   nothing applied. Unknown: Timeout/Unavailable; retrying (same idempotency key, or even
   a new one) is always safe: merging the same state twice changes nothing.
3. Limits: key as put (4 KiB, 400 ``key_too_large``); the encoded state at most the
   server's value limit (1 MiB, 413 ``value_too_large``); unknown type or junk state: 400
   ``invalid_argument``.
4. Key layout: the CRDT is the plain kv value of ``key`` (msgpack
   ``[b"skcrdt", 1, T, state]``), so get/range/watch/txn compares see it.
5. Chaos: chaos/crdt_workload.py syncs counter replicas through every fault;
   chaos/checker/crdt.py checks the store's value against the acknowledged and unknown
   merges, and the exact total after a final sync; tests/integration/test_crdt.py runs
   replicas on both sides of an iptables partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..base import BaseClient, command
from ..errors import InvalidRequest
from ..kv_requests import MISSING
from ..responses import decode_ok, error_from_response, malformed
from ..wire import Request, check_key, new_idempotency_key, post, read_options
from . import model
from .replica import (
    CounterReplica,
    GCounterReplica,
    MapReplica,
    MVRegisterReplica,
    RegisterReplica,
    SetReplica,
)

__all__ = ["CrdtAccessor", "CrdtCommands", "CrdtMergeResult", "CrdtValue", "encode_state"]


@dataclass(frozen=True, slots=True)
class CrdtMergeResult:
    """Result of a merge.

    Attributes:
        revision: the store revision of the merge; when ``changed`` is False, the revision
            the store was at (no new revision was taken).
        changed: False when the store already included everything merged.
        value: the CRDT's value after the merge (the counter's number, the set's sorted
            members, the register's value, the map's dict).
    """

    revision: int
    changed: bool
    value: Any


@dataclass(frozen=True, slots=True)
class CrdtValue:
    """A CRDT as read by ``crdt_get``.

    Attributes:
        key, ns: where it is; type: its type name (``"pncounter"`` ...).
        value: its value; state: its decoded state (only when read with ``state=True``,
            else None): fold it into a local one with ``client.crdt.model.merge``.
        revision: the store revision the read was served at; mod_revision, version: the
            key's, as for get.
    """

    key: str
    type: str
    value: Any
    state: Any
    revision: int
    mod_revision: int
    version: int
    ns: str = "default"


def _invalid(e: model.CrdtError) -> InvalidRequest:
    return InvalidRequest(e.message, code=e.code)


def check_type(type_name: Any) -> str:
    if type_name not in model.TYPES:
        raise InvalidRequest(
            f"unknown CRDT type {type_name!r} (one of {', '.join(model.TYPES)})",
            code="invalid_argument",
        )
    return str(type_name)


def encode_state(type_name: str, state: Any) -> bytes:
    """``state`` as the wire wants it: bytes (already encoded) as they are, else the
    canonical encoding of a state of ``type_name`` (InvalidRequest if it is not one)."""
    if isinstance(state, bytes | bytearray | memoryview):
        return bytes(state)
    try:
        model.check(type_name, state)
        return model.encode(type_name, state)
    except model.CrdtError as e:
        raise _invalid(e) from None


def merge_request(
    ns: str, key: str, type_name: str, state: Any, idempotency_key: str | None = None
) -> Request:
    """POST /v1/crdt/merge; ``parse`` returns a :class:`CrdtMergeResult`."""
    ik = idempotency_key or new_idempotency_key()
    body = {
        "ns": ns,
        "key": check_key(key),
        "type": check_type(type_name),
        "state": encode_state(type_name, state),
        "idempotency_key": ik,
    }

    def parse(status: int, ctype: str | None, raw: bytes) -> CrdtMergeResult:
        d = decode_ok(status, ctype, raw, ns)
        if not isinstance(d.get("revision"), int):
            raise malformed(status, "merge answer without a revision")
        return CrdtMergeResult(d["revision"], bool(d.get("changed", True)), d.get("value"))

    return post("/v1/crdt/merge", body, parse, "merge", ik)


def get_request(
    ns: str,
    key: str,
    *,
    state: bool = False,
    revision: int | None = None,
    consistency: str | None = None,
    min_revision: int | None = None,
    default: Any = MISSING,
) -> Request:
    """POST /v1/crdt/get; ``parse`` returns a :class:`CrdtValue`, or ``default`` (if
    given) when the key does not exist, else raises NotFound."""
    body: dict[str, Any] = {"ns": ns, "key": check_key(key)}
    if state:
        body["state"] = True
    read_options(body, revision, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> Any:
        if status == 404 and default is not MISSING:
            err = error_from_response(status, ctype, raw, ns)
            if err.code in ("not_found", "key_not_found"):
                return default
            raise err
        d = decode_ok(status, ctype, raw, ns)
        t = d.get("type")
        if t not in model.TYPES:
            raise malformed(status, f"crdt_get answer with type {t!r}")
        decoded = None
        if state:
            raw_state = d.get("state")
            if not isinstance(raw_state, bytes):
                raise malformed(status, "crdt_get answer without the state asked for")
            try:
                decoded = model.decode(t, raw_state)
            except model.CrdtError as e:
                raise malformed(status, f"undecodable {t} state: {e.message}") from None
        return CrdtValue(
            key, t, d.get("value"), decoded, d.get("revision", 0),
            d.get("mod_revision", 0), d.get("version", 0), ns,
        )  # fmt: skip

    return post("/v1/crdt/get", body, parse, "crdt_get")


class CrdtAccessor:
    """``client.crdt``: replicas of CRDT keys, and the two operations.

    Every factory takes ``(key, replica_id=None, path=None, *, ns=None, autosave=True)``
    and returns a replica (client/crdt/replica.py) that updates locally at once, never
    touching the network, and ``sync()`` s with the store (awaited on an AsyncClient).
    ``replica_id``: who this replica is (default: a fresh uuid4, or the one in ``path``);
    one replica id must never be used by two replicas at once. ``path``: a local file
    the replica is loaded from (if it exists) and written to atomically after every
    change (``autosave=False``: only on ``save()``).
    """

    __slots__ = ("client", "model")

    def __init__(self, client: Any) -> None:
        self.client = client
        self.model = model  # the pure CRDT functions (client/crdt/model.py)

    def _make(self, cls: Any, key: str, replica_id: str | None, path: Any, ns: str | None,
              autosave: bool, **kw: Any) -> Any:  # fmt: skip
        ns = self.client.ns if ns is None else ns
        return cls(self.client, key, replica_id=replica_id, path=path, ns=ns, autosave=autosave,
                   **kw)  # fmt: skip

    def counter(self, key: str, replica_id: str | None = None, path: Any = None, *,
                ns: str | None = None, autosave: bool = True) -> Any:  # fmt: skip
        """A PN-Counter replica: ``increment(n)``, ``decrement(n)``, ``value`` (int)."""
        return self._make(CounterReplica, key, replica_id, path, ns, autosave)

    def gcounter(self, key: str, replica_id: str | None = None, path: Any = None, *,
                 ns: str | None = None, autosave: bool = True) -> Any:  # fmt: skip
        """A G-Counter replica (grow only): ``increment(n)``, ``value`` (int)."""
        return self._make(GCounterReplica, key, replica_id, path, ns, autosave)

    def set(self, key: str, replica_id: str | None = None, path: Any = None, *,
            ns: str | None = None, autosave: bool = True) -> Any:  # fmt: skip
        """An OR-Set replica (add wins): ``add(x)``, ``remove(x)``, ``x in s``,
        ``value`` (sorted members)."""
        return self._make(SetReplica, key, replica_id, path, ns, autosave)

    def register(self, key: str, replica_id: str | None = None, path: Any = None, *,
                 ns: str | None = None, autosave: bool = True, clock: Any = None) -> Any:  # fmt: skip
        """A last-writer-wins register replica: ``set(v)``, ``value`` (None until set).
        Its timestamps are this machine's wall clock in ms (``clock``: a function
        returning ms, for tests); see docs/crdt.md on clocks."""
        return self._make(RegisterReplica, key, replica_id, path, ns, autosave, clock=clock)

    def mvregister(self, key: str, replica_id: str | None = None, path: Any = None, *,
                   ns: str | None = None, autosave: bool = True) -> Any:  # fmt: skip
        """A multi-value register replica: ``set(v)``, ``values`` (every concurrent value;
        one after a set that saw them all)."""
        return self._make(MVRegisterReplica, key, replica_id, path, ns, autosave)

    def map(self, key: str, replica_id: str | None = None, path: Any = None, *,
            ns: str | None = None, autosave: bool = True, clock: Any = None) -> Any:  # fmt: skip
        """An OR-Map replica whose fields are CRDTs: ``increment(field, n)``,
        ``add(field, x)`` / ``discard(field, x)``, ``set(field, v)`` (LWW),
        ``set_mv(field, v)``, ``remove(field)``, ``value`` (dict)."""
        return self._make(MapReplica, key, replica_id, path, ns, autosave, clock=clock)

    def get(self, key: str, state: bool = False, **kw: Any) -> Any:
        """``client.crdt_get(key, state=state, **kw)``."""
        return self.client.crdt_get(key, state=state, **kw)

    def merge(self, key: str, type_name: str, state: Any, **kw: Any) -> Any:
        """``client.crdt_merge(key, type_name, state, **kw)``."""
        return self.client.crdt_merge(key, type_name, state, **kw)

    def __repr__(self) -> str:
        return f"CrdtAccessor({self.client!r})"


class CrdtCommands(BaseClient):
    """CRDT operations and ``client.crdt`` (see the module docstring)."""

    _crdt: CrdtAccessor | None = None

    @property
    def crdt(self) -> CrdtAccessor:
        """CRDTs (docs/crdt.md): ``counter(key)``, ``gcounter``, ``set``, ``register``,
        ``mvregister``, ``map`` make local replicas that update offline and ``sync()``
        by merge; ``get(key, state=False)`` and ``merge(key, T, state)`` are
        :meth:`crdt_get` and :meth:`crdt_merge`."""
        if self._crdt is None:
            self._crdt = CrdtAccessor(self)
        return self._crdt

    @command
    def crdt_merge(
        self,
        key: str,
        type_name: str,
        state: Any,
        *,
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> CrdtMergeResult:
        """Merge a delta or a whole state of CRDT type ``type_name`` into ``key``
        (created by its first merge). Never conflicts: merging is commutative and
        idempotent, so a repeated or retried merge changes nothing.

        Args:
            key: the key (as put's).
            type_name: ``"gcounter"``, ``"pncounter"``, ``"orset"``, ``"lwwreg"``,
                ``"mvreg"`` or ``"ormap"``.
            state: the state (client/crdt/model.py data, e.g. a delta its update
                functions return) or its canonical encoding (bytes).
            ns: namespace; defaults to the client's.
            idempotency_key: see :meth:`put`.

        Returns:
            CrdtMergeResult(revision, changed, value).

        Raises:
            CrdtTypeMismatch: the key holds another CRDT type or a non-CRDT value
                (nothing merged).
            InvalidRequest: not a valid state of that type, or too large.
        """
        return self._execute(merge_request(self._ns(ns), key, type_name, state, idempotency_key))

    @command
    def crdt_get(
        self,
        key: str,
        *,
        state: bool = False,
        ns: str | None = None,
        revision: int | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
        default: Any = MISSING,
    ) -> CrdtValue | Any:
        """Read the CRDT at ``key``: CrdtValue(key, type, value, state, revision,
        mod_revision, version).

        Args:
            key: the key.
            state: also return its decoded state (for a local replica to fold in).
            ns, revision, consistency, min_revision, default: as for :meth:`get`.

        Raises:
            NotFound: the key does not exist (and no ``default`` was given).
            CrdtTypeMismatch: the key holds a non-CRDT value.
        """
        return self._execute(
            get_request(
                self._ns(ns),
                key,
                state=state,
                revision=revision,
                consistency=self._consistency(consistency),
                min_revision=min_revision,
                default=default,
            )
        )
