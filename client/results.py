"""The results the client returns: one frozen dataclass per kind of answer."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CompactResult",
    "DeleteResult",
    "KeyValue",
    "RangeResult",
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
    """

    revision: int
    prev_kv: KeyValue | None = None
    kv: KeyValue | None = None
    replayed: bool = False


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
