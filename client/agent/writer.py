"""What one agent writer knows of its agent, and how the operations of AgentCore
(agent.py) update it: the head it last saw (whose mod_revision the next checkpoint's txn
compares), the stream's last seq it accounts for, the state it holds with its position,
and the step it is in (steps.py has the model). AgentCore is a WriterView whose plans
read and update this view; the plans themselves stay in agent.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..plan import AgentPlan
from .checkpoints import Committed, Ctx
from .errors import CheckpointConflict, PositionNotFound
from .layout import Layout
from .policies import Policy
from .records import Checkpoint, Hydrated, checkpoint_from, with_state
from .timeline import agent_event, fold, view_plan

__all__ = ["WriterView", "now_ms"]


def now_ms() -> int:
    return int(time.time() * 1000)


class WriterView:
    """The view of one writer (see the module docstring); AgentCore sets ``layout``,
    ``ns``, ``ctx``, ``reducer``, ``policy`` and ``clock`` before calling ``_init_view``."""

    layout: Layout
    ns: str | None
    ctx: Ctx
    reducer: Callable[[Any, Any], Any] | None
    policy: Policy
    clock: Callable[[], float]

    def _init_view(self) -> None:
        self.step = 1
        """The step the agent is in: log() stamps it on events as meta.step (log(step=s)
        moves it to s); hydrate, latest, checkpoint and rollback set it to the step after
        the state they leave (steps.py)."""
        self.position = 0
        """The last seq of the stream folded into the state this writer holds."""
        self.state: Any = None
        """The state this writer holds (set by hydrate, latest, checkpoint, rollback;
        apply() folds into it)."""
        self._holds_state = False
        self._step_logged = False  # an event of self.step was logged
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

    def _fence(self, fence: Any) -> Any:
        """``fence`` (else the agent's), refused if it is a lock of another namespace: the
        server checks a fence in the write's own, where it would never match."""
        if fence is None:
            return getattr(self, "fence", None)
        lock_ns = getattr(fence, "ns", None)
        if lock_ns is not None and self.ns is not None and lock_ns != self.ns:
            raise ValueError(
                f"agent {self.agent_id!r} writes in namespace {self.ns!r} but its fence is "
                f"lock {getattr(fence, 'name', fence)!r} of namespace {lock_ns!r}: take the "
                "lock in the agent's namespace (a fence is checked in the write's namespace)"
            )
        return fence

    def _saw_head(self, manifest: dict[str, Any] | None, kv: Any) -> Checkpoint | None:
        self._head_seen = True
        self._head_rev = kv.mod_revision if kv is not None else 0
        self.head = checkpoint_from(manifest, self._head_rev) if manifest else None
        return self.head

    def _check_position(self, view: Any) -> None:
        """Refuse a head whose position names events its stream lacks (never build on it)."""
        if view.manifest is not None and view.position > view.last_seq:
            raise PositionNotFound(
                agent=self.agent_id,
                stream=self.stream,
                position=view.position,
                last_seq=view.last_seq,
                ns=self.ns,
                ckpt=view.manifest.get("ckpt"),
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

    def _time_for(self, idempotency_key: str | None) -> int:
        """The manifest's time: the first attempt's for a retry with the same key (the
        server binds a key to the op's exact bytes)."""
        if idempotency_key is None:
            return now_ms()
        if self._key_time[0] != idempotency_key:
            self._key_time = (idempotency_key, now_ms())
        return self._key_time[1]

    def _committed(
        self, manifest: dict[str, Any], done: Committed, state: Any, loaded: bool = True
    ) -> Checkpoint:
        self._head_rev = done.revision
        self._head_seen = True
        self._last_seq = self.position = manifest["position"]
        self.head = checkpoint_from(manifest, done.revision)
        self._continue_after(self.head.step, state, loaded)
        self.policy.reset(self.head.step, self.clock())
        return with_state(self.head, state) if loaded else self.head

    def _continue_after(self, step: int, state: Any, loaded: bool = True) -> None:
        """This writer holds ``state``, the state at the end of ``step``: its next events
        belong to step + 1."""
        self.step, self._step_logged = step + 1, False
        self.state, self._holds_state = state, loaded

    def _ending(self, step: int | None) -> int:
        """The step a checkpoint of the state this writer holds ends: ``step``, by default
        the step of the last event the state includes; never before that one."""
        if step is None:
            return self.step if self._step_logged else max(self.step - 1, 0)
        if self._step_logged and step < self.step:
            raise ValueError(
                f"checkpoint step {step} is before step {self.step} of events it includes: "
                f"a checkpoint ends a step (rollback(to={step}) goes back)"
            )
        return step

    def _folded(self, view: Any, state: Any, ckpt: Checkpoint | None, reqs: int) -> Hydrated:
        events = [agent_event(self.ctx.codec, e) for e in view.tail]
        # The step to continue from: after the checkpoint's and every later event's.
        step = 1 + max([ckpt.step if ckpt else 0] + [e.step for e in events if e.step is not None])
        if self.reducer is None:
            return Hydrated(
                state, step, view.position, ckpt, 0, events, view.revision, view.last_seq, reqs
            )
        state, _, seq, n = fold(self.reducer, state, events, step)
        position = seq if n else view.position
        return Hydrated(state, step, position, ckpt, n, [], view.revision, view.last_seq, reqs)
