"""Checkpoints moved to the archive (``statekeeper archive run --within ckpt``), as the
agent layer's reads meet them (sans-IO plans, see plan.py).

Archiving a checkpoint deletes its ``ckpt/{n}`` key and leaves a tombstone naming the
segment file that holds it (docs/archive.md). A ``get`` of the key answers 410
``archived`` (client.Archived, a NotFound); a ``range`` simply does not list it. So:

- a read of checkpoint ``n`` (``get_checkpoint(n)``, ``rollback(ckpt=n)``) raises
  :class:`CheckpointArchived` naming the segment, never "no checkpoint #n"; with
  ``archived="fetch"`` it reads the manifest from the segment (the client's
  ``get(..., archived="fetch")``, which reads only under its ``archive_roots``);
- a search by step (``rollback(to=N)``, ``state_at(step=N, archived="fetch")``) that finds
  no LIVE checkpoint looks at the numbers the range did not list (checkpoint numbers are
  dense, layout.py), newest first, with batched gets: a deleted one (retention) answers
  "missing", an archived one Archived. The first archived one raises CheckpointArchived
  (``archived="error"``) or is read from the archive and matched (``"fetch"``).
  Only when no live checkpoint matches: a live match is used even when a newer archived
  one would match too (the events after the live one give the same state).

Each manifest read with "fetch" reads its segment file (up to ~64 MiB) once; the state's
chunks, when the state was chunked, are read from the cluster (``--within ckpt`` leaves
them live).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import Archived, NotFound
from ..plan import AgentPlan, batch, call
from ..wire import check_archived_mode
from .checkpoints import Ctx, scan_plan
from .errors import CheckpointArchived, CheckpointNotFound
from .records import Checkpoint, checkpoint_from, unpack_manifest

__all__ = ["ARCHIVED_READS", "archived_newest_plan", "check_archived", "manifest_plan"]

ARCHIVED_READS = ("error", "fetch")
PROBE_BATCH = 64  # gets per batch when looking for archived checkpoints


def check_archived(archived: Any) -> str:
    """``archived`` if it is "error" or "fetch" (InvalidRequest otherwise)."""
    return check_archived_mode(archived, ARCHIVED_READS)


def manifest_plan(ctx: Ctx, n: int, archived: str) -> AgentPlan[tuple[dict[str, Any], Any]]:
    """(manifest, KeyValue) of checkpoint ``n``: live, or (``archived="fetch"``) read from
    the archive. CheckpointNotFound if there is none; CheckpointArchived if it was
    archived and not fetched (or the segment the cluster names lacks it)."""
    key = ctx.layout.ckpt(n)
    try:
        kv = yield call("get", key, ns=ctx.ns, archived=None if archived == "error" else archived)
    except Archived as err:
        raise CheckpointArchived(agent=ctx.layout.agent_id, ckpt=n, cause=err) from err
    except NotFound:
        raise CheckpointNotFound(
            f"agent {ctx.layout.agent_id!r} has no checkpoint #{n}", details={"ckpt": n}
        ) from None
    return unpack_manifest(kv.value, kv.key), kv


def ckpt_number(ctx: Ctx, key: str) -> int | None:
    rest = key[len(ctx.layout.ckpt_prefix) :]
    return int(rest) if key.startswith(ctx.layout.ckpt_prefix) and rest.isdigit() else None


def archived_newest_plan(
    ctx: Ctx,
    top: int,
    match: Callable[[dict[str, Any]], bool],
    archived: str,
    *,
    revision: int | None = None,
    what: str = "",
) -> AgentPlan[tuple[dict[str, Any], Checkpoint] | None]:
    """The newest archived checkpoint (numbered ``top`` or below) ``match`` accepts, for a
    search that found no live one (module docstring); None when none is archived (or
    none of them matches). ``what`` ends CheckpointArchived's "checkpoint #n" (", which
    may have step <= 3")."""
    kvs = yield from scan_plan(ctx, ctx.layout.ckpt_prefix, revision, keys_only=True)
    live = {ckpt_number(ctx, kv.key) for kv in kvs}
    holes = [n for n in range(top, 0, -1) if n not in live]
    for i in range(0, len(holes), PROBE_BATCH):
        group = holes[i : i + PROBE_BATCH]
        results = yield batch(*(call("get", ctx.layout.ckpt(n)) for n in group), ns=ctx.ns)
        for n, r in zip(group, results, strict=True):
            if isinstance(r, Archived):
                if archived != "fetch":
                    raise CheckpointArchived(agent=ctx.layout.agent_id, ckpt=n, cause=r, what=what)
                m, kv = yield from manifest_plan(ctx, n, archived)
                if match(m):
                    return m, checkpoint_from(m, kv.mod_revision)
            elif isinstance(r, BaseException) and not isinstance(r, NotFound):
                raise r
    return None
