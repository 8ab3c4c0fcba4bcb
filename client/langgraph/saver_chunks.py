"""Large channel values and pending writes of StatekeeperSaver, as the agent layer stores
large states (client/chunks.py, issue 30 item 12): content-addressed chunks written first,
then the put's ONE txn with a small chunk manifest in the value's own key.

- Which values are chunked (:func:`split_inline`): every encoded value over
  ``Limits.inline_bytes`` (256 KiB), then the largest others until the txn fits
  ``Limits.request_bytes`` (so a put of many medium values is not refused either).
- Where: the chunks of the value at key ``k`` (``blob/...`` or ``writes/...``) are
  ``chunk/{k}/{sha256}/{i:06d}`` (keys.py chunk_root), so every prefix delete of a thread,
  a namespace or a checkpoint's writes has a ``chunk/`` twin, and a chunk dir names its
  owner.
- The txn carries a compare per chunk (it still exists), so a chunk deleted after its
  upload (delete_thread, a sweep collecting unreferenced chunks) fails the txn instead of
  committing a manifest with a hole; the plan then uploads again (only what is missing)
  and retries. A chunk is at most 1 MiB (the value limit; one chunk per request, so no
  raft entry grows past ~1 MiB, see client/chunks.py): with the 1000 ops of a txn, one put
  carries up to ~990 MiB of chunked values.
- Reads: the manifest comes with the range that reads the key; its chunks are then
  fetched in batched gets (chunks never change) and checked against its length and
  sha256.

A crash between the upload and the txn leaves chunks no manifest references, under their
owner's ``chunk/`` dir: delete_thread (and so a thread TTL) removes them with the thread;
prune and delete_for_runs delete the chunk dirs of blob keys no surviving checkpoint
references and of the deleted checkpoints' writes. An orphan dir under a key that is
referenced (a write retried with other bytes) stays until its thread or checkpoint goes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import writes_sort_key

from .. import chunks
from ..ops import ops
from ..plan import AgentPlan
from . import keys as K
from .saver_codec import (
    ChunkRef,
    Limits,
    WriteRecord,
    op_size,
    pack_chunk_ref,
    stored,
    unpack_write,
)

_MANIFEST = 160  # bytes of a chunk manifest (sha256 hex, three ints) in msgpack, roughly

__all__ = [
    "Spill",
    "blob_value_plan",
    "fetch_ref_plan",
    "pending_writes_plan",
    "space",
    "split_inline",
    "upload_spills_plan",
    "value_plan",
]


@dataclass(frozen=True, slots=True)
class Spill:
    """A value stored as chunks: its key, its bytes and their sha256."""

    key: str
    data: bytes
    sha: str


def space(ns: str, limits: Limits, key: str) -> chunks.ChunkSpace:
    """Where the chunks of the value at ``key`` live."""
    return chunks.ChunkSpace(
        K.chunk_root(key), ns, limits.value_bytes, limits.chunk_bytes, limits.chunk_bytes
    )


def split_inline(
    values: Sequence[tuple[str, bytes]], other_bytes: int, limits: Limits
) -> tuple[list[tuple[str, bytes]], list[Spill]]:
    """(the values kept in the txn, those to chunk): every value over
    ``limits.inline_bytes``, then the largest others until the txn (``other_bytes`` for
    its other ops) fits the request limit."""
    spill: set[str] = set()
    size = other_bytes + sum(op_size({"key": k, "value": v}) for k, v in values)
    for k, v in sorted(values, key=lambda kv: len(kv[1]), reverse=True):
        if len(v) <= limits.inline_bytes and size <= limits.request_bytes:
            break
        spill.add(k)  # its value leaves the txn; a manifest and a compare per chunk come in
        chunk_cmp = op_size({"key": K.chunk_root(k) + "0" * 71})
        size += _MANIFEST - len(v) + chunks.chunk_count(len(v), limits.chunk_bytes) * chunk_cmp
    inline = [(k, v) for k, v in values if k not in spill]
    return inline, [Spill(k, v, chunks.sha256_hex(v)) for k, v in values if k in spill]


def upload_spills_plan(
    ns: str, limits: Limits, spills: Iterable[Spill]
) -> AgentPlan[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Upload every spill's missing chunks; returns (the compares, the manifest puts) of
    the txn that commits them."""
    cmps: list[dict[str, Any]] = []
    puts: list[dict[str, Any]] = []
    for sp in spills:
        where = space(ns, limits, sp.key)
        size = yield from chunks.upload_plan(where, sp.data, sp.sha)
        count = chunks.chunk_count(len(sp.data), size)
        cmps += chunks.exists_compares(where, sp.sha, count)
        puts.append(ops.put(sp.key, pack_chunk_ref(ChunkRef(sp.sha, len(sp.data), count, size))))
    return cmps, puts


def fetch_ref_plan(ns: str, limits: Limits, key: str, ref: ChunkRef) -> AgentPlan[bytes]:
    """The value at ``key`` whose manifest is ``ref``, from its chunks (checked)."""

    def missing(i: int, chunk_key: str) -> ValueError:
        return ValueError(f"{key}: chunk {i} of {ref.count} ({chunk_key}) is missing")

    where = space(ns, limits, key)
    data = yield from chunks.fetch_plan(where, ref.sha256, ref.count, missing)
    if len(data) != ref.size or chunks.sha256_hex(data) != ref.sha256:
        raise ValueError(
            f"{key}: its chunks hold {len(data)} bytes that do not match the manifest "
            f"({ref.size} bytes, sha256 {ref.sha256[:12]}...)"
        )
    return data


def value_plan(
    ns: str, limits: Limits, key: str, main: bytes, old: Mapping[int, bytes]
) -> AgentPlan[bytes]:
    """The value at ``key`` from its stored ``main`` (and old-format ``chunks``), its
    content-addressed chunks fetched when ``main`` is their manifest."""
    raw = stored(key, main, old)
    if isinstance(raw, ChunkRef):
        raw = yield from fetch_ref_plan(ns, limits, key, raw)
    return raw


def blob_value_plan(
    ns: str, limits: Limits, key: str, kvs: Iterable[Any]
) -> AgentPlan[bytes | None]:
    """The blob at ``key`` from the kvs of the range [key, key + "/d") (the key and the
    ``{key}/c{i}`` chunks of the old format), or None."""
    main: bytes | None = None
    old: dict[int, bytes] = {}
    for kv in kvs:
        if kv.key == key:
            main = kv.value
        elif kv.key.startswith(key + "/c"):
            old[int(kv.key[len(key) + 2 :])] = kv.value
    if main is None:
        return None
    return (yield from value_plan(ns, limits, key, main, old))


def pending_writes_plan(
    ns: str, limits: Limits, prefix: str, kvs: Iterable[Any]
) -> AgentPlan[list[WriteRecord]]:
    """The pending writes in the kvs under ``prefix`` (``{task}/{idx}`` and their chunks)."""
    mains: dict[str, bytes] = {}
    old: dict[str, dict[int, bytes]] = {}
    for kv in kvs:
        key, i = K.main_key(kv.key, prefix.count("/") + 1)  # {task}/{idx}: one more "/"
        if i is None:
            mains[key] = kv.value
        else:
            old.setdefault(key, {})[i] = kv.value
    out = []
    for k, v in mains.items():
        raw = yield from value_plan(ns, limits, k, v, old.get(k, {}))
        out.append(unpack_write(raw))
    out.sort(key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))
    return out
