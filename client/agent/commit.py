"""Writing a checkpoint, the step AgentCore's checkpoint() and maybe_checkpoint() share:
make sure this writer knows what it builds on (the head and the stream's last seq), encode
the state, upload its chunks when it does not fit inline, then commit the manifest, the
head and the checkpoint's events in one txn (checkpoints.commit_plan), retrying when gc
collected the chunks under it. A mixin of AgentCore (agent.py), whose view of the agent
(head, position, step, last seq) it reads and, through ``_committed``, moves.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..plan import AgentPlan
from .checkpoints import Committed, Ctx, commit_plan, conflict, sha256_hex, upload_chunks_plan
from .codec import unpack_event
from .errors import CheckpointConflict
from .layout import Layout
from .records import Checkpoint, checkpoint_from, make_manifest
from .timeline import view_plan

__all__ = ["CheckpointWriter", "now_ms"]


def now_ms() -> int:
    return int(time.time() * 1000)


class CheckpointWriter:
    """The checkpoint step of AgentCore (see the module docstring)."""

    ctx: Ctx
    layout: Layout
    ns: str | None
    head: Checkpoint | None
    _head_rev: int
    _head_seen: bool
    _last_seq: int | None
    _origin: int | None
    _key_time: tuple[str | None, int]

    @property
    def agent_id(self) -> str:
        return self.layout.agent_id

    @property
    def stream(self) -> str:
        return self.layout.stream

    def _fence(self, fence: Any) -> Any:
        raise NotImplementedError  # AgentCore's

    def _check_position(self, view: Any) -> None:
        raise NotImplementedError  # AgentCore's

    def _saw_head(self, manifest: dict[str, Any] | None, kv: Any) -> Checkpoint | None:
        raise NotImplementedError  # AgentCore's

    def _committed(self, manifest: dict[str, Any], done: Committed, state: Any) -> Checkpoint:
        raise NotImplementedError  # AgentCore's

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

    def _checkpoint_plan(
        self,
        state: Any,
        step: int,
        metadata: Mapping[str, Any] | None,
        events: Iterable[Any],
        idempotency_key: str | None,
        fence: Any = None,
    ) -> AgentPlan[Checkpoint]:
        fence = self._fence(fence)
        wire = [self.ctx.codec.wire_event(*unpack_event(e), step) for e in events]
        yield from self._ensure_view()
        env = self.ctx.codec.encode(state)
        sha = sha256_hex(env)
        inline = len(env) <= self.ctx.inline_limit
        size = self.ctx.chunk_size
        for attempt in range(3):
            if not inline:
                size = yield from upload_chunks_plan(self.ctx, env, sha, fence)
            assert self._last_seq is not None
            manifest = make_manifest(
                agent=self.agent_id,
                n=(self.head.n if self.head else 0) + 1,
                step=step,
                position=self._last_seq + len(wire),
                time_ms=self._time_for(idempotency_key),
                parent=self.head.n if self.head else None,
                metadata=dict(metadata or {}),
                header=self.ctx.codec.header(env),
                envelope=env,
                inline=inline,
                chunk_size=size,
                sha256=sha,
            )
            key = idempotency_key and (
                f"{idempotency_key}.{attempt}" if attempt else idempotency_key
            )
            done: Committed = yield from commit_plan(
                self.ctx, manifest, self._head_rev, wire, self._last_seq, key, fence
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
            return now_ms()
        if self._key_time[0] != idempotency_key:
            self._key_time = (idempotency_key, now_ms())
        return self._key_time[1]
