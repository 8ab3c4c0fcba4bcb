"""The saver's maintenance operations as plans (see saver_plan.py): delete_thread,
delete_for_runs, prune and copy_thread.

- Deleting threads is prefix deletes (``ckpt/{t}/``, ``blob/{t}/``, ``writes/{t}/``,
  their chunks ``chunk/blob/{t}/`` and ``chunk/writes/{t}/``, ``trun/{t}/``, ``last/{t}/``
  and ``run/{run}/{t}/`` per run of the thread) and the ``ttl/{t}`` marker, one txn
  (several only past 1000 prefixes); a thread's lease (ttl=) is left to expire with no
  keys.
- delete_for_runs and prune "keep_latest" *sweep* one (thread, checkpoint_ns) at a time:
  read its records, its blob keys and its ``last/`` marker at one revision, then one txn
  deletes the doomed checkpoints, their pending writes and run index entries, un-parents a
  survivor whose parent went (as PostgresSaver's prune does) and deletes every blob no
  survivor references, and their chunk dirs (mark and sweep: also collects blobs an
  earlier interrupted sweep left and the chunks of puts that crashed before their txn). The txn compares the ``last/`` marker's mod_revision, which every put of that
  namespace rewrites: a checkpoint put meanwhile (which may reference a blob the sweep
  would free) fails the compare, and the namespace is read and swept again.
- copy_thread reads the source at one revision and writes blobs and writes, then records
  (and the run index, ``trun/``, ``last/``): ONE txn when it fits in the limits (1000 ops,
  ~4 MiB), else several, records last, so an interrupted copy shows a subset of the
  checkpoints, each complete; running it again finishes it (same keys, same values).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import Conflict
from ..ops import compare, ops
from ..plan import AgentPlan, Call
from . import keys as K
from .saver_codec import Record, pack_record, pack_txns, unpack_record
from .saver_plan import Ctx, ranges_at

__all__ = [
    "PRUNE_STRATEGIES",
    "copy_thread_plan",
    "delete_for_runs_plan",
    "delete_threads_plan",
    "prune_plan",
    "sweep_plan",
]

PRUNE_STRATEGIES = ("keep_latest", "delete")
_ATTEMPTS = 5
_VALUE_PAGE = 256  # kvs per range page when reading values (copy_thread)


def _unique(items: Iterable[str], name: str = "thread_id") -> list[str]:
    return list(dict.fromkeys(K.checked_id(i, name) for i in items))


def _bounds(prefixes: Iterable[str]) -> list[tuple[str, str]]:
    return [(p, K.prefix_end(p)) for p in prefixes]


def _last_segment(key: str) -> str:
    return K.unpart(key.rpartition("/")[2])


def delete_threads_plan(ctx: Ctx, thread_ids: Sequence[str]) -> AgentPlan[None]:
    """Everything of these threads, every checkpoint_ns: prefix deletes in one txn."""
    threads = _unique(thread_ids)
    if not threads:
        return
    runs, _ = yield from ranges_at(
        ctx, _bounds(K.trun_prefix(t) for t in threads), None, keys_only=True
    )
    prefixes = []
    for t, kvs in zip(threads, runs, strict=True):
        prefixes += [K.ckpt_prefix(t), K.blob_prefix(t), K.writes_prefix(t)]
        prefixes += [K.chunk_prefix(K.blob_prefix(t)), K.chunk_prefix(K.writes_prefix(t))]
        prefixes += [K.last_prefix(t), K.trun_prefix(t)]
        prefixes += [K.run_prefix(_last_segment(kv.key), t) for kv in kvs]
    deletes = [ops.delete(p, prefix=True) for p in prefixes]
    deletes += [ops.delete(K.ttl_key(t)) for t in threads]  # its lease's marker (saver_ttl.py)
    for txn in pack_txns(deletes, ctx.limits):
        yield Call("txn", ([], txn), {"ns": ctx.ns})


@dataclass(frozen=True, slots=True)
class Swept:
    """What a sweep of one namespace did: the records it deleted, those left."""

    deleted: list[Record]
    survivors: list[Record]


def _sweep_ops(
    thread: str,
    cns: str,
    records: list[Record],
    dead: set[str],
    blob_keys: list[str],
    chunk_keys: list[str],
) -> list[dict]:
    survivors = [r for r in records if r.id not in dead]
    out = []
    for r in survivors:  # a survivor whose parent goes is left with none
        if r.parent in dead:
            rec = Record(r.id, None, r.ckpt, r.meta, r.run, r.blobs, r.delta)
            out.append(ops.put(K.ckpt_key(thread, cns, r.id), pack_record(rec)))
    for r in records:
        if r.id in dead:
            out.append(ops.delete(K.ckpt_key(thread, cns, r.id)))
            if r.run is not None:
                out.append(ops.delete(K.run_key(r.run, thread, cns, r.id)))
            out.append(ops.delete(K.writes_prefix(thread, cns, r.id), prefix=True))
            writes_chunks = K.chunk_prefix(K.writes_prefix(thread, cns, r.id))
            out.append(ops.delete(writes_chunks, prefix=True))
    used = {K.blob_key(thread, cns, ch, v) for r in survivors for ch, v in r.blobs.items()}
    slashes = K.blob_prefix(thread, cns).count("/") + 1  # {channel}/{version}
    out += [ops.delete(k) for k in blob_keys if K.main_key(k, slashes)[0] not in used]
    # chunk dirs of blobs no survivor references: also those of puts that crashed (or are
    # in flight: their txn's chunk compares fail and they upload again)
    owners = dict.fromkeys(K.chunk_owner(k) for k in chunk_keys)
    out += [ops.delete(K.chunk_root(o), prefix=True) for o in owners if o not in used]
    return out


def sweep_plan(
    ctx: Ctx, thread: str, cns: str, doomed: Callable[[list[Record]], set[str]]
) -> AgentPlan[Swept]:
    """Delete the checkpoints of (thread, cns) that ``doomed`` picks (it gets the records
    newest first), their writes and run index entries, and every blob no survivor
    references; see the module docstring for the compare that guards it."""
    prefix = K.ckpt_prefix(thread, cns)
    last = K.last_key(thread, cns)
    for _ in range(_ATTEMPTS):
        (rkvs,), rev = yield from ranges_at(ctx, _bounds([prefix]), None)
        records = [unpack_record(kv.value) for kv in rkvs]
        dead = doomed(records)
        blobs = K.blob_prefix(thread, cns)
        (bkvs, lkvs, ckvs), _ = yield from ranges_at(
            ctx,
            [*_bounds([blobs]), (last, last + "\x01"), *_bounds([K.chunk_prefix(blobs)])],
            rev,
            keys_only=True,
        )
        blob_keys, chunk_keys = [kv.key for kv in bkvs], [kv.key for kv in ckvs]
        txn_ops = _sweep_ops(thread, cns, records, dead, blob_keys, chunk_keys)
        guard = compare.mod_revision(last) == (lkvs[0].mod_revision if lkvs else 0)
        for txn in pack_txns(txn_ops, ctx.limits, reserve=1):
            r = yield Call("txn", ([guard], txn), {"ns": ctx.ns})
            if not r.succeeded:
                break  # a put landed in this namespace meanwhile: read it again
        else:
            deleted = [r for r in records if r.id in dead]
            return Swept(deleted, [r for r in records if r.id not in dead])
    raise Conflict(f"thread {thread!r} namespace {cns!r} kept changing while it was swept")


def _namespaces(kvs: Iterable[Any]) -> list[str]:
    return list(dict.fromkeys(K.parse_ckpt_key(kv.key)[1] for kv in kvs))


def delete_for_runs_plan(ctx: Ctx, run_ids: Sequence[str]) -> AgentPlan[None]:
    """Every checkpoint whose metadata run_id is one of ``run_ids`` (found by the run
    index), with its writes, and the blobs nothing left references."""
    runs = set(_unique(run_ids, "run_id"))
    if not runs:
        return
    index, _ = yield from ranges_at(
        ctx, _bounds(K.run_prefix(r) for r in runs), None, keys_only=True
    )
    entries = [K.parse_run_key(kv.key) for kvs in index for kv in kvs]
    for thread, cns in dict.fromkeys((t, ns) for _, t, ns, _ in entries):
        yield from sweep_plan(ctx, thread, cns, lambda recs: {r.id for r in recs if r.run in runs})
    # Entries whose checkpoint was gone already, and the threads' run sets.
    rest = [ops.delete(K.run_key(*e)) for e in entries]
    rest += [ops.delete(K.trun_key(t, r)) for r, t in dict.fromkeys((e[0], e[1]) for e in entries)]
    for txn in pack_txns(rest, ctx.limits):
        yield Call("txn", ([], txn), {"ns": ctx.ns})


def prune_plan(ctx: Ctx, thread_ids: Sequence[str], strategy: str) -> AgentPlan[None]:
    """ "delete": every checkpoint of the threads. "keep_latest": the newest checkpoint of
    each checkpoint_ns, its writes and the blobs it references stay; refused (nothing
    pruned) for threads that use a DeltaChannel, whose latest value is rebuilt from older
    checkpoints (see BaseCheckpointSaver.prune)."""
    if isinstance(thread_ids, str):
        raise TypeError("thread_ids must be a sequence of thread ids, not a str")
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"unknown prune strategy {strategy!r}; use one of {PRUNE_STRATEGIES}")
    threads = _unique(thread_ids)
    if not threads:
        return
    if strategy == "delete":
        yield from delete_threads_plan(ctx, threads)
        return
    found, _ = yield from ranges_at(ctx, _bounds(K.ckpt_prefix(t) for t in threads), None)
    delta = [
        t
        for t, kvs in zip(threads, found, strict=True)
        if any(unpack_record(kv.value).delta for kv in kvs)
    ]
    if delta:
        raise NotImplementedError(
            f"keep_latest can't prune threads that use a DeltaChannel: {', '.join(delta)}"
        )
    for thread, kvs in zip(threads, found, strict=True):
        alive: set[str | None] = set()
        for cns in _namespaces(kvs):
            swept = yield from sweep_plan(ctx, thread, cns, lambda recs: {r.id for r in recs[1:]})
            alive.update(r.run for r in swept.survivors)
        (truns,), _ = yield from ranges_at(
            ctx, _bounds([K.trun_prefix(thread)]), None, keys_only=True
        )
        gone = [ops.delete(kv.key) for kv in truns if _last_segment(kv.key) not in alive]
        for txn in pack_txns(gone, ctx.limits):
            yield Call("txn", ([], txn), {"ns": ctx.ns})


def copy_thread_plan(ctx: Ctx, source: str, target: str) -> AgentPlan[None]:
    """Every checkpoint (all namespaces, the whole parent chain), pending write and blob of
    ``source`` put under ``target``; what ``target`` had stays (same keys are overwritten)."""
    source, target = (
        K.checked_id(source, "source_thread_id"),
        K.checked_id(target, "target_thread_id"),
    )
    if source == target:
        return
    (rkvs,), rev = yield from ranges_at(ctx, _bounds([K.ckpt_prefix(source)]), None)
    if not rkvs:
        return
    prefixes = [K.blob_prefix(source), K.writes_prefix(source), K.last_prefix(source)]
    (bkvs, wkvs, lkvs), _ = yield from ranges_at(ctx, _bounds(prefixes), rev, limit=_VALUE_PAGE)
    data = [ops.put(K.retarget(kv.key, target), kv.value) for kv in (*bkvs, *wkvs)]
    # Chunks first (two 1 MiB chunks per range page, one per txn: no huge response or
    # raft entry), so every manifest copied afterwards finds its chunks.
    chunk_dirs = [K.chunk_prefix(K.blob_prefix(source)), K.chunk_prefix(K.writes_prefix(source))]
    found, _ = yield from ranges_at(ctx, _bounds(chunk_dirs), rev, limit=2)
    one_chunk = replace(ctx.limits, request_bytes=ctx.limits.chunk_bytes + 64 * 1024)
    chunk_puts = [ops.put(K.retarget(kv.key, target), kv.value) for kvs in found for kv in kvs]
    for txn in pack_txns(chunk_puts, one_chunk):
        yield Call("txn", ([], txn), {"ns": ctx.ns})
    index, truns = [], {}
    for kv in rkvs:
        rec = unpack_record(kv.value)
        if rec.run is not None:
            _, cns, _ = K.parse_ckpt_key(kv.key)
            index.append(ops.put(K.run_key(rec.run, target, cns, rec.id), b""))
            truns[K.trun_key(target, rec.run)] = ops.put(K.trun_key(target, rec.run), b"")
    records = [ops.put(K.retarget(kv.key, target), kv.value) for kv in (*rkvs, *lkvs)]
    for txn in pack_txns([*data, *truns.values(), *index, *records], ctx.limits):
        yield Call("txn", ([], txn), {"ns": ctx.ns})
