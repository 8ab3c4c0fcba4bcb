"""Toxic definitions (the API objects) and their per-connection behaviour.

A ``Toxic`` is what the HTTP API creates, lists and updates.  Every open
connection through a proxy gets one ``ToxicRuntime`` per toxic of its
direction; the runtime holds per-connection state (did toxicity pick this
connection, bytes sent so far, timers) and transforms the byte stream.

Semantics follow Toxiproxy's documentation and observed behaviour:

* latency: every chunk is delivered ``latency +/- jitter`` ms after it was
  read, so throughput is not reduced, only delayed.
* bandwidth: ``rate`` KB/s (1 KB = 1000 bytes), sent in <= 100 ms slices.
* slow_close: the close (EOF) is passed on ``delay`` ms late.
* timeout: data is dropped; after ``timeout`` ms the connection is closed,
  with 0 it is never closed.  Removing the toxic closes the connections it
  hit, because bytes were lost and the stream can no longer be trusted.
* reset_peer: the first data after the toxic applies starts a ``timeout`` ms
  wait, then both sockets are closed with SO_LINGER 0 (TCP RST).
* limit_data: at most ``bytes`` bytes pass, then the connection is closed.
* slicer: chunks are cut to ``average_size +/- size_variation`` bytes with
  ``delay`` microseconds between the slices.

Toxicity is rolled once per connection when the toxic is attached to it (at
connection creation, or when the toxic is added), and again on update.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import errors

DIRECTIONS: tuple[str, str] = ("upstream", "downstream")

# Known toxic types and their attributes with defaults (all integers).
TOXIC_ATTRIBUTES: dict[str, dict[str, int]] = {
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
}

Emit = Callable[[bytes], Awaitable[None]]


def _bad(detail: str) -> errors.ApiError:
    return errors.BAD_REQUEST_BODY.joined(detail)


def _parse_attributes(
    toxic_type: str, raw: Any, current: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Merge ``raw`` over ``current`` (or the defaults), validating every value."""
    result = dict(TOXIC_ATTRIBUTES[toxic_type] if current is None else current)
    if raw is None:
        return result
    if not isinstance(raw, dict):
        raise _bad("attributes must be an object")
    for key, value in raw.items():
        if key not in result:
            continue  # Toxiproxy ignores attributes a toxic does not have
        # Accept 100.0 as well as 100: JSON clients often send floats.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _bad(f"attribute {key!r} must be an integer")
        if isinstance(value, float):
            if not math.isfinite(value) or not value.is_integer():
                raise _bad(f"attribute {key!r} must be an integer")
            value = int(value)
        if value < 0:
            raise _bad(f"attribute {key!r} must not be negative")
        result[key] = value
    return result


def _parse_toxicity(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise _bad("toxicity must be a number")
    if not 0.0 <= float(raw) <= 1.0:
        raise _bad("toxicity must be between 0 and 1")
    return float(raw)


@dataclass
class Toxic:
    """A toxic as the API sees it."""

    name: str
    type: str
    stream: str
    toxicity: float = 1.0
    attributes: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: Any) -> Toxic:
        """Build a toxic from a create request, applying Toxiproxy's defaults."""
        if not isinstance(body, dict):
            raise _bad("expected a JSON object")
        stream = body.get("stream") or "downstream"
        if stream not in DIRECTIONS:
            raise errors.INVALID_STREAM
        toxic_type = body.get("type")
        if not isinstance(toxic_type, str) or toxic_type not in TOXIC_ATTRIBUTES:
            raise errors.INVALID_TOXIC_TYPE
        name = body.get("name") or f"{toxic_type}_{stream}"
        if not isinstance(name, str):
            raise _bad("name must be a string")
        toxicity = _parse_toxicity(body["toxicity"]) if body.get("toxicity") is not None else 1.0
        attributes = _parse_attributes(toxic_type, body.get("attributes"))
        return cls(name, toxic_type, stream, toxicity, attributes)

    def apply_update(self, body: Any) -> None:
        """Update toxicity and/or attributes; name, type and stream are fixed."""
        if not isinstance(body, dict):
            raise _bad("expected a JSON object")
        # Validate everything before changing anything.
        attributes = _parse_attributes(self.type, body.get("attributes"), self.attributes)
        toxicity = (
            _parse_toxicity(body["toxicity"]) if body.get("toxicity") is not None else self.toxicity
        )
        self.attributes = attributes
        self.toxicity = toxicity

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": dict(self.attributes),
        }


class LinkControl(Protocol):
    """What a runtime may do to the connection it sits on."""

    def close_output(self) -> None:
        """Flush what was written, then close this direction's destination."""

    def reset_connection(self) -> None:
        """Close both sockets with a TCP RST."""


class ToxicRuntime:
    """One toxic on one direction of one connection."""

    def __init__(self, toxic: Toxic, link: LinkControl) -> None:
        self.toxic = toxic
        self.link = link
        self.active = True
        self.applied = self._roll()
        self._wake = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None

    def _roll(self) -> bool:
        # random() is in [0, 1): toxicity 0 never applies, 1 always does.
        return random.random() < self.toxic.toxicity

    @property
    def attrs(self) -> dict[str, int]:
        return self.toxic.attributes

    @property
    def live(self) -> bool:
        return self.active and self.applied

    # Lifecycle -----------------------------------------------------------

    def start(self) -> None:
        """Called once attached; toxics with timers arm them here."""

    def restart(self) -> None:
        """The toxic was updated: re-roll toxicity, wake sleepers, re-arm timers."""
        self._cancel_timer()
        self.applied = self._roll()
        self._interrupt()
        self.start()

    def stop(self, *, removed: bool) -> None:
        """Detach: ``removed`` is true when the API removed the toxic (not on teardown)."""
        was_live = self.live
        self.active = False
        self._cancel_timer()
        self._interrupt()
        if removed and was_live:
            self.on_removed()

    def on_removed(self) -> None:
        """Hook for toxics that must act when removed from a live connection."""

    def _interrupt(self) -> None:
        old, self._wake = self._wake, asyncio.Event()
        old.set()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def sleep(self, seconds: float) -> bool:
        """Sleep, cut short by update/removal. True if the full time elapsed."""
        if seconds <= 0:
            return True
        wake = self._wake
        try:
            await asyncio.wait_for(wake.wait(), seconds)
        except TimeoutError:
            return True
        return False

    # Data path -----------------------------------------------------------

    async def process(self, data: bytes, ts: float, out: Emit) -> None:
        if self.live:
            await self.pipe(data, ts, out)
        else:
            await out(data)

    async def eof(self) -> None:
        if self.live:
            await self.on_eof()

    async def pipe(self, data: bytes, ts: float, out: Emit) -> None:
        await out(data)

    async def on_eof(self) -> None:
        return None


class LatencyRuntime(ToxicRuntime):
    async def pipe(self, data: bytes, ts: float, out: Emit) -> None:
        jitter = self.attrs["jitter"]
        delay_ms = self.attrs["latency"] + (random.uniform(-jitter, jitter) if jitter else 0.0)
        # Measured from when the chunk was read, so queued chunks overlap their waits.
        due = ts + max(0.0, delay_ms) / 1000.0
        await self.sleep(due - asyncio.get_running_loop().time())
        await out(data)


class BandwidthRuntime(ToxicRuntime):
    def __init__(self, toxic: Toxic, link: LinkControl) -> None:
        super().__init__(toxic, link)
        self._next_free = 0.0  # loop time when the "wire" is next idle

    async def pipe(self, data: bytes, ts: float, out: Emit) -> None:
        loop = asyncio.get_running_loop()
        rest = data
        while rest:
            if not self.live:
                await out(rest)  # removed mid-chunk: never drop data
                return
            rate = self.attrs["rate"]
            if rate <= 0:
                # Zero bandwidth: hold the data until the toxic changes.
                await self.sleep(3600.0)
                continue
            bytes_per_s = rate * 1000
            piece = rest[: max(1, bytes_per_s // 10)]  # at most 100 ms worth at once
            now = loop.time()
            due = max(now, self._next_free) + len(piece) / bytes_per_s
            if not await self.sleep(due - now):
                self._next_free = loop.time()  # interrupted: re-plan with new settings
                continue
            self._next_free = due
            await out(piece)
            rest = rest[len(piece) :]


class SlowCloseRuntime(ToxicRuntime):
    async def on_eof(self) -> None:
        await self.sleep(self.attrs["delay"] / 1000.0)


class TimeoutRuntime(ToxicRuntime):
    def start(self) -> None:
        timeout = self.attrs["timeout"]
        if self.live and timeout > 0:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(timeout / 1000.0, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self.live:
            self.link.close_output()

    async def pipe(self, data: bytes, ts: float, out: Emit) -> None:
        return None  # drop the data, like a partition

    def on_removed(self) -> None:
        # Bytes were dropped, so the stream is corrupt: close it (Toxiproxy does too).
        self.link.close_output()


class ResetPeerRuntime(ToxicRuntime):
    async def pipe(self, data: bytes, ts: float, out: Emit) -> None:
        # The first data after the toxic applies starts the countdown; it is dropped.
        if await self.sleep(self.attrs["timeout"] / 1000.0) and self.live:
            self.link.reset_connection()


class LimitDataRuntime(ToxicRuntime):
    def __init__(self, toxic: Toxic, link: LinkControl) -> None:
        super().__init__(toxic, link)
        self.transmitted = 0  # survives updates, as Toxiproxy's toxic state does

    async def pipe(self, data: bytes, ts: float, out: Emit) -> None:
        limit = self.attrs["bytes"]
        piece = data[: max(0, limit - self.transmitted)]
        if piece:
            await out(piece)
            self.transmitted += len(piece)
        if self.transmitted >= limit:
            self.link.close_output()


class SlicerRuntime(ToxicRuntime):
    async def pipe(self, data: bytes, ts: float, out: Emit) -> None:
        average = self.attrs["average_size"]
        if average <= 0:
            await out(data)
            return
        pos = 0
        while pos < len(data):
            if not self.live:
                await out(data[pos:])
                return
            variation = self.attrs["size_variation"]
            size = average + (random.randint(-variation, variation) if variation > 0 else 0)
            size = max(1, size)
            await out(data[pos : pos + size])
            pos += size
            if pos < len(data):
                await self.sleep(self.attrs["delay"] / 1_000_000.0)


RUNTIMES: dict[str, type[ToxicRuntime]] = {
    "latency": LatencyRuntime,
    "bandwidth": BandwidthRuntime,
    "slow_close": SlowCloseRuntime,
    "timeout": TimeoutRuntime,
    "reset_peer": ResetPeerRuntime,
    "limit_data": LimitDataRuntime,
    "slicer": SlicerRuntime,
}


def new_runtime(toxic: Toxic, link: LinkControl) -> ToxicRuntime:
    """A fresh runtime for ``toxic`` on ``link`` (toxicity rolled now)."""
    return RUNTIMES[toxic.type](toxic, link)
