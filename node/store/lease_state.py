"""Lease records and key attachment: what kv.py's writes and leases.py's ops share.

Records (node/store/keys.py has the rows):

    b"l" lease8              [ns, ttl_ms, expires_ms, granted_revision]
    b"l" p64(0)              the next lease id (int; absent: 1)
    b"x" expires_ms8 lease8  empty: the expiry index, one entry per lease
    b"k" lease8 ns 0x00 key  empty: the key is attached to the lease
    b"K" ns 0x00 key         the lease id the key is attached to
    b"j" lease8 ns 0x00 stream   empty: the stream is attached to the lease
    b"J" ns 0x00 stream      the lease id the stream is attached to

Invariants: every lease has exactly one "x" entry, at its expires_ms; "K" ns/key -> L
exists iff "k" L ns/key exists, iff the key is live and attached to L, and then L has an
"l" record; a key and its lease share a namespace. `write_put` calls `set_key_lease` (a
put attaches the key to the put's lease, or detaches it: etcd's semantics) and
`write_delete` calls `detach`, so no path that writes or deletes a key can leave a stale
attachment behind. Lease ids are never reused (the counter only grows).

Attachment is generic: a module with entries of its own attaches them with a tag of its
own and appends a (result field, hook) to leases.REVOKE_HOOKS; locks are keys, so key
attachment already covers them. Streams do so (node/store/stream_leases.py): "J"
ns/stream -> L exists iff "j" L ns/stream exists, iff the stream exists and is attached
to L (and L has an "l" record; same namespace). An append with `lease` attaches or moves
the stream; one without leaves it (streams are append-only: no detach); the revoke hook
deletes the stream with all its records and both attachment rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statekeeper.node.errors import OpError
from statekeeper.node.store.apply import EntryTx
from statekeeper.node.store.keys import (
    KEY_LEASE,
    SEP,
    key_lease_key,
    lease_exp_key,
    lease_key,
    lease_keys_prefix,
    unpack,
)
from statekeeper.node.store.reads import Source

COUNTER = lease_key(0)


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The b"l" record of one lease."""

    ns: str
    ttl_ms: int
    expires_ms: int
    granted_revision: int

    @classmethod
    def load(cls, src: Source, lease: int) -> LeaseRecord | None:
        raw = src.point(lease_key(lease))
        return None if raw is None else cls(*unpack(raw))

    def encode(self, pack: Any) -> bytes:
        return pack([self.ns, self.ttl_ms, self.expires_ms, self.granted_revision])

    def info(self, lease: int) -> dict:
        """The lease as lease_list shows it."""
        return {"lease": lease, "ns": self.ns, "ttl_ms": self.ttl_ms, "expires_ms": self.expires_ms}


def not_found(lease: int) -> OpError:
    return OpError(
        "lease_not_found",
        f"lease {lease} does not exist (never granted, revoked, or expired)",
        lease=lease,
    )


def load_existing(tx: Source, lease: int) -> LeaseRecord:
    """The lease's record; raises lease_not_found."""
    rec = LeaseRecord.load(tx, lease)
    if rec is None:
        raise not_found(lease)
    return rec


def load_in_ns(tx: Source, lease: int, ns: str, what: str) -> LeaseRecord:
    """The lease's record if it is in namespace `ns` (where the `what` it would carry
    lives); raises lease_not_found otherwise. A lease of another namespace is "not found"
    without naming its namespace: lease ids are sequential, and naming it told a tenant
    which namespace holds each id (issue 27, item 11)."""
    rec = LeaseRecord.load(tx, lease)
    if rec is None:
        raise not_found(lease)
    if rec.ns != ns:
        raise OpError(
            "lease_not_found",
            f"lease {lease} does not exist in namespace {ns!r} (a {what} and its lease share "
            "a namespace)",
            lease=lease,
        )
    return rec


def save(tx: EntryTx, lease: int, rec: LeaseRecord, old: LeaseRecord | None) -> None:
    """Stage the lease's record and its expiry index entry (replacing `old`'s). Takes no
    revision: lease records are not keys (nothing in the change log, nothing to watch),
    so a grant or keepalive that changes no key leaves the revision alone (etcd's rule)."""
    if old is not None and old.expires_ms != rec.expires_ms:
        tx.stage(lease_exp_key(old.expires_ms, lease), None)
    tx.stage(lease_key(lease), rec.encode(tx.pack))
    tx.stage(lease_exp_key(rec.expires_ms, lease), b"")


def remove(tx: EntryTx, lease: int, rec: LeaseRecord) -> None:
    """Stage the removal of the lease's record and index entry (not its keys)."""
    tx.stage(lease_key(lease), None)
    tx.stage(lease_exp_key(rec.expires_ms, lease), None)
    tx.wrote = True


def grant(tx: EntryTx, ns: str, ttl_ms: int, revision: int) -> tuple[int, LeaseRecord]:
    """A new lease in `ns`, expiring ttl_ms after the entry's time. Takes no revision by
    itself; `revision` (recorded as granted_revision) is the store's revision once the op
    is applied: the current one for lease_grant, the put's for a put's `ttl_ms`."""
    raw = tx.point(COUNTER)
    lease = unpack(raw) if raw is not None else 1
    tx.stage(COUNTER, tx.pack(lease + 1))
    rec = LeaseRecord(ns, ttl_ms, tx.clock + ttl_ms, revision)
    save(tx, lease, rec, None)
    return lease, rec


def for_put(tx: EntryTx, op: dict) -> tuple[int, bool]:
    """(the lease a put attaches its key to (0: none), whether the put granted it)."""
    lease = op.get("lease")
    if lease is not None:
        load_in_ns(tx, lease, op["ns"], "key")
        return lease, False
    ttl = op.get("ttl_ms")
    if ttl is not None:
        return grant(tx, op["ns"], ttl, tx.revision + 1)[0], True  # the put's revision
    return 0, False


def key_lease(src: Source, member: bytes, known: int | None) -> int:
    """The lease (0: none) of the live key `member` (ns 0x00 key) whose "c" record says
    `known` (keys.cur_lease); its "K" record is read only for an old-shape record (None)."""
    if known is not None:
        return known
    raw = src.point(KEY_LEASE + member)
    return unpack(raw) if raw is not None else 0


def set_key_lease(
    tx: EntryTx, ns_b: bytes, key_b: bytes, lease: int, old_lease: int | None
) -> None:
    """After a put of the key: attach it to `lease`, or (0) detach it from any lease.
    `old_lease`: the lease its "c" record named before the put (0 when it was not live;
    None for an old-shape record: read from "K")."""
    kk = key_lease_key(ns_b, key_b)
    old = key_lease(tx, kk[1:], old_lease)
    if old == lease:
        return
    member = ns_b + SEP + key_b
    if old:
        tx.stage(lease_keys_prefix(old) + member, None)
    if lease:
        tx.stage(kk, tx.pack(lease))
        tx.stage(lease_keys_prefix(lease) + member, b"")
    else:
        tx.stage(kk, None)


def detach(tx: EntryTx, ck: bytes, known: int | None) -> None:
    """With the deletion of the live key whose "c" key is `ck` and record names lease
    `known` (keys.cur_lease): drop its attachment."""
    member = ck[1:]  # ns 0x00 key
    lease = key_lease(tx, member, known)
    if not lease:
        return
    tx.stage(KEY_LEASE + member, None)
    tx.stage(lease_keys_prefix(lease) + member, None)
