"""Streams attached to leases: append's `lease`, and what a lease's revoke or expiry does
to its streams (docs/protocol.md, "Leases" and "Streams").

Records (node/store/keys.py has the rows), next to keys' b"k"/b"K":

    b"j" lease8 ns 0x00 stream   empty: the stream is attached to the lease
    b"J" ns 0x00 stream          the lease id the stream is attached to

Invariants (those of keys' k/K): "J" ns/stream -> L exists iff "j" L ns/stream exists,
iff the stream exists (its b"Q" meta) and is attached to L, and then L has an "l" record;
a stream and its lease share a namespace.

Semantics. An append with `lease` L (the lease must exist and be in the append's
namespace, else 404 `lease_not_found` / 400 `invalid_argument`, checked before anything
else, so nothing is appended) attaches the stream to L, moving it from any other lease.
An append without `lease` leaves the attachment as it is: streams are append-only and
usually written by many appends, so unlike a put (which replaces the whole value and so
detaches) an append does not detach. The attachment is set even when every event of the
append is a duplicate (a replay stores no event and takes no revision; the attachment,
like a lease record, is not versioned), so an agent replaying its log under a new lease
moves its stream to that lease.

Revoking or expiring L deletes every attached stream at the revoke's revision, with all
its records: meta b"Q", events b"q", dedup records b"d", archive tombstones b"B" and its
"J"/"j" attachment. Segments already sealed stay in the archive and their b"S" records
stay (they are the namespace's, not the stream's), but without tombstones nothing points
at them any more: read_stream no longer answers 410 for them and archive_restore cannot
bring them back into the stream. Afterwards the stream does not exist: stream_info
answers 404 `stream_not_found`, read_stream reads it as empty (at a past revision too:
stream records are not versioned), and an append creates it
anew from seq 1 (new create_revision; old event ids are forgotten, so they are new again).

Cost: deleting a stream is linear in its stored events and dedup records, all in the one
apply of the revoke/expire entry (no budget, unlike truncate_stream's): measured at the
unit level (tests/unit/store/test_stream_leases.py, the last test: one in-process state
machine on a shared 2-core machine) about 0.07 s for the revoke entry that deletes a
10,000-event stream with ids (20,000 RocksDB deletes in one write batch), so about 7 us
per event. A lease holding millions of events makes one
raft entry that slow on every node; truncate or keep such streams off short leases.
"""

from __future__ import annotations

from statekeeper.node.store import lease_state
from statekeeper.node.store.apply import EntryTx
from statekeeper.node.store.keys import (
    SEP,
    archived_events_prefix,
    inc,
    lease_streams_prefix,
    stream_dedup_key,
    stream_event_prefix,
    stream_lease_key,
    stream_meta_key,
    unpack,
)
from statekeeper.node.store.lease_state import LeaseRecord
from statekeeper.node.store.reads import Source


def lease_for_append(tx: EntryTx, op: dict) -> int:
    """The lease an append attaches its stream to (0: none given, leave it as it is).
    Raises lease_not_found (also for another namespace's lease) before the append touches anything."""
    lease = op.get("lease")
    if lease is None:
        return 0
    lease_state.load_in_ns(tx, lease, op["ns"], "stream")
    return lease


def attach(tx: EntryTx, ns_b: bytes, stream_b: bytes, lease: int) -> None:
    """After an append with `lease` (> 0) to the existing stream: attach it to `lease`,
    moving it from its old lease if it had another."""
    jk = stream_lease_key(ns_b, stream_b)
    raw = tx.point(jk)
    old = unpack(raw) if raw is not None else 0
    if old == lease:
        return
    member = ns_b + SEP + stream_b
    if old:
        tx.stage(lease_streams_prefix(old) + member, None)
    tx.stage(jk, tx.pack(lease))
    tx.stage(lease_streams_prefix(lease) + member, b"")


def attached_streams(src: Source, lease: int):
    """(ns 0x00 stream) of every stream attached to the lease, in byte order."""
    prefix = lease_streams_prefix(lease)
    skip = len(prefix)
    # The next lease's prefix bounds this one (lease8 may end in 0xff: no inc()).
    for k, _ in src.scan(prefix, lease_streams_prefix(lease + 1)):
        yield k[skip:]


def _delete_range(tx: EntryTx, lo: bytes, hi: bytes) -> int:
    keys = [k for k, _ in tx.scan(lo, hi)]  # collect first: a scan sees staged deletes
    for k in keys:
        tx.stage(k, None)
    return len(keys)


def delete_stream(tx: EntryTx, ns_b: bytes, stream_b: bytes) -> int:
    """Stage the deletion of every record of the stream (meta, events, dedup records,
    archive tombstones, its attachment); how many records went."""
    meta_key = stream_meta_key(ns_b, stream_b)
    n = 0
    if tx.point(meta_key) is not None:
        tx.stage(meta_key, None)
        n += 1
    for prefix in (
        stream_event_prefix(ns_b, stream_b),
        stream_dedup_key(ns_b, stream_b, ""),  # b"d" ns 0x00 stream 0x00
        archived_events_prefix(ns_b, stream_b),
    ):
        n += _delete_range(tx, prefix, inc(prefix))
    jk = stream_lease_key(ns_b, stream_b)
    raw = tx.point(jk)
    if raw is not None:
        tx.stage(jk, None)
        tx.stage(lease_streams_prefix(unpack(raw)) + ns_b + SEP + stream_b, None)
    tx.wrote = True
    return n


def delete_streams(tx: EntryTx, lease: int, rec: LeaseRecord) -> int:
    """The revoke hook: delete every stream attached to the lease; how many streams."""
    members = list(attached_streams(tx, lease))  # collect first: deleting detaches
    for member in members:
        ns_b, stream_b = member.split(SEP, 1)
        delete_stream(tx, ns_b, stream_b)
    return len(members)
