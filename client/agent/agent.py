"""Agent and AsyncAgent: an agent's checkpoints, events, rollback, time travel and
hydration over statekeeper's kv, txn and streams, as ONE implementation (each operation is
a sans-IO plan, plan.py) run by a blocking or an asyncio driver.

    agent = Agent(client, "agent-7", reducer=apply_event, initial={})
    h = agent.hydrate()                      # latest checkpoint + the events after it
    agent.log("tool.ok", {"tool": "search"}) # one event of stream agent/agent-7
    agent.checkpoint(state, step=12, metadata={"run_id": "r1"})
    agent.rollback(to=10); agent.state_at(step=11); agent.history()

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

Why one module of ~540 lines: AgentCore is one object whose view of the agent (head,
position, step, the last seq it accounts for) every plan reads and updates; the plans'
building blocks already live in checkpoints.py and timeline.py, and splitting the methods
across modules would split that state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import NotFound
from ..plan import AgentPlan, arun, call, driven, planned, run
from .checkpoints import (
    Committed,
    Ctx,
    check_events,
    chunk_groups,
    commit_plan,
    conflict,
    gc_plan,
    head_call,
    head_of,
    load_state_plan,
    newest_plan,
    sha256_hex,
    upload_chunks_plan,
)
from .codec import Codec, unpack_event
from .envelope import SchemaRegistry
from .errors import CheckpointConflict, CheckpointNotFound, PositionNotFound
from .layout import Layout
from .policies import Never, Policy
from .records import (
    ROLLBACK_EVENT,
    Checkpoint,
    Hydrated,
    TimelineRow,
    checkpoint_from,
    make_manifest,
    unpack_manifest,
    with_state,
)
from .timeline import (
    agent_event,
    fold,
    history_plan,
    initial_state,
    read_forward_plan,
    stops_after,
    view_plan,
)

__all__ = ["Agent", "AgentCore", "AsyncAgent"]

Reducer = Callable[[Any, Any], Any]


def _now_ms() -> int:
    return int(time.time() * 1000)


class AgentCore:
    """What Agent and AsyncAgent share: configuration, what this writer last saw, and
    every operation as a plan. Use :class:`Agent` or :class:`AsyncAgent`.

    Args:
        client: a Client (Agent) or AsyncClient (AsyncAgent).
        agent_id: the agent's id (no '/'); its keys are agent/{id}/..., its stream agent/{id}.
        ns: namespace (the client's by default).
        reducer: ``reducer(state, event) -> state`` folding an AgentEvent into the state
            (hydrate, state_at); without one, events are returned, not folded.
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
    ) -> None:
        self.client = client
        self.layout = Layout(agent_id)
        self.ns = ns if ns is not None else getattr(client, "ns", None)
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
        self.step = 0
        """The agent's current step (set by checkpoint/maybe_checkpoint/hydrate; log()
        stamps it on events as meta.step)."""
        self.position = 0
        """The last seq of the stream folded into the state this writer holds."""
        self.head: Checkpoint | None = None
        """The current checkpoint as this writer last saw it."""
        self._head_rev = 0  # the head's mod_revision as last seen (0: missing)
        self._head_seen = False  # head read (or written) by this writer
        self._last_seq: int | None = None  # the seq the next checkpoint builds on
        self._origin: int | None = None  # first seq this writer logged before reading
        self._key_time: tuple[str | None, int] = (None, 0)

    @property
    def agent_id(self) -> str:
        return self.layout.agent_id

    @property
    def stream(self) -> str:
        return self.layout.stream

    @property
    def last_seq(self) -> int | None:
        """The last seq of the stream this writer accounts for, which its next checkpoint's
        position builds on: the stream's last seq as hydrate(), log() or a checkpoint saw
        it, the head's position after latest() (None: not read yet)."""
        return self._last_seq

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.agent_id!r}, ns={self.ns!r}, step={self.step})"

    # -- what this writer saw ---------------------------------------------------------------

    def _saw_head(self, manifest: dict[str, Any] | None, kv: Any) -> Checkpoint | None:
        self._head_seen = True
        self._head_rev = kv.mod_revision if kv is not None else 0
        self.head = checkpoint_from(manifest, self._head_rev) if manifest else None
        return self.head

    def _check_position(self, view: Any) -> None:
        """Refuse a head whose position names events its stream lacks (never build on it)."""
        if view.manifest is not None and view.position > view.last_seq:
            raise PositionNotFound(
                agent=self.agent_id, stream=self.stream, position=view.position,
                last_seq=view.last_seq, ns=self.ns, ckpt=view.manifest.get("ckpt"),
            )

    def _ensure_view(self) -> AgentPlan[None]:
        """Read the head and the stream's last seq if this writer has not (one batch).

        A writer that has not read the agent may only checkpoint what it knows all of:
        nothing (no head, no stream: position 0) or a stream it started itself (its first
        log() got seq 1). A head it has not loaded, or events it never saw, need a
        hydrate() first (CheckpointConflict), else the new checkpoint would claim them."""
        if self._head_seen and self._last_seq is not None:
            return
        view = yield from view_plan(self.ctx, tail=1, need_tail=False)
        self._check_position(view)
        if not self._head_seen:
            if view.manifest is not None:
                raise CheckpointConflict(
                    f"agent {self.agent_id!r} already has checkpoint #{view.manifest['ckpt']} "
                    f"(step {view.manifest['step']}) that this Agent has not loaded: call "
                    "hydrate() or latest() first",
                    current=checkpoint_from(view.manifest, view.head_kv.mod_revision),
                )
            if view.last_seq > 0 and self._origin != 1:
                raise CheckpointConflict(
                    f"agent {self.agent_id!r} has no checkpoint but its stream {self.stream!r} "
                    f"holds {view.last_seq} events this Agent has not folded: call hydrate() "
                    "first (a checkpoint now would claim them and every later hydrate would "
                    "skip them)",
                    details={"last_seq": view.last_seq},
                )
            self._saw_head(None, None)
        if self._last_seq is None:
            self._last_seq = view.last_seq

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
    ) -> AgentPlan[Any]:
        """Append one event to the agent's stream; returns the client's AppendResult.

        ``data``: bytes as they are, anything else (msgpack-able or a registered class) as
        an envelope. ``meta`` gets ``{"step": step or agent.step}``. ``id`` makes the
        event idempotent (a retry returns the first seq); ``expect``: see client.append.
        """
        ev = self.ctx.codec.wire_event(type, data, id, meta, self.step if step is None else step)
        check_events(self.ctx, [ev], f"event {type!r}")
        r = yield call(
            "append", self.stream, [ev], expect=expect, ns=self.ns, idempotency_key=idempotency_key
        )
        if self._last_seq is None and not self._head_seen and r.seqs:
            self._origin = min(r.seqs)  # 1: this writer started the stream
        self._last_seq = max(self._last_seq or 0, r.last_seq)
        return r

    def _checkpoint_plan(
        self,
        state: Any,
        step: int,
        metadata: Mapping[str, Any] | None,
        events: Iterable[Any],
        idempotency_key: str | None,
    ) -> AgentPlan[Checkpoint]:
        wire = [self.ctx.codec.wire_event(*unpack_event(e), step) for e in events]
        check_events(self.ctx, wire)  # before any chunk is uploaded
        yield from self._ensure_view()
        env = self.ctx.codec.encode(state)
        sha = sha256_hex(env)
        inline = len(env) <= self.ctx.inline_limit
        size = self.ctx.chunk_size
        for attempt in range(3):
            if not inline:
                size = yield from upload_chunks_plan(self.ctx, env, sha)
            assert self._last_seq is not None
            manifest = make_manifest(
                agent=self.agent_id, n=(self.head.n if self.head else 0) + 1, step=step,
                position=self._last_seq + len(wire), time_ms=self._time_for(idempotency_key),
                parent=self.head.n if self.head else None, metadata=dict(metadata or {}),
                header=self.ctx.codec.header(env), envelope=env, inline=inline,
                chunk_size=size, sha256=sha,
            )
            key = idempotency_key and (f"{idempotency_key}.{attempt}" if attempt else idempotency_key)
            done: Committed = yield from commit_plan(
                self.ctx, manifest, self._head_rev, wire, self._last_seq, key
            )
            if done.ok:
                return self._committed(manifest, done, state)
            if done.head_moved and done.current is not None and done.is_own(manifest):
                return self._committed(done.current, Committed(True, done.current_rev), state)
            if done.head_moved:
                raise conflict(self.ctx, done.current, self._head_rev)
            # The head did not move: chunks were collected under us; send them again.
        raise conflict(self.ctx, None, self._head_rev)

    def _time_for(self, idempotency_key: str | None) -> int:
        """The manifest's time: the first attempt's for a retry with the same key (the
        server binds a key to the op's exact bytes)."""
        if idempotency_key is None:
            return _now_ms()
        if self._key_time[0] != idempotency_key:
            self._key_time = (idempotency_key, _now_ms())
        return self._key_time[1]

    def _committed(self, manifest: dict[str, Any], done: Committed, state: Any) -> Checkpoint:
        self._head_rev = done.revision
        self._head_seen = True
        self._last_seq = self.position = manifest["position"]
        self.step = manifest["step"]
        self.head = checkpoint_from(manifest, done.revision)
        self.policy.reset(self.step, self.clock())
        return with_state(self.head, state)

    @planned
    def checkpoint(
        self,
        state: Any,
        *,
        step: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        events: Iterable[Any] = (),
        idempotency_key: str | None = None,
    ) -> AgentPlan[Checkpoint]:
        """Store ``state`` as the agent's new current checkpoint; returns it.

        Chunks first when the state's envelope is large, then ONE txn: the manifest, the
        head and ``events`` (dicts with type/data/meta, or (type, data) tuples) appended
        to the agent's stream, so the checkpoint, its position (the stream's last seq
        after the txn) and those events commit together or not at all.

        Raises:
            CheckpointConflict: another writer moved the head or appended to the stream
                since this Agent last saw it (nothing written). A new Agent over an agent
                that has checkpoints must hydrate() or latest() first.
        """
        s = self.step if step is None else step
        return (yield from self._checkpoint_plan(state, s, metadata, events, idempotency_key))

    @planned
    def maybe_checkpoint(
        self,
        state: Any,
        *,
        step: int | None = None,
        event: Any = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AgentPlan[Checkpoint | None]:
        """Checkpoint if the policy says it is due (``step`` becomes the agent's step;
        ``event`` is what OnEvent predicates look at); returns the Checkpoint or None."""
        if step is not None:
            self.step = step
        if not self.policy.due(self.step, event, self.clock()):
            return None
        return (yield from self._checkpoint_plan(state, self.step, metadata, (), None))

    @planned
    def rollback(self, to: int | None = None, *, ckpt: int | None = None) -> AgentPlan[Checkpoint]:
        """Make an earlier checkpoint current again: the newest one whose step is <= ``to``
        (or checkpoint number ``ckpt``). Writes a NEW checkpoint (kind "rollback", parent =
        the one restored, metadata {"rollback_from": the old head's number}) and a
        "statekeeper.rollback" event in one txn; nothing is deleted, so history() and
        state_at() still see what came after. Returns it with its state loaded."""
        if (to is None) == (ckpt is None):
            raise ValueError("rollback needs exactly one of to=STEP or ckpt=N")
        view = yield from view_plan(self.ctx, tail=1, need_tail=False)
        if view.manifest is None:
            raise CheckpointNotFound(f"agent {self.agent_id!r} has no checkpoints to roll back to")
        top = view.manifest["ckpt"]
        match = (lambda m: m["step"] <= to) if to is not None else (lambda m: m["ckpt"] == ckpt)
        below = (ckpt + 1) if ckpt is not None else None
        found = yield from newest_plan(self.ctx, top, match, 1, revision=view.revision, below=below)
        if not found:
            what = f"with step <= {to}" if to is not None else f"#{ckpt}"
            raise CheckpointNotFound(f"agent {self.agent_id!r} has no checkpoint {what}")
        target, tck = found[0]
        state = yield from load_state_plan(self.ctx, target)
        old = checkpoint_from(view.manifest, view.head_kv.mod_revision)
        data = {"from_ckpt": old.n, "from_step": old.step, "to_ckpt": tck.n, "to_step": tck.step}
        ev = self.ctx.codec.wire_event(ROLLBACK_EVENT, data, None, {"ckpt": top + 1}, tck.step)
        manifest = {
            **target, "ckpt": top + 1, "kind": "rollback", "parent": tck.n,
            "metadata": {"rollback_from": old.n}, "position": view.last_seq + 1,
            "time_ms": _now_ms(),
        }
        done = yield from commit_plan(
            self.ctx, manifest, view.head_kv.mod_revision, [ev], view.last_seq
        )
        if not done.ok:
            raise conflict(self.ctx, done.current, view.head_kv.mod_revision)
        return self._committed(manifest, done, state)

    # -- reading -----------------------------------------------------------------------------

    def _folded(self, view: Any, state: Any, ckpt: Checkpoint | None, reqs: int) -> Hydrated:
        events = [agent_event(self.ctx.codec, e) for e in view.tail]
        step = ckpt.step if ckpt else 0
        if self.reducer is None:
            return Hydrated(state, step, view.position, ckpt, 0, events, view.revision,
                            view.last_seq, reqs)
        state, step, seq, n = fold(self.reducer, state, events, step)
        position = seq if n else view.position
        return Hydrated(state, step, position, ckpt, n, [], view.revision, view.last_seq, reqs)

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
        writer then continues from there (its step, position and head).

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
        self.position, self.step = view_h.position, view_h.step
        return view_h

    @planned
    def state_at(self, *, step: int | None = None, revision: int | None = None) -> AgentPlan[Any]:
        """The state as it was: at ``step`` (the newest checkpoint with step <= it, then the
        events after its position up to that step, stopping at a rollback), or at store
        ``revision`` (the head and the stream as of it). Without a reducer, the
        checkpoint's state alone.

        Raises:
            EventsMissing: events the state needs were truncated or archived.
            client.Compacted: ``revision`` is older than the history the cluster keeps
                (retention.history_revisions).
        """
        if (step is None) == (revision is None):
            raise ValueError("state_at needs exactly one of step= or revision=")
        if revision is not None:
            return (yield from self._load_plan(revision)).state
        rr = yield head_call(self.ctx)
        head, _ = head_of(self.ctx, rr)
        found = yield from newest_plan(
            self.ctx, head["ckpt"] if head else 0, lambda m: m["step"] <= step, 1,
            revision=rr.revision,
        )
        state, start, from_step = initial_state(self.initial), 1, 0
        if found:
            m, ck = found[0]
            state = yield from load_state_plan(self.ctx, m)
            start, from_step = ck.position + 1, ck.step
        if self.reducer is None:
            return state
        raw, _, _ = yield from read_forward_plan(
            self.ctx, start, rr.revision, stops_after(step), whole=True
        )
        events = [agent_event(self.ctx.codec, e) for e in raw]
        return fold(self.reducer, state, events, from_step)[0]

    @planned
    def checkpoints(self, *, limit: int | None = 20, before: int | None = None,
                    **metadata: Any) -> AgentPlan[list[Checkpoint]]:
        """Checkpoints newest first (states not loaded), those whose metadata has every
        given ``key=value``; at most ``limit`` (None: all), numbered below ``before``."""
        rr = yield head_call(self.ctx)
        head, _ = head_of(self.ctx, rr)
        if head is None:
            return []

        def match(m: dict[str, Any]) -> bool:
            md = m.get("metadata") or {}
            return all(k in md and md[k] == v for k, v in metadata.items())

        found = yield from newest_plan(
            self.ctx, head["ckpt"], match if metadata else None, limit,
            revision=rr.revision, below=before,
        )
        return [ck for _, ck in found]

    @planned
    def get_checkpoint(self, n: int) -> AgentPlan[Checkpoint]:
        """Checkpoint ``n`` with its state (CheckpointNotFound if there is none)."""
        try:
            kv = yield call("get", self.layout.ckpt(n), ns=self.ns)
        except NotFound:
            raise CheckpointNotFound(f"agent {self.agent_id!r} has no checkpoint #{n}") from None
        m = unpack_manifest(kv.value, kv.key)
        state = yield from load_state_plan(self.ctx, m)
        return with_state(checkpoint_from(m, kv.mod_revision), state)

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
        return with_state(ck, state)

    @planned
    def history(self, limit: int | None = None) -> AgentPlan[list[TimelineRow]]:
        """Events, checkpoints and rollbacks oldest first, with revisions and times (the
        last ``limit`` rows)."""
        return (yield from history_plan(self.ctx, limit))

    @planned
    def gc(self) -> AgentPlan[int]:
        """Delete chunks no checkpoint references (left by a crash between chunks and
        manifest); returns the number of chunk keys deleted."""
        return (yield from gc_plan(self.ctx))


@driven(AgentCore, run, is_async=False)
class Agent(AgentCore):
    """An agent's state over a blocking :class:`client.Client` (see AgentCore for the
    arguments and the module docstring for the guarantees). Not thread-safe: one Agent
    per writer."""


@driven(AgentCore, arun, is_async=True)
class AsyncAgent(AgentCore):
    """:class:`Agent` over an :class:`client.AsyncClient`: the same methods, awaited."""
