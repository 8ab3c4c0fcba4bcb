"""Restoring archived data and reading it, sans-IO plans like client/archive/archiver.py's
(driven by its :class:`~client.archive.archiver.Driver` / ``AsyncDriver``):

- :func:`restore_plan` (``client.archive_restore``, ``statekeeper archive restore``): find
  the segment's record (archive_list), read its file from the URL recorded there (only
  under the configured archive roots: client/archive/storage.py), verify its size and
  sha256 (ArchiveCorrupt otherwise), then ``archive_restore_op`` its keys and stream
  ranges in ops of <= 500 items, <= 10000 events and <= :data:`RESTORE_MAX_BYTES`. A stream
  range larger than one op goes back as suffixes, newest first (the node shrinks the
  tombstone each time; docs/protocol.md "Archival"), and a stream appears at most once
  per op, so its ranges go back newest first too;
- :func:`fetch_key` / :func:`fetch_stream` (``get(..., archived="fetch" | "restore")``,
  ``read_stream(..., archived="fetch")``): the live data, else on Archived the data read
  from the segment the error names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from ..errors import Archived, NotFound
from ..plan import AgentPlan, call
from ..results import StreamEvent
from .archiver import EVENT_OVERHEAD, MAX_ITEMS, SEAL_MAX_EVENTS
from .segment import KeyItem, Segment, StreamItem, decode

__all__ = ["RESTORE_MAX_BYTES", "fetch_key", "fetch_stream", "find_segment", "restore_plan"]

RESTORE_MAX_BYTES: Final = 3 << 20  # below the default max_request_bytes (4 MiB)


# -- restore ---------------------------------------------------------------------------------


def find_segment(ns: str | None, segment_id: str) -> AgentPlan[dict[str, Any]]:
    """The cluster's record of ``segment_id`` (archive_list pages; ``ns`` None: every
    namespace). NotFound if the cluster has none."""
    token = None
    while True:
        page = yield call("archive_list", ns=ns, all_namespaces=ns is None, continuation=token)
        for rec in page["segments"]:
            if rec["id"] == segment_id:
                return dict(rec)
        token = page.get("continuation")
        if not page.get("more") or token is None:
            raise NotFound(
                f"no archive segment {segment_id!r} in "
                f"{'any namespace' if ns is None else f'namespace {ns!r}'}",
                code="not_found",
                details={"segment": segment_id},
            )


def load_segment(url: str, sha256: str, segment_id: str, size: int | None) -> AgentPlan[Segment]:
    """The segment file at ``url`` (only under the configured archive roots), verified:
    ``size`` bytes (as sealed; None: unknown) with that sha256."""
    data = yield call("store_read_url", url, size)
    return decode(data, sha256, segment_id, size)


def restore_plan(
    segment_id: str,
    *,
    ns: str | None,
    keys: Iterable[str] | None = None,
    streams: Iterable[str] | None = None,
    record: dict[str, Any] | None = None,
) -> AgentPlan[dict[str, Any]]:
    """The plan of ``archive restore``: read and verify the segment (the cluster's
    record names its URL and sha256), then archive_restore its keys and stream ranges
    (all, or those named) in ops of <= 500 items, <= 10000 events and <= 3 MiB; a
    stream's ranges newest first. Returns {segment, ns, restored_keys, restored_events,
    skipped, revision}."""
    rec = record if record is not None else (yield from find_segment(ns, segment_id))
    seg = yield from load_segment(rec["url"], rec["sha256"], segment_id, rec.get("bytes"))
    ns = rec.get("ns") or seg.ns
    want_k = None if keys is None else set(keys)
    want_s = None if streams is None else set(streams)
    everything = want_k is None and want_s is None
    k_items = [k for k in seg.keys if everything or (want_k is not None and k.key in want_k)]
    s_items = [s for s in seg.streams if everything or (want_s is not None and s.stream in want_s)]
    s_items.sort(key=lambda s: (s.stream, -s.from_seq))
    out: dict[str, Any] = {
        "segment": segment_id,
        "ns": ns,
        "restored_keys": 0,
        "restored_events": 0,
        "skipped": [],
        "revision": None,
    }
    for op_keys, op_streams in _restore_ops(k_items, s_items):
        r = yield call("archive_restore_op", segment_id, keys=op_keys, streams=op_streams, ns=ns)
        out["restored_keys"] += r.get("restored_keys", 0)
        out["restored_events"] += r.get("restored_events", 0)
        out["skipped"] += [list(s) for s in r.get("skipped") or ()]
        out["revision"] = r.get("revision", out["revision"])
    return out


def _restore_ops(keys: Sequence[KeyItem], streams: Sequence[StreamItem]):
    """Chunks of (keys [[key, value]], streams [[stream, events]]); a stream appears at
    most once per op, so its ranges go back newest first, one op after the other."""
    ops: list[tuple[list, list]] = []
    cur_k: list[list[Any]] = []
    size = 0
    for k in keys:
        cost = len(k.key) + len(k.value) + 16
        if cur_k and (len(cur_k) >= MAX_ITEMS or size + cost > RESTORE_MAX_BYTES):
            ops.append((cur_k, []))
            cur_k, size = [], 0
        cur_k.append([k.key, k.value])
        size += cost
    if cur_k:
        ops.append((cur_k, []))
    cur_s: list[list[Any]] = []
    names: set[str] = set()
    size = events = 0
    for stream, chunk in _stream_chunks(streams):
        cost = sum(len(e[1]) + EVENT_OVERHEAD for e in chunk)
        n = len(chunk)
        if cur_s and (
            stream in names
            or len(cur_s) >= MAX_ITEMS
            or events + n > SEAL_MAX_EVENTS
            or size + cost > RESTORE_MAX_BYTES
        ):
            ops.append(([], cur_s))
            cur_s, names, size, events = [], set(), 0, 0
        cur_s.append([stream, chunk])
        names.add(stream)
        size += cost
        events += n
    if cur_s:
        ops.append(([], cur_s))
    return ops


def _stream_chunks(streams: Sequence[StreamItem]) -> list[tuple[str, list[list[Any]]]]:
    """Each stream item's events as restore chunks, newest chunk first: an item larger
    than one request goes back as suffixes [x, before_seq) (the node shrinks the
    tombstone to [from_seq, x) each time)."""
    out: list[tuple[str, list[list[Any]]]] = []
    for s in streams:
        end = len(s.events)
        while end > 0:
            start, size = end, 0
            while start > 0 and end - start < SEAL_MAX_EVENTS:
                cost = len(s.events[start - 1][1]) + EVENT_OVERHEAD
                if start < end and size + cost > RESTORE_MAX_BYTES:
                    break
                size += cost
                start -= 1
            out.append((s.stream, [list(e) for e in s.events[start:end]]))
            end = start
    return out


# -- archived reads --------------------------------------------------------------------------


def fetch_key(key: str, ns: str, mode: str, read: dict[str, Any]) -> AgentPlan[Any]:
    """get(key, archived="fetch" | "restore"): the live key, else (Archived) its value
    read from the segment (an ArchivedKeyValue) or restored and read again."""
    from .results import ArchivedKeyValue

    try:
        return (yield call("get", key, ns=ns, **read))
    except Archived as e:
        err = e
    if not (err.segment and err.url and err.sha256):
        raise err
    record = {
        "id": err.segment,
        "url": err.url,
        "sha256": err.sha256,
        "bytes": err.segment_bytes,
        "ns": ns,
    }
    if mode == "restore":
        yield from restore_plan(err.segment, ns=ns, keys=[key], streams=(), record=record)
        return (yield call("get", key, ns=ns, **read))
    seg = yield from load_segment(err.url, err.sha256, err.segment, err.segment_bytes)
    item = seg.key(key)
    if item is None:
        raise err  # the cluster points at a segment that does not hold the key
    return ArchivedKeyValue(
        key,
        item.value,
        item.version,
        item.create_revision,
        item.mod_revision,
        ns,
        err.revision or 0,
        segment=err.segment,
    )


def fetch_stream(
    stream: str, ns: str, start: int | None, limit: int | None, read: dict[str, Any]
) -> AgentPlan[Any]:
    """read_stream(..., archived="fetch"): the page as stored, else (Archived) the page
    read from the segment: the events from ``start`` up to the archived range's end (at
    most ``limit``), as an ArchivedStreamPage."""
    from .results import ArchivedStreamPage

    try:
        return (yield call("read_stream", stream, ns=ns, start=start, limit=limit, **read))
    except Archived as e:
        err = e
    if not (err.segment and err.url and err.sha256):
        raise err
    seg = yield from load_segment(err.url, err.sha256, err.segment, err.segment_bytes)
    first = start if start is not None else 1
    events = [
        StreamEvent(e[0], e[1], e[2] or "", e[3], e[4], e[5], e[6] or {})
        for s in seg.streams
        if s.stream == stream
        for e in s.events
        if e[0] >= first
    ]
    events.sort(key=lambda e: e.seq)
    if limit is not None:
        events = events[:limit]
    if not events:
        raise err
    info = yield call("stream_info", stream, ns=ns)
    return ArchivedStreamPage(
        events,
        info.revision,
        info.last_seq,
        events[-1].seq < info.last_seq,
        None,
        info.first_seq,
        segment=err.segment,
    )
