"""The raft snapshot file: a header naming the raft entries it covers, then the state
machine's own snapshot bytes. Shipped to followers as is."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import BinaryIO

import msgpack

MAGIC = b"SKSNAP01"


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path: str, header: dict, write_body: Callable[[BinaryIO], None], durable: bool) -> None:
    """The header, then whatever write_body(file) writes; fsynced when `durable`."""
    head = msgpack.packb(header, use_bin_type=True)
    with open(path, "wb") as out:
        out.write(MAGIC + struct.pack(">I", len(head)) + head)
        write_body(out)
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
