"""Errors of the agent layer. Each is a subclass of the client error a caller already
catches (a conflict is a :class:`client.Conflict`, a missing checkpoint a
:class:`client.NotFound`), with its own ``code`` and a message that says what to do."""

from __future__ import annotations

from typing import Any

from ..errors import Conflict, InvalidRequest, NotFound, StatekeeperError

__all__ = [
    "AgentError",
    "CheckpointConflict",
    "CheckpointCorrupt",
    "CheckpointNotFound",
    "ProjectionConflict",
    "InvalidAgentId",
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


class CheckpointCorrupt(AgentError):
    """A checkpoint's stored bytes do not match its manifest (a chunk missing, or the
    sha256 or size differ). Never silently replaced by another state."""

    def __init__(self, message: str, **kw: Any) -> None:
        kw.setdefault("code", "checkpoint_corrupt")
        super().__init__(message, **kw)


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
