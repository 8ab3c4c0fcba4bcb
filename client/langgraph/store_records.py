"""The JSON record StatekeeperStore keeps under each item key (client/langgraph/store_keys.py),
readable with a plain ``statekeeper range item/``::

    {"namespace": ["users", "42"], "key": "prefs", "value": {...},
     "created_at": "2025-01-01T00:00:00+00:00", "updated_at": "...",
     "ttl": 5.0, "expires_at": "...", "leased": true,         # only for an item with a TTL
     "dims": 1536, "vectors": {"text": "<base64>", ...}}        # only for an embedded item

A record over the value limit is stored as content-addressed chunks (store_chunks.py): the
key then holds the record without ``value``, ``dims`` and ``vectors`` but with
``"chunks": {"sha256", "size", "count", "chunk_size", "lease"}``, and the chunks hold the
whole record as written.

- ``value`` is the item's value as JSON (so it must be JSON-serializable; tuples come back
  as lists, like any JSON store).
- ``ttl`` is in minutes (LangGraph's unit); ``expires_at`` is when the item stops being
  visible (the writer's wall clock); ``leased`` says whether the key also has a server
  lease that deletes it (TTLs above one day, the longest lease, have none: sweep_ttl()
  and reads that meet them delete them).
- ``vectors`` maps each embedded field path (``text``, ``tags.0``, ...) to its vector as
  base64 of little-endian float64s (exact, ~2.7x smaller than JSON numbers); ``dims`` is the
  index's dimension when the item was embedded, checked against the store's at search.
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from langgraph.store.base import Item, SearchItem

__all__ = ["Record", "decode_vector", "encode_vector"]


def encode_vector(vector: list[float]) -> str:
    """A vector as base64 of its little-endian float64s."""
    return base64.b64encode(struct.pack(f"<{len(vector)}d", *vector)).decode("ascii")


def decode_vector(text: str) -> tuple[float, ...]:
    raw = base64.b64decode(text)
    return struct.unpack(f"<{len(raw) // 8}d", raw)


def _time(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@dataclass(frozen=True, slots=True)
class Record:
    """One stored item (see the module docstring for its JSON shape)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    ttl: float | None = None
    expires_at: datetime | None = None
    leased: bool = False
    dims: int | None = None
    vectors: dict[str, str] | None = None
    chunks: dict[str, Any] | None = None  # the manifest of a chunked record (store_chunks.py)

    def encode(self) -> bytes:
        """The record as compact UTF-8 JSON.

        Raises:
            TypeError: the value is not JSON-serializable (names the item).
        """
        out: dict[str, Any] = {
            "namespace": list(self.namespace),
            "key": self.key,
            "value": self.value,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }
        if self.chunks is not None:  # value and vectors are in the chunks
            del out["value"]
            out["chunks"] = self.chunks
        if self.ttl is not None and self.expires_at is not None:
            out["ttl"] = self.ttl
            out["expires_at"] = self.expires_at.isoformat()
            out["leased"] = self.leased
        if self.vectors and self.chunks is None:
            out["dims"] = self.dims
            out["vectors"] = self.vectors
        try:
            return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise TypeError(
                f"the value of item {self.key!r} in namespace {self.namespace!r} is not "
                f"JSON-serializable: {e}"
            ) from e

    @classmethod
    def decode(cls, raw: bytes, where: str) -> Record:
        """The record stored as ``raw`` under key ``where``.

        Raises:
            ValueError: it is not a store record (names the key).
        """
        try:
            d = json.loads(raw)
            return cls(
                namespace=tuple(d["namespace"]),
                key=d["key"],
                value=d["value"] if "chunks" not in d else {},
                created_at=datetime.fromisoformat(d["created_at"]),
                updated_at=datetime.fromisoformat(d["updated_at"]),
                ttl=d.get("ttl"),
                expires_at=_time(d.get("expires_at")),
                leased=bool(d.get("leased", False)),
                dims=d.get("dims"),
                vectors=d.get("vectors"),
                chunks=d.get("chunks"),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"key {where!r} does not hold a StatekeeperStore item: {e}") from e

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def refreshed(self, now: datetime) -> Record:
        """This record with its TTL restarted at ``now`` (value and timestamps kept)."""
        assert self.ttl is not None
        return replace(self, expires_at=now + timedelta(minutes=self.ttl))

    def item(self) -> Item:
        return Item(
            value=self.value,
            key=self.key,
            namespace=self.namespace,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )

    def search_item(self, score: float | None = None) -> SearchItem:
        return SearchItem(
            self.namespace, self.key, self.value, self.created_at, self.updated_at, score
        )

    def vector_list(self) -> list[tuple[float, ...]]:
        return [decode_vector(v) for v in (self.vectors or {}).values()]
