"""The agent layer: an agent's state over statekeeper, pure client code over kv, txn and
streams (both clients; one implementation, sans-IO plans in client/plan.py).

::

    from statekeeper import Client
    from statekeeper.client.agent import Agent, EveryNSteps, OnEvent

    with Client(["http://127.0.0.1:7000"], ns="agents") as c:
        agent = Agent(c, "agent-7", reducer=apply_event, initial={},
                      policy=EveryNSteps(10) | OnEvent(lambda e: e.type == "tool.ok"))
        h = agent.hydrate()                    # latest checkpoint + events after it
        state = agent.apply("tool.ok", {"tool": "search"}, step=h.step)  # log + fold
        agent.maybe_checkpoint(state, step=h.step)   # step h.step is done

- :class:`Agent` / :class:`AsyncAgent`: checkpoints (chunked when large), events,
  rollback, ``state_at``, ``history``, ``hydrate``, ``gc`` (client/agent/agent.py);
- policies: :class:`EveryNSteps`, :class:`EveryTSeconds`, :class:`OnEvent`, ``|``/``&``;
- :class:`Projection` / :class:`AsyncProjection`: read models folded from a stream,
  resuming from their saved position;
- envelopes (client/agent/envelope.py): typed state <-> bytes, schemas and upcasters;
- key layout: client/agent/layout.py; CLI: ``statekeeper agent list|show|history|rollback|
  checkpoints|gc``; error codes: docs/agent-state.md, "Errors".
"""

from __future__ import annotations

from .agent import Agent, AgentCore, AsyncAgent
from .envelope import (
    EnvelopeError,
    Header,
    MissingUpcaster,
    PickleRefused,
    SchemaRegistry,
    SchemaTooNew,
    UnknownSchema,
    decode,
    decode_raw,
    default_registry,
    encode,
    peek,
    schema,
    upcaster,
)
from .errors import (
    AgentError,
    CheckpointArchived,
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointNotFound,
    EventsMissing,
    InvalidAgentId,
    PositionNotFound,
    ProjectionConflict,
)
from .layout import Layout
from .policies import AllOf, AnyOf, EveryNSteps, EveryTSeconds, Never, OnEvent, Policy
from .projection import AsyncProjection, Projection
from .records import AgentEvent, Checkpoint, Hydrated, TimelineRow

__all__ = [
    "Agent",
    "AgentCore",
    "AgentError",
    "AgentEvent",
    "AllOf",
    "AnyOf",
    "AsyncAgent",
    "AsyncProjection",
    "Checkpoint",
    "CheckpointArchived",
    "CheckpointConflict",
    "CheckpointCorrupt",
    "CheckpointNotFound",
    "EnvelopeError",
    "EventsMissing",
    "EveryNSteps",
    "EveryTSeconds",
    "Header",
    "Hydrated",
    "InvalidAgentId",
    "Layout",
    "MissingUpcaster",
    "Never",
    "OnEvent",
    "PickleRefused",
    "Policy",
    "PositionNotFound",
    "Projection",
    "ProjectionConflict",
    "SchemaRegistry",
    "SchemaTooNew",
    "TimelineRow",
    "UnknownSchema",
    "decode",
    "decode_raw",
    "default_registry",
    "encode",
    "peek",
    "schema",
    "upcaster",
]
