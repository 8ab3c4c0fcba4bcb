"""What StatekeeperSaver stores, as bytes: the checkpoint record, blobs, pending writes,
the chunking of large values, the pickle guard and the size limits (no I/O here).

Values (all msgpack; ``typed`` is the serde's ``(type, bytes)`` pair as a 2-list):

- checkpoint record (``ckpt/...``): ``{"v": 1, "id", "parent", "ckpt": typed checkpoint
  without channel_values, "meta": typed metadata, "run": run_id | None, "blobs": {channel:
  version segment}, "delta": uses a DeltaChannel}``. ``run`` and ``blobs`` are plain so
  delete_for_runs, prune and copy_thread never need the serde (nor its encryption key).
- blob (``blob/...``): ``typed``.
- pending write (``writes/...``): ``{"task", "ch", "idx", "path", "val": typed}``.

A blob or write stored as chunks (saver_chunks.py: over 256 KiB, or to fit the txn) has
at its key the manifest ``b"\\xc1" + msgpack({"sha256", "size", "count", "chunk"})`` (0xc1
is never a msgpack first byte) and its bytes in ``chunk/{key}/{sha256}/{i:06d}``, written
before the txn. Earlier versions wrote ``b"\\xc1" + msgpack([chunks, size])`` with the bytes
in ``{key}/c0``, ``{key}/c1``, ... of the same txn; :func:`stored` still reads those. A
record must fit in one value (1 MiB): it holds no channel values, so only a huge
``versions_seen`` or metadata can hit that; it is refused with
``InvalidRequest(code="too_large")``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from ..errors import InvalidRequest

__all__ = [
    "CHUNK_MARK",
    "ChunkRef",
    "Limits",
    "Record",
    "WriteRecord",
    "check_one_txn",
    "check_serde",
    "dumps",
    "loads",
    "op_size",
    "pack_blob",
    "pack_chunk_ref",
    "pack_record",
    "pack_txns",
    "pack_write",
    "stored",
    "too_large",
    "unpack_blob",
    "unpack_record",
    "unpack_write",
]

CHUNK_MARK = b"\xc1"
_OP_OVERHEAD = 64  # msgpack framing of one put/delete op in a txn request, generously


@dataclass(frozen=True, slots=True)
class Limits:
    """The server's limits as the saver plans with them (node/config.py Limits), with
    headroom: a txn's request must stay under ``request_bytes`` and ``ops`` ops. Values
    over ``inline_bytes`` are stored as chunks of ``chunk_bytes`` (saver_chunks.py)."""

    value_bytes: int = 1024 * 1024
    inline_bytes: int = 256 * 1024
    chunk_bytes: int = 1024 * 1024
    request_bytes: int = 4 * 1024 * 1024 - 64 * 1024
    ops: int = 1000
    range_page: int = 10_000


def too_large(message: str) -> InvalidRequest:
    return InvalidRequest(message, code="too_large")


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False)


# -- serde, never pickle -------------------------------------------------------------------


def check_serde(serde: Any) -> None:
    """Refuse a serializer that may pickle (JsonPlusSerializer(pickle_fallback=True), also
    inside an EncryptedSerializer)."""
    inner = serde
    for _ in range(4):
        if getattr(inner, "pickle_fallback", False):
            raise ValueError(
                "StatekeeperSaver never pickles: pass a serde without pickle_fallback "
                "(JsonPlusSerializer() is LangGraph's msgpack-based default)"
            )
        inner = getattr(inner, "serde", None)
        if inner is None:
            return


def dumps(serde: Any, value: Any, what: str) -> list[Any]:
    """``serde.dumps_typed(value)`` as a 2-list; TypeError (naming ``what``) when the serde
    cannot encode it without pickle."""
    try:
        type_, data = serde.dumps_typed(value)
    except Exception as e:  # ormsgpack.MsgpackEncodeError and friends
        raise TypeError(
            f"{what}: {type(value).__name__} cannot be serialized by {type(serde).__name__} "
            f"(msgpack) and StatekeeperSaver never pickles: {e}"
        ) from e
    if type_ == "pickle":
        raise TypeError(f"{what}: the serde pickled it; StatekeeperSaver never stores pickle")
    return [type_, bytes(data)]


def loads(serde: Any, typed: Sequence[Any]) -> Any:
    if typed[0] == "pickle":
        raise ValueError("refusing to unpickle a stored value (StatekeeperSaver never pickles)")
    return serde.loads_typed((typed[0], typed[1]))


# -- chunking ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """The manifest of a value stored as content-addressed chunks (saver_chunks.py)."""

    sha256: str
    size: int
    count: int
    chunk_size: int


def pack_chunk_ref(ref: ChunkRef) -> bytes:
    return CHUNK_MARK + _pack(
        {"sha256": ref.sha256, "size": ref.size, "count": ref.count, "chunk": ref.chunk_size}
    )


def stored(key: str, main: bytes, chunks: Mapping[int, bytes]) -> bytes | ChunkRef:
    """What the value at ``key`` is: ``main`` itself, a ChunkRef (its chunks are fetched
    apart), or (format of earlier versions) the concatenation of ``{key}/c{i}`` chunks
    written in the same txn (``chunks``: i -> bytes)."""
    if not main.startswith(CHUNK_MARK):
        return main
    manifest = _unpack(main[1:])
    if isinstance(manifest, dict):
        return ChunkRef(manifest["sha256"], manifest["size"], manifest["count"], manifest["chunk"])
    n, size = manifest
    try:
        data = b"".join(chunks[i] for i in range(n))
    except KeyError as e:
        raise ValueError(f"{key}: chunk {e.args[0]} of {n} is missing") from None
    if len(data) != size:
        raise ValueError(f"{key}: chunks hold {len(data)} bytes, the manifest says {size}")
    return data


# -- records -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """A checkpoint record as stored (its typed parts not decoded)."""

    id: str
    parent: str | None
    ckpt: list[Any]
    meta: list[Any]
    run: str | None
    blobs: dict[str, str]
    delta: bool


def pack_record(rec: Record) -> bytes:
    return _pack(
        {
            "v": 1,
            "id": rec.id,
            "parent": rec.parent,
            "ckpt": rec.ckpt,
            "meta": rec.meta,
            "run": rec.run,
            "blobs": rec.blobs,
            "delta": rec.delta,
        }
    )


def unpack_record(data: bytes) -> Record:
    d = _unpack(data)
    return Record(
        d["id"],
        d.get("parent"),
        d["ckpt"],
        d["meta"],
        d.get("run"),
        d.get("blobs") or {},
        bool(d.get("delta")),
    )


def pack_blob(typed: list[Any]) -> bytes:
    return _pack(typed)


def unpack_blob(data: bytes) -> list[Any]:
    return _unpack(data)


@dataclass(frozen=True, slots=True)
class WriteRecord:
    task_id: str
    channel: str
    idx: int
    task_path: str
    value: list[Any]


def pack_write(w: WriteRecord) -> bytes:
    return _pack(
        {"task": w.task_id, "ch": w.channel, "idx": w.idx, "path": w.task_path, "val": w.value}
    )


def unpack_write(data: bytes) -> WriteRecord:
    d = _unpack(data)
    return WriteRecord(d["task"], d["ch"], d["idx"], d.get("path") or "", d["val"])


# -- txn sizing ----------------------------------------------------------------------------


def op_size(op: Mapping[str, Any]) -> int:
    """Bytes ``op`` (a put, delete, get or compare) adds to a txn request, about."""
    value = op.get("value")
    return len(op["key"]) + (len(value) if isinstance(value, bytes) else 8) + _OP_OVERHEAD


def pack_txns(ops: Iterable[dict[str, Any]], limits: Limits, reserve: int = 0) -> list[list[dict]]:
    """``ops`` in order, cut into txns within the op and byte limits (``reserve`` ops per
    txn are left for compares)."""
    txns: list[list[dict]] = []
    cur: list[dict] = []
    size = 0
    for op in ops:
        n = op_size(op)
        if cur and (len(cur) + 1 + reserve > limits.ops or size + n > limits.request_bytes):
            txns.append(cur)
            cur, size = [], 0
        cur.append(op)
        size += n
    if cur:
        txns.append(cur)
    return txns


def check_one_txn(ops: Sequence[Mapping[str, Any]], limits: Limits, what: str) -> None:
    """InvalidRequest(code="too_large") unless ``ops`` fit in one txn."""
    size = sum(op_size(o) for o in ops)
    if len(ops) > limits.ops or size > limits.request_bytes:
        biggest = sorted(ops, key=op_size, reverse=True)[:3]
        names = ", ".join(f"{o['key']} ({op_size(o)} bytes)" for o in biggest)
        raise too_large(
            f"{what} needs {len(ops)} ops and {size} bytes in one txn; the limits are "
            f"{limits.ops} ops and {limits.request_bytes} bytes (largest: {names})"
        )
