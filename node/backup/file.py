"""The backup file (`statekeeper backup --out FILE`): one revision of a cluster's store,
with its metadata and a checksum, written and read as a stream.

Layout (integers big-endian):

    magic      8 bytes  b"SKBACKUP"
    version    u16      FORMAT (1)
    meta_len   u32      <= MAX_META_BYTES
    meta       msgpack map (below)
    frames     u32 length + that many body bytes, 1 <= length <= MAX_FRAME_BYTES, repeated
    end        u32 0    (the empty frame: the body is complete)
    sha256     32 bytes over every byte before it (magic through the end frame)

and nothing after it. The body is the store's snapshot (node/store/snapshot.py: a tar of
a RocksDB checkpoint taken between two applies, whose own header repeats applied_index,
revision and compact_revision). Frames let the node stream a body whose size it does not
know in advance; the end frame and the trailing digest make a truncated file (a dropped
connection, a full disk) fail as "truncated", never as a shorter valid backup.

meta (msgpack map, str keys; readers ignore keys they do not know):

    format          the snapshot body's format (node/store/snapshot.py FORMAT)
    cluster         [cluster] name of the source cluster
    source_node     id of the node that took it
    revision        store revision of the backup: every key as of it, nothing later
    compact_revision
    applied_index   raft index of the source cluster the state is at (informational:
                    a restore starts a new raft log, see node/backup/seed.py)
    clock_ms        the replicated cluster clock (node/raft/cluster_clock.py) at that index
    created_ms      the source node's wall clock when it took the checkpoint
    apply_pause_ms  how long applies waited for the checkpoint
    version         statekeeper version of the source node

Reading is all or nothing: `verify()` reads the whole file and checks the digest before
a restore writes anything; `copy_body()` checks it again while it copies (the file may
change between the two reads). Every refusal is a BackupError with a message that says
what is wrong (not a backup, another version, truncated at byte N, checksum mismatch).
Nothing in the file is unpickled or executed: meta is msgpack of plain values, the body
is extracted by node/store/snapshot.py, which admits only regular files under db/.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import msgpack

MAGIC = b"SKBACKUP"
FORMAT = 1
MAX_META_BYTES = 1 << 16
MAX_FRAME_BYTES = 1 << 22
FRAME_BYTES = 1 << 20  # what the writer puts in a frame
_U16, _U32 = struct.Struct(">H"), struct.Struct(">I")
DIGEST_BYTES = hashlib.sha256().digest_size


class BackupError(ValueError):
    """A file that is not a usable backup; the message says why."""


class BackupWriter:
    """Writes one backup through `write` (a file's write, or a stream's), hashing as it
    goes. Call meta() once, then write() the body, then finish(). tell() makes it a
    file for tarfile."""

    def __init__(self, write: Callable[[bytes], Any]) -> None:
        self._out = write
        self._hash = hashlib.sha256()
        self._buf = bytearray()
        self._body_bytes = 0
        self.size = 0

    def _emit(self, data: bytes) -> None:
        self._hash.update(data)
        self._out(data)
        self.size += len(data)

    def meta(self, meta: dict[str, Any]) -> None:
        packed = msgpack.packb(meta, use_bin_type=True)
        if len(packed) > MAX_META_BYTES:
            raise ValueError(f"backup metadata too large ({len(packed)} bytes)")
        self._emit(MAGIC + _U16.pack(FORMAT) + _U32.pack(len(packed)) + packed)

    def write(self, data: bytes) -> int:
        self._buf += data
        self._body_bytes += len(data)
        while len(self._buf) >= FRAME_BYTES:
            self._frame(bytes(self._buf[:FRAME_BYTES]))
            del self._buf[:FRAME_BYTES]
        return len(data)

    def tell(self) -> int:
        return self._body_bytes

    def flush(self) -> None:
        pass

    def _frame(self, data: bytes) -> None:
        self._emit(_U32.pack(len(data)) + data)

    def finish(self) -> str:
        """End the body and write the digest; returns it (hex)."""
        if self._buf:
            self._frame(bytes(self._buf))
            self._buf.clear()
        self._emit(_U32.pack(0))
        digest = self._hash.digest()
        self._out(digest)
        self.size += len(digest)
        return digest.hex()


class _Reader:
    """Reads a backup from `f`, hashing everything before the digest."""

    def __init__(self, f: BinaryIO, name: str) -> None:
        self._f = f
        self._name = name
        self._hash = hashlib.sha256()
        self.pos = 0

    def _exact(self, n: int, what: str, hashed: bool = True) -> bytes:
        data = self._f.read(n)
        if len(data) != n:
            raise BackupError(
                f"{self._name}: truncated: the file ends at byte {self.pos + len(data)}, "
                f"inside the {what} (an interrupted download or a full disk?)"
            )
        if hashed:
            self._hash.update(data)
        self.pos += n
        return data

    def meta(self) -> dict[str, Any]:
        head = self._f.read(len(MAGIC))
        if head != MAGIC:
            raise BackupError(
                f"{self._name}: not a statekeeper backup (it does not start with {MAGIC!r})"
            )
        self._hash.update(head)
        self.pos = len(MAGIC)
        (version,) = _U16.unpack(self._exact(2, "header"))
        if version != FORMAT:
            raise BackupError(
                f"{self._name}: backup format {version}; this statekeeper reads format {FORMAT}"
            )
        (n,) = _U32.unpack(self._exact(4, "header"))
        if n > MAX_META_BYTES:
            raise BackupError(f"{self._name}: corrupted: metadata length {n} is out of range")
        raw = self._exact(n, "metadata")
        try:
            meta = msgpack.unpackb(raw, raw=False, strict_map_key=True)
        except (ValueError, msgpack.UnpackException) as e:
            raise BackupError(f"{self._name}: corrupted: unreadable metadata ({e})") from None
        if not isinstance(meta, dict):
            raise BackupError(f"{self._name}: corrupted: metadata is not a map")
        return meta

    def body(self) -> Iterator[bytes]:
        """The body's frames, then checks the end and the digest."""
        while True:
            at = self.pos
            (n,) = _U32.unpack(self._exact(4, "body"))
            if n == 0:
                break
            if n > MAX_FRAME_BYTES:
                raise BackupError(
                    f"{self._name}: corrupted: frame length {n} at byte {at} is out of range"
                )
            yield self._exact(n, "body")
        digest = self._exact(DIGEST_BYTES, "checksum", hashed=False)
        if digest != self._hash.digest():
            raise BackupError(
                f"{self._name}: checksum mismatch: the file is corrupted (sha256 of its "
                f"content does not match the one stored at its end)"
            )
        if self._f.read(1):
            raise BackupError(
                f"{self._name}: corrupted: data after the checksum at byte {self.pos}"
            )

    @property
    def digest(self) -> str:
        return self._hash.hexdigest()


def verify(path: str, progress: Callable[[int], None] | None = None) -> tuple[dict, str, int]:
    """Read the whole file: (meta, sha256 hex, body bytes). Raises BackupError."""
    body = 0
    with _open(path) as f:
        r = _Reader(f, path)
        meta = r.meta()
        for frame in r.body():
            body += len(frame)
            if progress is not None:
                progress(r.pos)
    return meta, r.digest, body


def copy_body(path: str, dest: BinaryIO) -> dict:
    """Write the body to `dest`, checking the whole file as it goes; returns the meta.
    On BackupError `dest` holds part of a body: the caller discards it."""
    with _open(path) as f:
        r = _Reader(f, path)
        meta = r.meta()
        for frame in r.body():
            dest.write(frame)  # (an error writing is the caller's, not the file's)
    return meta


def _open(path: str) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as e:
        raise BackupError(f"{path}: cannot read: {e.strerror or e}") from None
