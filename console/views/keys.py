"""The Keys page's data (issue 31, "Keys"): the namespaces a token sees, a prefix browser,
a key's value decoded, its revisions with a diff between any two, and watch as a live tail.
Everything goes through the user's own AsyncClient (its token's grants decide).

- Namespaces: the API has no namespace listing (node/ops has none; retention and lease
  listings are admin-wide or per-namespace), so :func:`visible_namespaces` names the
  namespaces of the token's grants (``auth_whoami``) and the client's own; a pattern
  grant (``team-*``, ``*``) is listed as a pattern: the page lets the user type a name.
- Browser: one ``range(keys_only=True)`` per page; the cursor is the last key shown (the
  next page starts there and drops it), so a page needs no server state and survives
  compaction (the server's continuation token pins a revision).
- Revisions: the API has no "list a key's versions" read. :func:`key_revisions` walks
  back: ``get(key, revision=mod_revision - 1)`` gives the version before, one sequential
  request per revision shown (``limit`` of them, default 20: about 20 round trips, 1-2 ms
  each on loopback), and stops at the key's creation (``version`` says how many versions
  its current life has) or at the compaction point (``compacted``). A watch from the
  creation revision would replay every version in one request, but it sends them oldest
  first, all of them; the page wants the newest few.
- Tail: :class:`KeyTail` runs ``client.watch`` in a task into a ring buffer of
  :data:`TAIL_BUFFER` decoded events per tail (older ones are dropped and counted) that a
  page polls with a cursor; :func:`tail_events` is the same stream as an async iterator.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from statekeeper.client.agent.listing import key_prefix_end as prefix_end
from statekeeper.client.errors import Compacted, NotFound

from .paging import page_limit
from .values import DecodedValue, ValueDiff, decode_value, diff_values

__all__ = [
    "TAIL_BUFFER",
    "KeyPage",
    "KeyRevision",
    "KeyRow",
    "KeyTail",
    "KeyValueView",
    "NamespaceList",
    "RevisionPage",
    "TailEvent",
    "TailPage",
    "browse_keys",
    "key_diff",
    "key_revisions",
    "key_value",
    "tail_events",
    "visible_namespaces",
]

TAIL_BUFFER = 500
"""Decoded events a tail keeps (a ring: a page that polls less often than the keys change
loses the oldest, counted in ``TailPage.dropped``). 500 values of up to 1 MiB each would be
500 MiB, so a tail keeps each value's shown text cut to TAIL_TEXT characters."""
TAIL_TEXT = 4096
REVISIONS_LIMIT = 100


# -- namespaces ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NamespaceList:
    """What the token may see: ``namespaces`` named by its grants (and the client's own),
    ``patterns`` its wildcard grants (``team-*``, ``*``); ``roles`` the best role per
    namespace or pattern; ``auth`` False when the cluster runs without auth (every
    namespace is open: the page asks for a name)."""

    namespaces: tuple[str, ...]
    patterns: tuple[str, ...]
    roles: dict[str, str]
    default: str
    auth: bool


_RANK = {"reader": 0, "writer": 1, "admin": 2}


async def visible_namespaces(client: Any) -> NamespaceList:
    """The namespaces of the token's grants (module docstring)."""
    me = await client.auth_whoami()
    default = client.ns
    roles: dict[str, str] = {}
    for g in me.grants:
        ns, role = g.get("ns", ""), g.get("role", "reader")
        if _RANK.get(role, 0) >= _RANK.get(roles.get(ns, ""), -1):
            roles[ns] = role
    names = sorted(
        {n for n in roles if not n.endswith("*")} | ({default} if me.id is None else set())
    )
    if me.id is not None and default not in names and _pattern_covers(roles, default):
        names = sorted({*names, default})
    patterns = tuple(sorted(n for n in roles if n.endswith("*")))
    return NamespaceList(tuple(names), patterns, roles, default, me.id is not None)


def _pattern_covers(roles: dict[str, str], ns: str) -> bool:
    return any(p.endswith("*") and ns.startswith(p[:-1]) for p in roles)


# -- the browser ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyRow:
    key: str
    version: int
    create_revision: int
    mod_revision: int


@dataclass(frozen=True, slots=True)
class KeyPage:
    """One page of keys under ``prefix`` (values not read); ``cursor`` (the last key shown)
    opens the next page (None: this is the last)."""

    ns: str
    prefix: str
    keys: tuple[KeyRow, ...]
    revision: int
    cursor: str | None


async def browse_keys(
    client: Any, ns: str, prefix: str = "", *, limit: int | None = None, cursor: str | None = None
) -> KeyPage:
    """The keys starting with ``prefix`` from ``cursor`` on (one keys-only range)."""
    n = page_limit(limit)
    start = prefix if cursor is None or cursor < prefix else cursor
    # One more than the page: the cursor (the last key shown) is read again and dropped.
    rr = await client.range(start=start, end=prefix_end(prefix), limit=n + 1, keys_only=True, ns=ns)
    kvs = [kv for kv in rr.kvs if kv.key != cursor]
    rows = tuple(KeyRow(kv.key, kv.version, kv.create_revision, kv.mod_revision) for kv in kvs[:n])
    nxt = rows[-1].key if rows and (len(kvs) > n or rr.more) else None
    return KeyPage(ns, prefix, rows, rr.revision, nxt)


# -- one key -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyValueView:
    """A key at ``revision`` (the read's): its counters and its value decoded."""

    ns: str
    key: str
    revision: int
    version: int
    create_revision: int
    mod_revision: int
    value: DecodedValue


async def key_value(client: Any, ns: str, key: str, *, revision: int | None = None) -> KeyValueView:
    """``key`` (as of ``revision``) decoded. NotFound / Compacted / Archived as the API's."""
    kv = await client.get(key, ns=ns, revision=revision)
    return KeyValueView(
        ns,
        key,
        kv.revision,
        kv.version,
        kv.create_revision,
        kv.mod_revision,
        decode_value(kv.value),
    )


@dataclass(frozen=True, slots=True)
class KeyRevision:
    mod_revision: int
    version: int
    create_revision: int
    size: int


@dataclass(frozen=True, slots=True)
class RevisionPage:
    """The key's versions newest first, from ``before`` down (module docstring: one
    request per row). ``versions``: how many versions the key's current life has (the
    newest's ``version``); ``cursor``: the ``before`` of the next page (None: the first
    version reached, or ``compacted``: older ones are compacted away); ``requests``: reads
    it took."""

    ns: str
    key: str
    revisions: tuple[KeyRevision, ...]
    versions: int
    cursor: int | None
    compacted: bool
    requests: int


async def key_revisions(
    client: Any, ns: str, key: str, *, limit: int | None = 20, before: int | None = None
) -> RevisionPage:
    """Up to ``limit`` (at most 100) versions of ``key`` newest first: the one current at
    ``before`` (default: now) and the ones before it. NotFound if the key does not exist
    at ``before``."""
    n = page_limit(limit, 20, REVISIONS_LIMIT)
    kv = await client.get(key, ns=ns, revision=before)
    rows = [KeyRevision(kv.mod_revision, kv.version, kv.create_revision, len(kv.value))]
    requests, compacted = 1, False
    while len(rows) < n and kv.version > 1:
        try:
            kv = await client.get(key, ns=ns, revision=kv.mod_revision - 1)
        except Compacted:
            compacted = True
            break
        except NotFound:  # deleted between (a version counter never skips): stop there
            break
        requests += 1
        rows.append(KeyRevision(kv.mod_revision, kv.version, kv.create_revision, len(kv.value)))
    last = rows[-1]
    cursor = last.mod_revision - 1 if last.version > 1 and not compacted else None
    return RevisionPage(ns, key, tuple(rows), rows[0].version, cursor, compacted, requests)


async def key_diff(client: Any, ns: str, key: str, left: int, right: int) -> ValueDiff:
    """``key`` at revision ``left`` against ``right`` (two reads in one batch request)."""
    b = client.batch(ns=ns)
    b.get(key, revision=left)
    b.get(key, revision=right)
    results = await b.execute()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    a, z = results
    if a is None or z is None:
        missing = left if a is None else right
        raise NotFound(
            f"key {key!r} did not exist at revision {missing}", code="key_not_found", status=404
        )
    return diff_values(
        decode_value(a.value), decode_value(z.value), (f"{key}@{left}", f"{key}@{right}")
    )


# -- the live tail -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TailEvent:
    """One change seen by a tail: ``n`` its number in the tail (1, 2, ...: the poll
    cursor), the watch's type ("put" | "delete"), key, revision, and the value decoded (its
    text cut to TAIL_TEXT characters; None for a delete)."""

    n: int
    type: str
    key: str
    revision: int
    value: DecodedValue | None


@dataclass(frozen=True, slots=True)
class TailPage:
    """Events after the poll's cursor; ``cursor`` the next poll's; ``dropped`` events the
    ring lost since that cursor (the page polled too slowly); ``error`` why the watch ended
    (None while it runs)."""

    events: tuple[TailEvent, ...]
    cursor: int
    dropped: int
    error: str | None


def _tail_value(kv: Any) -> DecodedValue:
    v = decode_value(kv.value)
    if len(v.text) <= TAIL_TEXT:
        return v
    return DecodedValue(v.format, v.size, None, v.text[:TAIL_TEXT], v.header, True)


async def tail_events(
    client: Any, ns: str, prefix: str = "", *, start_revision: int | None = None
) -> AsyncIterator[TailEvent]:
    """The changes under ``prefix`` as decoded TailEvents, from ``start_revision`` (default:
    the next revision after now), numbered from 1. Never ends by itself: close it."""
    if start_revision is None:
        rr = await client.range(prefix or None, limit=1, keys_only=True, ns=ns)
        start_revision = rr.revision + 1
    n = 0
    async for ev in client.watch(prefix, start_revision=start_revision, ns=ns):
        n += 1
        value = None if ev.type == "delete" else _tail_value(ev.kv)
        yield TailEvent(n, ev.type, ev.kv.key, ev.revision, value)


class KeyTail:
    """A watch running in a task into a ring of :data:`TAIL_BUFFER` events that a page polls
    (one per session and prefix; ``close()`` it when the session ends or goes idle)."""

    def __init__(self, client: Any, ns: str, prefix: str = "", *, bound: int = TAIL_BUFFER) -> None:
        self.ns, self.prefix, self.bound = ns, prefix, bound
        self._client = client
        self._ring: deque[TailEvent] = deque(maxlen=bound)
        self._seen = 0
        self._error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self.start_revision = 0

    async def start(self, start_revision: int | None = None) -> KeyTail:
        """Start watching (from ``start_revision``, default the next one); returns self."""
        if start_revision is None:
            rr = await self._client.range(self.prefix or None, limit=1, keys_only=True, ns=self.ns)
            start_revision = rr.revision + 1
        self.start_revision = start_revision
        self._task = asyncio.create_task(self._run(start_revision))
        return self

    async def _run(self, start_revision: int) -> None:
        events = tail_events(self._client, self.ns, self.prefix, start_revision=start_revision)
        try:
            async for ev in events:
                self._ring.append(ev)
                self._seen = ev.n
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - shown on the page: the tail stopped
            self._error = f"{type(exc).__name__}: {exc}"
        finally:
            with contextlib.suppress(Exception):
                await events.aclose()

    def poll(self, cursor: int = 0) -> TailPage:
        """The events numbered after ``cursor`` that the ring still holds."""
        events = tuple(e for e in self._ring if e.n > cursor)
        first = events[0].n if events else self._seen + 1
        dropped = max(0, first - cursor - 1) if events else max(0, self._seen - cursor)
        return TailPage(events, max(cursor, self._seen), dropped, self._error)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
