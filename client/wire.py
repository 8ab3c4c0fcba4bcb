"""The wire basics of the client's sans-IO core: a :class:`Request`, the msgpack encoding,
the read options. No sockets anywhere in the core.

``Client`` (blocking sockets) and ``AsyncClient`` (asyncio) both build a :class:`Request` with the
builders of client/kv_requests.py and client/batch_ops.py, send ``request.body`` to
``endpoint + request.path`` and hand the answer's status, Content-Type and body to
``request.parse``, which returns the result (client/results.py) or raises the typed
exception (client/responses.py maps answers to both). Keeping every wire detail in these
modules means the two clients cannot drift apart, and all of it is testable without a
network.

Wire format: msgpack (``application/msgpack``), values as bin. ``str`` values are
encoded as UTF-8 before sending; values always come back as ``bytes``
(:attr:`KeyValue.text` decodes them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from .errors import InvalidRequest

__all__ = [
    "ARCHIVED_MODES",
    "BACKUP_PATH",
    "CONSISTENCY_LEVELS",
    "GET_HEADERS",
    "LINEARIZABLE",
    "MSGPACK",
    "POST_HEADERS",
    "SERIALIZABLE",
    "Parser",
    "Request",
    "check_archived_mode",
    "check_key",
    "encode_value",
    "new_idempotency_key",
    "pack",
    "post",
    "read_options",
]

MSGPACK: Final = "application/msgpack"
LINEARIZABLE: Final = "linearizable"
SERIALIZABLE: Final = "serializable"
CONSISTENCY_LEVELS: Final = (LINEARIZABLE, SERIALIZABLE)

# Shared, never mutated: building header dicts per request is measurable overhead.
POST_HEADERS: Final[Mapping[str, str]] = {"Content-Type": MSGPACK, "Accept": MSGPACK}
GET_HEADERS: Final[Mapping[str, str]] = {"Accept": MSGPACK}
BACKUP_PATH: Final = "/v1/admin/backup"  # node/api/backup.py PATH: a stream, not an op

Parser = Callable[[int, "str | None", bytes], Any]


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP exchange, ready to send.

    ``body`` is built once, so every retry of a call sends the very same bytes, including
    the same idempotency key: that is what makes a retried write take effect once.
    """

    method: str
    path: str
    body: bytes | None
    headers: Mapping[str, str]
    parse: Parser
    idempotency_key: str | None = None
    op: str = ""
    # Seconds the server may hold the answer back (a long poll's wait): added to each
    # attempt's timeout and to the retry deadline.
    wait: float = 0.0


def new_idempotency_key() -> str:
    """A fresh idempotency key: a random (version 4) UUID as 32 hex digits."""
    # Same bits as uuid.uuid4().hex, without building a UUID object (5x faster).
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    return b.hex()


def encode_value(value: Any) -> bytes:
    """Value to wire bytes: bytes-like as is, str as UTF-8."""
    if type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(
        f"value must be bytes or str, not {type(value).__name__} (serialize it first, "
        "e.g. json.dumps or msgpack.packb)"
    )


def check_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    raise TypeError(f"key must be str, not {type(key).__name__}")


# What a read does with data moved to the archive (docs/archive.md): the ``archived=``
# argument of get and read_stream (client/commands.py, client/streams/commands.py), checked
# here, below both, so that neither command mixin imports the other's module.
ARCHIVED_MODES: Final = ("error", "fetch", "restore")


def check_archived_mode(archived: Any, allowed: tuple[str, ...] = ARCHIVED_MODES) -> str:
    if archived not in allowed:
        raise InvalidRequest(
            f"archived must be one of {', '.join(allowed)}, not {archived!r}",
            code="invalid_argument",
        )
    return str(archived)


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def post(
    path: str,
    body: dict[str, Any],
    parse: Parser,
    op: str,
    key: str | None = None,
    wait: float = 0.0,
) -> Request:
    return Request("POST", path, pack(body), POST_HEADERS, parse, key, op, wait)


def read_options(
    body: dict[str, Any], revision: int | None, consistency: str | None, min_revision: int | None
) -> None:
    if revision is not None:
        body["revision"] = revision
    # linearizable is the server default: leaving it out keeps the hot path small.
    if consistency is not None and consistency != LINEARIZABLE:
        if consistency not in CONSISTENCY_LEVELS:
            raise InvalidRequest(
                f"consistency must be one of {CONSISTENCY_LEVELS}, not {consistency!r}",
                code="invalid_argument",
            )
        body["consistency"] = consistency
    if min_revision is not None:
        body["min_revision"] = min_revision
