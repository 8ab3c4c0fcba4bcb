"""Watch: POST /v1/watch streams every change of a key, a prefix or a range from a start
revision on (docs/protocol.md, "Watch"). One mechanism: catch-up and live are the same loop
over the change log (node/store/changes.py), woken by apply through node/reads.py's
RevisionWaiters, the one wake-up read_stream's long poll uses too.

The loop (`watch_frames`): read the change log from the next revision in bounded pages on a
fresh ReadView each (never a view held across an await); send the frames; when caught up with
the local revision, wait for apply to move it, sending a progress frame after `progress_ms`
without a frame. Before the first frame the node passes the read barrier of a linearizable
read (ReadPolicy), so a watch never misses a revision the cluster had committed when the
request arrived; a follower then serves it from its own applied state.

Frames, one per line of NDJSON (`application/x-ndjson`, for a JSON request) or each as a
4-byte big-endian length followed by that many bytes of msgpack (`MSGPACK_FRAMES`, for a
msgpack request), carried in a chunked HTTP answer:

    {"events": [event, ...], "revision": r}   all watched changes of revision r
    {"progress": true, "revision": r}         every watched change <= r has been sent
    {"error": {"code", "message", "revision", ...}}   the last frame: `compacted` (with
        compact_revision), `watch_overflow` (the client read too slowly), `unavailable`
        (shutting down, or no leader known for WATCH_LEADERLESS_SECONDS),
        `unauthenticated` (auth on: the caller's token was revoked or expired; the
        node checks it on every token table change, at its expiry and before every page)

Invariants: revisions strictly increase over the frames of a stream; every revision in
[start_revision, last frame's revision] that changed a watched key is in exactly one events
frame, with all its watched changes; so a client that resumes from the last revision it saw
+ 1 (events or progress) gets neither a gap nor a duplicate. A stream ends only with an
error frame (`unavailable` once the node starts shutting down), or without one when the
HTTP server closes under it (http_server.py ends it with the last chunk) or the connection
breaks: the client then resumes elsewhere.

Memory per watch is one page (node/store/changes.py bounds it: ~4 MiB of values, plus
the revision that crosses it) plus one encoded piece (CHUNK_BYTES, or one larger frame)
plus the transport's buffer up to its high-water mark (64 KiB): the page is encoded and
written a piece at a time, and the HTTP writer asks for the next piece only while the
client drains the socket, letting the loop run between two. A client that stops reading for ServerLimits.stream_stall_seconds
gets `watch_overflow` and the stream ends; one that reads slowly falls behind in the change
log at no cost, until compaction passes it (`compacted`).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

from node import codec
from node.config import Limits
from node.errors import OpError
from node.http_server import StreamedResponse, StreamStalled
from node.reads import ReadPolicy, RevisionWaiters
from node.store.changes import read_changes, selection
from node.stream_auth import StreamGuard
from node.watch_ops import MSGPACK_FRAMES, NDJSON, validate_watch

FRAME_HEADER = struct.Struct(">I")
WAIT_SLICE = 1.0  # seconds between two looks at the node's state while idle
WATCH_LEADERLESS_SECONDS = 3.0  # no leader known this long: end, the client goes elsewhere
# Open watches of one token (auth on): 500 watches of one reader took a node from 88 MiB
# to 2.4 GB (issue 27, item 4). One more: 429 too_many_watches. A connection carries at
# most one watch (HTTP/1.1 answers in order), so max_connections bounds them with auth off.
MAX_WATCHES_PER_TOKEN = 100
# Encoded bytes handed to the HTTP writer at once: it looks at flow control (and lets the
# loop run) between two pieces, so a watch holds one page of changes (node/store/changes.py:
# ~4 MiB of values) plus about this much encoded, plus the transport's high-water mark.
CHUNK_BYTES = 64 * 1024


def content_type(fmt: str) -> str:
    return MSGPACK_FRAMES if fmt == codec.MSGPACK else NDJSON


def encode_frame(frame: dict, fmt: str) -> bytes:
    """One frame on the wire: an NDJSON line, or u32 big-endian length + msgpack."""
    raw = codec.encode(frame, fmt)
    if fmt == codec.MSGPACK:
        return FRAME_HEADER.pack(len(raw)) + raw
    return raw + b"\n"


def encode_frames(frames: list[dict], fmt: str) -> bytes:
    return b"".join(encode_frame(f, fmt) for f in frames)


def encoded_pieces(frames: list[dict], fmt: str, sent: int) -> Iterator[tuple[bytes, int]]:
    """The frames encoded in pieces of about CHUNK_BYTES (whole frames: one piece may be
    one larger frame), each with the highest revision it completes (from `sent` on). A page
    encoded whole and written at once put up to 4 MiB per watch into the transport's
    buffer before flow control was looked at (issue 27, item 4)."""
    out: list[bytes] = []
    size = 0
    for f in frames:
        raw = encode_frame(f, fmt)
        out.append(raw)
        size += len(raw)
        sent = max(sent, f.get("revision", sent))
        if size >= CHUNK_BYTES:
            yield b"".join(out), sent
            out, size = [], 0
    if out:
        yield b"".join(out), sent


def error_frame(err: OpError, revision: int) -> dict:
    """The last frame of a stream; `revision`: everything up to it was sent."""
    body = err.to_dict()
    body.setdefault("revision", revision)
    return {"error": body}


def overflow_frame(revision: int) -> dict:
    return error_frame(
        OpError(
            "watch_overflow",
            f"the client read too slowly; every watched change up to {revision} was sent: "
            "watch again from the last revision received + 1",
        ),
        revision,
    )


async def watch_frames(
    sm: Any,
    waiters: RevisionWaiters,
    w: dict,
    stopping: Callable[[], bool] = lambda: False,
    leader_known: Callable[[], bool] = lambda: True,
    guard: StreamGuard | None = None,
) -> AsyncGenerator[list[dict], None]:
    """The frames of the validated watch `w` (node/watch_ops.py), a page at a time, from
    `sm` (a StateMachine: read_view()). Endless unless it yields an error frame. With a
    `guard` (auth on) the caller's token is checked after every page read, before it is
    sent, and whenever the token table changes or the token expires: the last frame is
    then `unauthenticated` (node/stream_auth.py)."""
    loop = asyncio.get_running_loop()
    lo, hi = selection(w["ns"], w["key"], w["prefix"], w["start"], w["end"])
    progress = w["progress_ms"] / 1000
    first = w["start_revision"]
    quiet_since = loop.time()
    leaderless_since: float | None = None
    while True:
        try:
            with sm.read_view() as view:
                page = read_changes(view, lo, hi, first, w["prev_kv"])
        except OpError as e:  # compacted; unavailable: the store closed
            yield [error_frame(e, first - 1)]
            return
        if guard is not None and (err := guard.error()) is not None:
            yield [error_frame(err, first - 1)]
            return
        first = page.scanned_to + 1
        if page.frames:
            yield page.frames
            quiet_since = loop.time()
        if page.more:
            await asyncio.sleep(0)  # the next page after others had their turn
            continue
        while True:  # caught up with the local revision: wait for apply to move it
            now = loop.time()
            if progress and now - quiet_since >= progress:
                yield [{"progress": True, "revision": page.scanned_to}]
                quiet_since = now = loop.time()
            why = _unserved(stopping, leader_known, leaderless_since, now)
            if why is not None:
                if isinstance(why, float):
                    leaderless_since = why
                else:
                    yield [error_frame(OpError("unavailable", why), page.scanned_to)]
                    return
            else:
                leaderless_since = None
            due = quiet_since + progress if progress else now + WAIT_SLICE
            due = min(due, now + WAIT_SLICE)
            interrupt = None
            if guard is not None:
                due = min(due, guard.wake_at(now) or due)
                interrupt = guard.next_change()
            moved = await waiters.wait_for_change(page.scanned_to, due, interrupt)
            if guard is not None and (err := guard.error()) is not None:
                yield [error_frame(err, page.scanned_to)]
                return
            if moved:
                break


def _unserved(
    stopping: Callable[[], bool],
    leader_known: Callable[[], bool],
    leaderless_since: float | None,
    now: float,
) -> str | float | None:
    """None: serve on. A message: end the stream. A float: no leader known since then."""
    if stopping():
        return "this node is shutting down; watch again on another node"
    if leader_known():
        return None
    if leaderless_since is None:
        return now
    if now - leaderless_since >= WATCH_LEADERLESS_SECONDS:
        return (
            f"this node has known no raft leader for {WATCH_LEADERLESS_SECONDS:g} s "
            "(partitioned?); watch again on another node"
        )
    return leaderless_since


async def watch_body(
    frames: AsyncGenerator[list[dict], None],
    fmt: str,
    start_revision: int,
    track: Callable[[int], None] = lambda n: None,
) -> AsyncGenerator[bytes, None]:
    """The chunks of the HTTP answer: each page of frames encoded as one chunk. When the
    HTTP writer throws StreamStalled in (the client stopped reading), the last chunk is
    the `watch_overflow` frame. `track(+1)` when it starts, `track(-1)` when it ends."""
    sent = start_revision - 1
    track(1)
    try:
        async for batch in frames:
            for piece, upto in encoded_pieces(batch, fmt, sent):
                sent = upto  # the piece is written before the next is asked for
                try:
                    yield piece
                except StreamStalled:
                    yield encode_frames([overflow_frame(sent)], fmt)
                    return
    finally:
        track(-1)
        await frames.aclose()


class Watches:
    """Serves POST /v1/watch for node/http_api.py (see the module docstring)."""

    def __init__(
        self,
        sm: Any,
        reads: ReadPolicy,
        limits: Limits,
        stopping: Callable[[], bool],
        leader_known: Callable[[], bool],
    ) -> None:
        self.sm = sm
        self.reads = reads
        self.limits = limits
        self.stopping = stopping
        self.leader_known = leader_known
        self.active = 0  # watches being streamed now
        self.per_token: dict[str, int] = {}  # token id -> watches opened and not ended

    async def open(self, body: Any, fmt: str, guard: StreamGuard | None = None) -> StreamedResponse:
        """Validate, pass the linearizable read barrier, and answer the stream; raises
        OpError (invalid_argument, unavailable, future_revision) before anything is sent.
        `guard`: the caller's token, re-checked while the stream lasts (auth on)."""
        w = validate_watch(body, self.limits)
        end = self._take_place(guard)  # before any await: concurrent opens count too
        try:
            await self.reads.wait("linearizable", None)
            current = self.sm.revision
            if w["start_revision"] > current + 1:
                raise OpError(
                    "future_revision",
                    f"start_revision {w['start_revision']} is above the current revision "
                    f"{current} + 1",
                    revision=current,
                )
        except BaseException:
            end()
            raise
        frames = watch_frames(
            self.sm, self.reads.revisions, w, self.stopping, self.leader_known, guard
        )
        body = watch_body(frames, fmt, w["start_revision"], self._track)
        return StreamedResponse(200, content_type(fmt), body, on_end=end)

    def _take_place(self, guard: StreamGuard | None) -> Callable[[], None]:
        """Count a watch against its token (raises 429 too_many_watches at the limit);
        returns what gives the place back (idempotent)."""
        if guard is None:
            return lambda: None
        token_id = guard.principal.id
        held = self.per_token.get(token_id, 0)
        if held >= MAX_WATCHES_PER_TOKEN:
            raise OpError(
                "too_many_watches",
                f"token {token_id} has {held} watches open, the most one token may have: "
                "close one, or watch a common prefix with one watch",
                limit=MAX_WATCHES_PER_TOKEN,
            )
        self.per_token[token_id] = held + 1
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if given_back:
                return
            given_back = True
            left = self.per_token[token_id] - 1
            if left:
                self.per_token[token_id] = left
            else:
                del self.per_token[token_id]

        return give_back

    def _track(self, n: int) -> None:
        self.active += n
