"""What the agent layer returns (frozen dataclasses) and the stored manifest format.

A manifest (the value of ``agent/{id}/ckpt/{n}`` and, for the current one, of
``agent/{id}/head``) is a msgpack map::

    {"v": 1, "agent": id, "ckpt": n, "kind": "checkpoint" | "rollback", "step": s,
     "position": p, "time_ms": t, "parent": n' | None, "metadata": {...},
     "header": {schema, version, format, compression, ...} (the envelope's), "size": bytes,
     "sha256": hex of the envelope, and either "inline": envelope bytes
     or "chunks": {"count": k, "size": chunk bytes}}
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack

from .errors import CheckpointCorrupt

__all__ = [
    "AgentEvent",
    "Checkpoint",
    "Hydrated",
    "TimelineRow",
    "checkpoint_from",
    "make_manifest",
    "pack_manifest",
    "state_fields",
    "unpack_manifest",
]

MANIFEST_VERSION = 1
ROLLBACK_EVENT = "statekeeper.rollback"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One recovery point of an agent.

    Attributes:
        agent: the agent id.
        n: the checkpoint's number (1, 2, ...; the head is the current one).
        step: the step whose end the state is (client/agent/steps.py).
        position: the last seq of the agent's stream folded into the state.
        revision: the store revision that committed it (0 if unknown).
        time_ms: the writer's wall clock when it was written (informational; the
            revision orders checkpoints).
        parent: the checkpoint that was current before it (for a rollback: the one it
            restored).
        metadata: the caller's metadata (a rollback's: ``{"rollback_from": n}``).
        kind: ``"checkpoint"`` or ``"rollback"``.
        size: bytes of the state's envelope.
        chunks: 0 if the state is inline in the manifest, else the number of chunks.
        header: the envelope's header (schema, version, format, compression).
        state: the decoded state when ``loaded`` (``get_checkpoint``, ``latest``,
            ``rollback``); listings leave it out (None, ``loaded`` False).
    """

    agent: str
    n: int
    step: int
    position: int
    revision: int
    time_ms: int
    parent: int | None
    metadata: dict[str, Any]
    kind: str = "checkpoint"
    size: int = 0
    chunks: int = 0
    header: dict[str, Any] = field(default_factory=dict)
    state: Any = None
    loaded: bool = False
    sha256: str = ""


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """An event of a stream as the agent layer hands it to reducers and folds: ``data``
    decoded from its envelope (raw bytes when it is not one), ``step`` from its meta."""

    seq: int
    type: str
    data: Any
    step: int | None
    time_ms: int
    revision: int
    id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Hydrated:
    """The result of ``hydrate()`` / what ``state_at`` computes.

    Attributes:
        state: the checkpoint's state with the later events folded through the reducer.
        step: the step to continue from: one more than the checkpoint's step and every
            later event's ``meta.step`` (1 for a new agent; client/agent/steps.py).
        position: the last seq folded in (the checkpoint's position without a reducer).
        checkpoint: the checkpoint started from (None: started from ``initial``).
        events_folded: how many events were folded.
        events: the events after the checkpoint, when there is no reducer to fold them.
        revision: the store revision the whole view was read at.
        last_seq: the stream's last seq at that revision.
        requests: how many requests it took.
    """

    state: Any
    step: int
    position: int
    checkpoint: Checkpoint | None
    events_folded: int
    events: list[AgentEvent] = field(default_factory=list)
    revision: int = 0
    last_seq: int = 0
    requests: int = 0


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One line of ``history()``: an event, a checkpoint or a rollback."""

    revision: int
    time_ms: int
    kind: str  # "event" | "checkpoint" | "rollback"
    step: int | None
    seq: int | None
    ckpt: int | None
    type: str
    summary: str


def make_manifest(
    *,
    agent: str,
    n: int,
    step: int,
    position: int,
    time_ms: int,
    parent: int | None,
    metadata: dict[str, Any],
    header: dict[str, Any],
    envelope: bytes,
    inline: bool,
    chunk_size: int,
    kind: str = "checkpoint",
    sha256: str | None = None,
) -> dict[str, Any]:
    m: dict[str, Any] = {
        "v": MANIFEST_VERSION,
        "agent": agent,
        "ckpt": n,
        "kind": kind,
        "step": step,
        "position": position,
        "time_ms": time_ms,
        "parent": parent,
        "metadata": metadata,
        **state_fields(header, envelope, inline, chunk_size, sha256),
    }
    return m


# The fields of a manifest that store its state (what a rollback copies).
STATE_FIELDS = ("header", "size", "sha256", "inline", "chunks")


def state_fields(
    header: dict[str, Any], envelope: bytes, inline: bool, chunk_size: int, sha256: str | None = None
) -> dict[str, Any]:
    """The manifest fields that store ``envelope``: inline, or as chunks of ``chunk_size``."""
    f: dict[str, Any] = {
        "header": header,
        "size": len(envelope),
        "sha256": sha256 or hashlib.sha256(envelope).hexdigest(),
    }
    if inline:
        f["inline"] = envelope
    else:
        f["chunks"] = {"count": -(-len(envelope) // chunk_size), "size": chunk_size}
    return f


def pack_manifest(m: dict[str, Any]) -> bytes:
    try:
        return msgpack.packb(m, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"checkpoint metadata must be msgpack-able plain data: {exc}") from None


def unpack_manifest(raw: bytes, where: str) -> dict[str, Any]:
    try:
        m = msgpack.unpackb(raw, raw=False)
    except Exception as exc:
        raise CheckpointCorrupt(f"{where} is not a msgpack manifest: {exc}") from None
    if not isinstance(m, dict) or not isinstance(m.get("ckpt"), int) or "step" not in m:
        raise CheckpointCorrupt(f"{where} is not a checkpoint manifest")
    if "inline" not in m and not isinstance(m.get("chunks"), dict):
        raise CheckpointCorrupt(f"{where} has neither inline state nor chunks")
    return m


def checkpoint_from(m: dict[str, Any], revision: int) -> Checkpoint:
    """The Checkpoint (state not loaded) a manifest describes."""
    chunks = m.get("chunks") or {}
    return Checkpoint(
        agent=str(m.get("agent", "")),
        n=m["ckpt"],
        step=int(m.get("step") or 0),
        position=int(m.get("position") or 0),
        revision=revision,
        time_ms=int(m.get("time_ms") or 0),
        parent=m.get("parent"),
        metadata=dict(m.get("metadata") or {}),
        kind=str(m.get("kind", "checkpoint")),
        size=int(m.get("size") or 0),
        chunks=int(chunks.get("count", 0)),
        header=dict(m.get("header") or {}),
        sha256=str(m.get("sha256", "")),
    )


def with_state(ckpt: Checkpoint, state: Any) -> Checkpoint:
    return replace(ckpt, state=state, loaded=True)
