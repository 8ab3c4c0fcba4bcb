"""Store items over the 1 MiB value limit (issue 30 item 12, the store half), stored as the
saver stores large channel values (client/chunks.py): content-addressed chunks first, then
the item's txn with a small manifest record and a compare per chunk.

- What is chunked: an item whose encoded record (value, timestamps, vectors) is over
  ``Limits.max_value_bytes``. The chunks hold that whole record; the item's key holds the
  record without value and vectors but with ``"chunks": {sha256, size, count, chunk_size,
  lease}`` (store_records.py), so expiry and namespace are known without the chunks.
- Where: ``chunk/{item key}%/{tag}{sha256}/{i:06d}``. The ``%/`` ends the item key: item
  keys are escaped (store_keys.part), so ``%`` is always followed by ``25``, ``2F`` or
  ``00`` there, and one item's chunk root is never a prefix of another's (``item/a/b``'s
  would otherwise hold the chunks of every item in namespace ("a", "b")). ``tag`` is the
  item's lease id in hex and ``-`` for an item with a lease, empty otherwise.
- The txn: the manifest put, a prefix delete of every OTHER chunk dir under the item's
  root (the previous value's chunks, or a crashed put's), and the exists compares; a
  chunk deleted meanwhile (a concurrent put or delete of the item drops the whole root)
  fails the txn, and the plan uploads again (only what is missing) and retries.
- Overwrites and deletes: every small put and every delete of an item (and the sweeps of
  expired unleased items) carries a prefix delete of its chunk root in the same txn, so a
  chunked value's chunks go when the item is replaced or removed.
- TTL: an item with a lease (TTL <= one day) gets an explicit lease granted before the
  upload; chunks and manifest are attached to it, so its expiry deletes them at one
  revision. The tag makes the chunk dir unique to that lease: a re-put of the same bytes
  never reuses chunks that an older lease will delete. Refresh on read keeps that lease
  alive (``lease_keepalive``) and rewrites the manifest on it.
- Reads: get and search fetch the chunks of each visible chunked item they return (or
  filter or rank) in batched gets and check their length and sha256; list_namespaces
  reads only manifests.

Chunks are 1 MiB, one per request (a raft entry stays ~1 MiB, see client/chunks.py); the
txn's op limit bounds an item to ~990 MiB (``value_too_large`` above, before sending).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from .. import chunks
from ..errors import Conflict, InvalidRequest
from ..ops import ops
from ..plan import AgentPlan, call
from .store_records import Record

__all__ = ["BigPut", "big_put", "drop_chunks", "fill_rows_plan", "full_record_plan", "put_big_plan"]

_ATTEMPTS = 5
CHUNK = "chunk/"


def chunk_root(key: str) -> str:
    """The prefix of every chunk of the item at ``key`` (see the module docstring)."""
    return f"{CHUNK}{key}%/"


def drop_chunks(key: str) -> dict[str, Any]:
    """The txn op that deletes every chunk of the item at ``key``."""
    return ops.delete(chunk_root(key), prefix=True)


def _space(ns: str, key: str, lease: int | None, chunk_size: int) -> chunks.ChunkSpace:
    tag = "" if lease is None else f"{lease:x}-"
    return chunks.ChunkSpace(chunk_root(key) + tag, ns, chunk_size, chunk_size, chunk_size)


@dataclass(frozen=True, slots=True)
class BigPut:
    """An item to store as chunks: its key, record, encoded record and its sha256, the
    seconds of its lease (None: no lease)."""

    key: str
    record: Record
    raw: bytes
    sha: str
    lease_seconds: float | None


def big_put(
    key: str, rec: Record, raw: bytes, lease_seconds: float | None, chunk_size: int, ops_max: int
) -> BigPut:
    """A :class:`BigPut`, or ``value_too_large`` when its compares would not fit one txn."""
    count = chunks.chunk_count(len(raw), chunk_size)
    if count + 8 > ops_max:
        raise InvalidRequest(
            f"item {rec.key!r} of {rec.namespace!r} is {len(raw)} bytes as stored, over the "
            f"{(ops_max - 8) * chunk_size}-byte item limit",
            code="value_too_large",
        )
    return BigPut(key, rec, raw, chunks.sha256_hex(raw), lease_seconds)


def put_big_plan(ns: str, chunk_size: int, big: BigPut) -> AgentPlan[None]:
    """Grant the item's lease (if it has a TTL), upload its chunks, then one txn: the
    manifest, the other chunk dirs of the item deleted, every chunk checked."""
    lease = None
    if big.lease_seconds is not None:
        lease = (yield call("lease_grant", big.lease_seconds, ns=ns)).lease
    where = _space(ns, big.key, lease, chunk_size)
    own = where.dir(big.sha)
    for _ in range(_ATTEMPTS):
        size = yield from chunks.upload_plan(where, big.raw, big.sha, lease=lease)
        count = chunks.chunk_count(len(big.raw), size)
        kvs = yield from chunks.scan_plan(ns, chunk_root(big.key), None, True)
        others = sorted({kv.key.rsplit("/", 1)[0] + "/" for kv in kvs} - {own})
        manifest = {
            "sha256": big.sha,
            "size": len(big.raw),
            "count": count,
            "chunk_size": size,
            "lease": lease,
        }
        rec = replace(big.record, chunks=manifest)
        success = [ops.put(big.key, rec.encode(), lease=lease)]
        success += [ops.delete(d, prefix=True) for d in others]
        r = yield call("txn", chunks.exists_compares(where, big.sha, count), success, ns=ns)
        if r.succeeded:
            return
    raise Conflict(
        f"the chunks of item {big.record.key!r} of {big.record.namespace!r} kept "
        "being deleted while it was put (concurrent puts or deletes of the item)"
    )


def full_record_plan(ns: str, key: str, rec: Record) -> AgentPlan[Record]:
    """The chunked item ``rec`` (its manifest, read at ``key``) with its value and vectors
    from its chunks, checked against the manifest's length and sha256."""
    m = rec.chunks or {}
    where = _space(ns, key, m.get("lease"), m["chunk_size"])

    def missing(i: int, chunk_key: str) -> ValueError:
        return ValueError(
            f"item {rec.key!r} of {rec.namespace!r}: chunk {i} of {m['count']} "
            f"({chunk_key}) is missing"
        )

    data = yield from chunks.fetch_plan(where, m["sha256"], m["count"], missing)
    if len(data) != m["size"] or chunks.sha256_hex(data) != m["sha256"]:
        raise ValueError(
            f"item {rec.key!r} of {rec.namespace!r}: its chunks hold {len(data)} "
            f"bytes that do not match its manifest ({m['size']} bytes)"
        )
    full = Record.decode(data, key)
    return replace(rec, value=full.value, dims=full.dims, vectors=full.vectors)


def fill_rows_plan(ns: str, tables: list[Any], now: datetime) -> AgentPlan[None]:
    """Replace, in each table (a dict or list of store_core Rows), every unexpired chunked
    row by the row with its full record (:func:`full_record_plan`)."""
    for table in tables:
        for at in list(table.keys() if isinstance(table, dict) else range(len(table))):
            row = table[at]
            if row is not None and row.record.chunks is not None and not row.record.expired(now):
                full = yield from full_record_plan(ns, row.key, row.record)
                table[at] = row._replace(record=full)
