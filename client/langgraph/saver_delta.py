"""get_delta_channel_history as a plan (DeltaChannel support, beta in LangGraph).

The base class's version walks the parent chain with one get_tuple per ancestor (two
round trips each, up to a DeltaChannel's snapshot_frequency ancestors deep). Here the
chain's records come from range pages of ``ckpt/{thread}/{cns}/`` starting at the target
(an ancestor was created before its descendant, so it sorts after it: newest first), and
the ancestors' writes and blobs are read in batches of ``_WINDOW`` ancestors, all at the
revision of the first read. The result is the base class's, to the value: per channel,
the writes of the ancestors (oldest first, each checkpoint's in writes_sort_key order) back
to and including the nearest ancestor holding a stored value, which is the ``seed``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..plan import AgentPlan, Call
from . import keys as K
from .saver_chunks import blob_value_plan, pending_writes_plan
from .saver_codec import Record, loads, unpack_blob, unpack_record
from .saver_plan import Ctx, pinned_read, ranges_at, target

__all__ = ["delta_history_plan"]

_WINDOW = 64  # ancestors whose writes and blobs one batch reads
_PAGE = 256  # records per range page of the chain walk


def _chain_plan(ctx: Ctx, config: Mapping[str, Any]) -> AgentPlan[tuple[list[Record], int]]:
    """The target's ancestors, nearest first, and the revision they were read at."""
    thread, cns, cid = target(config)
    prefix = K.ckpt_prefix(thread, cns)
    kw: dict[str, Any] = {"start": prefix + K.inv(cid) if cid else prefix, "ns": ctx.ns}
    kw.update(end=K.prefix_end(prefix), limit=_PAGE)
    records: dict[str, Record] = {}
    chain: list[Record] = []
    head: Record | None = None
    rev = 0
    while True:
        res = yield Call("range", (), dict(kw))
        if not rev:
            rev = res.revision
            kw.update(pinned_read(rev))
        for kv in res.kvs:
            rec = unpack_record(kv.value)
            records[rec.id] = rec
            if head is None:
                if cid and rec.id != cid:
                    return [], rev  # no such checkpoint
                head = rec
        if head is None:
            return [], rev
        nxt = chain[-1].parent if chain else head.parent
        while nxt is not None and nxt in records:
            chain.append(records[nxt])
            nxt = records[nxt].parent
        if nxt is None or not res.more or not res.kvs:
            return chain, rev
        kw["start"] = res.kvs[-1].key + "\x01"


def delta_history_plan(
    ctx: Ctx, config: Mapping[str, Any], channels: Sequence[str]
) -> AgentPlan[dict[str, Any]]:
    """BaseCheckpointSaver.get_delta_channel_history's result, in a few batches."""
    if not channels:
        return {}
    thread, cns, _ = target(config)
    chain, rev = yield from _chain_plan(ctx, config)
    collected: dict[str, list[Any]] = {ch: [] for ch in channels}
    seeds: dict[str, Any] = {}
    remaining = set(channels)
    for i in range(0, len(chain), _WINDOW):
        if not remaining:
            break
        window = chain[i : i + _WINDOW]
        wprefix = [K.writes_prefix(thread, cns, rec.id) for rec in window]
        bkeys = {
            (rec.id, ch): K.blob_key(thread, cns, ch, rec.blobs[ch])
            for rec in window
            for ch in remaining
            if ch in rec.blobs
        }
        bounds = [(p, K.prefix_end(p)) for p in wprefix]
        bounds += [(k, k + "/d") for k in bkeys.values()]
        found, _ = yield from ranges_at(ctx, bounds, rev)
        blobs = dict(zip(bkeys, found[len(window) :], strict=True))
        for rec, prefix, wkvs in zip(window, wprefix, found[: len(window)], strict=True):
            for w in reversed((yield from pending_writes_plan(ctx.ns, ctx.limits, prefix, wkvs))):
                if w.channel in remaining:
                    collected[w.channel].append((w.task_id, w.channel, loads(ctx.serde, w.value)))
            for ch in list(remaining):
                key = bkeys.get((rec.id, ch))
                raw = (
                    (yield from blob_value_plan(ctx.ns, ctx.limits, key, blobs[(rec.id, ch)]))
                    if key
                    else None
                )
                if raw is not None:
                    seeds[ch] = loads(ctx.serde, unpack_blob(raw))
                    remaining.discard(ch)
    out: dict[str, Any] = {}
    for ch in channels:
        entry: dict[str, Any] = {"writes": collected[ch][::-1]}
        if ch in seeds:
            entry["seed"] = seeds[ch]
        out[ch] = entry
    return out
