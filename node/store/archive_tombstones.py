"""The archive tombstone lookups of the read paths: a get of an archived key, a
read_stream from an archived seq (410 `archived`, naming the segment) and stream_info's
`archived_before` (docs/protocol.md, "Archival").

They sit below node/store/kv.py and node/store/streams.py, which call them, and below
node/store/archive.py, which writes the tombstones they read (its docstring has the
invariants and the key layout), so that all three import this module and none imports
another back.
"""

from __future__ import annotations

from statekeeper.node.errors import OpError
from statekeeper.node.store.keys import (
    archived_events_prefix,
    archived_key,
    inc,
    p64,
    segment_key,
    u64,
    unpack,
)
from statekeeper.node.store.reads import Source


def _archived(src: Source, ns_b: bytes, seg_id: str, what: str, it: str, **fields) -> OpError:
    """410 `archived`: `what` ("key 'k' is") lies in segment `seg_id`, whose url, sha256
    and size the answer carries (the client reads at most `bytes` of the file)."""
    raw = src.point(segment_key(ns_b, seg_id))
    seg = unpack(raw) if raw is not None else [None, None, None]
    return OpError(
        "archived",
        f"{what} archived in segment {seg_id} ({seg[0]}); read {it} from the archive "
        f"or restore {it}",
        segment=seg_id,
        url=seg[0],
        sha256=seg[1],
        bytes=seg[2],
        **fields,
    )


def check_key(src: Source, ns: str, key: str) -> None:
    """Raise 410 `archived` if the (not live) key has a tombstone."""
    ns_b = ns.encode()
    raw = src.point(archived_key(ns_b, key.encode()))
    if raw is None:
        return
    seg_id, archived_rev, _ = unpack(raw)
    raise _archived(
        src, ns_b, seg_id, f"key {key!r} is", "it", archived_revision=archived_rev, key=key
    )


def events_tombstone(src: Source, ns_b: bytes, stream_b: bytes, seq: int) -> tuple | None:
    """(from_seq, before_seq, segment_id, archived_revision) of the stream tombstone whose
    range holds `seq`, or None."""
    prefix = archived_events_prefix(ns_b, stream_b)
    items = list(src.scan(prefix, prefix + p64(seq + 1)))
    if not items:
        return None
    k, v = items[-1]
    before, seg_id, archived_rev = unpack(v)
    lo = u64(k[-8:])
    return (lo, before, seg_id, archived_rev) if lo <= seq < before else None


def check_events(src: Source, ns: str, stream: str, seq: int) -> None:
    """Raise 410 `archived` if a stream tombstone covers `seq` (a seq below first_seq)."""
    ns_b = ns.encode()
    found = events_tombstone(src, ns_b, stream.encode(), seq)
    if found is None:
        return
    lo, before, seg_id, _ = found
    what = f"events {lo}..{before - 1} of stream {stream!r} are"
    raise _archived(src, ns_b, seg_id, what, "them", stream=stream, from_seq=lo, before_seq=before)


def archived_before(src: Source, ns_b: bytes, stream_b: bytes) -> int | None:
    """The smallest from_seq of the stream's tombstones, or None."""
    prefix = archived_events_prefix(ns_b, stream_b)
    for k, _ in src.scan(prefix, inc(prefix)):
        return u64(k[-8:])
    return None
