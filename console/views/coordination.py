"""The Coordination page's data: locks (holder and fence), leases (TTL left and attached
keys), effects (state, attempt, maybe_happened) and CRDTs (value and replicas) of one
namespace, each a page (``limit`` at most 500, ``cursor`` the previous ``next_cursor``).

Every read is a public API call with the user's AsyncClient:

- locks: ``lock_list`` (the holder is the first waiter; its owner is free text).
- leases: ``lease_list`` is cluster-wide and needs admin on every namespace; for an admin
  token the page pages it by id, keeps the namespace's leases and reads each one's
  ``lease_info`` (remaining TTL, first 1000 keys). Any other token gets 403 there: the page
  then shows the leases its namespace's locks are held on (``complete`` False, ``note``
  says why), each read by ``lease_info``, which a reader of the namespace may call.
- effects: the ledger's records (``client.effects.list``, ``after`` the cursor); a claimed
  record's lock ``effect:{key}`` is looked up to tell a run in progress from one that
  stopped.
- CRDTs: one range of the prefix, values decoded on the client (client/crdt/stored.py);
  plain values in the range are skipped, so a page may hold fewer than ``limit`` CRDTs
  and still have a ``next_cursor``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from statekeeper.client.agent.codec import jsonable
from statekeeper.client.crdt import model
from statekeeper.client.crdt.stored import counts_by_replica, replica_ids, unwrap
from statekeeper.client.errors import LeaseNotFound, PermissionDenied
from statekeeper.client.locks.results import LockInfo, LockWaiter

from .paging import page_limit, prefix_end

__all__ = [
    "CrdtRow",
    "CrdtsPage",
    "EffectRow",
    "EffectsPage",
    "LeaseRow",
    "LeasesPage",
    "LockRow",
    "LocksPage",
    "LockWaiter",
    "crdts",
    "effects",
    "leases",
    "locks",
]

_LEASE_SCAN_PAGES = 20  # lease_list pages read at most per console page (500 ids each)


@dataclass(frozen=True, slots=True)
class LockRow:
    """A lock: the holder's fence, lease and owner (None when it gave none), how many wait
    (holder included) and the queue holder first (at most 100)."""

    name: str
    holder_fence: int
    holder_lease: int | None
    holder_owner: str | None
    count: int
    waiters: tuple[LockWaiter, ...]


@dataclass(frozen=True, slots=True)
class LocksPage:
    ns: str
    prefix: str
    locks: tuple[LockRow, ...]
    next_cursor: str | None
    revision: int


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """A lease: its TTL, expiry (cluster time, ms) and the time left (``remaining_ms``,
    lease_info's: expires_ms minus the replicated clock, which advances with raft entries,
    so on an idle cluster it stands still until the next write; the page counts down from
    it), its first 1000 keys and streams (``more_keys`` / ``more_streams``: more exist)."""

    lease_id: int
    ttl_ms: int
    expires_ms: int
    remaining_ms: int | None
    keys: tuple[str, ...]
    more_keys: bool
    streams: tuple[str, ...]
    more_streams: bool


@dataclass(frozen=True, slots=True)
class LeasesPage:
    """``complete`` False: not every lease of the namespace could be listed (``note``
    says why and what is shown instead)."""

    ns: str
    leases: tuple[LeaseRow, ...]
    next_cursor: str | None
    revision: int
    complete: bool
    note: str | None


@dataclass(frozen=True, slots=True)
class EffectRow:
    """An effect's record. ``maybe_happened``: the effect was claimed and no result was
    recorded (state "claimed"): its call may have taken effect, and the next run gets
    ``ctx.maybe_happened`` True. ``in_progress``: a run holds its claim now (else the
    claiming run stopped: died, cut off, or fn raised ``error``). ``result``: JSON-ready."""

    key: str
    state: str
    attempt: int
    fence: int
    maybe_happened: bool
    in_progress: bool
    idempotency_key: str
    runner: str | None
    started_ms: int
    done_ms: int | None
    result: Any
    error: str | None
    result_lost: str | None
    mod_revision: int


@dataclass(frozen=True, slots=True)
class EffectsPage:
    ns: str
    prefix: str
    effects: tuple[EffectRow, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class CrdtRow:
    """A CRDT: its type, value (JSON-ready), the replicas that changed it, and for
    counters each replica's contribution (``per_replica``; None for other types)."""

    key: str
    type: str
    value: Any
    replicas: tuple[str, ...]
    per_replica: dict[str, int] | None
    mod_revision: int
    version: int


@dataclass(frozen=True, slots=True)
class CrdtsPage:
    """``scanned``: keys read for this page (CRDTs and the plain values skipped)."""

    ns: str
    prefix: str
    crdts: tuple[CrdtRow, ...]
    next_cursor: str | None
    revision: int
    scanned: int


def _lock_row(info: LockInfo) -> LockRow:
    holder = info.waiters[0] if info.waiters else None
    owner = holder.owner if holder is not None and holder.fence == info.holder_fence else None
    return LockRow(
        info.name, info.holder_fence, info.holder_lease, owner, info.count, tuple(info.waiters)
    )


async def locks(
    client: Any,
    *,
    ns: str | None = None,
    prefix: str = "",
    limit: int | None = None,
    cursor: str | None = None,
) -> LocksPage:
    """A page of the locks of ``ns`` (default: the client's) whose name starts with
    ``prefix``, in name order."""
    ns = client.ns if ns is None else ns
    page = await client.lock_list(prefix or None, after=cursor, limit=page_limit(limit), ns=ns)
    rows = tuple(_lock_row(i) for i in page.locks)
    nxt = rows[-1].name if page.more and rows else None
    return LocksPage(ns, prefix, rows, nxt, page.revision)


async def _lease_rows(client: Any, ids: list[int]) -> list[LeaseRow]:
    """lease_info of each id, concurrently; leases gone meanwhile are left out."""

    async def one(lease_id: int) -> LeaseRow | None:
        try:
            i = await client.lease_info(lease_id)
        except LeaseNotFound:
            return None
        return LeaseRow(
            i.lease,
            i.ttl_ms,
            i.expires_ms,
            i.remaining_ms,
            tuple(i.keys),
            i.more_keys,
            tuple(i.streams),
            i.more_streams,
        )

    found = await asyncio.gather(*(one(i) for i in ids))
    return [r for r in found if r is not None]


async def _listed_leases(
    client: Any, ns: str, limit: int, after: int | None
) -> tuple[list[int], int | None, int]:
    """(ids of ``ns``'s leases after ``after``, at most ``limit``; the cursor; revision)
    from lease_list pages (at most _LEASE_SCAN_PAGES of them: the cursor then resumes
    the scan where it stopped)."""
    ids: list[int] = []
    revision = 0
    for _ in range(_LEASE_SCAN_PAGES):
        page = await client.lease_list(after=after, limit=500)
        revision = revision or page.revision
        for info in page.leases:
            after = info.lease
            if info.ns == ns:
                ids.append(info.lease)
                if len(ids) == limit:
                    return ids, after, revision
        if not page.more:
            return ids, None, revision
    return ids, after, revision


async def leases(
    client: Any, *, ns: str | None = None, limit: int | None = None, cursor: str | None = None
) -> LeasesPage:
    """A page of the leases of ``ns`` (default: the client's), in id order; see the
    module docstring for tokens that may not list every lease."""
    ns = client.ns if ns is None else ns
    limit = page_limit(limit)
    try:
        ids, nxt, revision = await _listed_leases(client, ns, limit, int(cursor or 0) or None)
    except PermissionDenied:
        page = await client.lock_list(after=cursor, limit=limit, ns=ns)
        ids = sorted({w.lease for i in page.locks for w in i.waiters if w.lease is not None})
        rows = await _lease_rows(client, ids)
        more = page.locks[-1].name if page.more and page.locks else None
        note = (
            "listing every lease needs an admin token (lease_list is cluster-wide): "
            "shown are the leases this namespace's locks are held on"
        )
        return LeasesPage(ns, tuple(rows), more, page.revision, False, note)
    rows = await _lease_rows(client, ids)
    return LeasesPage(ns, tuple(rows), None if nxt is None else str(nxt), revision, True, None)


async def _claims_held(client: Any, ns: str, keys: list[str]) -> set[str]:
    """The effect keys among ``keys`` whose claim lock ``effect:{key}`` is held now."""

    async def held(key: str) -> bool:
        page = await client.lock_list(f"effect:{key}", limit=1, ns=ns)
        return any(i.name == f"effect:{key}" for i in page.locks)

    found = await asyncio.gather(*(held(k) for k in keys))
    return {k for k, h in zip(keys, found, strict=True) if h}


async def effects(
    client: Any,
    *,
    ns: str | None = None,
    prefix: str = "",
    limit: int | None = None,
    cursor: str | None = None,
) -> EffectsPage:
    """A page of the effect ledger's records of ``ns`` whose effect key starts with
    ``prefix``, in key order; ``cursor``: the last effect key of the previous page."""
    ns = client.ns if ns is None else ns
    limit = page_limit(limit)
    records = await client.effects.list(prefix, ns=ns, limit=limit + 1, after=cursor)
    more = len(records) > limit
    records = records[:limit]
    claimed = [r.key for r in records if r.state != "done"]
    running = await _claims_held(client, ns, claimed) if claimed else set()
    rows = tuple(
        EffectRow(
            r.key,
            r.state,
            r.attempt,
            r.fence,
            r.state != "done",
            r.key in running,
            r.idempotency_key,
            r.runner,
            r.started_ms,
            r.done_ms,
            jsonable(r.result),
            r.error,
            r.result_lost,
            r.mod_revision,
        )
        for r in records
    )
    return EffectsPage(ns, prefix, rows, records[-1].key if more and records else None)


def _crdt_row(kv: Any) -> CrdtRow | None:
    found = unwrap(kv.value)
    if found is None:
        return None
    t, state = found
    return CrdtRow(
        kv.key,
        t,
        jsonable(model.value(t, state)),
        replica_ids(t, state),
        counts_by_replica(t, state),
        kv.mod_revision,
        kv.version,
    )


async def crdts(
    client: Any,
    *,
    ns: str | None = None,
    prefix: str = "",
    limit: int | None = None,
    cursor: str | None = None,
) -> CrdtsPage:
    """The CRDTs among a page of ``limit`` keys of ``ns`` starting with ``prefix``
    (``cursor``: the last key read by the previous page)."""
    ns = client.ns if ns is None else ns
    start = prefix if cursor is None else max(prefix, cursor + "\x01")
    bounds = {"start": start or None, "end": prefix_end(prefix)}  # "" and None: open
    page = await client.range(**bounds, limit=page_limit(limit), ns=ns)
    rows = tuple(r for r in (_crdt_row(kv) for kv in page.kvs) if r is not None)
    nxt = page.kvs[-1].key if page.more and page.kvs else None
    return CrdtsPage(ns, prefix, rows, nxt, page.revision, len(page.kvs))
