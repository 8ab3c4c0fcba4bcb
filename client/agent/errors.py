"""Errors of the agent layer. Each is a subclass of the client error a caller already
catches (a conflict is a :class:`client.Conflict`, a missing checkpoint a
:class:`client.NotFound`), with its own ``code`` and a message that says what to do."""

from __future__ import annotations

from typing import Any

from ..errors import Archived, Conflict, InvalidRequest, NotFound, StatekeeperError

__all__ = [
    "AgentError",
    "CheckpointArchived",
    "CheckpointConflict",
    "CheckpointCorrupt",
    "CheckpointNotFound",
    "EventsMissing",
    "InvalidAgentId",
    "PositionNotFound",
    "ProjectionConflict",
]


class AgentError(StatekeeperError):
    """Base of the agent-layer errors that have no closer client class."""


class CheckpointConflict(Conflict):
    """Another writer moved the agent's head (or appended to its stream) since this Agent
    last saw it; nothing was written. ``current`` is the head's Checkpoint (without its
    state) or None. Hydrate (or call ``latest()``) and decide again."""

    def __init__(self, message: str, *, current: Any = None, **kw: Any) -> None:
        kw.setdefault("code", "checkpoint_conflict")
        kw.setdefault("status", 409)
        super().__init__(message, current=current, **kw)


class CheckpointNotFound(NotFound):
    """No checkpoint matches (a number, a step, or none at all yet)."""

    def __init__(self, message: str, **kw: Any) -> None:
        kw.setdefault("code", "checkpoint_not_found")
        kw.setdefault("status", 404)
        super().__init__(message, **kw)


class CheckpointArchived(Archived):
    """A checkpoint this call needs was moved to the archive (``statekeeper archive run
    --within ckpt``): code ``archived``, 410, like the client's :class:`client.Archived`
    it is (so also a NotFound), naming the checkpoint and the segment that holds it. Pass
    ``archived="fetch"`` to read it from the archive (the client's ``archive_roots``), or
    restore the segment (``statekeeper archive restore SEGMENT``).

    Attributes: agent, ckpt (the checkpoint's number), and Archived's segment, url,
    sha256, key."""

    def __init__(self, *, agent: str, ckpt: int, cause: Archived, what: str = "") -> None:
        segment = cause.segment
        message = (
            f"agent {agent!r}: checkpoint #{ckpt}{what} was archived"
            f"{f' to segment {segment!r}' if segment else ''}; pass archived=\"fetch\" to "
            "read it from the archive, or restore it (statekeeper archive restore "
            f"{segment or 'SEGMENT'})"
        )
        details = {**cause.details, "agent": agent, "ckpt": ckpt}
        super().__init__(message, code="archived", status=410, details=details)
        self.agent, self.ckpt = agent, ckpt


class CheckpointCorrupt(AgentError):
    """A checkpoint's stored bytes do not match its manifest (a chunk missing, or the
    sha256 or size differ). Never silently replaced by another state."""

    def __init__(self, message: str, **kw: Any) -> None:
        kw.setdefault("code", "checkpoint_corrupt")
        super().__init__(message, **kw)


class PositionNotFound(NotFound):
    """A checkpoint's stream position names events the agent's stream does not hold: the
    stream does not exist (code ``stream_not_found``) or ends before that seq (code
    ``position_not_found``); 404, nothing written. A checkpoint that includes no event
    (position 0, a brand-new agent) names no stream and is always allowed; this is a head
    copied or restored without its stream, or a namespace mix-up.

    Attributes: agent, stream, position (the checkpoint's), last_seq (the stream's; 0:
    it does not exist)."""

    def __init__(
        self,
        *,
        agent: str,
        stream: str,
        position: int,
        last_seq: int,
        ns: str | None,
        ckpt: int | None = None,
        **kw: Any,
    ) -> None:
        missing = last_seq == 0
        kw.setdefault("code", "stream_not_found" if missing else "position_not_found")
        kw.setdefault("status", 404)
        what = f"checkpoint #{ckpt}" if ckpt is not None else "a checkpoint"
        where = (
            f"stream {stream!r}, which does not exist in namespace {ns!r}"
            if missing
            else f"stream {stream!r}, whose last seq is {last_seq}"
        )
        message = (
            f"agent {agent!r}: {what} at position {position} names events of {where}; "
            "refusing it (nothing written). Was the head copied without its stream, or is "
            "the namespace wrong?"
        )
        details = {"agent": agent, "stream": stream, "position": position, "last_seq": last_seq}
        super().__init__(message, details={**details, **kw.pop("details", {})}, **kw)
        self.agent, self.stream, self.position, self.last_seq = agent, stream, position, last_seq


class EventsMissing(AgentError):
    """hydrate()/state_at() needs events that are no longer in the agent's stream: its
    ``first_seq`` is past the checkpoint's ``position`` + 1 (truncated by retention or
    ``truncate_stream``, or archived: the read answered 410 ``archived``). Code
    ``events_missing``, 410; never a silently wrong state. Checkpoint more often than the
    stream is trimmed (or restore the archived range).

    Attributes: agent, position (the checkpoint's, 0 without one), first_seq (the
    stream's first stored seq, or None if unknown), last_seq."""

    def __init__(
        self,
        *,
        agent: str,
        position: int,
        first_seq: int | None,
        last_seq: int | None = None,
        **kw: Any,
    ) -> None:
        kw.setdefault("code", "events_missing")
        kw.setdefault("status", 410)
        start = "the checkpoint" if position else "the start of the stream (no checkpoint)"
        gone = (
            f"the stream's first stored seq is {first_seq}"
            if first_seq is not None
            else "they were archived"
        )
        message = (
            f"agent {agent!r}: the state needs events from seq {position + 1} on (after "
            f"{start}, position {position}) but {gone}: events {position + 1}.."
            f"{(first_seq - 1) if first_seq is not None else '?'} are gone (truncated or "
            "archived). Refusing to fold across the hole"
        )
        details = {
            "agent": agent,
            "position": position,
            "first_seq": first_seq,
            "last_seq": last_seq,
        }
        super().__init__(message, details={**details, **kw.pop("details", {})}, **kw)
        self.agent, self.position, self.first_seq, self.last_seq = (
            agent,
            position,
            first_seq,
            last_seq,
        )


class ProjectionConflict(Conflict):
    """Another projector with the same name saved its position since this one loaded it;
    nothing was saved. Run one projector per name (or give each its own name)."""

    def __init__(self, message: str, *, current: Any = None, **kw: Any) -> None:
        kw.setdefault("code", "projection_conflict")
        kw.setdefault("status", 409)
        super().__init__(message, current=current, **kw)


class InvalidAgentId(InvalidRequest):
    """A bad agent id or projection name (empty, '/', NUL): refused before any request."""

    def __init__(self, message: str, **kw: Any) -> None:
        kw.setdefault("code", "invalid_argument")
        super().__init__(message, **kw)
