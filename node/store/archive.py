"""Archival to a cold tier: ops archive_seal, archive_restore; reads archive_plan,
archive_list (docs/protocol.md, "Archival"; declared in node/ops/archive.py). The tombstone
checks of get, read_stream and stream_info live below this module and below kv.py and
streams.py, in node/store/archive_tombstones.py.

The cluster never touches the cold tier: a client's archiver (client/archive/) plans
(archive_plan), reads the items, writes a segment file durably, then seals it
(archive_seal): apply re-checks every item like the retention `gc` does, removes what still
holds and leaves a tombstone naming the segment. A restore writes the items back from the
segment file. Apply reads no clock beyond the entry's, no randomness, nothing but its store.

Invariants:
- A key tombstone b"A" exists only for a key archived by a seal and not live since: it is
  removed by the key's restore and by any put that creates the key (kv.write_put: when the
  key is not live, one point lookup of the tombstone and a delete if found; the cost lands
  only on puts that create a key). Nothing else touches tombstones.
- A stream tombstone b"B" [from_seq, before_seq) lies below the stream's first_seq; the
  stream's tombstones never overlap (a seal starts at first_seq and moves it past its
  range). A restore takes events back NEWEST FIRST: its events must end at first_seq - 1
  and lie within one tombstone, which then shrinks to [from_seq, x) (gone when x ==
  from_seq). Restored events are byte-identical: same seq, data, type, time_ms, ORIGINAL
  revision, id, meta; their id dedup records are rebuilt (an id appended again after the
  archival keeps its newer record). Since event revisions and times never decrease with
  seq, the restored events' must not either, nor exceed the current first event's
  (else the item is skipped "bad_events").
- A restored key is written like a put: a new revision (create_revision = mod_revision =
  the restore's revision, version 1); its archived version and revisions stay in the segment.
- A segment record b"S" sums the counts of every seal and restore naming its id; url,
  sha256, bytes and sealed_revision are the first seal's (a later seal with another sha256
  fails `invalid_argument`).

The five things:

1. Consistency. archive_seal / archive_restore are raft writes, linearizable, one revision
   each (none when nothing was sealed / restored). archive_plan / archive_list are served
   like get (linearizable by default); the plan is computed at the replicated clock with
   node/store/retention_select.py on an ad-hoc policy (stored policies play no part).
2. ok / failed / unknown. Both writes are idempotent in effect (a repeated seal skips what
   it already sealed, a repeated restore skips what is live); retry an unknown result with
   the same idempotency_key to get the first answer.
3. Limits. node/ops/archive.py: 500 items, 10000 events per op; a plan item of a stream
   covers at most 10000 events.
4. Key layout: b"A", b"B", b"S" (node/store/keys.py has the rows). A seal's delete is an
   ordinary delete in the history and change log (watchers see a DELETE).
5. Chaos: none (no chaos scenario archives).
"""

from __future__ import annotations

from itertools import islice
from typing import Any

from statekeeper.node.config import Limits
from statekeeper.node.ops.archive import MAX_ARCHIVE_EVENTS
from statekeeper.node.ops.fields import invalid
from statekeeper.node.store.apply import EntryTx, handles, read_op
from statekeeper.node.store.archive_tombstones import events_tombstone
from statekeeper.node.store.keys import (
    SEGMENT,
    SEP,
    archived_events_prefix,
    archived_key,
    cur_key,
    inc,
    p64,
    segment_key,
    stream_dedup_key,
    stream_event_prefix,
    stream_meta_key,
    unpack,
)
from statekeeper.node.store.kv import write_delete, write_put
from statekeeper.node.store.reads import Source, page_key, page_token
from statekeeper.node.store.retention_select import Policy, select, stored_value_len
from statekeeper.node.store.streams import StreamMeta, event_digest, truncate

# -- archive_seal ----------------------------------------------------------------------------


def _seal_keys(tx: EntryTx, ns_b: bytes, seg_id: str, items: list, skipped: list) -> int:
    n = 0
    for key, mod in items:
        key_b = key.encode()
        ck = cur_key(ns_b, key_b)
        cur = tx.point(ck)
        meta = unpack(cur) if cur is not None else None
        if meta is None or meta[2] != mod:
            skipped.append([key, "missing" if meta is None else "changed"])
            continue
        write_delete(tx, ck, meta)
        tx.stage(archived_key(ns_b, key_b), tx.pack([seg_id, tx.revision + 1, mod]))
        n += 1
    return n


def _seal_streams(tx: EntryTx, ns_b: bytes, seg_id: str, items: list, skipped: list) -> int:
    n = 0
    for stream, lo, before in items:
        stream_b = stream.encode()
        meta = StreamMeta.load(tx, stream_meta_key(ns_b, stream_b))
        if meta is None:
            skipped.append([stream, "missing"])
            continue
        if meta.first_seq != lo or not lo < before <= meta.last_seq + 1:
            skipped.append([stream, "moved"])
            continue
        _, removed = truncate(tx, ns_b, stream_b, before, before - lo)
        prefix = archived_events_prefix(ns_b, stream_b)
        tx.stage(prefix + p64(lo), tx.pack([before, seg_id, tx.revision + 1]))
        n += removed
    return n


def _add_counts(tx: EntryTx, k: bytes, record: list, counts: tuple[int, int, int, int]) -> None:
    for i, c in enumerate(counts):
        record[4 + i] += c
    tx.stage(k, tx.pack(record))


@handles("archive_seal")
def archive_seal(tx: EntryTx, op: dict) -> dict:
    """{revision, segment, sealed_keys, sealed_events, skipped: [[name, reason]]}."""
    ns_b, seg = op["ns"].encode(), op["segment"]
    sk = segment_key(ns_b, seg["id"])
    old = tx.point(sk)
    record = unpack(old) if old is not None else None
    if record is not None and record[1] != seg["sha256"]:
        raise invalid(
            f"segment {seg['id']} is already sealed with sha256 {record[1]}; a segment id "
            "names one file"
        )
    skipped: list = []
    keys = _seal_keys(tx, ns_b, seg["id"], op["keys"], skipped)
    events = _seal_streams(tx, ns_b, seg["id"], op["streams"], skipped)
    if tx.wrote:
        if record is None:
            record = [seg["url"], seg["sha256"], seg["bytes"], tx.revision + 1, 0, 0, 0, 0]
        _add_counts(tx, sk, record, (keys, events, 0, 0))
    return {
        "revision": tx.revision + 1 if tx.wrote else tx.revision,
        "segment": seg["id"],
        "sealed_keys": keys,
        "sealed_events": events,
        "skipped": skipped,
    }


# -- archive_restore -------------------------------------------------------------------------


def _restore_keys(tx: EntryTx, ns_b: bytes, seg_id: str, items: list, skipped: list) -> int:
    n = 0
    for key, value in items:
        key_b = key.encode()
        if tx.point(cur_key(ns_b, key_b)) is not None:
            skipped.append([key, "live"])
            continue
        raw = tx.point(archived_key(ns_b, key_b))
        if raw is None:
            skipped.append([key, "not_archived"])
            continue
        if unpack(raw)[0] != seg_id:
            skipped.append([key, "other_segment"])
            continue
        write_put(tx, ns_b, key_b, key, value, False)  # removes the tombstone: a create
        n += 1
    return n


def _stream_skip(tx: EntryTx, ns_b: bytes, stream_b: bytes, seg_id: str, events: list) -> Any:
    """Why a stream item cannot be restored (a reason), or (meta, tombstone)."""
    meta = StreamMeta.load(tx, stream_meta_key(ns_b, stream_b))
    if meta is None:
        return "missing"
    x = events[0][0]
    found = events_tombstone(tx, ns_b, stream_b, x)
    if found is None:
        return "not_archived"
    if found[2] != seg_id:
        return "other_segment"
    before = found[1]
    seqs_ok = all(ev[0] == x + i for i, ev in enumerate(events))
    if not seqs_ok or x + len(events) != before or before != meta.first_seq:
        return "not_contiguous"
    revs = [ev[4] for ev in events]
    times = [ev[3] for ev in events]
    if revs != sorted(revs) or times != sorted(times):
        return "bad_events"
    if meta.first_seq <= meta.last_seq:
        raw = tx.point(stream_event_prefix(ns_b, stream_b) + p64(meta.first_seq))
        if raw is not None:
            _, _, t, r, _, _ = unpack(raw)
            if revs[-1] > r or times[-1] > t:
                return "bad_events"
    return meta, found


def _restore_stream(tx: EntryTx, ns_b: bytes, stream_b: bytes, events: list, meta, found) -> int:
    prefix = stream_event_prefix(ns_b, stream_b)
    added = 0
    for seq, data, etype, time_ms, rev, eid, emeta in events:
        tx.stage(prefix + p64(seq), tx.pack([data, etype, time_ms, rev, eid, emeta]))
        if eid is not None:
            dk = stream_dedup_key(ns_b, stream_b, eid)
            if tx.point(dk) is None:  # else the id was appended again since: keep that
                digest = event_digest({"data": data, "type": etype, "meta": emeta})
                tx.stage(dk, tx.pack([seq, digest]))
        added += len(data)
    x = events[0][0]
    lo, _, seg_id, archived_rev = found
    tomb = archived_events_prefix(ns_b, stream_b) + p64(lo)
    tx.stage(tomb, None if x == lo else tx.pack([x, seg_id, archived_rev]))
    new = StreamMeta(
        x,
        meta.last_seq,
        meta.count + len(events),
        meta.bytes + added,
        meta.create_revision,
        tx.revision + 1,
    )
    tx.stage(stream_meta_key(ns_b, stream_b), new.encode(tx.pack))
    tx.wrote = True
    return len(events)


@handles("archive_restore")
def archive_restore(tx: EntryTx, op: dict) -> dict:
    """{revision, segment, restored_keys, restored_events, skipped: [[name, reason]]}."""
    ns_b, seg_id = op["ns"].encode(), op["segment"]
    skipped: list = []
    keys = _restore_keys(tx, ns_b, seg_id, op["keys"], skipped)
    events = 0
    for stream, evs in op["streams"]:
        stream_b = stream.encode()
        why = _stream_skip(tx, ns_b, stream_b, seg_id, evs)
        if isinstance(why, str):
            skipped.append([stream, why])
            continue
        events += _restore_stream(tx, ns_b, stream_b, evs, *why)
    if tx.wrote:
        sk = segment_key(ns_b, seg_id)
        raw = tx.point(sk)
        if raw is not None:
            _add_counts(tx, sk, unpack(raw), (0, 0, keys, events))
    return {
        "revision": tx.revision + 1 if tx.wrote else tx.revision,
        "segment": seg_id,
        "restored_keys": keys,
        "restored_events": events,
        "skipped": skipped,
    }


# -- reads -----------------------------------------------------------------------------------


def _plan_items(src: Source, p: Policy, sel: Any) -> list:
    ns_b = p.ns.encode()
    if p.target == "keys":
        return [[k, m, stored_value_len(src, ns_b, k, m)] for k, m in sel.deletes]
    out = []
    for stream, cut in sel.truncates:
        meta = StreamMeta.load(src, stream_meta_key(ns_b, stream.encode()))
        if meta is not None and cut > meta.first_seq:
            out.append([stream, meta.first_seq, min(cut, meta.first_seq + MAX_ARCHIVE_EVENTS)])
    return out


@read_op("archive_plan")
def archive_plan(src: Source, limits: Limits, op: dict) -> dict:
    """{revision, keys: [[key, mod_revision, value_len]], streams: [[stream, first_seq,
    before_seq]], more}: what a retention policy with the op's rules would drop now."""
    p = Policy(
        op["ns"],
        op["target"],
        op["prefix"],
        op["keep_last"],
        op["keep_every"],
        op["max_age_s"],
        0,
        0,
        op["within"],
    )
    sel = select(src, p, [p], getattr(src, "clock", 0))  # no other policy arbitrates
    if p.target == "keys":
        del sel.deletes[op["limit"] + 1 :]
    else:
        del sel.truncates[op["limit"] + 1 :]
    items = _plan_items(src, p, sel)
    more = len(items) > op["limit"]
    items = items[: op["limit"]]
    keys, streams = (items, []) if p.target == "keys" else ([], items)
    return {"revision": src.revision, "keys": keys, "streams": streams, "more": more}


def _segment_info(k: bytes, v: bytes) -> dict:
    ns_b, seg_id = k[1:].split(SEP, 1)
    url, sha, size, rev, keys, events, r_keys, r_events = unpack(v)
    return {
        "ns": ns_b.decode(),
        "id": seg_id.decode(),
        "url": url,
        "sha256": sha,
        "bytes": size,
        "sealed_revision": rev,
        "keys": keys,
        "events": events,
        "restored_keys": r_keys,
        "restored_events": r_events,
    }


@read_op("archive_list")
def archive_list(src: Source, limits: Limits, op: dict) -> dict:
    """{revision, segments: [...], more, continuation?} in (ns, id) byte order."""
    ns = op.get("ns")
    lo = SEGMENT if ns is None else SEGMENT + ns.encode() + SEP
    hi = inc(lo)
    token = op.get("continuation")
    if token is not None:
        lo = max(lo, SEGMENT + page_key(token, "archive_list") + b"\x00")
    limit = max(1, min(op.get("limit", 1000), limits.max_range_limit))
    items = list(islice(src.scan(lo, hi), limit + 1))
    out: dict[str, Any] = {
        "revision": src.revision,
        "segments": [_segment_info(k, v) for k, v in items[:limit]],
        "more": len(items) > limit,
    }
    if len(items) > limit:
        out["continuation"] = page_token(items[limit - 1][0][1:])
    return out
