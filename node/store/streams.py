"""Event streams: op `append` (a write, also inside a txn branch), op truncate_stream,
and the reads read_stream, stream_info, list_streams (docs/protocol.md, "Streams").

A stream is an append-only sequence of events in a namespace, named like a kv key. Each
event gets the next `seq` (1, 2, ... consecutive, assigned here in apply), the entry's
leader time (`tx.clock`, ms) and the revision of the append that stored it.

The five things (docs/protocol.md has them for users):

1. Consistency. An append is one raft write, linearizable like put: one revision per
   append (all its events share it; inside a txn, the txn's). read_stream, stream_info and
   list_streams are served like get/range: linearizable by default, serializable on
   request, `min_revision` for read-your-writes; read_stream also reads at a past
   `revision` (events whose revision is <= it), and its pages all come from the first
   page's revision. stream_info and list_streams answer the current state only.
2. ok / failed / unknown. ok: the events are stored at the answered seqs (or were
   already: `duplicate: true`). failed (4xx): nothing was stored. unknown (timeout,
   lost connection): retry with the same idempotency_key, which replays the first
   result; or with the same event ids, which turns stored events into duplicates
   (their stored seq is answered, nothing is stored twice, and when every event is a
   duplicate the append succeeds without checking `expect` and without a new revision,
   so an agent replaying its log after a crash succeeds). An event id seen again with
   another payload fails `idempotency_key_reused` (422), naming the id and its index.
   Event-id dedup records are kept as long as the stream; op-level idempotency keys
   expire after retention.idempotency_seconds.
3. Limits. events per append 1..max_events_per_append (413 `too_many_events`); data
   <= max_value_bytes (413 `value_too_large`); stream name like a key (413
   `key_too_large`, 400 otherwise); type <= 256 UTF-8 bytes, id 1..128 chars, meta <= 64
   scalar entries and <= 4096 bytes packed, ids unique within an append (400
   `invalid_argument`); `expect` not met: 409 `expectation_failed` with `last_seq` and
   `exists`; stream_info of a missing stream: 404 `stream_not_found`; read_stream
   `wait_ms` <= 60000.
4. Key layout (node/store/keys.py has the rows): b"Q" ns 0x00 stream -> meta [first_seq,
   last_seq, count, bytes, create_revision, mod_revision]; b"q" ns 0x00 stream 0x00 seq8
   -> event [data, type, time_ms, revision, id, meta]; b"d" ns 0x00 stream 0x00 id ->
   dedup [seq, digest16]. first_seq starts at 1 and moves forward by truncate_stream, a
   retention policy's gc (node/store/retention.py) or an archive_seal, and back only by an
   archive_restore of archived events (node/store/archive.py); the first three remove the
   events below the new first_seq with their dedup records (an id truncated away can be
   appended again as new). `compact` never prunes events. A read_stream from a seq below
   first_seq starts at first_seq (the answer carries `first_seq`), unless an archive
   tombstone covers that seq (node/store/archive.py): then 410 `archived`; a read at a
   past revision sees only the events still stored. stream_info's `archived_before` is
   the smallest archived from_seq (null: none).
   Leases: an append with `lease` attaches the stream to it (b"j"/b"J",
   node/store/stream_leases.py); the lease's revoke or expiry deletes the stream with all
   its records ("Q", "q", "d", "B"), after which an append creates it anew from seq 1.
5. Chaos coverage: chaos/stream_workload.py in every scenario, checked by
   chaos/checker/streams.py (docs/protocol.md lists the rules).

Invariants: events first_seq..last_seq all exist (none when first_seq = last_seq + 1,
after a truncation of everything; count = last_seq - first_seq + 1); event revisions never decrease with
seq (so the events visible at revision R are a prefix, found by binary search); an id's
dedup record names the seq of the event that carries that id.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from itertools import islice
from typing import Any

import msgpack

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.fields import decode_continuation, encode_continuation, invalid
from statekeeper.node.ops.streams import decode_stream_continuation, encode_stream_continuation
from statekeeper.node.store import stream_leases
from statekeeper.node.store.apply import EntryTx, handles, read_op
from statekeeper.node.store.archive_tombstones import archived_before, check_events
from statekeeper.node.store.keys import (
    STREAM_META,
    bounds,
    p64,
    stream_dedup_key,
    stream_event_prefix,
    stream_meta_key,
    u64,
    unpack,
)
from statekeeper.node.store.reads import Source, check_revision


@dataclass(frozen=True, slots=True)
class StreamMeta:
    """The b"Q" record of a stream (it exists once the first append stored an event)."""

    first_seq: int
    last_seq: int
    count: int
    bytes: int
    create_revision: int
    mod_revision: int

    @classmethod
    def load(cls, src: Source, key: bytes) -> StreamMeta | None:
        raw = src.point(key)
        return None if raw is None else cls(*unpack(raw))

    def encode(self, pack: Any) -> bytes:
        return pack(
            [
                self.first_seq,
                self.last_seq,
                self.count,
                self.bytes,
                self.create_revision,
                self.mod_revision,
            ]
        )

    def info(self, stream: str) -> dict:
        """The stream as stream_info / list_streams show it (without `revision`)."""
        return {
            "stream": stream,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "count": self.count,
            "bytes": self.bytes,
            "create_revision": self.create_revision,
            "mod_revision": self.mod_revision,
        }


def event_digest(event: dict) -> bytes:
    """What binds an event id to its payload: BLAKE2b-16 of msgpack [data, type, meta]
    with meta's keys sorted."""
    meta = {k: event["meta"][k] for k in sorted(event["meta"])}
    packed = msgpack.packb([event["data"], event["type"], meta], use_bin_type=True)
    return hashlib.blake2b(packed, digest_size=16).digest()


# -- append --------------------------------------------------------------------------------


def _duplicates(tx: EntryTx, ns_b: bytes, stream_b: bytes, op: dict) -> list[tuple]:
    """Per event: (stored seq or None, digest or None). Raises idempotency_key_reused for
    an id stored with another payload."""
    out = []
    for i, ev in enumerate(op["events"]):
        if ev["id"] is None:
            out.append((None, None))
            continue
        digest = event_digest(ev)
        rec = tx.point(stream_dedup_key(ns_b, stream_b, ev["id"]))
        if rec is None:
            out.append((None, digest))
            continue
        seq, stored = unpack(rec)
        if stored != digest:
            raise OpError(
                "idempotency_key_reused",
                f"events[{i}].id {ev['id']!r} is already in stream {op['stream']!r} (seq "
                f"{seq}) with another payload; nothing was appended",
                event_id=ev["id"],
                index=i,
            )
        out.append((seq, digest))
    return out


def _check_expectation(expect: Any, stream: str, meta: StreamMeta | None) -> None:
    last = meta.last_seq if meta is not None else 0
    exists = meta is not None
    if expect == "any":
        return
    if expect == "no_stream":
        ok = not exists
    elif expect == "exists":
        ok = exists
    else:
        ok = last == expect
    if not ok:
        state = f"last_seq {last}" if exists else "no events (it does not exist)"
        raise OpError(
            "expectation_failed",
            f"stream {stream!r} has {state}; the append expected {expect!r}",
            last_seq=last,
            exists=exists,
        )


@handles("append")
def append(tx: EntryTx, op: dict) -> dict:
    """Append the op's events that are not duplicates at last_seq + 1, ..., one revision."""
    ns_b, stream = op["ns"].encode(), op["stream"]
    stream_b = stream.encode()
    lease = stream_leases.lease_for_append(tx, op)  # 404 before anything is appended
    meta_key = stream_meta_key(ns_b, stream_b)
    meta = StreamMeta.load(tx, meta_key)
    last = meta.last_seq if meta is not None else 0
    dups = _duplicates(tx, ns_b, stream_b, op)
    if all(seq is not None for seq, _ in dups):  # a replay: nothing to store, no revision
        if lease and meta is not None:
            stream_leases.attach(tx, ns_b, stream_b, lease)  # not versioned: no revision
        events = [{"seq": seq, "duplicate": True} for seq, _ in dups]
        return {
            "revision": tx.revision,
            "stream": stream,
            "first_seq": None,
            "last_seq": last,
            "events": events,
        }
    _check_expectation(op["expect"], stream, meta)
    rev = tx.revision + 1
    prefix = stream_event_prefix(ns_b, stream_b)
    seq, added_bytes, events = last, 0, []
    for ev, (dup_seq, digest) in zip(op["events"], dups, strict=True):
        if dup_seq is not None:
            events.append({"seq": dup_seq, "duplicate": True})
            continue
        seq += 1
        record = [ev["data"], ev["type"], tx.clock, rev, ev["id"], ev["meta"]]
        tx.stage(prefix + p64(seq), tx.pack(record))
        if digest is not None:
            tx.stage(stream_dedup_key(ns_b, stream_b, ev["id"]), tx.pack([seq, digest]))
        added_bytes += len(ev["data"])
        events.append({"seq": seq, "duplicate": False})
    first = meta.first_seq if meta is not None else 1
    created = meta.create_revision if meta is not None else rev
    total = (meta.bytes if meta is not None else 0) + added_bytes
    new_meta = StreamMeta(first, seq, seq - first + 1, total, created, rev)
    tx.stage(meta_key, new_meta.encode(tx.pack))
    if lease:
        stream_leases.attach(tx, ns_b, stream_b, lease)
    tx.wrote = True
    return {
        "revision": rev,
        "stream": stream,
        "first_seq": last + 1,
        "last_seq": seq,
        "events": events,
    }


# -- truncation ----------------------------------------------------------------------------


def truncate(tx: EntryTx, ns_b: bytes, stream_b: bytes, before_seq: int, budget: int) -> tuple:
    """Remove events first_seq..before_seq-1 (at most `budget`, never past last_seq) and
    their id dedup records; moves first_seq. Returns (meta after or None if the stream does
    not exist, events removed). Only forward: a before_seq <= first_seq removes nothing."""
    meta_key = stream_meta_key(ns_b, stream_b)
    meta = StreamMeta.load(tx, meta_key)
    if meta is None:
        return None, 0
    stop = min(before_seq, meta.last_seq + 1, meta.first_seq + max(0, budget))
    if stop <= meta.first_seq:
        return meta, 0
    prefix = stream_event_prefix(ns_b, stream_b)
    items = list(tx.scan(prefix + p64(meta.first_seq), prefix + p64(stop)))
    freed = 0
    for k, raw in items:
        data, _, _, _, event_id, _ = unpack(raw)
        freed += len(data)
        tx.stage(k, None)
        if event_id is not None:
            tx.stage(stream_dedup_key(ns_b, stream_b, event_id), None)
    removed = stop - meta.first_seq
    new = StreamMeta(
        stop,
        meta.last_seq,
        meta.count - removed,
        meta.bytes - freed,
        meta.create_revision,
        meta.mod_revision,  # the last append's: truncation adds no event
    )
    tx.stage(meta_key, new.encode(tx.pack))
    tx.wrote = True
    return new, removed


@handles("truncate_stream")
def truncate_stream(tx: EntryTx, op: dict) -> dict:
    """{revision, stream, first_seq, last_seq, removed, more}: one revision if it removed
    anything; 404 `stream_not_found` for a stream that does not exist."""
    from statekeeper.node.ops.retention import MAX_TRUNCATE_EVENTS

    stream, before = op["stream"], op["before_seq"]
    meta, removed = truncate(tx, op["ns"].encode(), stream.encode(), before, MAX_TRUNCATE_EVENTS)
    if meta is None:
        raise OpError(
            "stream_not_found", f"stream {stream!r} does not exist in namespace {op['ns']!r}"
        )
    return {
        "revision": tx.revision + 1 if removed else tx.revision,
        "stream": stream,
        "first_seq": meta.first_seq,
        "last_seq": meta.last_seq,
        "removed": removed,
        "more": meta.first_seq < min(before, meta.last_seq + 1),
    }


# -- reads ---------------------------------------------------------------------------------


def _event_revision(raw: bytes) -> int:
    """The revision field of a packed event, without copying its data."""
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(raw)
    unpacker.read_array_header()
    for _ in range(3):  # data, type, time_ms
        unpacker.skip()
    return unpacker.unpack()


def last_seq_at(src: Source, prefix: bytes, meta: StreamMeta | None, revision: int) -> int:
    """The stream's last seq as of `revision` (0: it did not exist yet)."""
    if meta is None or meta.create_revision > revision:
        return 0
    if meta.mod_revision <= revision:
        return meta.last_seq
    # Event revisions never decrease with seq: find the last event at or below `revision`.
    # Invariant: event `lo` is visible (create_revision <= revision), event `hi` is not.
    lo, hi = meta.first_seq, meta.last_seq
    if lo > hi:  # truncated to nothing: no event is left to read at any revision
        return meta.last_seq
    raw = src.point(prefix + p64(lo))
    if raw is None or _event_revision(raw) > revision:
        return lo - 1  # the events visible at `revision` were all truncated
    while hi - lo > 1:
        mid = (lo + hi) // 2
        raw = src.point(prefix + p64(mid))
        if raw is not None and _event_revision(raw) <= revision:
            lo = mid
        else:
            hi = mid
    return lo


def _event(seq: int, raw: bytes) -> dict:
    data, etype, time_ms, revision, event_id, meta = unpack(raw)
    out: dict[str, Any] = {
        "seq": seq,
        "data": data,
        "type": etype,
        "time": time_ms,
        "revision": revision,
    }
    if event_id is not None:
        out["id"] = event_id
    if meta:
        out["meta"] = meta
    return out


def _events(src: Source, prefix: bytes, lo: int, hi: int) -> list[dict]:
    """Events lo..hi (all exist) in ascending seq order."""
    if lo > hi:
        return []
    # Collect first: a ReadView shares one iterator between scan and point.
    items = list(src.scan(prefix + p64(lo), prefix + p64(hi + 1)))
    return [_event(u64(k[-8:]), v) for k, v in items]


def _page_bounds(
    direction: str, start: int | None, first: int, last: int, limit: int
) -> tuple[int, int, int | None]:
    """(lo, hi, next start or None) of one page of seqs within first..last."""
    if direction == "forward":
        lo = first if start is None else max(first, start)
        hi = min(last, lo + limit - 1)
        return lo, hi, (hi + 1 if lo <= hi < last else None)
    hi = last if start is None else min(last, start)
    lo = max(first, hi - limit + 1)
    return lo, hi, (lo - 1 if first < lo <= hi else None)


@read_op("read_stream")
def read_stream(src: Source, limits: Limits, op: dict) -> dict:
    """{revision, stream, events, last_seq, more, continuation?} (see the module docstring)."""
    start, direction, revision = op.get("start"), op.get("direction", "forward"), op.get("revision")
    token = op.get("continuation")
    if token is not None:
        token_rev, start, direction = decode_stream_continuation(token)
        if revision is not None and revision != token_rev:
            raise invalid("revision does not match the continuation's revision")
        revision = token_rev
    r = check_revision(revision, src.revision, src.compact_revision)
    limit = max(1, min(op.get("limit", 1000), limits.max_range_limit))
    stream = op["stream"]
    ns_b, stream_b = op["ns"].encode(), stream.encode()
    meta = StreamMeta.load(src, stream_meta_key(ns_b, stream_b))
    prefix = stream_event_prefix(ns_b, stream_b)
    last = last_seq_at(src, prefix, meta, r)
    first = meta.first_seq if meta is not None else 1
    if start is not None and start < first and direction == "forward" and meta is not None:
        check_events(src, op["ns"], stream, start)  # 410 `archived` if a tombstone holds it
    lo, hi, next_start = _page_bounds(direction, start, first, last, limit)
    events = _events(src, prefix, lo, hi)
    if direction == "backward":
        events.reverse()
    result: dict[str, Any] = {
        "revision": r,
        "stream": stream,
        "events": events,
        "first_seq": first,
        "last_seq": last,
        "more": next_start is not None,
    }
    if next_start is not None:
        result["continuation"] = encode_stream_continuation(r, next_start, direction)
    return result


@read_op("stream_info")
def stream_info(src: Source, limits: Limits, op: dict) -> dict:
    """{revision, stream, first_seq, last_seq, count, bytes, create_revision, mod_revision}."""
    stream = op["stream"]
    meta = StreamMeta.load(src, stream_meta_key(op["ns"].encode(), stream.encode()))
    if meta is None:
        raise OpError(
            "stream_not_found", f"stream {stream!r} does not exist in namespace {op['ns']!r}"
        )
    before = archived_before(src, op["ns"].encode(), stream.encode())
    return {"revision": src.revision, **meta.info(stream), "archived_before": before}


@read_op("list_streams")
def list_streams(src: Source, limits: Limits, op: dict) -> dict:
    """{revision, streams: [info], more, continuation?}: names in byte order. Every page is
    served at the current revision (stream meta is not versioned); only a lease's revoke
    or expiry removes a stream, so paging misses none that existed when the first page
    was read and still exists."""
    after = None
    token = op.get("continuation")
    if token is not None:
        after = decode_continuation(token, limits)[1]
    ns_b = op["ns"].encode()
    lo, hi = bounds(STREAM_META, ns_b, op.get("prefix"), None, None, after)
    limit = max(1, min(op.get("limit", 1000), limits.max_range_limit))
    items = list(islice(src.scan(lo, hi), limit + 1))
    skip = len(ns_b) + 2
    names = [k[skip:].decode() for k, _ in items]
    streams = [StreamMeta(*unpack(v)).info(names[i]) for i, (_, v) in enumerate(items[:limit])]
    result: dict[str, Any] = {
        "revision": src.revision,
        "streams": streams,
        "more": len(items) > limit,
    }
    if len(items) > limit:
        result["continuation"] = encode_continuation(src.revision, names[limit])
    return result
