"""The requests of the stream reads (read_stream, stream_info, list_streams) and the
sans-IO pages of a subscription. An append is a write: client/kv_requests.py's
``write_request`` sends it (to POST /v1/streams/append)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from ..errors import InvalidRequest
from ..kv_requests import op_body
from ..ops import Ops
from ..responses import decode_ok, stream_info, stream_list, stream_page
from ..results import StreamEvent, StreamInfo, StreamList, StreamPage
from ..wire import SERIALIZABLE, Request, post, read_options

__all__ = [
    "MAX_WAIT",
    "Subscription",
    "list_streams_request",
    "read_stream_request",
    "stream_info_request",
]

MAX_WAIT: Final = 60.0
"""Longest long poll the server takes (read_stream's wait_ms <= 60000), in seconds."""


def read_stream_request(
    ns: str,
    stream: str,
    *,
    consistency: str | None = None,
    min_revision: int | None = None,
    wait: float | None = None,
    **fields: Any,
) -> Request:
    """POST /v1/streams/read; ``fields`` are those of :meth:`Ops.read_stream` (start,
    direction, limit, revision, continuation). ``wait`` (seconds, > 0) makes it a long
    poll: the server holds a forward read that finds nothing until events arrive or
    ``wait`` passes (the request's timeout grows by ``wait``)."""
    body = op_body(Ops.read_stream(stream, **fields), ns)
    held = 0.0
    if wait is not None:
        if not 0 <= wait <= MAX_WAIT:
            raise InvalidRequest(
                f"wait must be within 0..{MAX_WAIT:g} seconds", code="invalid_argument"
            )
        if wait > 0:
            body["wait_ms"] = math.ceil(wait * 1000)
            held = body["wait_ms"] / 1000
    read_options(body, None, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> StreamPage:
        return stream_page(decode_ok(status, ctype, raw, ns))

    return post("/v1/streams/read", body, parse, "read_stream", wait=held)


def stream_info_request(
    ns: str,
    stream: str,
    *,
    consistency: str | None = None,
    min_revision: int | None = None,
) -> Request:
    """POST /v1/streams/info; ``parse`` returns a StreamInfo or raises StreamNotFound."""
    body = op_body(Ops.stream_info(stream), ns)
    read_options(body, None, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> StreamInfo:
        return stream_info(decode_ok(status, ctype, raw, ns))

    return post("/v1/streams/info", body, parse, "stream_info")


def list_streams_request(
    ns: str,
    prefix: str | None = None,
    *,
    limit: int | None = None,
    continuation: Any = None,
    consistency: str | None = None,
    min_revision: int | None = None,
) -> Request:
    """POST /v1/streams/list; ``parse`` returns a StreamList."""
    body = op_body(Ops.list_streams(prefix, limit=limit, continuation=continuation), ns)
    read_options(body, None, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> StreamList:
        return stream_list(decode_ok(status, ctype, raw, ns))

    return post("/v1/streams/list", body, parse, "list_streams")


class Subscription:
    """The read_stream requests of one subscription, sans-IO and endless (a
    :class:`base.Pages`): each asks for the events from the next unseen seq as a long
    poll, so it answers at once while the stream has events to catch up on and waits for
    new ones once it has none. The first request uses the caller's consistency; later ones
    are ``serializable`` with ``min_revision`` = the revision of the last answer, so the
    subscriber never sees the stream go back in time, whichever node serves it."""

    __slots__ = ("_make", "_next_seq", "_read")

    def __init__(self, make: Callable[..., Request], start: int, consistency: str | None):
        self._make = make  # read_stream_request with ns, stream, wait bound
        self._next_seq = start
        self._read: dict[str, Any] = {"consistency": consistency}

    def __iter__(self) -> Subscription:
        return self

    def __next__(self) -> Request:
        return self._make(start=self._next_seq, **self._read)

    def items(self, page: StreamPage) -> list[StreamEvent]:
        """The events of ``page`` (the answer to the last request), in seq order."""
        if page.events:
            self._next_seq = page.events[-1].seq + 1
        self._read = {"consistency": SERIALIZABLE, "min_revision": page.revision}
        return page.events
