"""The agent's steps: ONE model that log, checkpoint, hydrate, state_at and rollback share
(docs/agent-state.md, "Steps", has the same picture).

A step is one turn of the agent's loop. Every event carries the step it belongs to
(``meta.step``); steps only go forward along the stream (a rollback starts again from an
earlier step, and state_at never reads across a rollback)::

    step        1        2        3          4
    stream    e1 e2  |  e3   |  e4 e5   |   e6   |  <- crash here
                             ^ checkpoint #1 = end of step 2 (step 2, position 3)
    state_at(step=3)  = #1 + e4 e5              the state at the END of step 3
    rollback(to=3)    = a new checkpoint holding state_at(step=3), step 3
    hydrate()         = #1 + e4 e5 e6, .step = 5: the step to continue from

- ``state_at(step=N)`` is the state at the end of step N: the newest checkpoint with
  step <= N, then the events after its position up to the first event of a later step or
  a rollback (a prefix of the stream: a state the agent really had). Step 0 is the initial
  state.
- A checkpoint at step N holds state_at(step=N): it ends step N (its default step is the
  step of the last event it includes) and the agent goes on with step N + 1.
- ``agent.step`` is the step the agent is in, the one ``log()`` stamps by default;
  ``log(step=s)`` moves it to ``s`` (never back). hydrate(), latest(), checkpoint() and
  rollback() set it to the step after the state they leave, so ``Hydrated.step`` is the
  step to continue from: the loop "log, then step += 1" loses and repeats no step across
  a crash (tests/unit/test_agent_steps.py kills it at several points).
- ``rollback(to=N)`` writes a checkpoint whose state is exactly state_at(step=N): when no
  event of a step <= N follows the checkpoint it starts from, the manifest's stored state
  (inline bytes or chunk reference) is copied as is, with no decoding, so no schema
  registry is needed (the CLI rolls back agents whose state is a registered class);
  otherwise the events are folded with the agent's reducer and the result stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..plan import AgentPlan
from .archived import archived_newest_plan
from .checkpoints import Ctx, load_envelope_plan, newest_plan, sha256_hex, upload_chunks_plan
from .errors import CheckpointNotFound
from .records import STATE_FIELDS, Checkpoint, state_fields
from .schemas import MissingUpcaster, SchemaTooNew, UnknownSchema
from .timeline import agent_event, fold, initial_state, read_forward_plan, stops_after

__all__ = ["AtStep", "Restored", "at_step_plan", "restore_plan", "state_at_step_plan"]

Reducer = Callable[[Any, Any], Any]


@dataclass(frozen=True, slots=True)
class AtStep:
    """Where the state at the end of ``step`` comes from: the newest checkpoint with a
    step <= it (manifest and Checkpoint; None: the initial state) and the raw events after
    its position up to the end of that step, all read at ``revision``."""

    step: int
    manifest: dict[str, Any] | None
    checkpoint: Checkpoint | None
    events: list[Any]
    revision: int


@dataclass(frozen=True, slots=True)
class Restored:
    """The state a rollback makes current: the manifest fields that store it (header,
    size, sha256, inline or chunks), the checkpoint it comes from (None: the initial
    state), and the decoded state when this reader could decode it (``loaded``)."""

    fields: dict[str, Any]
    parent: int | None
    state: Any
    loaded: bool


def at_step_plan(
    ctx: Ctx,
    step: int,
    top: int,
    revision: int | None,
    *,
    events: bool = True,
    archived: str | None = None,
) -> AgentPlan[AtStep]:
    """The checkpoint and events state_at(step=``step``) folds (``top``: the head's
    checkpoint number at ``revision``; ``events=False``: the checkpoint only).

    When no live checkpoint has step <= ``step`` and ``archived`` is given, the archived
    ones are searched (archived.py): "error" raises CheckpointArchived for one that may
    be the base, "fetch" reads it from its segment; None (state_at's default) folds from
    the initial state as before."""

    def match(m: dict[str, Any]) -> bool:
        return bool(m["step"] <= step)

    found = yield from newest_plan(ctx, top, match, 1, revision=revision)
    if not found and archived is not None and top > 0:
        gone = yield from archived_newest_plan(
            ctx, top, match, archived, revision=revision, what=f", which may have step <= {step}"
        )
        found = [gone] if gone else []
    manifest, ck = found[0] if found else (None, None)
    start = ck.position + 1 if ck is not None else 1
    raw: list[Any] = []
    if events:
        raw, _, _ = yield from read_forward_plan(
            ctx, start, revision, stops_after(step), whole=True
        )
    return AtStep(step, manifest, ck, raw, revision or 0)


def state_at_step_plan(
    ctx: Ctx, at: AtStep, reducer: Reducer | None, initial: Any
) -> AgentPlan[Any]:
    """The state at the end of ``at.step`` (without a reducer: the checkpoint's alone)."""
    if at.manifest is None:
        state = initial_state(initial)
    else:
        state = ctx.codec.decode((yield from load_envelope_plan(ctx, at.manifest)))
    if reducer is None:
        return state
    return fold(reducer, state, [agent_event(ctx.codec, e) for e in at.events], 0)[0]


def restore_plan(
    ctx: Ctx, at: AtStep, reducer: Reducer | None, initial: Any
) -> AgentPlan[Restored]:
    """What rollback(to=``at.step``) stores: the checkpoint's stored state copied when no
    event needs folding (module docstring), else the folded state, encoded (and chunked
    when it does not fit inline). CheckpointNotFound when folding is needed and there is
    no reducer (it never snaps to another step)."""
    if at.manifest is not None and not at.events:
        return (yield from copy_plan(ctx, at.manifest))
    if reducer is None:
        raise CheckpointNotFound(_needs_reducer(ctx, at))
    state = yield from state_at_step_plan(ctx, at, reducer, initial)
    env = ctx.codec.encode(state)
    sha = sha256_hex(env)
    inline = len(env) <= ctx.inline_limit
    size = ctx.chunk_size if inline else (yield from upload_chunks_plan(ctx, env, sha))
    fields = state_fields(ctx.codec.header(env), env, inline, size, sha)
    return Restored(fields, at.checkpoint.n if at.checkpoint else None, state, True)


def copy_plan(ctx: Ctx, manifest: dict[str, Any]) -> AgentPlan[Restored]:
    """Checkpoint ``manifest``'s state as stored (checked against its sha256); decoded for
    the caller only when this reader's registry knows its schema: a reader without the
    class still rolls back (it copies the bytes) and gets ``loaded`` False."""
    env = yield from load_envelope_plan(ctx, manifest)
    fields = {k: manifest[k] for k in STATE_FIELDS if k in manifest}
    try:
        return Restored(fields, manifest["ckpt"], ctx.codec.decode(env), True)
    except (UnknownSchema, SchemaTooNew, MissingUpcaster):
        return Restored(fields, manifest["ckpt"], None, False)


def _needs_reducer(ctx: Ctx, at: AtStep) -> str:
    agent = ctx.layout.agent_id
    if at.checkpoint is None:
        return (
            f"agent {agent!r} has no checkpoint with step <= {at.step}: its state at step "
            f"{at.step} is its initial state folded with {len(at.events)} event(s), which "
            "needs the agent's reducer (Agent(reducer=...).rollback(to=...) in code)"
        )
    ck = at.checkpoint
    return (
        f"agent {agent!r} has no checkpoint at step {at.step}: the newest at or below it is "
        f"#{ck.n} (step {ck.step}) and {len(at.events)} event(s) of steps up to {at.step} "
        f"follow it; folding them needs the agent's reducer (Agent(reducer=...)), or roll "
        f"back to step {ck.step} (ckpt={ck.n}, CLI --ckpt {ck.n})"
    )
