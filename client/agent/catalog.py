"""The agent's catalog: the operations of :class:`AgentCore` that read what is stored
without touching the writer's view of the agent (its head, position and step): listing
checkpoints, one checkpoint by number (live or archived), the history, and gc. A mixin of
AgentCore (agent.py), which keeps the operations that read or move the writer's view; as
every AgentCore operation each is a sans-IO plan (plan.py) that ``driven`` makes a method
of Agent and a coroutine of AsyncAgent.
"""

from __future__ import annotations

from typing import Any

from ..plan import AgentPlan, planned
from .archived import check_archived, manifest_plan
from .checkpoints import Ctx, gc_plan, head_call, head_of, load_state_plan, newest_plan
from .layout import Layout
from .records import Checkpoint, TimelineRow, checkpoint_from, with_state
from .timeline import history_plan
from .writer import WriterView

__all__ = ["Catalog"]


class Catalog(WriterView):
    """What AgentCore reads without its writer's view (see the module docstring)."""

    ctx: Ctx
    layout: Layout
    ns: str | None

    @planned
    def checkpoints(
        self, *, limit: int | None = 20, before: int | None = None, **metadata: Any
    ) -> AgentPlan[list[Checkpoint]]:
        """Checkpoints newest first (states not loaded), those whose metadata has every
        given ``key=value``; at most ``limit`` (None: all), numbered below ``before``.
        Archived checkpoints are not listed."""
        rr = yield head_call(self.ctx)
        head, _ = head_of(self.ctx, rr)
        if head is None:
            return []

        def match(m: dict[str, Any]) -> bool:
            md = m.get("metadata") or {}
            return all(k in md and md[k] == v for k, v in metadata.items())

        found = yield from newest_plan(
            self.ctx,
            head["ckpt"],
            match if metadata else None,
            limit,
            revision=rr.revision,
            below=before,
        )
        return [ck for _, ck in found]

    @planned
    def get_checkpoint(self, n: int, *, archived: str = "error") -> AgentPlan[Checkpoint]:
        """Checkpoint ``n`` with its state.

        Raises:
            CheckpointNotFound: there is no checkpoint ``n`` (never written, or deleted).
            CheckpointArchived: it was archived (names the segment); ``archived="fetch"``
                reads it from the archive instead (client/agent/archived.py).
        """
        m, kv = yield from manifest_plan(self.ctx, n, check_archived(archived))
        state = yield from load_state_plan(self.ctx, m)
        return with_state(checkpoint_from(m, kv.mod_revision), state)

    @planned
    def history(self, limit: int | None = None) -> AgentPlan[list[TimelineRow]]:
        """Events, checkpoints and rollbacks oldest first, with revisions and times (the
        last ``limit`` rows)."""
        return (yield from history_plan(self.ctx, limit))

    @planned
    def gc(self, *, fence: Any = None) -> AgentPlan[int]:
        """Delete chunks no checkpoint references (left by a crash between chunks and
        manifest); returns the number of chunk keys deleted. ``fence``: see AgentCore.

        Not after archiving chunked checkpoints: an archived manifest is not listed, so
        the chunks only it references count as orphans (docs/agent-state.md, "Archived
        checkpoints")."""
        return (yield from gc_plan(self.ctx, fence=self._fence(fence)))
