"""A replica's local file (client/crdt/replica.py, ``path=``): msgpack ``{format, version,
ns, key, type, replica_id, state, pending}``, the states in client/crdt/model.py's
canonical encoding (``pending`` None when nothing is pending), replaced atomically: written
to a temporary file next to it, fsynced, renamed over the old file, directory fsynced; a
crash leaves the old file or the new one, never a torn one."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import msgpack

from . import model

__all__ = ["FORMAT", "VERSION", "ReplicaFileError", "read_replica", "write_replica"]

FORMAT = "statekeeper-crdt-replica"
VERSION = 1


class ReplicaFileError(ValueError):
    """A replica's local file is not one (corrupt, another format) or belongs to another
    key, namespace, type or replica id. ``code``: ``bad_replica_file``."""

    code = "bad_replica_file"


def write_replica(
    path: Path, fields: dict[str, str], replica_id: str, state: Any, pending: Any
) -> None:
    """Write the replica (``fields``: ns, key, type) to ``path`` atomically."""
    t = fields["type"]
    data = msgpack.packb(
        {
            "format": FORMAT,
            "version": VERSION,
            **fields,
            "replica_id": replica_id,
            "state": model.encode(t, state),
            "pending": None if pending is None else model.encode(t, pending),
        },
        use_bin_type=True,
    )
    write_atomically(path, data)


def read_replica(
    path: Path, fields: dict[str, str], replica_id: str | None
) -> tuple[str, Any, Any]:
    """(replica id, state, pending) of the file at ``path``, which must hold the replica of
    ``fields`` (ns, key, type) and, when given, of ``replica_id``; else ReplicaFileError."""
    try:
        d = msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False)
    except Exception as e:  # noqa: BLE001 - any decoding failure: not our file
        raise ReplicaFileError(f"{path}: not a replica file ({e})") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT or d.get("version") != VERSION:
        raise ReplicaFileError(f"{path}: not a replica file (format {FORMAT} v{VERSION})")
    for name, expected in fields.items():
        if d.get(name) != expected:
            raise ReplicaFileError(
                f"{path} holds the replica of {name} {d.get(name)!r}, not {expected!r}"
            )
    rid = d.get("replica_id")
    if not isinstance(rid, str) or not rid:
        raise ReplicaFileError(f"{path}: no replica id")
    if replica_id is not None and replica_id != rid:
        raise ReplicaFileError(
            f"{path} belongs to replica {rid!r}, not {replica_id!r} (one file per replica "
            "id: use another path, or no replica_id)"
        )
    try:
        state = model.decode(fields["type"], d.get("state"))
        raw = d.get("pending")
        pending = None if raw is None else model.decode(fields["type"], raw)
    except model.CrdtError as e:
        raise ReplicaFileError(f"{path}: bad state: {e.message}") from None
    return rid, state, pending


def write_atomically(path: Path, data: bytes) -> None:
    """tmp file + fsync + rename + directory fsync."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
