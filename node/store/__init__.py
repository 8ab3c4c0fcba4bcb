"""The replicated state machine: an etcd-like multi-version KV store in one RocksDB.

Nothing here knows about Raft or the network. `StateMachine` implements node.raft.FSM
(hashicorp/raft's FSM shape): `apply(index, entry)` is called with committed raft
entries (docs/protocol.md, "Raft entries") from a single thread; reads (`get`, `range`,
`read`, `read_view`) may run concurrently from other threads; `read` serves every read
op through `reads.READERS`, which each op family extends with `@reads.serves("name")`.

Determinism: apply depends only on the DB contents, the entry bytes, `limits` and
`retention` (every node must run with the same config). Time comes only from the
entries' leader timestamp `t`; no clock, randomness or environment is read.

Modules, one job each (the shape of etcd's mvcc + backend):

    keys.py        the on-disk format: key layout, value encodings, the meta record
    backend.py     the RocksDB handle: opening, checked access, the lock guarding it
    reads.py       MVCC reads: get/range at a revision; ReadView, a reader's view of the DB
    apply.py       one entry: decoding, each op atomic, idempotency keys, the op registry
    kv.py          ops put, delete, cas, get, range
    streams.py     op append; reads read_stream, stream_info, list_streams
    leases.py      ops lease_grant, lease_keepalive, lease_revoke, lease_expire; reads
                   lease_info, lease_list (lease_state.py: records, key attachment)
    locks.py       ops lock_acquire, lock_release; read lock_list; the fence check every
                   fenced write passes before its handler (apply.BEFORE_HANDLER)
    crdt.py        op merge; read crdt_get (CRDT envelopes in kv values; the types are
                   client/crdt/model.py's)
    txn.py         op txn (compares, then one branch of the ops above)
    retention.py   ops retention_set, retention_delete, gc; reads retention_list,
                   retention_status; the revision-time index (retention_select.py: what
                   a policy selects, for the leader's GC task and the status)
    archive.py     ops archive_seal, archive_restore; reads archive_plan, archive_list;
                   the archive tombstones get and read_stream check
    auth.py        ops auth_token_create, auth_token_revoke; read auth_token_list; the
                   state machine's in-memory token view
    idempotency.py read idempotency_status (the records apply keeps; no records of its own)
    compaction.py  op compact; history, change-log and idempotency pruning after every entry
    changes.py     the change log read for watches (node/api/watch.py), in bounded pages
    snapshot.py    checkpoint, pack a checkpoint, restore, the swap-directory recovery
    machine.py     StateMachine, tying them together

Adding an op family (streams, leases, CRDTs...) is one new module here plus its import
below: decorate `handler(tx, op) -> result` with `@apply.handles("name")` for each op,
and append a `hook(tx)` to `apply.AFTER_ENTRY` if the family has work to do after every
entry (expiring leases, say; compaction.py does its pruning this way). A handler reads
through `tx` (point, scan, kv_at), stages writes with `tx.stage(key, value)` and sets
`tx.wrote` if the op takes a revision (apply.py's docstring has the rules). A read op
registers `reader(src, limits, op)` with `@apply.read_op("name")` (reads.serves plus the
apply handler every op needs; the reader takes any reads.Source: a ReadView, or the EntryTx). Give
its records a new tag byte in keys.py (the on-disk format is append-only). The rest of a new
family (its node/ops/ declaration, OpenAPI, client, CLI, docs) is docs/architecture.md's
"Adding an op family: the checklist"; tests/unit/test_layout.py checks its files.
"""

from statekeeper.node.store import (  # noqa: F401  (each registers its ops)
    archive,
    auth,
    compaction,
    crdt,
    idempotency,
    kv,
    leases,
    locks,
    retention,
    streams,
    txn,
)
from statekeeper.node.store.backend import StorageError
from statekeeper.node.store.machine import StateMachine

__all__ = ["StateMachine", "StorageError"]
