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

Shared pages: the frames of a revision depend only on the selection (ns, key / prefix /
range), prev_kv and the encoding, so watchers that agree on those and are at the same next
revision `first` take the same page from `SharedPages`, keyed by (selection, prev_kv,
encoding, first): the first of them reads and encodes it, the others send the same bytes
(issue 27, item 4: 500 watches of one reader and 30 writes of 64 KiB took a node from
88 MiB to 2.4 GB, each watch reading, encoding and buffering its own page). A page is held
only while some watcher is sending it (`users`), and dropped when the last one is done, so
the cache holds nothing a watcher does not hold anyway. Sharing is exact: a page read
earlier ends at the same or a lower revision than a fresh read would (the view's
revision), never with other frames for the revisions it covers, so the watcher only reads the rest with its
next page (same frames, same order, perhaps other HTTP chunk boundaries); a compaction
up to `first` or past it since the page was read sends the watcher to a fresh read, which answers
`compacted` as before; the token check (auth on) runs for each watcher on the page it
took, before sending it. Progress and error frames are each watcher's own.

Memory per watch is one page (node/store/changes.py bounds it: ~4 MiB of values, plus
the revision that crosses it), held encoded (JSON: values not UTF-8 in base64, up to 4/3 of
that) while it is being sent, plus the transport's buffer up to its high-water mark
(64 KiB): the page is written a piece (CHUNK_BYTES, or one larger frame) at a time, and
the HTTP writer asks for the next piece only while the client drains the socket, letting
the loop run between two. N watchers of one selection at one position hold one page
between them, not N; a watcher that waits for the next write holds none. A client that
stops reading for ServerLimits.stream_stall_seconds gets `watch_overflow` and the stream
ends; one that reads slowly falls behind in the change log at no cost, until compaction
passes it (`compacted`).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

from statekeeper.node.api import codec
from statekeeper.node.api.server import StreamedResponse, StreamStalled
from statekeeper.node.api.stream_auth import StreamGuard
from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.watch import MSGPACK_FRAMES, NDJSON, validate_watch
from statekeeper.node.reads import ReadPolicy, RevisionWaiters
from statekeeper.node.store.changes import read_changes, selection

FRAME_HEADER = struct.Struct(">I")
WAIT_SLICE = 1.0  # seconds between two looks at the node's state while idle
WATCH_LEADERLESS_SECONDS = 3.0  # no leader known this long: end, the client goes elsewhere
# Open watches of one token (auth on): 500 watches of one reader took a node from 88 MiB
# to 2.4 GB (issue 27, item 4). One more: 429 too_many_watches. A connection carries at
# most one watch (HTTP/1.1 answers in order), so max_connections bounds them with auth off.
MAX_WATCHES_PER_TOKEN = 100
# Encoded bytes handed to the HTTP writer at once: it looks at flow control (and lets the
# loop run) between two pieces, so the transport's buffer holds at most its high-water
# mark plus one piece beyond the (shared) encoded page.
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


class SharedPage:
    """One page of the change log, encoded: what a watcher at `first` sends next."""

    __slots__ = ("more", "pieces", "scanned_to", "users")

    def __init__(self, pieces: tuple[tuple[bytes, int], ...], scanned_to: int, more: bool):
        self.pieces = pieces  # (encoded frames, the revision they complete), CHUNK_BYTES each
        self.scanned_to = scanned_to  # every revision up to here was looked at
        self.more = more  # stopped at a page bound below the view's revision
        self.users = 0  # watchers sending it now


class SharedPages:
    """The pages in flight, shared by the watchers of one selection at one position (see
    the module docstring). `reads` and `shared` count pages read and pages taken from
    another watcher's read (operators' and tests' view of how much is shared)."""

    def __init__(self) -> None:
        self._pages: dict[tuple, SharedPage] = {}
        self.reads = 0
        self.shared = 0

    def __len__(self) -> int:
        return len(self._pages)

    def take(self, sm: Any, w: dict, fmt: str, first: int) -> tuple[tuple, SharedPage]:
        """The page of `w`'s selection from revision `first` in `fmt`: the one in flight,
        or read and encoded now (raises OpError `compacted`, `unavailable`). Give it back
        with `give_back` once sent."""
        lo, hi = selection(w["ns"], w["key"], w["prefix"], w["start"], w["end"])
        key = (lo, hi, w["prev_kv"], fmt, first)
        page = self._pages.get(key)
        # Compaction since the page was read: read again, which answers `compacted`.
        if page is not None and first > sm.compact_revision:
            self.shared += 1
        else:
            with sm.read_view() as view:
                found = read_changes(view, lo, hi, first, w["prev_kv"])
            pieces = tuple(encoded_pieces(found.frames, fmt, first - 1))
            page = SharedPage(pieces, found.scanned_to, found.more)
            self.reads += 1
            self._pages.setdefault(key, page)
        page.users += 1
        return key, page

    def give_back(self, key: tuple, page: SharedPage) -> None:
        page.users -= 1
        if page.users <= 0 and self._pages.get(key) is page:
            del self._pages[key]


Pieces = tuple[tuple[bytes, int], ...]


def own_pieces(frames: list[dict], fmt: str, sent: int) -> Pieces:
    """A watcher's own frames (progress, error), encoded."""
    return tuple(encoded_pieces(frames, fmt, sent))


async def watch_frames(
    sm: Any,
    waiters: RevisionWaiters,
    w: dict,
    stopping: Callable[[], bool] = lambda: False,
    leader_known: Callable[[], bool] = lambda: True,
    guard: StreamGuard | None = None,
    fmt: str = codec.MSGPACK,
    pages: SharedPages | None = None,
) -> AsyncGenerator[Pieces, None]:
    """The frames of the validated watch `w` (node/ops/watch.py) encoded in `fmt`, a page
    at a time (as `encoded_pieces`), from `sm` (a StateMachine: read_view(),
    compact_revision), sharing the pages of `pages` with the other watchers. Endless
    unless it yields an error frame. With a `guard` (auth on) the caller's token is
    checked after every page is taken, before it is sent, and whenever the token table
    changes or the token expires: the last frame is then `unauthenticated`
    (node/api/stream_auth.py)."""
    loop = asyncio.get_running_loop()
    pages = SharedPages() if pages is None else pages
    progress = w["progress_ms"] / 1000
    first = w["start_revision"]
    quiet_since = loop.time()
    leaderless_since: float | None = None
    while True:
        try:
            key, page = pages.take(sm, w, fmt, first)
        except OpError as e:  # compacted; unavailable: the store closed
            yield own_pieces([error_frame(e, first - 1)], fmt, first - 1)
            return
        try:
            if guard is not None and (err := guard.error()) is not None:
                yield own_pieces([error_frame(err, first - 1)], fmt, first - 1)
                return
            scanned_to, more = page.scanned_to, page.more
            if page.pieces:
                yield page.pieces
                quiet_since = loop.time()
        finally:
            pages.give_back(key, page)
            del page  # not held while this watcher waits
        first = scanned_to + 1
        if more:
            await asyncio.sleep(0)  # the next page after others had their turn
            continue
        while True:  # caught up with the local revision: wait for apply to move it
            now = loop.time()
            if progress and now - quiet_since >= progress:
                yield own_pieces([{"progress": True, "revision": scanned_to}], fmt, scanned_to)
                quiet_since = now = loop.time()
            why = _unserved(stopping, leader_known, leaderless_since, now)
            if why is not None:
                if isinstance(why, float):
                    leaderless_since = why
                else:
                    err = OpError("unavailable", why)
                    yield own_pieces([error_frame(err, scanned_to)], fmt, scanned_to)
                    return
            else:
                leaderless_since = None
            due = quiet_since + progress if progress else now + WAIT_SLICE
            due = min(due, now + WAIT_SLICE)
            interrupt = None
            if guard is not None:
                due = min(due, guard.wake_at(now) or due)
                interrupt = guard.next_change()
            moved = await waiters.wait_for_change(scanned_to, due, interrupt)
            if guard is not None and (err := guard.error()) is not None:
                yield own_pieces([error_frame(err, scanned_to)], fmt, scanned_to)
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
    frames: AsyncGenerator[Pieces, None],
    fmt: str,
    start_revision: int,
    track: Callable[[int], None] = lambda n: None,
) -> AsyncGenerator[bytes, None]:
    """The chunks of the HTTP answer: the encoded pieces of `frames` (watch_frames), one
    chunk each. When the HTTP writer throws StreamStalled in (the client stopped reading),
    the last chunk is the `watch_overflow` frame. `track(+1)` when it starts, `track(-1)`
    when it ends."""
    sent = start_revision - 1
    track(1)
    try:
        async for batch in frames:
            for piece, upto in batch:
                sent = max(sent, upto)  # the piece is written before the next is asked for
                try:
                    yield piece
                except StreamStalled:
                    yield encode_frames([overflow_frame(sent)], fmt)
                    return
            del batch  # a shared page is not held while this watcher waits
    finally:
        track(-1)
        await frames.aclose()


class Watches:
    """Serves POST /v1/watch for node/api/routes.py (see the module docstring)."""

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
        self.pages = SharedPages()  # the pages in flight, one per selection and position

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
            self.sm,
            self.reads.revisions,
            w,
            self.stopping,
            self.leader_known,
            guard,
            fmt,
            self.pages,
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
