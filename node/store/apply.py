"""Applying one raft entry: its ops in order, each atomic, with idempotency keys.

The op families register here (see the package docstring): `HANDLERS` maps an op name to
`handler(tx, op) -> result`, `AFTER_ENTRY` lists `hook(tx)` run once after all ops of an
entry (also an undecodable one), e.g. pruning. A handler reads through the tx (the DB
plus this entry's earlier writes), stages its writes with `tx.stage` at revision
`tx.revision + 1` and sets `tx.wrote` when it wrote something (the op then takes that
revision); raising OpError fails the op and drops what it staged.

`BEFORE_HANDLER` maps an op name to checks `check(tx, op)` run before its handler (after
the idempotency lookup, so a retry of an op that applied replays its result): the generic
fence check of node/store/locks.py is registered there for every op that takes a `fence`
(put, delete, cas, txn, append); raising OpError fails the op and nothing is applied.

Idempotency: a key is scoped to the op's namespace (ns-less ops such as compact use
the empty ns) and bound to the op it came with: the record keeps a 16-byte BLAKE2b
digest of the op (without its idempotency_key, dict keys sorted), and the same key
with another op fails with `idempotency_key_reused` instead of replaying a result
that belongs to a different request. `clock` = max of all entry timestamps seen
(time only the leader stamps, node/raft/cluster_clock.py; it never runs backwards across
leader changes); a record expires at clock + idempotency_seconds when stored and is
pruned (node/store/compaction.py) once clock passes it. Results of failed ops (errors)
are not stored: a failed op leaves no trace.

Validation: every op is validated (node/ops.validate_op, internal ops allowed) before it
runs, except a put or delete the proposing node marked as validate_op's own output
(node/entry.py `validated_op` has the argument why that is safe); a malformed op fails
with validation's error code instead of reaching a handler.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
from rocksdict import Rdict, WriteBatch

from statekeeper.node import entry as raft_entry
from statekeeper.node.config import Limits, Retention
from statekeeper.node.entry import validated_op
from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import READ_OPS, validate_op
from statekeeper.node.store.backend import StorageError, check, db_get, db_iter
from statekeeper.node.store.keys import (
    IDEM,
    INF,
    META,
    Meta,
    cur_key,
    hist_prefix,
    idem_exp_key,
    idem_record_id,
    p64,
    unpack,
)
from statekeeper.node.store.reads import Reader, hist_get, kv, serves

Handler = Callable[["EntryTx", dict], dict]
HANDLERS: dict[str, Handler] = {}
AFTER_ENTRY: list[Callable[[EntryTx], None]] = []
# op name -> checks run before its handler (the fence check of node/store/locks.py).
BEFORE_HANDLER: dict[str, list[Callable[[EntryTx, dict], None]]] = {}

_MISSING = object()


def handles(name: str) -> Callable[[Handler], Handler]:
    """Decorator: register `handler(tx, op)` for the validated ops named `name`."""

    def register(handler: Handler) -> Handler:
        if name in HANDLERS:
            raise ValueError(f"op {name!r} already has a handler")
        HANDLERS[name] = handler
        return handler

    return register


def read_op(name: str) -> Callable[[Reader], Reader]:
    """Decorator: register `reader(src, limits, op)` for StateMachine.read (reads.serves)
    and, over the EntryTx, as the apply handler of the op (every op validation accepts
    has a handler, so an entry carrying a read fails nothing)."""

    def register(reader: Reader) -> Reader:
        handles(name)(lambda tx, op: reader(tx, tx.limits, op))
        return serves(name)(reader)

    return register


class EntryTx:
    """One entry being applied: reads see DB + overlay, writes go to the overlay.

    Each op stages its writes in `staging`; they move into `overlay` only when the
    op succeeds, so a failed op leaves no trace. The overlay becomes one WriteBatch.
    Values are packed bytes, None = delete.
    """

    def __init__(
        self,
        db: Rdict,
        limits: Limits,
        retention: Retention,
        pack: Callable[[Any], bytes],
        meta: Meta,
        idem_next: int | None,
    ) -> None:
        self.db = db
        self.limits = limits
        self.retention = retention
        self.pack = pack
        self.overlay: dict[bytes, bytes | None] = {}
        self.staging: dict[bytes, bytes | None] = {}
        # Every DB value read by this entry (None: absent). The DB does not change while
        # an entry applies (its writes go to the overlay), so a key read twice (a txn's
        # compare and its put, two puts of one key) is read from RocksDB once.
        self.db_read: dict[bytes, bytes | None] = {}
        self.base_revision = meta.revision  # everything <= this is in the DB itself
        self.revision = meta.revision
        self.compact_revision = meta.compact_revision
        self.clock = meta.clock
        self.pruned_rev = meta.pruned_rev
        self.idem_pruned = meta.idem_pruned
        self.changes_pruned = meta.changes_pruned
        # Smallest expiry pending in the "e" index, None = unknown. Only lets pruning
        # skip a seek when nothing can be due; the pruning itself does not depend on it.
        self.idem_next = idem_next
        self.stored_min_exp = INF  # smallest expiry stored by this entry
        # clock_ms of the newest revision-time index record, None = unknown (read from the
        # DB then; node/store/retention.py). A cache only: the record written is the same.
        self.time_indexed: int | None = None
        self.hist_written = 0
        self.idem_written = 0
        self.wrote = False  # the current op wrote keys (takes revision + 1)
        self.tokens_changed = False  # an op staged a token record (node/store/auth.py)

    # -- storage access (reads.Source) --

    def db_iter(self) -> Any:
        return db_iter(self.db)

    def point(self, k: bytes) -> bytes | None:
        v = self.staging.get(k, _MISSING)
        if v is _MISSING:
            v = self.overlay.get(k, _MISSING)
            if v is _MISSING:
                v = self.db_read.get(k, _MISSING)
                if v is _MISSING:
                    v = self.db_read[k] = db_get(self.db, k)
        return v

    def _db_scan(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, int, bytes]]:
        it = self.db_iter()
        it.seek(lo)
        while it.valid():
            k = it.key()
            if k >= hi:
                return
            yield k, 1, it.value()
            it.next()
        check(it)

    def scan(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Live entries of [lo, hi): the DB merged with this entry's pending writes."""
        pending: dict[bytes, bytes | None] = {}
        for d in (self.overlay, self.staging):  # staging is newer
            for k, v in d.items():
                if lo <= k < hi:
                    pending[k] = v
        staged = sorted((k, 0, v) for k, v in pending.items())
        last = None
        for k, _, v in heapq.merge(staged, self._db_scan(lo, hi)):
            if k == last:
                continue  # the DB's version of a key with a pending write
            last = k
            if v is not None:
                yield k, v

    def hist_iter(self, revision: int) -> Any:
        if revision > self.base_revision:
            raise OpError(
                "invalid_argument",
                f"revision {revision} is written by this same raft entry; read it afterwards",
            )
        return self.db_iter()

    def kv_at(self, ns_b: bytes, key: str, revision: int, latest: bool) -> dict | None:
        key_b = key.encode()
        if not latest:
            return hist_get(self.hist_iter(revision), hist_prefix(ns_b, key_b), revision, key)
        cur = self.point(cur_key(ns_b, key_b))
        if cur is None:
            return None
        return self.kv_from_meta(ns_b, key_b, key, unpack(cur))

    def kv_from_meta(self, ns_b: bytes, key_b: bytes, key: str, meta: list) -> dict:
        """The kv of a live key, given its "c" record [version, create, mod, lease?]."""
        version, create, mod = meta[0], meta[1], meta[2]
        rec = self.point(hist_prefix(ns_b, key_b) + p64(mod))
        return kv(key, unpack(rec)[0] if rec is not None else b"", version, create, mod)

    def stage(self, k: bytes, v: bytes | None) -> None:
        self.staging[k] = v

    # -- the entry --

    def apply(self, entry: Any) -> list[dict]:
        """Run every op of the entry, then the AFTER_ENTRY hooks; one result per op."""
        results = self._run(entry)
        for hook in AFTER_ENTRY:
            hook(self)
        return results

    def write_batch(self, index: int) -> tuple[WriteBatch, Meta]:
        """Everything the entry at raft `index` wrote, meta record included."""
        wb = WriteBatch(raw_mode=True)
        for k, v in self.overlay.items():
            if v is None:
                wb.delete(k)
            else:
                wb.put(k, v)
        meta = Meta(
            applied_index=index,
            revision=self.revision,
            compact_revision=self.compact_revision,
            clock=self.clock,
            pruned_rev=self.pruned_rev,
            idem_pruned=self.idem_pruned,
            changes_pruned=self.changes_pruned,
        )
        wb.put(META, meta.encode(self.pack))
        return wb, meta

    def _run(self, entry: Any) -> list[dict]:
        try:
            t, ops = raft_entry.decode(entry)
        except raft_entry.EntryError as e:
            n = 1
            with contextlib.suppress(Exception):
                ops = msgpack.unpackb(entry, raw=False).get("ops")
                n = len(ops) if isinstance(ops, list) else 1
            return [{"error": {"code": "invalid_request", "message": str(e)}} for _ in range(n)]
        self.clock = max(self.clock, t)
        return [self._run_op(op) for op in ops]

    def _run_op(self, raw: Any) -> dict:
        # One function per op (validation, idempotency, handler, commit of its writes):
        # _run_valid and _remember were two more calls per op (issue 28 item 3; the
        # numbers are in _run's docstring).
        saved = (self.compact_revision, self.hist_written, self.idem_written, self.stored_min_exp)
        self.wrote = False
        staging = self.staging
        try:
            op = validated_op(raw)  # node/entry.py says why it can be trusted
            if op is None:
                op = validate_op(raw, self.limits, internal=True)
            name = op["op"]
            ik = op.get("idempotency_key")
            if ik is not None and name in READ_OPS:
                ik = None  # idempotency_status: the key it asks about is no record of its own
            if ik is not None:
                record_id = idem_record_id(op.get("ns", ""), ik)
                digest = op_digest(op, self.pack)
                old_exp = None
                stored = self.point(IDEM + record_id)
                if stored is not None:
                    result, old_exp = recorded_result(stored, self.clock, digest, op)
                    if result is not None:
                        return result
            checks = BEFORE_HANDLER.get(name)
            if checks is not None:
                for before in checks:
                    before(self, op)
            result = HANDLERS[name](self, op)
            rev = self.revision + 1 if self.wrote else self.revision
            if ik is not None and self.retention.idempotency_seconds > 0:
                if old_exp is not None:
                    staging[idem_exp_key(old_exp, record_id)] = None
                exp = self.clock + self.retention.idempotency_seconds * 1000
                staging[IDEM + record_id] = self.pack([exp, rev, result, digest])
                staging[idem_exp_key(exp, record_id)] = b""
                self.idem_written += 1
                if exp < self.stored_min_exp:
                    self.stored_min_exp = exp
            self.revision = rev
            self.overlay.update(staging)
            return result
        except StorageError:
            raise
        except OpError as e:
            self.compact_revision, self.hist_written, self.idem_written, self.stored_min_exp = saved
            return {"error": e.to_dict()}
        except Exception as e:  # a bug; failing the op the same way everywhere keeps nodes equal
            self.compact_revision, self.hist_written, self.idem_written, self.stored_min_exp = saved
            return {"error": {"code": "internal", "message": f"{type(e).__name__}: {e}"}}
        finally:
            staging.clear()


def as_applied(op: dict, limits: Limits) -> dict:
    """`op`, validated by the HTTP layer and not proposed, as apply would run it: through
    an entry's msgpack encoding and apply's own validation (or node/entry.py's mark), so
    that its digest is the one apply computes for it."""
    packed = msgpack.packb(raft_entry.mark_validated(dict(op)), use_bin_type=True)
    raw = msgpack.unpackb(packed, raw=False)
    valid = raft_entry.validated_op(raw)
    return valid if valid is not None else validate_op(raw, limits, internal=True)


def recorded_result(
    stored: bytes, clock: int, digest: bytes, op: dict
) -> tuple[dict | None, int | None]:
    """An idempotency record (IDEM + record id) read for `op` (whose digest is `digest`)
    at replicated time `clock`: (its result marked replayed, None) while it lives, (None,
    its expiry) once expired. Raises idempotency_key_reused when it is bound to another
    request. Apply replays with it; node/quota/gate.py answers a retry refused under the
    NOSPACE alarm with it (the same answer apply would give)."""
    exp, _, result, *bound_to = unpack(stored)
    if exp <= clock:
        return None, exp
    if bound_to and bound_to[0] != digest:
        raise OpError(
            "idempotency_key_reused",
            f"idempotency_key {op.get('idempotency_key')!r} was already used in namespace "
            f"{op.get('ns', '')!r} for a different request; use a new key",
        )
    result["replayed"] = True
    return result, None


# Values _canonical leaves as they are: the top-level fields of a put or delete.
_FLAT = frozenset((str, bytes, int, bool, float, type(None)))


def _canonical(v: Any) -> Any:
    # Flat members are not walked: a saver txn's digest called this 46 times per op
    # (18% of its apply, cProfile, issue 28). Exact types first, the flat check inline:
    # op_digest of a txn of ten 256 B puts 49 -> 34 us (timeit, best of 5).
    t = type(v)
    if t is dict:
        return [[k, x if type(x) in _FLAT else _canonical(x)] for k, x in sorted(v.items())]
    if t is list or t is tuple:
        return [x if type(x) in _FLAT else _canonical(x) for x in v]
    if isinstance(v, dict):
        return [[k, _canonical(v[k])] for k in sorted(v)]
    if isinstance(v, list | tuple):
        return [_canonical(x) for x in v]
    return v


def op_digest(op: dict, pack: Callable[[Any], bytes] | None = None) -> bytes:
    """What binds an idempotency key to its request: a digest of the validated op without
    the key itself, independent of the order of its fields (a retry is re-validated).
    The digest is stored in idempotency records and must stay the same bytes on every
    node and version: msgpack of [[field, _canonical(value)], ...] sorted by field. Flat
    values skip the walk and the pairs are tuples (msgpack packs a tuple as the same array
    as a list): ~5 -> ~3 us per op (process time, 2 shared cores), a batch of 64 puts
    spent 14% of a follower's CPU here (py-spy, issue 17).

    `pack`: apply passes its store's reusable msgpack Packer (use_bin_type=True, the same
    bytes as packb's): msgpack.packb builds a new Packer per call, 1.4-2.0 -> 0.8-1.1 us
    for a 256 B put's body (timeit, best of 5); packb was 4.3 % of a follower's CPU under
    batches of 64 puts (py-spy)."""
    body = []
    for k in sorted(op):
        if k != "idempotency_key":
            v = op[k]
            body.append((k, v if type(v) in _FLAT else _canonical(v)))
    packed = pack(body) if pack is not None else msgpack.packb(body, use_bin_type=True)
    return hashlib.blake2b(packed, digest_size=16).digest()
