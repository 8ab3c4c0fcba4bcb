"""Checkpoint storage plans (sans-IO, see plan.py): writing a state's chunks, committing a
manifest in one txn, loading a state back, listing manifests newest first, collecting
orphan chunks.

Write order (a crash anywhere leaves the previous checkpoint current):

1. chunks, when the envelope does not fit inline: batched puts of ``chunk/{sha256}/{i}``
   (each <= the value limit, each batch <= the request limit; smaller by default, see
   :class:`Ctx`); chunks already stored under that sha256 are not sent again (content
   addressing);
2. ONE txn: compare head's mod_revision with the one this writer last saw, and (chunked)
   that every chunk still exists; put ``ckpt/{n}``, put ``head`` (same manifest), append
   the checkpoint's events with ``expect`` = the stream's last seq. The manifest, the head,
   the position and those events commit in one raft entry, or none of them does.

A writer given a ``fence`` (a lock, docs/agent-state.md "Fencing") sends it with every
write of 1, 2 and gc: once the lock has moved on, the first of them fails FenceMismatch
and nothing is written (the server checks the fence in the same apply as the write).

A crash between 1 and 2 leaves chunks no manifest references; :func:`gc_plan` deletes
them in one txn guarded by the head's mod_revision, so it never deletes chunks a manifest
committed meanwhile refers to (and a writer whose chunks were collected under it sees its
txn's chunk compares fail, uploads again and retries).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import chunks
from ..chunks import sha256_hex
from ..errors import Conflict, FenceMismatch, InvalidRequest
from ..ops import compare, ops
from ..plan import AgentPlan, call
from .codec import Codec
from .errors import CheckpointConflict, CheckpointCorrupt
from .layout import Layout
from .records import Checkpoint, checkpoint_from, pack_manifest, unpack_manifest

__all__ = [
    "Committed",
    "Ctx",
    "check_events",
    "commit_plan",
    "gc_plan",
    "load_state_plan",
    "newest_plan",
    "sha256_hex",
]

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Ctx:
    """What every plan of one agent needs: where (layout, ns), how to encode (codec) and
    the sizes: the server's value and request limits (1 MiB, 4 MiB by default), the
    largest envelope kept inline in a manifest, the chunk size and the payload of one
    batch of chunk puts or gets. Chunks and batches stay well under the limits on
    purpose (client/chunks.py: entries of 2 MiB and more made a test cluster lose its
    leader)."""

    layout: Layout
    ns: str | None
    codec: Codec
    value_limit: int = MIB
    request_limit: int = 4 * MIB
    inline_limit: int = 256 * 1024
    chunk_size: int = 512 * 1024
    batch_bytes: int = MIB

    @property
    def chunks(self) -> chunks.ChunkSpace:
        """Where this agent's chunks live (``chunk/{sha256}/{i}`` under its root)."""
        return chunks.ChunkSpace(
            self.layout.chunk_prefix, self.ns, self.value_limit, self.chunk_size, self.batch_bytes
        )


@dataclass(frozen=True, slots=True)
class Committed:
    """What a checkpoint txn came to: ``revision`` when it committed; else whether the
    head had moved (``current`` = its manifest) or chunks had been collected."""

    ok: bool
    revision: int = 0
    last_seq: int | None = None
    head_moved: bool = False
    current: dict[str, Any] | None = None
    current_rev: int = 0

    def is_own(self, manifest: dict[str, Any]) -> bool:
        """The head moved to ``manifest`` itself: an earlier attempt of this very
        checkpoint committed (its answer was lost), so it counts as done."""
        same = ("ckpt", "step", "position", "parent", "sha256", "metadata", "kind")
        cur = self.current
        return cur is not None and all(cur.get(k) == manifest.get(k) for k in same)


def field_of(obj: Any, name: str, default: Any = None) -> Any:
    """``obj.name`` or ``obj[name]``: results of ops the client parses into a class, or
    leaves as a dict (an op it does not know inside a txn)."""
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def head_call(ctx: Ctx, revision: int | None = None) -> Any:
    """The read of the head as a range (a RangeResult carries the revision it was served
    at even when the head is missing; a get answers None then)."""
    return call("range", ctx.layout.head, limit=1, revision=revision, ns=ctx.ns)


def head_of(ctx: Ctx, rr: Any) -> tuple[dict[str, Any] | None, Any]:
    """(manifest, KeyValue) of the head from a head_call's RangeResult; (None, None)."""
    for kv in rr.kvs:
        if kv.key == ctx.layout.head:
            return unpack_manifest(kv.value, f"{ctx.layout.head}"), kv
    return None, None


# -- chunks (the shared content-addressed chunk code: client/chunks.py) -------------------


def chunk_groups(count: int, ctx: Ctx) -> list[range]:
    """The chunk indexes of each batch (as many chunks as fit in one request)."""
    return chunks.chunk_groups(count, ctx.chunks)


def upload_chunks_plan(ctx: Ctx, envelope: bytes, sha: str, fence: Any = None) -> AgentPlan[int]:
    """Store ``envelope``'s chunks under chunk/{sha}/ and return the chunk size they use
    (client/chunks.py upload_plan; each put fenced by ``fence`` when given)."""
    return (yield from chunks.upload_plan(ctx.chunks, envelope, sha, fence))


def fetch_chunks_plan(ctx: Ctx, m: dict[str, Any]) -> AgentPlan[bytes]:
    sha, count = m["sha256"], int(m["chunks"]["count"])

    def missing(i: int, key: str) -> CheckpointCorrupt:
        return CheckpointCorrupt(
            f"checkpoint #{m['ckpt']} of agent {ctx.layout.agent_id!r}: chunk {i} of "
            f"{count} ({key}) is missing"
        )

    return (yield from chunks.fetch_plan(ctx.chunks, sha, count, missing))


def load_state_plan(ctx: Ctx, m: dict[str, Any]) -> AgentPlan[Any]:
    """The decoded state of manifest ``m`` (inline, or its chunks fetched and checked)."""
    return ctx.codec.decode((yield from load_envelope_plan(ctx, m)))


def load_envelope_plan(ctx: Ctx, m: dict[str, Any]) -> AgentPlan[bytes]:
    """The state envelope of manifest ``m``, checked against its size and sha256."""
    if "inline" in m:
        env = m["inline"]
    else:
        env = yield from fetch_chunks_plan(ctx, m)
    if len(env) != m.get("size", len(env)) or sha256_hex(env) != m.get("sha256"):
        raise CheckpointCorrupt(
            f"checkpoint #{m['ckpt']} of agent {ctx.layout.agent_id!r}: the stored state "
            f"({len(env)} bytes) does not match its manifest's size/sha256"
        )
    return bytes(env)


# -- the commit txn ----------------------------------------------------------------------


def check_events(ctx: Ctx, events: list[dict[str, Any]], what: str = "events") -> None:
    """Refuse (InvalidRequest value_too_large / request_too_large) events the server would
    refuse, before anything is uploaded: the server's own answer names the txn's internals
    ("success[2]: events[0].data ...") and comes after the state's chunks were stored (left
    for gc). ``what``: how the caller named them ("events", or "event" for one log())."""
    total = 0
    for i, ev in enumerate(events):
        n = len(ev["data"])
        total += n
        if n > ctx.value_limit:
            name = f"{what}[{i}] (type {ev['type']!r})" if what == "events" else what
            raise InvalidRequest(
                f"{name} is {n} bytes once encoded, over the value "
                f"limit of {ctx.value_limit} bytes (max_value_bytes); store large data as "
                "state or under a key of its own and log a reference to it",
                code="value_too_large",
            )
    if total > ctx.request_limit:  # the manifest too goes in that request: a lower bound
        raise InvalidRequest(
            f"{what} hold {total} bytes together once encoded, over the request limit "
            f"({ctx.request_limit} bytes, max_request_bytes): they commit in one request",
            code="request_too_large",
        )


def commit_plan(
    ctx: Ctx,
    manifest: dict[str, Any],
    head_rev: int,
    events: list[dict[str, Any]],
    expect_seq: int,
    idempotency_key: str | None = None,
    fence: Any = None,
) -> AgentPlan[Committed]:
    """The checkpoint txn (module docstring, step 2), fenced by ``fence`` when given."""
    lay = ctx.layout
    raw = pack_manifest(manifest)
    if len(raw) > ctx.value_limit:
        raise ValueError(
            f"the manifest of checkpoint #{manifest['ckpt']} is {len(raw)} bytes, over the "
            f"value limit {ctx.value_limit}: its metadata is too large"
        )
    cmp = [compare.mod_revision(lay.head) == head_rev]
    if "chunks" in manifest:
        cmp += chunks.exists_compares(ctx.chunks, manifest["sha256"], manifest["chunks"]["count"])
    success = [ops.put(lay.ckpt(manifest["ckpt"]), raw), ops.put(lay.head, raw)]
    if events:
        success.append(ops.append(lay.stream, events, expect=expect_seq))
    try:
        r = yield call(
            "txn", cmp, success, [ops.get(lay.head)], ns=ctx.ns,
            idempotency_key=idempotency_key, fence=fence,
        )
    except FenceMismatch:
        raise  # this writer's lock moved on: not another writer's append
    except Conflict as exc:  # the append's expectation (another writer appended)
        raise CheckpointConflict(
            f"agent {lay.agent_id!r}: its stream moved past seq {expect_seq} "
            f"(now {exc.details.get('last_seq', '?')}); another writer is active. Hydrate "
            "and decide again",
            details=dict(exc.details),
        ) from exc
    if r.succeeded:
        last = field_of(r.results[2], "last_seq") if events else None
        return Committed(True, r.revision, last)
    kv = r.results[0] if r.results else None
    current = unpack_manifest(kv.value, lay.head) if kv is not None else None
    rev = kv.mod_revision if kv is not None else 0
    return Committed(False, r.revision, None, rev != head_rev, current, rev)


def conflict(ctx: Ctx, current: dict[str, Any] | None, expected_rev: int) -> CheckpointConflict:
    ck = checkpoint_from(current, 0) if current else None
    now = f"checkpoint #{ck.n} (step {ck.step})" if ck else "no checkpoint"
    return CheckpointConflict(
        f"agent {ctx.layout.agent_id!r}: the head moved (this writer last saw mod_revision "
        f"{expected_rev}; it now holds {now}); another writer checkpointed. Hydrate (or "
        "latest()) and decide again",
        current=ck,
        details={"expected_mod_revision": expected_rev},
    )


# -- reading manifests -------------------------------------------------------------------


def newest_plan(
    ctx: Ctx,
    top: int,
    match: Callable[[dict[str, Any]], bool] | None = None,
    limit: int | None = 1,
    *,
    revision: int | None = None,
    below: int | None = None,
) -> AgentPlan[list[tuple[dict[str, Any], Checkpoint]]]:
    """Manifests newest first (from checkpoint ``top``, or below ``below``), those
    ``match`` accepts, at most ``limit`` (None: all), read in windows of keys."""
    out: list[tuple[dict[str, Any], Checkpoint]] = []
    hi = top if below is None else min(top, below - 1)
    while hi >= 1 and (limit is None or len(out) < limit):
        window = 32 if limit is None else min(32, max(8, 2 * (limit - len(out))))
        lo = max(1, hi - window + 1)
        rr = yield call(
            "range", start=ctx.layout.ckpt(lo), end=ctx.layout.ckpt(hi + 1),
            revision=revision, ns=ctx.ns,
        )
        for kv in reversed(rr.kvs):
            m = unpack_manifest(kv.value, kv.key)
            if match is None or match(m):
                out.append((m, checkpoint_from(m, kv.mod_revision)))
                if limit is not None and len(out) >= limit:
                    break
        hi = lo - 1
    return out


def scan_plan(
    ctx: Ctx, prefix: str, revision: int | None, keys_only: bool = False
) -> AgentPlan[list[Any]]:
    """Every KeyValue under ``prefix`` at ``revision``, page by page."""
    return (yield from chunks.scan_plan(ctx.ns, prefix, revision, keys_only))


def gc_plan(ctx: Ctx, attempts: int = 5, fence: Any = None) -> AgentPlan[int]:
    """Delete chunk sets neither the head nor any checkpoint manifest references; returns
    the chunk keys deleted (the txn fenced by ``fence`` when given)."""
    lay = ctx.layout
    for _ in range(attempts):
        rr = yield head_call(ctx)
        head, head_kv = head_of(ctx, rr)
        head_rev = head_kv.mod_revision if head_kv is not None else 0
        manifests = yield from scan_plan(ctx, lay.ckpt_prefix, rr.revision)
        used = {unpack_manifest(kv.value, kv.key).get("sha256") for kv in manifests}
        # The head's own: its ckpt/ manifest may be gone (a retention policy, rollback).
        used.add(head.get("sha256") if head is not None else None)
        chunk_kvs = yield from scan_plan(ctx, lay.chunk_prefix, rr.revision, keys_only=True)
        orphans = sorted({ctx.chunks.sha_of(kv.key) for kv in chunk_kvs} - used)
        if not orphans:
            return 0
        deletes = [ops.delete(ctx.chunks.dir(sha), prefix=True) for sha in orphans]
        r = yield call(
            "txn", [compare.mod_revision(lay.head) == head_rev], deletes, ns=ctx.ns, fence=fence
        )
        if r.succeeded:
            return sum(field_of(d, "deleted", 0) for d in r.results)
    return 0
