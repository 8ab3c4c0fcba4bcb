"""The raft snapshot file: a header naming the raft entries it covers, then the state
machine's own snapshot bytes. Written on the raft thread, shipped to followers as is."""

from __future__ import annotations

import os
import struct

import msgpack

MAGIC = b"SKSNAP01"


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path: str, header: dict, body_file: str, durable: bool) -> None:
    head = msgpack.packb(header, use_bin_type=True)
    with open(path, "wb") as out, open(body_file, "rb") as src:
        out.write(MAGIC + struct.pack(">I", len(head)) + head)
        while chunk := src.read(1 << 20):
            out.write(chunk)
        out.flush()
        if durable:
            os.fsync(out.fileno())


def read_header(path: str) -> tuple[dict, int]:
    """(header, offset of the body)."""
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path}: not a statekeeper snapshot")
        (n,) = struct.unpack(">I", f.read(4))
        return msgpack.unpackb(f.read(n), raw=False), len(MAGIC) + 4 + n


def extract_body(path: str, offset: int, dest: str) -> None:
    with open(path, "rb") as src, open(dest, "wb") as dst:
        src.seek(offset)
        while chunk := src.read(1 << 20):
            dst.write(chunk)
