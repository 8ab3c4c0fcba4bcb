"""Agent and AsyncAgent: an agent's checkpoints, events, rollback, time travel and
hydration over statekeeper's kv, txn and streams, as ONE implementation (each operation is
a sans-IO plan, plan.py) run by a blocking or an asyncio driver.

    agent = Agent(client, "agent-7", reducer=apply_event, initial={})
    h = agent.hydrate()                      # latest checkpoint + the events after it
    state = agent.apply("tool.ok", {"tool": "search"})  # log + fold with the reducer
    agent.checkpoint(state, step=12, metadata={"run_id": "r1"})
    agent.rollback(to=10); agent.state_at(step=11); agent.history()

Steps (steps.py has the picture): an event belongs to the step it is stamped with; the
state at step N is the state at the END of step N; a checkpoint at step N holds it;
``Hydrated.step`` and ``agent.step`` are the step to continue from; rollback(to=N) makes
exactly state_at(step=N) current.

The five things (docs/agent-state.md, "The five things"):

1. Consistency: linearizable. A checkpoint is one txn (manifest, head, position and its
   events in one raft entry) guarded by a compare on the head's mod_revision, so two
   writers of one agent cannot both move it (the loser gets CheckpointConflict, nothing
   written). Reads (hydrate, state_at, history, lists) see one revision: a plan pins later
   reads to the revision of its first one.
2. ok / failed / unknown: ok = committed, the Checkpoint carries its revision; failed =
   CheckpointConflict (another writer; hydrate and decide again), CheckpointNotFound,
   InvalidRequest (limits); nothing was written. Unknown = client Timeout/Unavailable
   after the client's retries: every request keeps its idempotency key across retries, so
   a retried txn applies once; whether it committed, ``latest()`` tells (pass your own
   ``idempotency_key=`` to retry the same checkpoint later and get its first result).
   Chunks written before an unknown outcome are harmless (gc() collects orphans).
3. Limits: value 1 MiB (larger states are chunked; the txn's 1024 compares on 512 KiB
   chunks bound a state at ~500 MiB), request 4 MiB (chunk batches stay under it; a
   checkpoint's own events must fit one txn, else 413 request_too_large), 1000 events per
   append (413 too_many_events). Codes: docs/agent-state.md, "Errors".
4. Key layout: client/agent/layout.py (agent/{id}/head, ckpt/{n}, chunk/{sha}/{i},
   stream agent/{id}).
5. Chaos: the kv/txn and stream workloads cover the primitives; the agent layer itself
   (the checkpoint txn mixing puts and an append) has no chaos workload yet.

6. Fencing: ``Agent(..., fence=lock)`` (or ``fence=`` on a write) sends the lock's fence
   with every write (log, apply, checkpoint with its chunks, rollback, gc): once the lock
   moved on (this instance was paused past its TTL, or cut off) each fails FenceMismatch
   and writes nothing (docs/agent-state.md, "Fencing").

AgentCore is one object whose view of the agent (head, position, step, state, the last
seq it accounts for) every plan reads and updates: writer.py (WriterView) holds that view
and its rules; two mixins keep this module under 500 lines: commit.py (the checkpoint
step) and catalog.py (reads that leave the view alone, gc); the plans' building blocks
live in checkpoints.py, timeline.py and steps.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..plan import AgentPlan, arun, call, driven, planned, run
from .archived import check_archived, manifest_plan
from .catalog import Catalog
from .checkpoints import (
    Ctx,
    check_events,
    chunk_groups,
    commit_plan,
    conflict,
    head_call,
    head_of,
    load_state_plan,
    newest_plan,
)
from .codec import Codec
from .commit import CheckpointWriter
from .envelope import SchemaRegistry
from .errors import CheckpointNotFound
from .layout import Layout
from .policies import Never, Policy
from .records import (
    MANIFEST_VERSION,
    ROLLBACK_EVENT,
    AgentEvent,
    Checkpoint,
    Hydrated,
    checkpoint_from,
    with_state,
)
from .steps import AtStep, at_step_plan, restore_plan, state_at_step_plan
from .timeline import initial_state, view_plan
from .writer import now_ms

__all__ = ["Agent", "AgentCore", "AsyncAgent"]

Reducer = Callable[[Any, Any], Any]


class AgentCore(Catalog, CheckpointWriter):
    """What Agent and AsyncAgent share: configuration, what this writer last saw, and
    every operation as a plan (the catalog's reads and gc in catalog.py). Use
    :class:`Agent` or :class:`AsyncAgent`.

    Args:
        client: a Client (Agent) or AsyncClient (AsyncAgent).
        agent_id: the agent's id (no '/'); its keys are agent/{id}/..., its stream agent/{id}.
        ns: namespace (the client's by default).
        reducer: ``reducer(state, event) -> state`` folding an AgentEvent into the state
            (hydrate, state_at, apply, rollback between checkpoints); without one,
            events are returned, not folded.
        initial: the state before any checkpoint (copied), or a factory for it.
        policy: when ``maybe_checkpoint`` writes (EveryNSteps, EveryTSeconds, OnEvent,
            combined with | and &); default Never.
        registry, state_type, format: the envelope's SchemaRegistry, the class states
            decode into, "msgpack" or "json".
        clock: seconds for the policies (time.monotonic).
        tail: events the hydrate batch reads with the head (more take a second request).
        value_limit, request_limit, inline_limit: the server's limits and the largest
            envelope kept inline in the manifest (bigger ones are chunked).
        chunk_size, batch_bytes: bytes per chunk and per batch of chunks (see
            checkpoints.Ctx for why they default to 512 KiB and 1 MiB).
        fence: a lock (client.lock(...), a (name, token) pair) of the agent's namespace
            every write carries (log, checkpoint, rollback, gc; a call's own ``fence=``
            overrides it): once the lock has moved on, they fail FenceMismatch and write
            nothing (docs/agent-state.md, "Fencing").
    """

    def __init__(
        self,
        client: Any,
        agent_id: str,
        *,
        ns: str | None = None,
        reducer: Reducer | None = None,
        initial: Any = None,
        policy: Policy | None = None,
        registry: SchemaRegistry | None = None,
        state_type: Any = None,
        format: str = "msgpack",
        clock: Callable[[], float] = time.monotonic,
        tail: int = 100,
        value_limit: int = 1024 * 1024,
        request_limit: int = 4 * 1024 * 1024,
        inline_limit: int = 256 * 1024,
        chunk_size: int = 512 * 1024,
        batch_bytes: int = 1024 * 1024,
        fence: Any = None,
    ) -> None:
        self.client = client
        self.layout = Layout(agent_id)
        self.ns = ns if ns is not None else getattr(client, "ns", None)
        self.fence = self._fence(fence)
        """The lock every write carries (None: unfenced)."""
        self.reducer = reducer
        self.initial = initial
        self.policy: Policy = policy if policy is not None else Never()
        self.clock = clock
        self.tail = tail
        inline_limit = min(inline_limit, value_limit * 3 // 4, request_limit // 3)
        chunk_size = min(chunk_size, value_limit)
        batch_bytes = max(chunk_size, min(batch_bytes, request_limit * 3 // 4))
        self.ctx = Ctx(
            self.layout, self.ns, Codec(registry, state_type, format),
            value_limit, request_limit, inline_limit, chunk_size, batch_bytes,
        )
        self._init_view()

    # -- writing -----------------------------------------------------------------------------

    @planned
    def log(
        self,
        type: str,
        data: Any = b"",
        *,
        id: str | None = None,
        meta: Mapping[str, Any] | None = None,
        expect: Any = None,
        step: int | None = None,
        idempotency_key: str | None = None,
        fence: Any = None,
    ) -> AgentPlan[Any]:
        """Append one event to the agent's stream; returns the client's AppendResult.

        ``data``: bytes as they are, anything else (msgpack-able or a registered class) as
        an envelope. ``meta`` gets ``{"step": step}``, by default ``agent.step``; a later
        ``step`` becomes the agent's step (an earlier one is an event replayed with its
        id: it must carry its first step). ``id`` makes the event idempotent (a retry
        returns the first seq);
        ``expect``: see client.append; ``fence``: see AgentCore (FenceMismatch: nothing
        appended). The event is not folded into ``agent.state`` (``apply`` does that).
        """
        plan = self._log_plan(type, data, id, meta, expect, step, idempotency_key, fence)
        return (yield from plan)[0]

    def _log_plan(
        self, type: str, data: Any, id: str | None, meta: Mapping[str, Any] | None, expect: Any,
        step: int | None, idempotency_key: str | None, fence: Any,
    ) -> AgentPlan[tuple[Any, dict[str, Any]]]:
        s = self.step if step is None else step
        ev = self.ctx.codec.wire_event(type, data, id, meta, s)
        check_events(self.ctx, [ev], f"event {type!r}")
        r = yield call(
            "append", self.stream, [ev], expect=expect, ns=self.ns,
            idempotency_key=idempotency_key, fence=self._fence(fence),
        )
        if self._last_seq is None and not self._head_seen and r.seqs:
            self._origin = min(r.seqs)  # 1: this writer started the stream
        self._last_seq = max(self._last_seq or 0, r.last_seq)
        if s >= self.step:  # an earlier step: an event replayed with its id and step
            self.step, self._step_logged = s, True
        return r, ev

    @planned
    def apply(
        self,
        type: str,
        data: Any = b"",
        *,
        id: str | None = None,
        meta: Mapping[str, Any] | None = None,
        step: int | None = None,
        idempotency_key: str | None = None,
        fence: Any = None,
    ) -> AgentPlan[Any]:
        """``log()`` the event, then fold it into ``agent.state`` with the reducer, as
        hydrate would fold it (its data decoded from the bytes sent; ``time_ms`` is this
        writer's clock); returns the new state. The append expects the stream to end at
        the state's position, so another writer's event in between is a 409
        (ExpectationFailed) with nothing written; an ``id`` already in the stream is
        folded only if the state does not include it yet (a retry after a lost answer).
        ``fence``: see AgentCore (FenceMismatch: nothing appended, the state unchanged).

        Raises:
            ValueError: no reducer; no state held yet (call hydrate() first); events were
                logged with log() since the state was loaded (hydrate() folds them).
        """
        if self.reducer is None:
            raise ValueError("apply() folds with the reducer: this Agent has none (reducer=...)")
        if not self._holds_state:
            raise ValueError("apply() folds into the state the agent holds: call hydrate() first")
        if self._last_seq is not None and self._last_seq != self.position:
            raise ValueError(
                f"the stream holds events up to seq {self._last_seq} that agent.state (position "
                f"{self.position}) does not include (logged with log()): hydrate() to fold them"
            )
        r, ev = yield from self._log_plan(
            type, data, id, meta, self.position, step, idempotency_key, fence
        )
        seq = r.seqs[0]
        if seq <= self.position:
            return self.state  # a duplicate id: the state already includes its event
        event = AgentEvent(seq, type, self.ctx.codec.decode_event(ev["data"]), ev["meta"]["step"],
                           now_ms(), r.revision, id, ev["meta"])
        self.state, self.position = self.reducer(self.state, event), seq
        return self.state


    @planned
    def checkpoint(
        self,
        state: Any,
        *,
        step: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        events: Iterable[Any] = (),
        idempotency_key: str | None = None,
        fence: Any = None,
    ) -> AgentPlan[Checkpoint]:
        """Store ``state`` as the agent's new current checkpoint, the end of ``step`` (by
        default the step of the last event logged or folded); returns it. The agent goes
        on with step + 1.

        Chunks first when the state's envelope is large, then ONE txn: the manifest, the
        head and ``events`` (dicts with type/data/meta, or (type, data) tuples) appended
        to the agent's stream, so the checkpoint, its position (the stream's last seq
        after the txn) and those events commit together or not at all.

        Raises:
            CheckpointConflict: another writer moved the head or appended to the stream
                since this Agent last saw it (nothing written). A new Agent over an agent
                that has checkpoints must hydrate() or latest() first.
            FenceMismatch: ``fence`` (or the agent's) is not the lock's holder any more;
                nothing written (its chunks neither).
        """
        s = self._ending(step)
        return (
            yield from self._checkpoint_plan(state, s, metadata, events, idempotency_key, fence)
        )

    @planned
    def maybe_checkpoint(
        self,
        state: Any,
        *,
        step: int | None = None,
        event: Any = None,
        metadata: Mapping[str, Any] | None = None,
        fence: Any = None,
    ) -> AgentPlan[Checkpoint | None]:
        """Step ``step`` (by default the step of the last event logged) is done:
        checkpoint it if the policy says it is due (``event`` is what OnEvent predicates
        look at); returns the Checkpoint or None. Either way the agent goes on with the
        next step."""
        s = self._ending(step)
        if not self.policy.due(s, event, self.clock()):
            self.step, self._step_logged = s + 1, False
            return None
        return (yield from self._checkpoint_plan(state, s, metadata, (), None, fence))

    @planned
    def rollback(
        self, to: int | None = None, *, ckpt: int | None = None, fence: Any = None,
        archived: str = "error",
    ) -> AgentPlan[Checkpoint]:
        """Make the state at the end of step ``to`` current again, exactly
        state_at(step=to) (steps.py: the newest checkpoint with step <= to, copied as
        stored, or folded with the later events of steps <= to); or checkpoint number
        ``ckpt`` as it is. Writes a NEW checkpoint (kind "rollback", step ``to``, parent =
        the checkpoint it starts from, metadata {"rollback_from": the old head's number})
        and a "statekeeper.rollback" event in one txn; nothing is deleted, so history()
        and state_at() still see what came after. The agent goes on with step ``to`` + 1.
        Returns it with its state loaded (``loaded`` False when a copied state's schema is
        unknown to this Agent's registry: copying needs no decoding). ``fence``: see
        AgentCore. A base checkpoint that was archived raises CheckpointArchived naming its
        segment; ``archived="fetch"`` reads it from the archive (archived.py)."""
        if (to is None) == (ckpt is None):
            raise ValueError("rollback needs exactly one of to=STEP or ckpt=N")
        check_archived(archived)
        fence = self._fence(fence)
        view = yield from view_plan(self.ctx, tail=1, need_tail=False)
        if view.manifest is None:
            raise CheckpointNotFound(f"agent {self.agent_id!r} has no checkpoints to roll back to")
        top = view.manifest["ckpt"]
        if ckpt is not None:
            found = yield from newest_plan(
                self.ctx, top, lambda m: m["ckpt"] == ckpt, 1, revision=view.revision, below=ckpt + 1
            )
            if not found:  # archived, deleted, or never written
                m, kv = yield from manifest_plan(self.ctx, ckpt, archived)
                found = [(m, checkpoint_from(m, kv.mod_revision))]
            at = AtStep(found[0][1].step, *found[0], [], view.revision)
        else:
            at = yield from at_step_plan(self.ctx, to, top, view.revision, archived=archived)
        back = yield from restore_plan(self.ctx, at, self.reducer, self.initial)
        old = checkpoint_from(view.manifest, view.head_kv.mod_revision)
        data = {"from_ckpt": old.n, "from_step": old.step, "to_ckpt": back.parent, "to_step": at.step}
        ev = self.ctx.codec.wire_event(ROLLBACK_EVENT, data, None, {"ckpt": top + 1}, at.step)
        manifest = {
            "v": MANIFEST_VERSION, "agent": self.agent_id, "ckpt": top + 1, "kind": "rollback",
            "step": at.step, "position": view.last_seq + 1, "time_ms": now_ms(),
            "parent": back.parent, "metadata": {"rollback_from": old.n}, **back.fields,
        }
        done = yield from commit_plan(
            self.ctx, manifest, view.head_kv.mod_revision, [ev], view.last_seq, fence=fence
        )
        if not done.ok:
            raise conflict(self.ctx, done.current, view.head_kv.mod_revision)
        return self._committed(manifest, done, back.state, back.loaded)

    # -- reading -----------------------------------------------------------------------------

    def _load_plan(self, revision: int | None) -> AgentPlan[Hydrated]:
        view = yield from view_plan(self.ctx, revision=revision, tail=self.tail)
        self._check_position(view)
        reqs = view.requests
        ckpt = None
        state = initial_state(self.initial)
        if view.manifest is not None:
            if "inline" not in view.manifest:
                reqs += len(chunk_groups(int(view.manifest["chunks"]["count"]), self.ctx))
            state = yield from load_state_plan(self.ctx, view.manifest)
            ckpt = with_state(checkpoint_from(view.manifest, view.head_kv.mod_revision), state)
        return self._folded(view, state, ckpt, reqs)

    @planned
    def hydrate(self) -> AgentPlan[Hydrated]:
        """Cold start: the latest checkpoint plus the events after it folded through the
        reducer (one batch request when the state is inline and the tail short). This
        writer then continues from there (its state, position and head); ``step`` is the
        step to continue from: the one after the checkpoint's and the events' (1 for a
        new agent).

        Raises:
            EventsMissing: events after the checkpoint's position are gone (the stream's
                first_seq is past it + 1: truncated, or archived), never folded across.
            PositionNotFound: the head names events its stream does not hold.
        """
        view_h = yield from self._load_plan(None)
        self._head_seen = True
        self.head = view_h.checkpoint
        self._head_rev = view_h.checkpoint.revision if view_h.checkpoint else 0
        self._last_seq = view_h.last_seq
        self.position = view_h.position
        self._continue_after(view_h.step - 1, view_h.state)
        return view_h

    @planned
    def state_at(
        self, *, step: int | None = None, revision: int | None = None, archived: str = "error"
    ) -> AgentPlan[Any]:
        """The state as it was: at the end of ``step`` (the newest checkpoint with step <=
        it, then the events after its position up to that step, stopping at a rollback:
        steps.py), or at store ``revision`` (the head and the stream as of it). Without a
        reducer, the checkpoint's state alone. ``archived="fetch"``: when no live
        checkpoint has step <= ``step``, look among the archived ones too (archived.py).

        Raises:
            EventsMissing: events the state needs were truncated or archived.
            client.Compacted: ``revision`` is older than the history the cluster keeps
                (retention.history_revisions).
        """
        if (step is None) == (revision is None):
            raise ValueError("state_at needs exactly one of step= or revision=")
        check_archived(archived)
        if revision is not None:
            return (yield from self._load_plan(revision)).state
        rr = yield head_call(self.ctx)
        head, _ = head_of(self.ctx, rr)
        at = yield from at_step_plan(
            self.ctx, step, head["ckpt"] if head else 0, rr.revision,
            events=self.reducer is not None, archived="fetch" if archived == "fetch" else None,
        )
        return (yield from state_at_step_plan(self.ctx, at, self.reducer, self.initial))

    @planned
    def latest(self) -> AgentPlan[Checkpoint | None]:
        """The current checkpoint with its state, or None; this writer now knows the head
        (its next checkpoint is checked against it) and builds on its position, not on
        events after it it has not folded (they stay after the next checkpoint, for
        hydrate to fold). PositionNotFound if the head names events its stream lacks."""
        view = yield from view_plan(self.ctx, tail=1, need_tail=False)
        self._check_position(view)
        ck = self._saw_head(view.manifest, view.head_kv)
        self._last_seq = view.position
        if view.manifest is None or ck is None:
            return None
        state = yield from load_state_plan(self.ctx, view.manifest)
        self.position = view.position
        self._continue_after(ck.step, state)
        return with_state(ck, state)

@driven(AgentCore, run, is_async=False)
class Agent(AgentCore):
    """An agent's state over a blocking :class:`client.Client` (see AgentCore for the
    arguments and the module docstring for the guarantees). Not thread-safe: one Agent
    per writer."""


@driven(AgentCore, arun, is_async=True)
class AsyncAgent(AgentCore):
    """:class:`Agent` over an :class:`client.AsyncClient`: the same methods, awaited."""
