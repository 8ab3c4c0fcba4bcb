"""Archival to a cold tier, the client side (docs/archive.md): the segment format
(:mod:`.segment`), manifest entries (:mod:`.manifest`), the archive store
(:mod:`.storage`, the only module using fsspec: the ``archive`` extra) and the archiver's
sans-IO plans (:mod:`.archiver`) that ``client.archive_run``, ``client.archive_restore`` and
``get(..., archived="fetch" | "restore")`` run.

Importing this package needs nothing beyond the client; making an :class:`ArchiveStore`
without fsspec raises an ImportError saying ``pip install 'statekeeper[archive]'``.
"""

from __future__ import annotations

from .results import ArchivedKeyValue, ArchivedStreamPage
from .segment import KeyItem, Segment, StreamItem, checksum, decode, encode, new_segment_id
from .storage import ArchiveStore, ArchiveWriteError

__all__ = [
    "ArchiveStore",
    "ArchiveWriteError",
    "ArchivedKeyValue",
    "ArchivedStreamPage",
    "KeyItem",
    "Segment",
    "StreamItem",
    "checksum",
    "decode",
    "encode",
    "new_segment_id",
]
