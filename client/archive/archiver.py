"""The archiver, sans-IO: ``archive run`` as a plan (``archive restore`` and the archived
reads are in client/archive/restore.py) in the style of
client/plan.py: generators that yield :class:`client.plan.Call` /
:class:`~client.plan.BatchCall` steps and are sent their results (or have the
exception thrown in). :func:`client.plan.run` / ``arun`` drive them over a
:class:`Driver` / :class:`AsyncDriver`, which is the client plus four archive steps:

- ``store_put(path, data)``: make ``data`` durable at ``path`` of the archive
  (client/archive/storage.py ``put_durable``); ``store_delete(path)``;
- ``store_read_url(url, size)``: the bytes of a segment file at the URL the cluster
  recorded, only under the configured archive roots and at most ``size`` + 1 of them;
- ``progress(step, info)``: report a step (the CLI prints it and hits failpoint
  ``archive-<step>`` there, so a test can kill the archiver between steps).

A test drives the plans by hand with a fake exchange (tests/unit/test_archive_plan.py).

One segment of ``archive run`` (crash safety: docs/archive.md):

1. ``archive_plan`` (the inline retention rules; what a policy would delete);
2. read what it names: keys by batched gets (a key whose mod_revision is no longer the
   planned one, or that is gone, is left out: it changed after the plan), stream events by
   read_stream pages from the planned first_seq (a stream whose first_seq moved is left
   out); at most :data:`MAX_ITEMS` items and :data:`MAX_PAYLOAD` bytes of values/events;
   one stream item at most :data:`MAX_STREAM_ITEM_BYTES` of events (its restore then fits
   one request; client/archive/restore.py still splits larger ones);
3. encode, ``store_put`` the segment file -> step ``segment-written``;
4. ``store_put`` its manifest entry -> step ``manifest-written``;
5. ``archive_seal`` in parts of <= 500 items and <= 10000 events, each with idempotency
   key ``"archive-seal:" + segment id + ":" + part`` (a retry of a timed-out seal reuses
   it) -> step ``sealed``. A segment into which nothing was sealed (every item changed)
   has its file and manifest deleted again.

Until the plan is empty, ``max_segments`` segments were written, or a segment sealed
nothing (what is left keeps changing: the next run will take it).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Final

from ..errors import Archived, NotFound, Timeout, Unavailable
from ..plan import AgentPlan, BatchCall, call
from ..results import StreamEvent
from . import manifest as mf
from .segment import KeyItem, StreamItem, checksum, encode, new_segment_id
from .storage import manifest_path, segment_path

__all__ = [
    "MAX_ITEMS",
    "MAX_PAYLOAD",
    "AsyncDriver",
    "Driver",
    "run_plan",
    "seal_parts",
]

MAX_ITEMS: Final = 500
MAX_PAYLOAD: Final = 64 << 20
MAX_STREAM_ITEM_BYTES: Final = 2 << 20
SEAL_MAX_EVENTS: Final = 10_000
KEY_READ_BATCH: Final = 100
READ_PAGE: Final = 1000
SEAL_ATTEMPTS: Final = 3
EVENT_OVERHEAD: Final = 64  # wire bytes of an event besides data, id and meta


# -- archive run -----------------------------------------------------------------------------


def run_plan(
    *,
    ns: str,
    target: str,
    prefix: str,
    rules: dict[str, Any],
    store_url: Callable[[str], str],
    clock_ms: Callable[[], int],
    random_bytes: Callable[[int], bytes],
    max_segments: int | None = None,
) -> AgentPlan[dict[str, Any]]:
    """The plan of ``archive run`` (see the module docstring). ``rules``: archive_plan's
    keep_last / keep_every / max_age_s / within; ``store_url(path)``: the URL the cluster
    records for a segment path. Returns {segments (those something was sealed into),
    sealed_keys, sealed_events, skipped, bytes}; ``skipped`` lists what a segment left out
    ([name, reason]), which a later segment of the same run may have taken after all."""
    out: dict[str, Any] = {
        "segments": [],
        "sealed_keys": 0,
        "sealed_events": 0,
        "skipped": [],
        "bytes": 0,
    }
    while max_segments is None or len(out["segments"]) < max_segments:
        planned = yield call("archive_plan", prefix, target=target, ns=ns, **rules)
        yield call(
            "progress",
            "planned",
            {
                "keys": len(planned["keys"]),
                "streams": len(planned["streams"]),
                "more": planned.get("more", False),
            },
        )
        if not planned["keys"] and not planned["streams"]:
            break
        keys, skipped = yield from _read_keys(ns, planned["keys"])
        budget = MAX_PAYLOAD - sum(len(k.value) for k in keys)
        streams, stream_skips = yield from _read_streams(
            ns, planned["streams"], MAX_ITEMS - len(keys), budget
        )
        out["skipped"] += skipped + stream_skips
        if not keys and not streams:
            break  # everything planned changed meanwhile
        seg = yield from _write_and_seal(
            ns, int(planned["revision"]), keys, streams, store_url, clock_ms, random_bytes
        )
        out["skipped"] += seg.pop("skipped")
        if seg["sealed_keys"] + seg["sealed_events"] == 0:
            break  # its files were deleted again; what is left keeps changing
        out["segments"].append(seg)
        out["sealed_keys"] += seg["sealed_keys"]
        out["sealed_events"] += seg["sealed_events"]
        out["bytes"] += seg["bytes"]
    return out


def _read_keys(ns: str, planned: Sequence[Sequence[Any]]) -> AgentPlan[tuple[list, list]]:
    """The planned keys still at their planned mod_revision, within the segment caps."""
    chosen, payload = [], 0
    for key, mod, size in planned:
        if len(chosen) >= MAX_ITEMS or (chosen and payload + size > MAX_PAYLOAD):
            break  # the next segment takes the rest
        chosen.append((key, mod))
        payload += size
    keys: list[KeyItem] = []
    skipped: list[list[Any]] = []
    for i in range(0, len(chosen), KEY_READ_BATCH):
        group = chosen[i : i + KEY_READ_BATCH]
        results = yield BatchCall(tuple(call("get", k) for k, _ in group), ns=ns)
        for (key, mod), kv in zip(group, results, strict=True):
            if kv is None or isinstance(kv, NotFound):
                skipped.append([key, "missing"])
            elif isinstance(kv, BaseException):
                raise kv
            elif kv.mod_revision != mod:
                skipped.append([key, "changed"])
            else:
                keys.append(KeyItem(key, kv.value, kv.version, kv.create_revision, kv.mod_revision))
    return keys, skipped


def _event_cost(e: StreamEvent) -> int:
    return len(e.data) + EVENT_OVERHEAD + len(e.id or "") + 16 * len(e.meta)


def _read_streams(
    ns: str, planned: Sequence[Sequence[Any]], room: int, budget: int
) -> AgentPlan[tuple[list, list]]:
    """The planned stream ranges as they are stored, cut to the caps; a stream whose
    first_seq moved since the plan is left out."""
    items: list[StreamItem] = []
    skipped: list[list[Any]] = []
    for stream, first, before in planned:
        if len(items) >= room or budget <= 0:
            break
        events: list[list[Any]] = []
        seq, item_bytes, moved = first, 0, False
        while seq < before and item_bytes < MAX_STREAM_ITEM_BYTES and budget > 0:
            try:
                page = yield call(
                    "read_stream", stream, ns=ns, start=seq, limit=min(READ_PAGE, before - seq)
                )
            except Archived:
                moved = True
                break
            if page.first_seq > seq or not page.events or page.events[0].seq != seq:
                moved = not events  # truncated meanwhile; what was read still stands
                break
            for e in page.events:
                cost = _event_cost(e)
                if e.seq >= before or (events and item_bytes + cost > MAX_STREAM_ITEM_BYTES):
                    seq = before if e.seq >= before else e.seq
                    break
                events.append([e.seq, e.data, e.type, e.time_ms, e.revision, e.id, e.meta])
                item_bytes += cost
                budget -= cost
                seq = e.seq + 1
            else:
                continue
            break
        if moved or not events:
            skipped.append([stream, "moved"])
        else:
            items.append(StreamItem(stream, events))
    return items, skipped


def seal_parts(
    keys: Sequence[KeyItem], streams: Sequence[StreamItem]
) -> list[tuple[list[list[Any]], list[list[Any]]]]:
    """The seal ops of one segment: (keys [[key, mod_revision]], streams [[stream,
    from_seq, before_seq]]) with <= 500 items and <= 10000 events each."""
    parts: list[tuple[list[list[Any]], list[list[Any]]]] = []
    items: list[tuple[list[Any], int]] = [([k.key, k.mod_revision], -1) for k in keys]
    items += [([s.stream, s.from_seq, s.before_seq], len(s.events)) for s in streams]
    cur_k: list[list[Any]] = []
    cur_s: list[list[Any]] = []
    events = 0
    for item, n in items:
        cost = max(n, 0)
        if len(cur_k) + len(cur_s) >= MAX_ITEMS or (cur_s and events + cost > SEAL_MAX_EVENTS):
            parts.append((cur_k, cur_s))
            cur_k, cur_s, events = [], [], 0
        (cur_k if n < 0 else cur_s).append(item)
        events += cost
    if cur_k or cur_s:
        parts.append((cur_k, cur_s))
    return parts


def _write_and_seal(
    ns: str,
    revision: int,
    keys: list[KeyItem],
    streams: list[StreamItem],
    store_url: Callable[[str], str],
    clock_ms: Callable[[], int],
    random_bytes: Callable[[int], bytes],
) -> AgentPlan[dict[str, Any]]:
    created = clock_ms()
    seg_id = new_segment_id(created, random_bytes)
    data = encode(seg_id, ns, created, revision, keys, streams)
    sha = checksum(data)
    spath, mpath = segment_path(ns, seg_id), manifest_path(ns, seg_id)
    info: dict[str, Any] = {
        "segment": seg_id,
        "ns": ns,
        "url": store_url(spath),
        "sha256": sha,
        "bytes": len(data),
        "keys": len(keys),
        "events": sum(len(s.events) for s in streams),
    }
    yield call("store_put", spath, data)
    yield call("progress", "segment-written", dict(info))
    entry = mf.entry(
        seg_id,
        spath,
        sha,
        len(data),
        ns,
        created,
        revision,
        [k.key for k in keys],
        [[s.stream, s.from_seq, s.before_seq] for s in streams],
    )
    yield call("store_put", mpath, mf.encode_entry(entry))
    yield call("progress", "manifest-written", dict(info))
    segment = {"id": seg_id, "url": info["url"], "sha256": sha, "bytes": len(data)}
    sealed_keys = sealed_events = 0
    skipped: list[list[Any]] = []
    for part, (k_items, s_items) in enumerate(seal_parts(keys, streams)):
        r = yield from _seal(ns, segment, k_items, s_items, f"archive-seal:{seg_id}:{part}")
        sealed_keys += r.get("sealed_keys", 0)
        sealed_events += r.get("sealed_events", 0)
        skipped += [list(s) for s in r.get("skipped") or ()]
    info.update(sealed_keys=sealed_keys, sealed_events=sealed_events)
    yield call("progress", "sealed", dict(info))
    if sealed_keys + sealed_events == 0:  # nothing points at it: not worth keeping
        yield call("store_delete", mpath)
        yield call("store_delete", spath)
    info["skipped"] = skipped
    return info


def _seal(
    ns: str, segment: dict[str, Any], keys: list, streams: list, ik: str
) -> AgentPlan[dict[str, Any]]:
    """One seal op; retried (same idempotency key: applied once) when its outcome is
    unknown after the client's own retries."""
    for attempt in range(SEAL_ATTEMPTS):
        try:
            r = yield call(
                "archive_seal", segment, keys=keys, streams=streams, ns=ns, idempotency_key=ik
            )
        except (Timeout, Unavailable):
            if attempt == SEAL_ATTEMPTS - 1:
                raise
            continue
        return dict(r)
    raise AssertionError("unreachable")


# -- drivers ---------------------------------------------------------------------------------


class Driver:
    """What an archive plan's calls go to over a blocking Client: the client's methods,
    plus the archive steps (see the module docstring)."""

    def __init__(
        self,
        client: Any,
        store: Any = None,
        progress: Callable[[str, dict[str, Any]], Any] | None = None,
    ) -> None:
        self._client = client
        self._store = store
        self._progress = progress

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def store_put(self, path: str, data: bytes) -> None:
        self._store.put_durable(path, data)

    def store_delete(self, path: str) -> None:
        self._store.delete(path)

    def store_read_url(self, url: str, size: int | None = None) -> bytes:
        from .storage import read_segment_url

        return read_segment_url(url, self.segment_roots(), size)

    def segment_roots(self) -> tuple[str, ...]:
        """Where a segment URL the cluster names may be read: the client's configured
        roots, plus the archive this run writes to (client/archive/storage.py)."""
        from .storage import configured_roots

        roots = configured_roots(getattr(self._client, "archive_roots", None))
        return roots if self._store is None else (*roots, self._store.url)

    def progress(self, step: str, info: dict[str, Any]) -> None:
        if self._progress is not None:
            self._progress(step, info)


class AsyncDriver(Driver):
    """:class:`Driver` over an AsyncClient: the archive's blocking IO runs in a thread."""

    async def store_put(self, path: str, data: bytes) -> None:  # type: ignore[override]
        await asyncio.to_thread(self._store.put_durable, path, data)

    async def store_delete(self, path: str) -> None:  # type: ignore[override]
        await asyncio.to_thread(self._store.delete, path)

    async def store_read_url(self, url: str, size: int | None = None) -> bytes:  # type: ignore[override]
        from .storage import read_segment_url

        return await asyncio.to_thread(read_segment_url, url, self.segment_roots(), size)

    async def progress(self, step: str, info: dict[str, Any]) -> None:  # type: ignore[override]
        if self._progress is not None:
            out = self._progress(step, info)
            if inspect.isawaitable(out):
                await out
