"""Writing a checkpoint, the step AgentCore's checkpoint() and maybe_checkpoint() share:
make sure this writer knows what it builds on (the head and the stream's last seq), encode
the state, upload its chunks when it does not fit inline, then commit the manifest, the
head and the checkpoint's events in one txn (checkpoints.commit_plan), retrying when gc
collected the chunks under it. A mixin of AgentCore (agent.py), whose view of the agent
(head, position, step, last seq) it reads and, through ``_committed``, moves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..plan import AgentPlan
from .checkpoints import (
    Committed,
    check_events,
    commit_plan,
    conflict,
    sha256_hex,
    upload_chunks_plan,
)
from .codec import unpack_event
from .records import Checkpoint, make_manifest
from .writer import WriterView

__all__ = ["CheckpointWriter"]


class CheckpointWriter(WriterView):
    """The checkpoint step of AgentCore (see the module docstring)."""

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
        check_events(self.ctx, wire)  # before any chunk is uploaded
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
