"""The archive segment format: one file holding the keys and stream events one archive run
moved to the cold tier (client/archive/archiver.py writes it, restores and
``get(archived="fetch")`` read it). Pure: no IO, no clock, no randomness of its own.

File bytes = zlib (level 6) of msgpack ``[b"skarchive", 1, header, items]``:

- ``header``: ``{"segment": id, "ns": ns, "created_ms": ms, "revision": r, "keys": n,
  "events": n}`` (``revision``: the archive_plan revision the segment was read at);
- ``items``, each one of
  ``["k", key, value, version, create_revision, mod_revision]`` (a key as it was when
  archived) and
  ``["s", stream, [[seq, data, type, time_ms, revision, id, meta], ...]]`` (consecutive
  events of one stream, ascending seq, exactly the stored fields: type ``""`` and meta
  ``{}`` when the event has none, the ORIGINAL revision of each append).

The checksum is the sha256 (lowercase hex) of the file bytes; the cluster's segment record
(b"S") and the manifest carry it, and :func:`decode` verifies it before anything else, so
a truncated or flipped file is refused (:class:`client.errors.ArchiveCorrupt`, naming the
segment) instead of restoring wrong bytes.

Versioning: the second element is the format version. A reader refuses a version it does
not know (ArchiveCorrupt saying so). Adding a header field is not a new version (readers
ignore header fields they do not know); changing an item's layout or adding an item kind
is (bump to 2, keep reading 1).

Why zlib: it is in the standard library (the client's ``archive`` extra adds only fsspec;
zstandard is a client dependency already but zlib keeps the format readable with nothing
but Python), and agent checkpoints are JSON/msgpack text that compresses well. Measured
(Dec 2026, the shared 2-core dev machine, under load) on 200 JSON checkpoint-like values
of ~850 B each (173 KiB of msgpack items): level 6 gives 5.1x (34 KiB), compressing at
~8 MB/s and decompressing at ~45 MB/s; level 9 gains 4% of size at a quarter of the
speed; level 1 is 3x faster but only 3.8x. A full 64 MiB segment (the archiver's cap)
thus costs seconds of CPU here, small next to its upload; zstd would be faster but is not
what a reader with only the stdlib can open.

Segment ids: ``"20261201T005300Z-" + 8 hex`` (UTC time of the run + 4 bytes of an
injected random source): they sort by creation time, and two archivers starting in the
same second do not collide.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

from ..errors import ArchiveCorrupt

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "KeyItem",
    "Segment",
    "StreamItem",
    "checksum",
    "decode",
    "encode",
    "new_segment_id",
    "valid_segment_id",
]

MAGIC: Final = b"skarchive"
FORMAT_VERSION: Final = 1
ZLIB_LEVEL: Final = 6
_ID: Final = re.compile(r"^[A-Za-z0-9._-]{1,128}$")

Event = list[Any]
"""[seq, data, type, time_ms, revision, id, meta]: a stored event with its seq."""


@dataclass(frozen=True, slots=True)
class KeyItem:
    """One archived key as it was: its value and revisions."""

    key: str
    value: bytes
    version: int
    create_revision: int
    mod_revision: int


@dataclass(frozen=True, slots=True)
class StreamItem:
    """Consecutive events of one stream, ascending seq: [from_seq, before_seq)."""

    stream: str
    events: list[Event]

    @property
    def from_seq(self) -> int:
        return int(self.events[0][0])

    @property
    def before_seq(self) -> int:
        return int(self.events[-1][0]) + 1


@dataclass(frozen=True, slots=True)
class Segment:
    """A decoded segment file."""

    id: str
    ns: str
    created_ms: int
    revision: int
    keys: list[KeyItem] = field(default_factory=list)
    streams: list[StreamItem] = field(default_factory=list)

    def key(self, name: str) -> KeyItem | None:
        return next((k for k in self.keys if k.key == name), None)

    @property
    def events(self) -> int:
        return sum(len(s.events) for s in self.streams)


def valid_segment_id(segment_id: Any) -> bool:
    """Whether ``segment_id`` is 1..128 chars of [A-Za-z0-9._-] (the wire's rule)."""
    return isinstance(segment_id, str) and _ID.match(segment_id) is not None


def new_segment_id(now_ms: int, random_bytes: Callable[[int], bytes]) -> str:
    """A sortable segment id: UTC time of ``now_ms`` + "-" + 8 hex from ``random_bytes``."""
    stamp = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{random_bytes(4).hex()}"


def checksum(data: bytes) -> str:
    """The segment checksum: sha256 of the file bytes, lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def encode(
    segment_id: str,
    ns: str,
    created_ms: int,
    revision: int,
    keys: Sequence[KeyItem],
    streams: Sequence[StreamItem],
) -> bytes:
    """The file bytes of a segment (see the module docstring)."""
    if not valid_segment_id(segment_id):
        raise ValueError(f"bad segment id {segment_id!r}")
    header = {
        "segment": segment_id,
        "ns": ns,
        "created_ms": created_ms,
        "revision": revision,
        "keys": len(keys),
        "events": sum(len(s.events) for s in streams),
    }
    items: list[list[Any]] = [
        ["k", k.key, bytes(k.value), k.version, k.create_revision, k.mod_revision] for k in keys
    ]
    for s in streams:
        if not s.events:
            raise ValueError(f"stream item {s.stream!r} has no events")
        items.append(["s", s.stream, [list(e) for e in s.events]])
    packed = msgpack.packb([MAGIC, FORMAT_VERSION, header, items], use_bin_type=True)
    return zlib.compress(packed, ZLIB_LEVEL)


def decode(
    data: bytes, sha256: str, segment_id: str | None = None, size: int | None = None
) -> Segment:
    """The segment in ``data``, once its size is ``size`` (given) and its sha256 matches
    ``sha256``. The message never says the sha256 the data has: a segment URL is what a
    writer sealed, and echoing the hash of whatever it pointed at made the error an oracle
    of other files' contents (issue 27, item 5).

    Raises:
        ArchiveCorrupt: another size, checksum mismatch, not a segment, an unknown format
            version, or (given ``segment_id``) a file of another segment.
    """
    name = segment_id or "?"
    if size is not None and len(data) != size:
        raise _corrupt(name, f"the file is not the {size} bytes the cluster recorded")
    if checksum(data) != sha256:
        raise _corrupt(name, f"sha256 mismatch: the file's is not the recorded {sha256}")
    try:
        obj = msgpack.unpackb(zlib.decompress(data), raw=False, strict_map_key=False)
    except Exception as exc:  # zlib.error, msgpack's errors
        raise _corrupt(name, f"undecodable ({exc})") from None
    if not (isinstance(obj, list) and len(obj) == 4 and obj[0] == MAGIC):
        raise _corrupt(name, "not a statekeeper archive segment")
    _, version, header, items = obj
    if version != FORMAT_VERSION:
        raise _corrupt(name, f"format version {version!r}; this client reads {FORMAT_VERSION}")
    try:
        seg = _parse(header, items)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise _corrupt(name, f"malformed content ({exc})") from None
    if segment_id is not None and seg.id != segment_id:
        raise _corrupt(name, f"the file holds segment {seg.id!r}")
    return seg


def _parse(header: dict[str, Any], items: list[Any]) -> Segment:
    keys: list[KeyItem] = []
    streams: list[StreamItem] = []
    for item in items:
        if item[0] == "k":
            _, key, value, version, create, mod = item
            keys.append(KeyItem(key, bytes(value), int(version), int(create), int(mod)))
        elif item[0] == "s":
            events = [list(e) for e in item[2]]
            if not events or any(len(e) != 7 for e in events):
                raise ValueError(f"stream item {item[1]!r} has malformed events")
            streams.append(StreamItem(item[1], events))
        else:
            raise ValueError(f"unknown item kind {item[0]!r}")
    return Segment(
        str(header["segment"]),
        str(header["ns"]),
        int(header["created_ms"]),
        int(header["revision"]),
        keys,
        streams,
    )


def _corrupt(segment_id: str, why: str) -> ArchiveCorrupt:
    return ArchiveCorrupt(
        f"archive segment {segment_id} is corrupt: {why}",
        code="archive_corrupt",
        details={"segment": segment_id},
    )
