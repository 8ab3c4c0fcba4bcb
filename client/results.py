"""The results the client returns: one frozen dataclass per kind of answer (and
:class:`Event`, what a stream append takes)."""

from __future__ import annotations

import json as _json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "AppendResult",
    "AppendedEvent",
    "CompactResult",
    "DeleteResult",
    "Event",
    "KeyValue",
    "RangeResult",
    "StreamEvent",
    "StreamInfo",
    "StreamList",
    "StreamPage",
    "TxnResult",
    "WriteResult",
]


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as stored.

    Attributes:
        key: the key (str).
        value: the value (always bytes; empty for ``keys_only`` reads).
        version: writes since the key was (re)created; 1 right after creation.
        create_revision: store revision that created the key.
        mod_revision: store revision of the last write to the key.
        ns: namespace of the key.
        revision: store revision the read was served at (0 when the kv did not come
            from a read). Not part of equality.
    """

    key: str
    value: bytes
    version: int
    create_revision: int
    mod_revision: int
    ns: str = "default"
    revision: int = field(default=0, compare=False)
    archived: ClassVar[bool] = False
    """True only on a value read from the archive (``get(..., archived="fetch")``)."""

    @property
    def text(self) -> str:
        """The value decoded as UTF-8 (raises UnicodeDecodeError if it is not)."""
        return self.value.decode("utf-8")


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Result of ``put`` and of a successful ``cas``.

    Attributes:
        revision: store revision of the write.
        prev_kv: the key before the write (only when asked with ``prev_kv=True`` and
            the key existed).
        kv: the key after a ``cas``, when the server returns it.
        replayed: True if this was a retry the server had already applied (the stored
            result of the first application is returned, nothing was written twice).
        lease: the lease a ``put(..., ttl=...)`` granted the key (None otherwise).
    """

    revision: int
    prev_kv: KeyValue | None = None
    kv: KeyValue | None = None
    replayed: bool = False
    lease: int | None = None


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """Result of ``delete``: ``deleted`` keys removed at ``revision`` (the current
    revision when nothing was deleted); ``prev_kvs`` when asked with ``prev_kv=True``."""

    revision: int
    deleted: int
    prev_kvs: list[KeyValue] = field(default_factory=list)
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class RangeResult:
    """One page of a ``range`` read, in key byte order.

    Attributes:
        kvs: the keys of this page.
        revision: store revision the page was read at.
        more: True if keys remain after this page.
        continuation: pass it back as ``range(..., continuation=..., revision=...)`` to
            get the next page (or use ``scan()``, which does that for you).
    """

    kvs: list[KeyValue]
    revision: int
    more: bool = False
    continuation: Any = None

    def __iter__(self) -> Iterator[KeyValue]:
        return iter(self.kvs)

    def __len__(self) -> int:
        return len(self.kvs)


@dataclass(frozen=True, slots=True)
class TxnResult:
    """Result of ``txn``.

    Attributes:
        succeeded: True if every compare held (the ``success`` branch ran), False if the
            ``failure`` branch ran.
        revision: store revision of the txn's writes (the current one if it wrote
            nothing).
        results: one entry per op of the branch that ran: WriteResult for put,
            DeleteResult for delete, KeyValue or None for get, RangeResult for range.
    """

    succeeded: bool
    revision: int
    results: list[Any] = field(default_factory=list)
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class CompactResult:
    """Result of ``compact``: history below ``compact_revision`` is gone."""

    revision: int
    compact_revision: int


# -- streams ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    """One event to append (``client.append(stream, [Event(...), ...])``).

    Attributes:
        data: the payload (bytes, or str stored as UTF-8; at most max_value_bytes).
        type: a label, at most 256 UTF-8 bytes.
        id: the event's idempotency key (1..128 chars): appending an id the stream already
            holds stores nothing and answers the stored seq (``duplicate``), so a replayed
            log is appended once. The same id with another payload is refused.
        meta: scalar metadata (str keys; str/int/float/bool/None values; at most 64
            entries and 4 KiB packed).
    """

    data: bytes | str
    type: str = ""
    id: str | None = None
    meta: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AppendedEvent:
    """What became of one event of an append: its ``seq`` in the stream, and whether it
    was already there (``duplicate``: its id was stored before, at that seq)."""

    seq: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Result of ``append``.

    Attributes:
        revision: store revision of the append (the current one when every event was a
            duplicate: nothing was written).
        stream: the stream.
        first_seq: seq of the first newly stored event (None: all were duplicates).
        last_seq: the stream's last seq after the append.
        events: one :class:`AppendedEvent` per event sent, in order.
        replayed: True if this was a retry the server had already applied.
    """

    revision: int
    stream: str
    first_seq: int | None
    last_seq: int
    events: list[AppendedEvent] = field(default_factory=list)
    replayed: bool = False

    @property
    def duplicates(self) -> int:
        """How many events were already in the stream."""
        return sum(1 for e in self.events if e.duplicate)

    @property
    def seqs(self) -> list[int]:
        """The seq of every event sent, in order (stored now or before)."""
        return [e.seq for e in self.events]


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One stored event.

    Attributes:
        seq: its position in the stream (1, 2, ...).
        data: the payload (bytes).
        type: its type ("" when none was given).
        time_ms: leader time of its append, ms since the epoch.
        revision: store revision of its append.
        id: its id, if it was given one.
        meta: its metadata ({} when none).
    """

    seq: int
    data: bytes
    type: str = ""
    time_ms: int = 0
    revision: int = 0
    id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The data decoded as UTF-8."""
        return self.data.decode("utf-8")

    def json(self) -> Any:
        """The data parsed as JSON."""
        return _json.loads(self.data)


@dataclass(frozen=True, slots=True)
class StreamPage:
    """One page of ``read_stream``; iterate it for the events.

    Attributes:
        events: the events of this page (ascending seq forward, descending backward).
        revision: store revision the page was read at.
        last_seq: the stream's last seq as of ``revision`` (0: it did not exist).
        more: True if events remain in this direction.
        continuation: pass it back (``read_stream(..., continuation=...)``) for the next
            page, or use ``events()``, which does that for you.
        first_seq: the stream's first stored seq (events below it were truncated; a read
            from below it starts there).
    """

    events: list[StreamEvent]
    revision: int
    last_seq: int = 0
    more: bool = False
    continuation: Any = None
    first_seq: int = 1
    archived: ClassVar[bool] = False
    """True only on a page read from the archive (``read_stream(..., archived="fetch")``)."""

    def __iter__(self) -> Iterator[StreamEvent]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream's counters (``stream_info``, ``list_streams``).

    Attributes:
        stream: its name.
        first_seq / last_seq: seqs of its first and last event.
        count: events stored.
        bytes: sum of the events' data sizes.
        create_revision / mod_revision: revisions of its first and last append.
        revision: store revision the read was served at (0 inside a StreamList).
        archived_before: the smallest seq of the stream's events held by the archive
            (docs/archive.md; None: none archived).
    """

    stream: str
    first_seq: int
    last_seq: int
    count: int
    bytes: int
    create_revision: int
    mod_revision: int
    revision: int = field(default=0, compare=False)
    archived_before: int | None = None


@dataclass(frozen=True, slots=True)
class StreamList:
    """One page of ``list_streams``, in name byte order; iterate it for the streams."""

    streams: list[StreamInfo]
    revision: int
    more: bool = False
    continuation: Any = None

    def __iter__(self) -> Iterator[StreamInfo]:
        return iter(self.streams)

    def __len__(self) -> int:
        return len(self.streams)
