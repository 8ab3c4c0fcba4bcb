"""The sans-IO core of a watch (docs/protocol.md, "Watch"): its request, the frame decoder,
the results and the session that resumes it. No sockets here: Client (client/sync.py) and
AsyncClient (client/aio.py) each run a :class:`WatchSession` over their transport in
``_watch``; :meth:`watch_commands.WatchCommands.watch` is the one definition of the call.

A session connects with ``start_revision`` = the revision after the last one it delivered
(an events frame's revision, or a progress frame's), and on any interruption it can resume
from (connection refused, lost or timed out, the stream ending without an error frame,
``unavailable``, ``watch_overflow``, a 503) it backs off, moves to the next endpoint and
connects again from there. The server sends every watched revision above the start exactly
once in order, so the events the iterator yields have no gap and no duplicate across any
number of reconnections; frames at or below the last delivered revision are dropped
anyway. ``Compacted``, ``Unauthenticated`` (the `unauthenticated` frame: the token was
revoked or expired while the stream was open) and invalid requests end the watch (raised). The RetryPolicy bounds
consecutive failures: ``max_attempts`` attempts and ``deadline`` seconds without a frame.

Framing: a msgpack request (what the clients send) gets frames as a 4-byte big-endian
length and that many bytes of msgpack; a JSON one gets NDJSON (one frame per line). The
decoder keeps at most one incomplete frame (at most ``max_frame_bytes``) in memory.
"""

from __future__ import annotations

import json
import random
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from ..errors import InvalidRequest, StatekeeperError, Unavailable, error_class
from ..responses import error_from_response, malformed, parse_kv
from ..results import KeyValue
from ..retry import Endpoints, RetryPolicy
from ..wire import Request, check_key, post

__all__ = [
    "FrameDecoder",
    "WatchEvent",
    "WatchProgress",
    "WatchSession",
    "watch_request",
]

WATCH_PATH: Final = "/v1/watch"
MAX_FRAME_BYTES: Final = 256 * 1024 * 1024
_LENGTH = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change seen by a watch.

    Attributes:
        type: ``"put"`` or ``"delete"``.
        kv: the key after a put; for a delete, the key with an empty value, version 0 and
            ``mod_revision`` = the revision of the delete.
        prev_kv: the key before the change (only with ``prev_kv=True``, and when it
            existed).
        revision: the revision of the change. All changes of one revision come one after
            another; the next revision's follow only after the last of them.
    """

    type: str
    kv: KeyValue
    prev_kv: KeyValue | None
    revision: int

    @property
    def key(self) -> str:
        return self.kv.key


@dataclass(frozen=True, slots=True)
class WatchProgress:
    """A progress frame (``watch(..., progress_events=True)``): every watched change up to
    ``revision`` has been delivered."""

    revision: int


def watch_request(
    ns: str,
    start_revision: int,
    *,
    key: str | None = None,
    prefix: str | None = None,
    start: str | None = None,
    end: str | None = None,
    progress: float | None = 1.0,
    prev_kv: bool = False,
) -> Request:
    """POST /v1/watch from ``start_revision``; ``parse`` is not used (the answer is a
    stream, read by :class:`WatchSession`)."""
    if type(start_revision) is not int or start_revision < 1:
        raise InvalidRequest(
            "start_revision must be an integer >= 1 (a read's revision + 1 to watch from now)",
            code="invalid_argument",
        )
    body: dict[str, Any] = {"ns": ns, "start_revision": start_revision}
    for name, value in (("key", key), ("prefix", prefix), ("start", start), ("end", end)):
        if value is not None:
            body[name] = check_key(value)
    body["progress_ms"] = 0 if not progress else max(1, round(progress * 1000))
    if prev_kv:
        body["prev_kv"] = True
    return post(WATCH_PATH, body, _not_parsed, "watch")


def _not_parsed(status: int, ctype: str | None, raw: bytes) -> Any:
    raise error_from_response(status, ctype, raw)


class FrameDecoder:
    """Bytes of a watch stream in, frames (dicts) out; msgpack (length-prefixed) or NDJSON
    by the answer's Content-Type."""

    __slots__ = ("_buf", "_json", "max_frame_bytes")

    def __init__(self, content_type: str | None, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        ctype = (content_type or "").partition(";")[0].strip().lower()
        self._json = ctype in ("application/x-ndjson", "application/json")
        self._buf = bytearray()
        self.max_frame_bytes = max_frame_bytes

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The frames completed by ``data``; raises a ``malformed_response`` error for
        bytes that are no frames."""
        try:
            return self._feed(data)
        except StatekeeperError:
            raise
        except Exception as exc:  # json / msgpack decoding errors
            raise malformed(200, f"undecodable watch frame: {exc!r}") from exc

    def _feed(self, data: bytes) -> list[dict[str, Any]]:
        buf = self._buf
        buf += data
        frames: list[Any] = []
        pos = 0
        if self._json:
            while (nl := buf.find(b"\n", pos)) >= 0:
                if nl > pos:
                    frames.append(json.loads(bytes(buf[pos:nl])))
                pos = nl + 1
            pending = len(buf) - pos
        else:
            while len(buf) - pos >= 4:
                (n,) = _LENGTH.unpack_from(buf, pos)
                if n > self.max_frame_bytes:
                    raise malformed(200, f"a watch frame of {n} bytes, max {self.max_frame_bytes}")
                if len(buf) - pos - 4 < n:
                    break
                frames.append(msgpack.unpackb(bytes(buf[pos + 4 : pos + 4 + n]), raw=False))
                pos += 4 + n
            pending = len(buf) - pos
        del buf[:pos]
        if pending > self.max_frame_bytes + 4:
            raise malformed(200, f"a watch frame longer than {self.max_frame_bytes} bytes")
        for f in frames:
            if not isinstance(f, dict):
                raise malformed(200, f"a watch frame is a {type(f).__name__}, not a map")
        return frames


class WatchSession:
    """One watch across its connections, sans-IO (see the module docstring).

    A transport loops: ``url, request, timeout = session.attempt()``; open the stream
    (``timeout``: for the answer's head and then between two reads; None: no limit); on a
    200, ``session.start(content_type)`` and hand every piece of the body to
    ``session.feed(data)``, yielding what it yields; else ``err = session.refused(...)``;
    at the end of the body ``err = session.ended()``; on a transport failure ``err`` is
    ``responses.connection_error(...)``; ``feed`` may also raise an error. Then
    ``delay = session.retry_after(err)`` (raises ``err`` when giving up), sleep, repeat.
    """

    def __init__(
        self,
        make: Callable[[int], Request],
        start_revision: int,
        endpoints: Endpoints,
        policy: RetryPolicy,
        timeout: float,
        *,
        progress: float | None,
        progress_events: bool = False,
        ns: str = "default",
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._make = make
        self.next_revision = start_revision
        self._endpoints = endpoints
        self._policy = policy
        self._progress_events = progress_events
        self._ns = ns
        self._clock = clock
        self._rand = rand
        # Between two reads the server sends at least a progress frame every `progress`.
        self.read_timeout = timeout + progress if progress else None
        self._decoder: FrameDecoder | None = None
        self.url = endpoints.current
        self.failures = 0  # consecutive attempts that delivered no frame
        self._since = clock()  # last frame (or the start)

    def attempt(self) -> tuple[str, Request, float | None]:
        """Where to connect next, the request (from ``next_revision``) and its timeout."""
        self.url = self._endpoints.current
        self._decoder = None
        return self.url, self._make(self.next_revision), self.read_timeout

    def start(self, content_type: str | None) -> None:
        """The stream was answered 200 with this Content-Type."""
        self._decoder = FrameDecoder(content_type)

    def refused(self, status: int, content_type: str | None, body: bytes) -> StatekeeperError:
        """The error of a non-200 answer."""
        err = error_from_response(status, content_type, body, self._ns)
        err.endpoint = self.url
        return err

    def ended(self) -> StatekeeperError:
        """The body ended without an error frame (the node stopped serving it)."""
        return Unavailable(
            f"{self.url} ended the watch stream; resuming from {self.next_revision}",
            code="unavailable",
            endpoint=self.url,
        )

    def feed(self, data: bytes) -> Iterator[WatchEvent | WatchProgress]:
        """The events (and progress, if asked for) that ``data`` completes; raises the
        error of an error frame (after yielding what came before it)."""
        assert self._decoder is not None, "start() first"
        for frame in self._decoder.feed(data):
            yield from self._frame(frame)

    def _frame(self, frame: dict[str, Any]) -> Iterator[WatchEvent | WatchProgress]:
        rev = frame.get("revision")
        if "error" in frame:
            raise self._error(frame["error"])
        if type(rev) is not int:
            raise malformed(200, "a watch frame without an integer revision")
        self.failures = 0
        self._since = self._clock()
        if "events" in frame:
            if rev < self.next_revision:
                return  # already delivered (never sent twice by a server; be sure anyway)
            self.next_revision = rev + 1
            ns = self._ns
            for ev in frame["events"]:
                yield WatchEvent(
                    ev.get("type", "put"),
                    parse_kv(ev.get("kv"), ns, rev) or KeyValue("", b"", 0, 0, rev, ns, rev),
                    parse_kv(ev.get("prev_kv"), ns, rev),
                    rev,
                )
        elif frame.get("progress"):
            self.next_revision = max(self.next_revision, rev + 1)
            if self._progress_events:
                yield WatchProgress(rev)

    def _error(self, err: Any) -> StatekeeperError:
        if not isinstance(err, dict):
            err = {"code": str(err)}
        code = err.get("code") if isinstance(err.get("code"), str) else "error"
        details = {k: v for k, v in err.items() if k not in ("code", "message")}
        cls = error_class(code, None)
        return cls(
            str(err.get("message", code)), code=code, status=200, details=details, endpoint=self.url
        )

    def retry_after(self, err: StatekeeperError) -> float:
        """Seconds to wait before the next attempt; raises ``err`` when it is final (not
        retryable, or the RetryPolicy's attempts or deadline are used up)."""
        if err.endpoint is None:
            err.endpoint = self.url
        self.failures += 1
        err.attempts = self.failures
        if not self._policy.is_retryable(err):
            raise err
        self._endpoints.failed(self.url)
        if self.failures >= self._policy.max_attempts:
            raise err
        delay = self._policy.backoff(self.failures, self._rand)
        deadline = self._policy.deadline
        if deadline is not None and self._clock() + delay - self._since >= deadline:
            raise err
        return delay
