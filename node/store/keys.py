"""The store's on-disk format: every RocksDB key the store writes, and what its value holds.

This module owns the format. Every other module of node/store builds and parses keys
through the names below; a data directory written by one version must open in the next,
so nothing here changes meaning. A new op family adds a new tag byte (and a row below).

One RocksDB, raw mode, default column family; every value is msgpack; `rev8`/`ms8` are
unsigned 64-bit big-endian so byte order == numeric order; `ns` and `key` are UTF-8 and
contain no NUL, so NUL works as separator and byte order of the composite keys equals
(ns, key, revision) order:

    b"m"                                 meta map: applied_index, revision,
                                         compact_revision, clock, pruned_rev, idem_pruned,
                                         changes_pruned
    b"c" ns 0x00 key                     current index of live keys: [version,
                                         create_revision, mod_revision, lease]
                                         (lease 0: none); the 3-field shape (no
                                         lease: see "K") is read too, see below
    b"h" ns 0x00 key 0x00 rev8           history record written at revision rev:
                                         [value, version, create_revision], or nil
                                         for a tombstone (the key was deleted at rev)
    b"s" rev8 <history key>              empty; the history record is superseded at
                                         rev (no read at >= rev needs it). Written
                                         before issue 28 only (see "r"); still pruned.
    b"i" ns 0x00 idempotency_key         [expires_ms, revision, result, op_digest]
    b"e" ms8 ns 0x00 idempotency_key     empty; expiry index of the "i" records
    b"Q" ns 0x00 stream                  stream meta (node/store/streams.py): [first_seq,
                                         last_seq, count, bytes, create_revision,
                                         mod_revision]
    b"q" ns 0x00 stream 0x00 seq8        stream event at seq (1, 2, ... consecutive):
                                         [data, type, time_ms, revision, id, meta]
                                         (id nil when absent, meta {} when absent)
    b"d" ns 0x00 stream 0x00 event_id    event-id dedup record: [seq, digest16], the
                                         seq the event got and a 16-byte BLAKE2b digest
                                         of msgpack [data, type, meta] (meta keys sorted)
    b"l" lease8                          lease (node/store/leases.py): [ns, ttl_ms,
                                         expires_ms, granted_revision]; lease8 = 0 is
                                         no lease but the counter: the next lease id
    b"x" ms8 lease8                      empty; expiry index of the "l" records
                                         (ms8 = the lease's expires_ms)
    b"k" lease8 ns 0x00 key              empty; the live key is attached to the lease
    b"K" ns 0x00 key                     the lease the live key is attached to (int)
    b"j" lease8 ns 0x00 stream           empty; the stream is attached to the lease
                                         (node/store/stream_leases.py): revoking or
                                         expiring the lease deletes the stream
    b"J" ns 0x00 stream                  the lease the stream is attached to (int); "J"
                                         exists iff "j" does, iff the stream exists (its
                                         "Q") and was last appended to with that lease
    b"r" rev8 ns 0x00 key                the change log (node/api/watch.py): key was put or
                                         deleted at rev (its "h" record at rev says
                                         which). Value: the rev8s of the key's "h"
                                         records the write superseded at rev (no read
                                         at >= rev needs them): empty for a put that
                                         created the key, the previous mod_revision for
                                         an overwrite, that and rev itself for a delete
                                         (a deleted key vanishes once compacted past it).
                                         Written by every put/delete; pruned up to
                                         compact_revision with the records it names.
    b"P" ns 0x00 target 0x00 prefix      retention policy (node/store/retention.py):
                                         [keep_last, keep_every, max_age_s,
                                         create_revision, mod_revision] (nil = rule unset)
                                         or the same + [within] (str, target "keys" only;
                                         written only when set, so a 5-item record is a
                                         policy without it); target is "keys" or "streams"
    b"g" ns                              the namespace's last applied gc op:
                                         [revision, clock_ms, keys_deleted, events_removed]
    b"t" desc8                           revision-time index: desc8 = 2**64-1 - clock_ms,
                                         value = the revision after the entry at clock_ms
                                         (every revision <= it was applied at <= clock_ms).
                                         One record whenever the clock moved >= 60 s past
                                         the newest one (descending, so the newest record
                                         at or before a time is one seek away). Kept
                                         (about 1440 tiny records a day).
    b"A" ns 0x00 key                     archived-key tombstone (node/store/archive.py):
                                         [segment_id, archived_revision,
                                         mod_revision_archived]; the key was archived to
                                         that segment by the seal at archived_revision.
                                         Removed by a put that creates the key, or by its
                                         restore.
    b"B" ns 0x00 stream 0x00 from8       archived-events tombstone: [before_seq,
                                         segment_id, archived_revision]; the stream's events
                                         [from_seq, before_seq) are in that segment.
    b"S" ns 0x00 segment_id              a sealed archive segment: [url, sha256, bytes,
                                         sealed_revision, keys, events, restored_keys,
                                         restored_events] (counts summed over its seals
                                         and restores)
    b"T" token_id                        an auth token (node/store/auth.py): {hash, name,
                                         grants: [[ns_pattern, prefix, role]], created_ms,
                                         expires_ms} (expires_ms 0: never); removed by its
                                         revoke. Not versioned, no revision, not in any
                                         namespace (watchers see nothing of it).

CRDTs (node/store/crdt.py) have no records of their own: a CRDT is a kv key whose value
is the envelope msgpack [b"skcrdt", 1, type, state].

The value of a key is stored once (in its "h" record); "c" holds only metadata so
writes stay cheap and reads of the latest state need no history scan. Stream records are
not versioned: an event's `revision` says when it appeared, so a read at a past revision
keeps the events at or below it; `compact` never prunes them. Lease records are not
versioned either: they hold the current state only ("K"/"k" exist exactly while the key
is live and attached; a delete or a put without a lease removes both; "J"/"j" exist
exactly while the stream exists and is attached: an append with `lease` sets them, one
without leaves them, the lease's revoke/expiry deletes the stream and them). The "c"
record carries the key's lease (4th field) so that a put, which reads "c" anyway, needs
no "K" read to learn what it detaches (issue 28: one point read fewer per put of a live
key). Records written before that have 3 fields and say nothing about the lease: for them
"K" is read (`cur_lease` is None), so data dirs and snapshots of older versions open
unchanged; a put rewrites the record in the 4-field shape. "K"/"k" are still written for
every attached key (lock_list and lease revocation read them). Older versions cannot read
the 4-field shape (no downgrade).

Superseded history: before issue 28 every write also stored an "s" entry per history
record it superseded (a fourth record per put) and left "r" values empty; now the "r"
record's value names them (kv.write_put: 4 -> 3 records per put). compaction.py prunes
both ("s" entries of older data dirs and snapshots, with `pruned_rev` as their seek
position; "r" with `changes_pruned`), so old data opens and compacts unchanged; an
older version would read the new data correctly but never prune the history records
named only in "r" values (no downgrade). Records written before idempotency keys were scoped to a namespace (b"i" idempotency_key, 3 fields) are
never matched again and expire as before.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgpack

META = b"m"
CUR = b"c"
HIST = b"h"
SUPERSEDED = b"s"
IDEM = b"i"
IDEM_EXP = b"e"
STREAM_META = b"Q"
STREAM_EVENT = b"q"
STREAM_DEDUP = b"d"
LEASE = b"l"
LEASE_EXP = b"x"
LEASE_KEY = b"k"
KEY_LEASE = b"K"
LEASE_STREAM = b"j"
STREAM_LEASE = b"J"
CHANGE = b"r"
RETENTION = b"P"
RETENTION_GC = b"g"
TIME_INDEX = b"t"
ARCHIVED_KEY = b"A"
ARCHIVED_EVENTS = b"B"
SEGMENT = b"S"
TOKEN = b"T"
SEP = b"\x00"
NS_END = b"\x01"  # ns + NS_END sorts after every ns + SEP + key

# Every key starts with one of the tag bytes above, so [FIRST_KEY, PAST_LAST_KEY) is all.
FIRST_KEY = b""
PAST_LAST_KEY = b"\xff"

_U64 = struct.Struct(">Q")
p64 = _U64.pack
INF = 2**64 - 1
TOMBSTONE = msgpack.packb(None)


def u64(b: bytes) -> int:
    return _U64.unpack(b)[0]


def unpack(b: bytes) -> Any:
    return msgpack.unpackb(b, raw=False)


def cur_key(ns_b: bytes, key_b: bytes) -> bytes:
    """b"c" ns 0x00 key: the live key's [version, create_revision, mod_revision]."""
    return CUR + ns_b + SEP + key_b


def cur_lease(meta: list) -> int | None:
    """The lease a "c" record names (0: none); None for a record of the 3-field shape
    written by older versions, whose lease only "K" knows (node/store/lease_state.py)."""
    return meta[3] if len(meta) > 3 else None


def hist_prefix(ns_b: bytes, key_b: bytes) -> bytes:
    """b"h" ns 0x00 key 0x00: append rev8 for the key's history record at rev."""
    return HIST + ns_b + SEP + key_b + SEP


def hist_prefix_of(ck: bytes) -> bytes:
    """hist_prefix() of the key whose cur_key() is `ck`."""
    return HIST + ck[1:] + SEP


def idem_record_id(ns: str, idempotency_key: str) -> bytes:
    """Where an idempotency record lives: its ns, NUL, its key (ns has no NUL)."""
    return ns.encode() + SEP + idempotency_key.encode()


def idem_exp_key(expires_ms: int, record_id: bytes) -> bytes:
    """b"e" ms8 record_id: the expiry index entry of IDEM + record_id."""
    return IDEM_EXP + p64(expires_ms) + record_id


def stream_meta_key(ns_b: bytes, stream_b: bytes) -> bytes:
    """b"Q" ns 0x00 stream: the stream's meta record."""
    return STREAM_META + ns_b + SEP + stream_b


def stream_event_prefix(ns_b: bytes, stream_b: bytes) -> bytes:
    """b"q" ns 0x00 stream 0x00: append seq8 for the stream's event at seq."""
    return STREAM_EVENT + ns_b + SEP + stream_b + SEP


def stream_dedup_key(ns_b: bytes, stream_b: bytes, event_id: str) -> bytes:
    """b"d" ns 0x00 stream 0x00 event_id: the seq and digest an event id was stored with."""
    return STREAM_DEDUP + ns_b + SEP + stream_b + SEP + event_id.encode()


def change_key(rev: int, ck: bytes) -> bytes:
    """b"r" rev8 ns 0x00 key: the change-log record of the key whose cur_key() is `ck`."""
    return CHANGE + p64(rev) + ck[1:]


def retention_key(ns_b: bytes, target: str, prefix: str) -> bytes:
    """b"P" ns 0x00 target 0x00 prefix: a retention policy."""
    return RETENTION + ns_b + SEP + target.encode() + SEP + prefix.encode()


def archived_key(ns_b: bytes, key_b: bytes) -> bytes:
    """b"A" ns 0x00 key: the key's archive tombstone."""
    return ARCHIVED_KEY + ns_b + SEP + key_b


def archived_events_prefix(ns_b: bytes, stream_b: bytes) -> bytes:
    """b"B" ns 0x00 stream 0x00: append from8 for an archived-events tombstone."""
    return ARCHIVED_EVENTS + ns_b + SEP + stream_b + SEP


def segment_key(ns_b: bytes, segment_id: str) -> bytes:
    """b"S" ns 0x00 segment_id: a sealed segment's record."""
    return SEGMENT + ns_b + SEP + segment_id.encode()


def time_index_key(clock_ms: int) -> bytes:
    """b"t" desc8: the revision-time index record at clock_ms (newest first)."""
    return TIME_INDEX + p64(INF - clock_ms)


def lease_key(lease: int) -> bytes:
    """b"l" lease8: the lease's record (lease 0: the next-id counter)."""
    return LEASE + p64(lease)


def lease_exp_key(expires_ms: int, lease: int) -> bytes:
    """b"x" ms8 lease8: the expiry index entry of a lease."""
    return LEASE_EXP + p64(expires_ms) + p64(lease)


def lease_keys_prefix(lease: int) -> bytes:
    """b"k" lease8: append ns 0x00 key for a key attached to the lease."""
    return LEASE_KEY + p64(lease)


def key_lease_key(ns_b: bytes, key_b: bytes) -> bytes:
    """b"K" ns 0x00 key: the lease the live key is attached to."""
    return KEY_LEASE + ns_b + SEP + key_b


def lease_streams_prefix(lease: int) -> bytes:
    """b"j" lease8: append ns 0x00 stream for a stream attached to the lease."""
    return LEASE_STREAM + p64(lease)


def stream_lease_key(ns_b: bytes, stream_b: bytes) -> bytes:
    """b"J" ns 0x00 stream: the lease the stream is attached to."""
    return STREAM_LEASE + ns_b + SEP + stream_b


def inc(prefix: bytes) -> bytes:
    """The first byte string after every string starting with `prefix`."""
    # UTF-8 never contains 0xff, so bumping the last byte gives the prefix's end.
    return prefix[:-1] + bytes([prefix[-1] + 1])


def bounds(
    tag: bytes,
    ns_b: bytes,
    prefix: str | None,
    start: str | None,
    end: str | None,
    after: str | None,
) -> tuple[bytes, bytes]:
    """[lo, hi) of a key range within namespace ns in the `tag` keyspace.

    For history keys (key 0x00 rev8) the same bounds select exactly the records of
    the keys in range, because NUL sorts before every byte of a key.
    """
    base = tag + ns_b + SEP
    if prefix:
        pb = prefix.encode()
        lo, hi = base + pb, base + inc(pb)
    else:
        lo = base + start.encode() if start else base
        hi = base + end.encode() if end else tag + ns_b + NS_END
    if after is not None:
        lo = max(lo, base + after.encode())
    return lo, hi


@dataclass(frozen=True)
class Meta:
    """The b"m" record: where the store stands after the last applied raft entry.

    pruned_rev: history is physically pruned up to here (a seek position that skips
    RocksDB tombstones); idem_pruned: idempotency records expiring up to here are gone;
    changes_pruned: the change log ("r") is pruned up to this revision (a seek position).
    """

    applied_index: int = 0
    revision: int = 0
    compact_revision: int = 0
    clock: int = 0
    pruned_rev: int = 0
    idem_pruned: int = 0
    changes_pruned: int = 0

    @classmethod
    def decode(cls, raw: bytes | None) -> Meta:
        m = unpack(raw) if raw is not None else {}
        return cls(
            m.get("applied_index", 0),
            m.get("revision", 0),
            m.get("compact_revision", 0),
            m.get("clock", 0),
            m.get("pruned_rev", 0),
            m.get("idem_pruned", 0),
            m.get("changes_pruned", 0),
        )

    def encode(self, pack: Any) -> bytes:
        # The map's field order is part of the format (nodes compare DB bytes).
        return pack(
            {
                "applied_index": self.applied_index,
                "revision": self.revision,
                "compact_revision": self.compact_revision,
                "clock": self.clock,
                "pruned_rev": self.pruned_rev,
                "idem_pruned": self.idem_pruned,
                "changes_pruned": self.changes_pruned,
            }
        )
