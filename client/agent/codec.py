"""How the agent layer turns states, events and read models into bytes and back: the
envelope of client/agent/envelope.py (schema + version + format + zstd, upcasters, no
pickle), with the agent's registry, ``state_type`` and ``format``; and the JSON form the
CLI shows."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from . import envelope
from .envelope import MAGIC, SchemaRegistry

__all__ = ["Codec", "jsonable", "show_envelope", "unpack_event"]


class Codec:
    """Encode/decode with one registry (None: the envelope's default registry)."""

    __slots__ = ("format", "registry", "state_type")

    def __init__(
        self,
        registry: SchemaRegistry | None = None,
        state_type: Any = None,
        format: str = "msgpack",
    ) -> None:
        if format not in envelope.FORMATS:
            raise ValueError(f"format must be one of {envelope.FORMATS}, not {format!r}")
        self.registry = registry
        self.state_type = state_type
        self.format = format

    def encode(self, value: Any) -> bytes:
        """A state or read model as envelope bytes."""
        return envelope.encode(value, self.registry, self.format)

    def decode(self, data: bytes) -> Any:
        """The value of an envelope (an instance of ``state_type`` when one is set)."""
        return envelope.decode(data, self.registry, into=self.state_type)

    def header(self, data: bytes) -> dict[str, Any]:
        return envelope.peek(data).to_dict()

    def encode_event(self, data: Any) -> bytes:
        """An event's data: bytes as they are, anything else as an envelope."""
        if isinstance(data, bytes | bytearray | memoryview):
            return bytes(data)
        return envelope.encode(data, self.registry, self.format)

    def wire_event(
        self, type: str, data: Any, id: str | None, meta: Mapping[str, Any] | None, step: int
    ) -> dict[str, Any]:
        """An event to append: data encoded, ``meta.step`` set."""
        if not isinstance(type, str):
            raise TypeError(f"event type must be a str, not {type!r}")
        ev: dict[str, Any] = {
            "data": self.encode_event(data),
            "type": type,
            "meta": {**(meta or {}), "step": step},
        }
        if id is not None:
            ev["id"] = id
        return ev

    def decode_event(self, data: bytes) -> Any:
        """An event's data: decoded when it is an envelope, else the raw bytes."""
        if data[:3] == MAGIC:
            return envelope.decode(data, self.registry)
        return data


def unpack_event(e: Any) -> tuple[str, Any, None, Mapping[str, Any] | None]:
    """(type, data, None, meta) of an event given to a checkpoint: a (type, data) tuple, a
    dict or a client Event. It may not carry an id: the checkpoint's txn (its idempotency
    key and the stream expectation) already applies it once."""
    if isinstance(e, tuple):
        return e[0], e[1] if len(e) > 1 else b"", None, None
    if not isinstance(e, Mapping):
        e = {k: getattr(e, k, None) for k in ("type", "data", "id", "meta")}
    if e.get("id") is not None:
        raise ValueError(
            "events committed with a checkpoint take no id: the checkpoint's txn (its "
            "idempotency key and the stream expectation) already applies them once"
        )
    return e.get("type") or "", e.get("data", b""), None, e.get("meta")


def jsonable(value: Any) -> Any:
    """``value`` as JSON-ready data (bytes as {"$bytes": base64}, like the envelope's
    JSON form; dataclasses and other objects by their fields or repr)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {k if isinstance(k, str) else json.dumps(jsonable(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    try:
        from .schemas import to_plain

        return jsonable(to_plain(value))
    except Exception:
        return repr(value)


def show_envelope(data: bytes) -> dict[str, Any]:
    """Any envelope as JSON-ready data without a registry: {"header", "data"} (the data
    as stored, at the stored schema version); raw bytes that are no envelope as bytes."""
    if data[:3] != MAGIC:
        return {"header": None, "data": jsonable(data)}
    header, plain = envelope.decode_raw(data)
    return {"header": header.to_dict(), "data": jsonable(plain)}
