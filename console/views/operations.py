"""The Operations page's data: the cluster's members, the backup download, the retention
policies with what they hold and would free, and the archive segments.

Read with the user's AsyncClient through the public API:

- members: ``status()`` (GET /v1/status, open: node ids, raft addresses, client URLs,
  which one leads, whether a membership change is pending).
- backup: the page links GET /v1/admin/backup (the console's own route streams it with the
  user's token). Only an admin of every namespace may take one (the file holds every
  namespace and the token hashes): ``allowed`` comes from ``auth_whoami``'s grants (or is
  True with auth disabled). Its size is unknown until it is streamed: ``store_bytes`` is
  the serving node's storage usage, an upper bound of the backup (a backup is the store as
  compacted, 1.9-3.5 MiB for 100,000 keys: node/api/backup.py).
- retention: ``retention_list`` (paged) joined with ``retention_status`` (what each policy
  holds and would free now; it scans what every policy covers, an admin-sized read: pass
  ``with_status=False`` to skip it).
- archive: ``archive_list`` (paged by its continuation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statekeeper.client.wire import BACKUP_PATH

from .paging import page_limit

__all__ = [
    "BACKUP_PATH",
    "BackupLink",
    "MemberRow",
    "MembersPage",
    "RetentionPage",
    "RetentionRow",
    "SegmentRow",
    "SegmentsPage",
    "archive_segments",
    "backup",
    "members",
    "retention",
]

BACKUP_CONTENT_TYPE = "application/vnd.statekeeper.backup"


@dataclass(frozen=True, slots=True)
class MemberRow:
    id: str
    url: str
    raft_address: str
    is_leader: bool


@dataclass(frozen=True, slots=True)
class MembersPage:
    """The members in id order; ``leader_id`` as the serving node knows it (None: no
    leader now); ``change_pending``: a membership change is in the log, not committed."""

    members: tuple[MemberRow, ...]
    leader_id: str | None
    change_pending: bool
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class BackupLink:
    """What the backup link needs: the API path, whether the user's token may take a
    backup, the serving node's store size (an upper bound of the file) and revision."""

    path: str
    content_type: str
    allowed: bool
    store_bytes: int | None
    revision: int | None


@dataclass(frozen=True, slots=True)
class RetentionRow:
    """A policy and, with its status read, what it holds (``holds``: groups, keys or
    events, bytes) and what a gc would free now (``frees``); None without the status."""

    ns: str
    target: str
    prefix: str
    keep_last: int | None
    keep_every: int | None
    max_age_s: int | None
    within: str | None
    create_revision: int
    mod_revision: int
    holds: dict[str, int] | None
    frees: dict[str, int] | None


@dataclass(frozen=True, slots=True)
class RetentionPage:
    """``last_gc``: the namespace's last applied gc ({revision, time, deleted, removed}) or
    None; ``compact_revision`` / ``history_revisions`` / ``idempotency_seconds``: the
    store-wide schemes (None without the status)."""

    ns: str
    policies: tuple[RetentionRow, ...]
    next_cursor: str | None
    revision: int
    last_gc: dict[str, Any] | None
    compact_revision: int | None
    history_revisions: int | None
    idempotency_seconds: int | None


@dataclass(frozen=True, slots=True)
class SegmentRow:
    ns: str
    id: str
    url: str
    sha256: str
    bytes: int
    sealed_revision: int
    keys: int
    events: int
    restored_keys: int
    restored_events: int


@dataclass(frozen=True, slots=True)
class SegmentsPage:
    ns: str
    segments: tuple[SegmentRow, ...]
    next_cursor: str | None
    revision: int


async def members(
    client: Any, *, limit: int | None = None, cursor: str | None = None
) -> MembersPage:
    """A page of the cluster's members (id order, after the id ``cursor``)."""
    st = await client.status()
    found = sorted(st.get("members") or (), key=lambda m: m["id"])
    leader = st.get("leader")
    after = [m for m in found if cursor is None or m["id"] > cursor]
    limit = page_limit(limit)
    rows = tuple(
        MemberRow(m["id"], m.get("url", ""), m.get("raft_address", ""), m["id"] == leader)
        for m in after[:limit]
    )
    nxt = rows[-1].id if len(after) > limit else None
    return MembersPage(rows, leader, bool(st.get("member_change_pending")), nxt)


def _admin_everywhere(grants: Any) -> bool:
    return any(
        g.get("ns") == "*" and g.get("role") == "admin" and not g.get("prefix") for g in grants
    )


async def backup(client: Any) -> BackupLink:
    """The backup link (see the module docstring)."""
    st = await client.status()
    me = await client.auth_whoami()
    allowed = me.id is None or _admin_everywhere(me.grants)
    usage = (st.get("storage") or {}).get("usage_bytes")
    return BackupLink(BACKUP_PATH, BACKUP_CONTENT_TYPE, allowed, usage, st.get("revision"))


def _policy_key(p: dict[str, Any]) -> tuple[Any, Any, Any]:
    return (p.get("ns"), p.get("target"), p.get("prefix"))


def _retention_row(p: dict[str, Any], status: dict[str, Any] | None) -> RetentionRow:
    return RetentionRow(
        p.get("ns", ""),
        p.get("target", ""),
        p.get("prefix", ""),
        p.get("keep_last"),
        p.get("keep_every"),
        p.get("max_age_s"),
        p.get("within"),
        p.get("create_revision", 0),
        p.get("mod_revision", 0),
        None if status is None else status.get("holds"),
        None if status is None else status.get("frees"),
    )


async def retention(
    client: Any,
    *,
    ns: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
    with_status: bool = True,
) -> RetentionPage:
    """A page of ``ns``'s retention policies (default: the client's) and, unless
    ``with_status`` is False, what each holds and frees."""
    ns = client.ns if ns is None else ns
    page = await client.retention_list(ns=ns, limit=page_limit(limit), continuation=cursor)
    status: dict[str, Any] = {}
    if with_status:
        status = await client.retention_status(ns=ns)
    by_key = {_policy_key(s): s for s in status.get("policies") or ()}
    rows = tuple(
        _retention_row(p, by_key.get(_policy_key(p)) if with_status else None)
        for p in page.get("policies") or ()
    )
    history = status.get("history") or {}
    return RetentionPage(
        ns,
        rows,
        page.get("continuation") if page.get("more") else None,
        page.get("revision", 0),
        (status.get("last_gc") or {}).get(ns),
        history.get("compact_revision"),
        history.get("history_revisions"),
        (status.get("idempotency") or {}).get("idempotency_seconds"),
    )


async def archive_segments(
    client: Any, *, ns: str | None = None, limit: int | None = None, cursor: str | None = None
) -> SegmentsPage:
    """A page of ``ns``'s archive segment records (default: the client's namespace)."""
    ns = client.ns if ns is None else ns
    page = await client.archive_list(ns=ns, limit=page_limit(limit), continuation=cursor)
    rows = tuple(
        SegmentRow(
            s.get("ns", ns),
            s.get("id", ""),
            s.get("url", ""),
            s.get("sha256", ""),
            s.get("bytes", 0),
            s.get("sealed_revision", 0),
            s.get("keys", 0),
            s.get("events", 0),
            s.get("restored_keys", 0),
            s.get("restored_events", 0),
        )
        for s in page.get("segments") or ()
    )
    nxt = page.get("continuation") if page.get("more") else None
    return SegmentsPage(ns, rows, nxt, page.get("revision", 0))
