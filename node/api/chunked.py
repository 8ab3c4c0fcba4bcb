"""Streamed HTTP answers for node/api/server.py: chunked transfer encoding under the
transport's flow control (the protocol of the module docstring of http_server.py).

A handler answers a `StreamedResponse`; `pump` writes its generator's items as chunks,
asking for the next item only when the transport is not paused (asyncio calls
pause_writing above the write buffer's high-water mark and resume_writing below its low
one; `Flow` turns that into an awaitable). So at most one item beyond the high-water mark
is ever buffered per stream. A client that lets the transport stay paused for
`stall_seconds` gets `StreamStalled` thrown into the generator at its yield: the generator
may yield one last item (written regardless), then the stream is over.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from http import HTTPStatus

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
LAST_CHUNK = b"0\r\n\r\n"


@dataclass(slots=True)
class StreamedResponse:
    """An answer sent as it is produced: one HTTP chunk per item of `chunks`."""

    status: int
    content_type: str
    chunks: AsyncGenerator[bytes, None]
    headers: tuple[tuple[str, str], ...] = ()
    # Called once when the answer is over, however it ended (even if `chunks` never
    # started: a generator closed before its first item runs no `finally`).
    on_end: Callable[[], None] | None = None


class StreamStalled(Exception):
    """Thrown into a StreamedResponse's generator when its client stopped reading."""


class Flow:
    """The transport's write flow control as seen by a writer."""

    __slots__ = ("_loop", "_waiter", "paused")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiter: asyncio.Future[None] | None = None
        self.paused = False

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        """Also called when the connection is lost (a writer waiting must look again)."""
        self.paused = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drained(self, timeout: float) -> bool:
        """Wait until the transport takes data again; False after `timeout` seconds."""
        if not self.paused:
            return True
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiter = fut
        try:
            async with asyncio.timeout(timeout):
                await fut
            return True
        except TimeoutError:
            return False
        finally:
            self._waiter = None


def stream_head(resp: StreamedResponse, fixed_headers: bytes, keep_alive: bool) -> bytes:
    extra = "".join(f"{k}: {v}\r\n" for k, v in resp.headers)
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n"
        b"Cache-Control: no-store\r\n%s%s%s\r\n"
        % (
            resp.status,
            _REASONS.get(resp.status, b"Unknown"),
            resp.content_type.encode("latin-1"),
            fixed_headers,
            extra.encode("latin-1"),
            b"" if keep_alive else b"Connection: close\r\n",
        )
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def pump(
    chunks: AsyncGenerator[bytes, None],
    write: Callable[[bytes], None],
    flow: Flow,
    stall_seconds: float,
    closed: Callable[[], bool],
) -> bool:
    """Write `chunks` as HTTP chunks (not the last one) while the client drains them.
    True when the generator ended; False when the client stalled or the connection closed."""
    while not closed():
        if flow.paused and not await flow.drained(stall_seconds):
            try:
                last = await chunks.athrow(StreamStalled())
            except (StreamStalled, StopAsyncIteration):
                last = None
            if last and not closed():
                write(chunk(last))
            return False
        try:
            data = await chunks.__anext__()
        except StopAsyncIteration:
            return True
        if data and not closed():
            write(chunk(data))
        # Let the loop run between two chunks: a producer that never suspends (a watch
        # catching up through pages) would otherwise hold it for the whole backlog (another
        # tenant's get waited 11.6 s behind 500 watches, issue 27, item 4).
        await asyncio.sleep(0)
    return False
