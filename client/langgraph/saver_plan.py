"""The saver's sans-IO core: put, put_writes, get_tuple and list as plans (generators that
yield client calls and are sent their results, client/plan.py), so the blocking and
the asyncio methods of StatekeeperSaver are one implementation and the unit tests drive
them over an in-memory client.

Reads of one operation see ONE revision: the first read is the client's (linearizable by
default); every later read of the operation (blobs, writes, list pages) is pinned to that
read's revision (serializable + revision, so any node that has applied it serves it; a
node that has not answers future_revision and the batch is re-read linearizable).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from ..errors import Compacted, Conflict
from ..ops import compare, ops
from ..plan import AgentPlan, Call, batch, is_error, raise_errors
from . import keys as K
from .saver_chunks import (
    Spill,
    blob_value_plan,
    pending_writes_plan,
    split_inline,
    upload_spills_plan,
)
from .saver_codec import (
    Limits,
    Record,
    WriteRecord,
    check_one_txn,
    dumps,
    loads,
    op_size,
    pack_blob,
    pack_record,
    pack_write,
    too_large,
    unpack_blob,
    unpack_record,
)

__all__ = [
    "Ctx",
    "ListCursor",
    "get_tuple_plan",
    "list_cursor",
    "list_page_plan",
    "put_ops",
    "put_plan",
    "put_writes_plan",
    "range_all",
    "ranges_at",
    "read_at",
    "write_entries",
]

SERIALIZABLE = "serializable"
_ATTEMPTS = 5  # compare failures (put_writes) or compactions (get_tuple) before giving up


@dataclass(frozen=True, slots=True)
class Ctx:
    """What every plan needs: the namespace, the serde, the limits and the list page."""

    ns: str
    serde: Any
    limits: Limits = field(default_factory=Limits)
    page_size: int = 100


def target(config: Mapping[str, Any]) -> tuple[str, str, str | None]:
    conf = config["configurable"]
    if conf.get("thread_id") is None:
        raise ValueError('the config has no thread_id: {"configurable": {"thread_id": ...}}')
    cns = K.checked_id(conf.get("checkpoint_ns") or "", "checkpoint_ns")
    return K.checked_id(conf["thread_id"]), cns, conf.get("checkpoint_id")


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> dict[str, Any]:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


# -- reads ---------------------------------------------------------------------------------


def pinned_read(revision: int) -> dict[str, Any]:
    return {"revision": revision, "consistency": SERIALIZABLE, "min_revision": revision}


def range_all(
    ctx: Ctx, prefix: str, *, revision: int | None = None, keys_only: bool = False
) -> AgentPlan[tuple[list[Any], int]]:
    """Every kv under ``prefix`` at one revision (``revision``, or the first page's):
    (kvs, revision)."""
    kvs: list[Any] = []
    kw: dict[str, Any] = {"start": prefix, "end": K.prefix_end(prefix), "ns": ctx.ns}
    kw["limit"] = ctx.limits.range_page
    if keys_only:
        kw["keys_only"] = True
    if revision is not None:
        kw.update(pinned_read(revision))
    while True:
        res = yield Call("range", (), dict(kw))
        kvs.extend(res.kvs)
        if revision is None:
            revision = res.revision
            kw.update(pinned_read(revision))
        if not res.more or not res.kvs:
            return kvs, revision
        kw["start"] = res.kvs[-1].key + "\x01"  # keys hold no NUL: the next key is >= this


def read_at(ctx: Ctx, calls: Sequence[Call], revision: int | None) -> AgentPlan[list[Any]]:
    """Batch read ``calls`` (gets and ranges that carry ``revision``) at ``revision``, or
    (None) with the client's consistency."""
    out: list[Any] = []
    for i in range(0, len(calls), ctx.limits.ops):
        group = calls[i : i + ctx.limits.ops]
        if revision is None:
            res = yield batch(*group, ns=ctx.ns)
        else:
            res = yield batch(*group, ns=ctx.ns, consistency=SERIALIZABLE)
            if any(is_error(r, "future_revision") for r in res):  # that node is behind: wait
                res = yield batch(*group, ns=ctx.ns)
        out.extend(raise_errors(res))
    return out


def ranges_at(
    ctx: Ctx,
    bounds: Sequence[tuple[str, str]],
    revision: int | None,
    *,
    keys_only: bool = False,
    limit: int | None = None,
) -> AgentPlan[tuple[list[list[Any]], int]]:
    """The kvs of each [start, end), all at one revision (``revision``, or the first
    batch's), paging as needed: (a list of kv lists, the revision)."""
    if not bounds:
        return [], revision or 0
    limit = limit or ctx.limits.range_page
    found: list[list[Any]] = [[] for _ in bounds]
    todo = list(enumerate(bounds))
    while todo:
        calls = []
        for _, (s, e) in todo:
            kw: dict[str, Any] = {"start": s, "end": e, "limit": limit}
            if revision is not None:
                kw["revision"] = revision
            if keys_only:
                kw["keys_only"] = True
            calls.append(Call("range", (), kw))
        pages = yield from read_at(ctx, calls, revision)
        if revision is None:
            revision = pages[0].revision
        nxt = []
        for (i, (_, e)), page in zip(todo, pages, strict=True):
            found[i].extend(page.kvs)
            if page.more and page.kvs:
                nxt.append((i, (page.kvs[-1].key + "\x01", e)))
        todo = nxt
    return found, revision if revision is not None else 0


Item = tuple[str, str, Record, Any]  # thread, checkpoint_ns, record, decoded metadata or None


def load_tuples(ctx: Ctx, items: Sequence[Item], revision: int) -> AgentPlan[list]:
    """The CheckpointTuples of ``items``: their writes and blobs read at ``revision``."""
    wprefix = [K.writes_prefix(t, ns, rec.id) for t, ns, rec, _ in items]
    blob_keys: dict[tuple[str, str, str, str], str] = {}
    for t, ns, rec, _ in items:
        for ch, ver in rec.blobs.items():
            blob_keys.setdefault((t, ns, ch, ver), K.blob_key(t, ns, ch, ver))
    bounds = [(p, K.prefix_end(p)) for p in wprefix]
    bounds += [(k, k + "/d") for k in blob_keys.values()]  # the blob and its chunks
    found, _ = yield from ranges_at(ctx, bounds, revision)
    blobs = {}
    for bkey, kvs in zip(blob_keys, found[len(items) :], strict=True):
        raw = yield from blob_value_plan(ctx.ns, ctx.limits, blob_keys[bkey], kvs)
        if raw is not None:
            blobs[bkey] = raw
    out = []
    for (t, ns, rec, meta), prefix, wkvs in zip(items, wprefix, found[: len(items)], strict=True):
        values = {}
        for ch, ver in rec.blobs.items():
            raw = blobs.get((t, ns, ch, ver))
            if raw is not None:
                values[ch] = loads(ctx.serde, unpack_blob(raw))
        found_writes = yield from pending_writes_plan(ctx.ns, ctx.limits, prefix, wkvs)
        writes = [(w.task_id, w.channel, loads(ctx.serde, w.value)) for w in found_writes]
        checkpoint = {**loads(ctx.serde, rec.ckpt), "channel_values": values}
        metadata = meta if meta is not None else loads(ctx.serde, rec.meta)
        parent = _config(t, ns, rec.parent) if rec.parent else None
        out.append(CheckpointTuple(_config(t, ns, rec.id), checkpoint, metadata, parent, writes))
    return out


def get_tuple_plan(ctx: Ctx, config: Mapping[str, Any]) -> AgentPlan[CheckpointTuple | None]:
    """The checkpoint ``config`` names (its checkpoint_id, else the newest of its thread and
    checkpoint_ns) with its values and pending writes, or None."""
    thread, cns, cid = target(config)
    for attempt in range(_ATTEMPTS):
        if cid:
            kv = yield Call("get", (K.ckpt_key(thread, cns, cid),), {"ns": ctx.ns, "default": None})
            rev = kv.revision if kv is not None else 0
        else:
            prefix = K.ckpt_prefix(thread, cns)
            res = yield Call(
                "range",
                (),
                {"start": prefix, "end": K.prefix_end(prefix), "limit": 1, "ns": ctx.ns},
            )
            kv, rev = (res.kvs[0] if res.kvs else None), res.revision
        if kv is None:
            return None
        try:
            tuples = yield from load_tuples(
                ctx, [(thread, cns, unpack_record(kv.value), None)], rev
            )
        except Compacted:  # history this old was dropped meanwhile: read anew
            if attempt == _ATTEMPTS - 1:
                raise
            continue
        return tuples[0]
    return None  # pragma: no cover


# -- list ----------------------------------------------------------------------------------


@dataclass(slots=True)
class ListCursor:
    """Where a list() is: the next key to read, the snapshot revision, what is left."""

    start: str
    end: str
    before: str | None
    filter: dict[str, Any] | None
    remaining: int | None
    only: str | None = None  # the config's checkpoint_id, if it names one
    revision: int | None = None


def list_cursor(
    config: Mapping[str, Any] | None,
    filter: Mapping[str, Any] | None,
    before: Mapping[str, Any] | None,
    limit: int | None,
) -> ListCursor | None:
    """The first cursor of a list (None: nothing to list). Scope: every thread (config
    None), one thread (every checkpoint_ns when the config has none), or one namespace."""
    if config is not None:
        target(config)  # a thread_id / checkpoint_ns too long for a key: named
    if limit is not None and limit <= 0:
        return None
    conf = config["configurable"] if config is not None else {}
    if config is None:
        prefix = K.ckpt_prefix()
    else:
        prefix = K.ckpt_prefix(str(conf["thread_id"]), conf.get("checkpoint_ns"))
    b = before["configurable"].get("checkpoint_id") if before else None
    only = conf.get("checkpoint_id") or None
    start, end = prefix, K.prefix_end(prefix)
    if conf.get("checkpoint_ns") is not None:  # one namespace: go straight to the first
        if only:
            start, end = prefix + K.inv(only), prefix + K.inv(only) + "\x01"
        elif b:
            start = prefix + K.inv(b)
    return ListCursor(start, end, b, dict(filter) if filter else None, limit, only)


def list_page_plan(ctx: Ctx, cur: ListCursor) -> AgentPlan[tuple[list, ListCursor | None]]:
    """One page of a list: (tuples, the cursor of the next page or None). Newest first
    within a checkpoint_ns; namespaces (and threads) in key order."""
    limit = ctx.page_size
    if cur.remaining is not None and cur.filter is None:
        limit = min(limit, cur.remaining)
    kw: dict[str, Any] = {"start": cur.start, "end": cur.end, "limit": limit, "ns": ctx.ns}
    if cur.revision is not None:
        kw.update(pinned_read(cur.revision))
    res = yield Call("range", (), kw)
    if cur.revision is None:
        cur.revision = res.revision
    items: list[Item] = []
    nxt: str | None = res.kvs[-1].key + "\x01" if res.more and res.kvs else None
    for kv in res.kvs:
        thread, ns, cid = K.parse_ckpt_key(kv.key)
        if cur.only is not None and cid != cur.only:
            continue
        if cur.before is not None and not cid < cur.before:
            seek = K.ckpt_key(thread, ns, cur.before)
            if seek > kv.key:  # skip this namespace's newer checkpoints in one jump
                nxt = seek
                break
            continue
        rec = unpack_record(kv.value)
        meta = None
        if cur.filter:
            meta = loads(ctx.serde, rec.meta)
            if not all(meta.get(k) == v for k, v in cur.filter.items()):
                continue
        items.append((thread, ns, rec, meta))
        if cur.remaining is not None:
            cur.remaining -= 1
            if cur.remaining <= 0:
                nxt = None
                break
    tuples = (yield from load_tuples(ctx, items, cur.revision)) if items else []
    if nxt is None:
        return tuples, None
    cur.start = nxt
    return tuples, cur


# -- put -----------------------------------------------------------------------------------


def _uses_delta(metadata: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
    if "counters_since_delta_snapshot" in metadata:
        return True
    return any(isinstance(v, _DeltaSnapshot) for v in values.values())


@dataclass(frozen=True, slots=True)
class PutPlan:
    """One put before its chunks are uploaded: the txn's ops (with its small values), the
    values stored as chunks, the config to return."""

    ops: list[dict[str, Any]]
    spills: list[Spill]
    config: dict[str, Any]


def put_ops(
    ctx: Ctx,
    config: Mapping[str, Any],
    checkpoint: Mapping[str, Any],
    metadata: Mapping[str, Any],
    new_versions: Mapping[str, Any],
) -> PutPlan:
    """The ops of one put (record, new blobs, run index, last marker), the blobs stored as
    chunks (saver_chunks.py) and the config to return."""
    thread, cns, parent = target(config)
    c = dict(checkpoint)
    values = c.pop("channel_values", None) or {}
    md = get_serializable_checkpoint_metadata(config, metadata)  # type: ignore[arg-type]
    cid = c["id"]
    blobs: list[tuple[str, bytes]] = []
    for ch, ver in new_versions.items():
        if ch in values:
            typed = dumps(ctx.serde, values[ch], f"channel {ch!r}")
            blobs.append((K.blob_key(thread, cns, ch, K.version_part(ver)), pack_blob(typed)))
    run_id = md.get("run_id")
    run = str(run_id) if run_id is not None else None
    rec = Record(
        cid,
        parent,
        dumps(ctx.serde, c, "checkpoint"),
        dumps(ctx.serde, md, "metadata"),
        run,
        {ch: K.version_part(v) for ch, v in c.get("channel_versions", {}).items()},
        _uses_delta(md, values),
    )
    data = pack_record(rec)
    if len(data) > ctx.limits.value_bytes:
        raise too_large(
            f"checkpoint {cid} record is {len(data)} bytes without its channel values "
            f"(versions_seen, metadata); the limit is {ctx.limits.value_bytes}"
        )
    puts = [(K.ckpt_key(thread, cns, cid), data)]
    if run is not None:
        puts.append((K.run_key(run, thread, cns, cid), b""))
        puts.append((K.trun_key(thread, run), b""))
    puts.append((K.last_key(thread, cns), cid.encode("utf-8")))
    other = sum(op_size({"key": k, "value": v}) for k, v in puts)
    inline, spills = split_inline(blobs, other, ctx.limits)
    return PutPlan([ops.put(k, v) for k, v in inline + puts], spills, _config(thread, cns, cid))


def put_plan(
    ctx: Ctx,
    config: Mapping[str, Any],
    checkpoint: Mapping[str, Any],
    metadata: Mapping[str, Any],
    new_versions: Mapping[str, Any],
) -> AgentPlan[dict[str, Any]]:
    """The chunks of the large blobs (saver_chunks.py), then one txn: the checkpoint
    record, its new blobs (or their chunk manifests), its run index entries. A chunk
    deleted meanwhile fails the txn's compares: upload again, retry."""
    p = put_ops(ctx, config, checkpoint, metadata, new_versions)
    what = f"checkpoint {p.config['configurable']['checkpoint_id']} of thread {target(config)[0]!r}"
    for _ in range(_ATTEMPTS):
        cmps, manifests = yield from upload_spills_plan(ctx.ns, ctx.limits, p.spills)
        check_one_txn(cmps + manifests + p.ops, ctx.limits, what)
        r = yield Call("txn", (cmps, manifests + p.ops), {"ns": ctx.ns})
        if r.succeeded:
            return p.config
    raise Conflict(f"the chunks of {what} kept being deleted while it was put")


# -- put_writes ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One pending write: ``key``'s value, or (``spill``) its chunks and a manifest;
    ``special`` ones (negative WRITES_IDX_MAP index) overwrite, the others are written only
    if absent."""

    key: str
    value: bytes | None
    special: bool
    spill: Spill | None = None


def write_entries(
    ctx: Ctx,
    config: Mapping[str, Any],
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str = "",
) -> list[Entry]:
    thread, cns, cid = target(config)
    if not cid:
        raise ValueError("put_writes needs a config with a checkpoint_id")
    packed: dict[str, tuple[bytes, bool]] = {}
    for i, (channel, value) in enumerate(writes):
        idx = WRITES_IDX_MAP.get(channel, i)
        key = K.writes_key(thread, cns, cid, task_id, idx)
        typed = dumps(ctx.serde, value, f"write to channel {channel!r} of task {task_id!r}")
        packed[key] = (pack_write(WriteRecord(task_id, channel, idx, task_path, typed)), idx < 0)
    # a special channel written twice here: the last wins; 3 ops a regular write at most
    other = 3 * sum(op_size({"key": k}) for k in packed)
    inline, spills = split_inline([(k, v) for k, (v, _) in packed.items()], other, ctx.limits)
    small = dict(inline)
    big = {sp.key: sp for sp in spills}
    return [Entry(k, small.get(k), special, big.get(k)) for k, (_, special) in packed.items()]


def put_writes_plan(
    ctx: Ctx,
    config: Mapping[str, Any],
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str = "",
) -> AgentPlan[None]:
    """The chunks of the large writes, then one txn: special writes overwrite, regular ones
    go in only where (task_id, idx) has none (compare version == 0; the failure branch
    reads which exist, and the txn is sent again without them), every chunk must exist."""
    pending = write_entries(ctx, config, writes, task_id, task_path)
    for _ in range(_ATTEMPTS):
        if not pending:
            return
        spills = [e.spill for e in pending if e.spill is not None]
        chunk_cmps, manifests = yield from upload_spills_plan(ctx.ns, ctx.limits, spills)
        regular = [e for e in pending if not e.special]
        success = [ops.put(e.key, e.value) for e in pending if e.value is not None]
        success += manifests
        cmps = [compare.version(e.key) == 0 for e in regular]
        fails = [ops.get(e.key) for e in regular]
        every = success + cmps + chunk_cmps + fails
        check_one_txn(every, ctx.limits, f"the writes of task {task_id!r}")
        r = yield Call("txn", (cmps + chunk_cmps, success, fails), {"ns": ctx.ns})
        if r.succeeded:
            return
        present = {e.key for e, kv in zip(regular, r.results, strict=True) if kv is not None}
        pending = [e for e in pending if e.special or e.key not in present]
    raise Conflict(f"the writes of task {task_id!r} kept conflicting with concurrent writers")
