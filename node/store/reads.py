"""MVCC reads: get and range at a revision, over any consistent `Source` of the store.

Two sources implement it: `ReadView` (a reader's view of RocksDB, any thread) and
node.store.apply.EntryTx (the entry being applied, so reads inside an entry or a txn see
its earlier writes).

Reads at revision R find, per key, the newest "h" record <= R (node/store/keys.py has the
layout); reads of the current revision go through the "c" index and one point lookup of
the value. A read below compact_revision fails `compacted`, above the current revision
`future_revision`.

Range continuation tokens encode (revision, next key) (see node.ops.core); later pages are
served at the first page's revision, so paging is consistent as long as that revision is
not compacted meanwhile.

`READERS` maps each read op to `reader(src, limits, op) -> result`; every op family
registers its reads with `@serves("name")` (kv.py: get, range; streams.py: read_stream,
stream_info, list_streams) and StateMachine.read dispatches through it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any, Protocol

from rocksdict import ReadOptions

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import decode_continuation, encode_continuation
from statekeeper.node.store.keys import (
    CUR,
    HIST,
    META,
    NS_END,
    Meta,
    bounds,
    hist_prefix,
    hist_prefix_of,
    p64,
    u64,
    unpack,
)


class Source(Protocol):
    """What get/range need from a consistent view of the store."""

    revision: int  # the view's current revision
    compact_revision: int

    def point(self, k: bytes) -> bytes | None: ...

    def scan(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]: ...

    def hist_iter(self, revision: int) -> Any: ...

    def kv_at(self, ns_b: bytes, key: str, revision: int, latest: bool) -> dict | None: ...


Reader = Callable[[Source, Limits, dict], dict]
READERS: dict[str, Reader] = {}


def serves(name: str) -> Callable[[Reader], Reader]:
    """Decorator: register `reader(src, limits, op)` for the validated read ops named `name`."""

    def register(reader: Reader) -> Reader:
        if name in READERS:
            raise ValueError(f"read op {name!r} already has a reader")
        READERS[name] = reader
        return reader

    return register


def kv(key: str, value: bytes | None, version: int, create: int, mod: int) -> dict:
    """A kv as the protocol shows it (`value` left out when None: keys_only)."""
    out: dict[str, Any] = {"key": key}
    if value is not None:
        out["value"] = value
    out["version"] = version
    out["create_revision"] = create
    out["mod_revision"] = mod
    return out


def page_token(raw: bytes) -> str:
    """An opaque continuation for a page of raw store keys (retention_list, archive_list):
    the last key served, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def page_key(token: str, op: str) -> bytes:
    """Inverse of page_token; 400 invalid_argument naming `op` for anything else."""
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise OpError("invalid_argument", f"continuation is not a valid {op} token") from None


def check_revision(revision: int | None, current: int, compact: int) -> int:
    if revision is None:
        return current
    if revision > current:
        raise OpError(
            "future_revision",
            f"revision {revision} is above the current revision {current}",
            revision=current,
        )
    if revision < compact:
        raise OpError(
            "compacted",
            f"revision {revision} is compacted (compact_revision {compact})",
            compact_revision=compact,
        )
    return revision


def hist_get(it: Any, hb: bytes, revision: int, key: str) -> dict | None:
    """kv of the newest history record of one key at or below `revision`."""
    it.seek_for_prev(hb + p64(revision))
    if not it.valid():
        return None
    k = it.key()
    if k[:-8] != hb:
        return None
    rec = unpack(it.value())
    if rec is None:
        return None
    return kv(key, rec[0], rec[1], rec[2], u64(k[-8:]))


def _range_hist(
    it: Any, lo: bytes, hi: bytes, revision: int, limit: int, keys_only: bool, skip: int
) -> tuple[list[dict], str | None]:
    """Keys in [lo, hi) of the history keyspace as of `revision`; up to limit kvs.

    Returns (kvs, next key or None). `skip` is len(b"h" + ns + SEP).
    """
    kvs: list[dict] = []
    it.seek(lo)
    while it.valid():
        k = it.key()
        if k >= hi:
            break
        hb = k[:-8]  # b"h" ns SEP key SEP
        it.seek_for_prev(hb + p64(revision))
        if it.valid():
            found = it.key()
            if found[:-8] == hb:
                rec = unpack(it.value())
                if rec is not None:
                    key = hb[skip:-1].decode()
                    if len(kvs) == limit:
                        return kvs, key
                    value = None if keys_only else rec[0]
                    kvs.append(kv(key, value, rec[1], rec[2], u64(found[-8:])))
        it.seek(hb[:-1] + NS_END)  # first record of the next key
    return kvs, None


def _range_latest(
    src: Source, lo: bytes, hi: bytes, limit: int, keys_only: bool, skip: int
) -> tuple[list[dict], str | None]:
    # Collect first, then look values up: the source may share one iterator.
    items = list(islice(src.scan(lo, hi), limit + 1))
    next_key = items.pop()[0][skip:].decode() if len(items) > limit else None
    kvs = []
    for ck, meta in items:
        version, create, mod = unpack(meta)[:3]  # [3]: the lease (keys.py)
        value = None
        if not keys_only:
            rec = src.point(hist_prefix_of(ck) + p64(mod))
            value = unpack(rec)[0] if rec is not None else b""
        kvs.append(kv(ck[skip:].decode(), value, version, create, mod))
    return kvs, next_key


def get(src: Source, ns: str, key: str, revision: int | None) -> dict:
    """{"revision": served, "kv": kv or None}."""
    r = check_revision(revision, src.revision, src.compact_revision)
    return {"revision": r, "kv": src.kv_at(ns.encode(), key, r, r == src.revision)}


def range_args(op: dict) -> tuple:
    """The arguments of range_() a get-or-range op dict asks for (defaults filled in)."""
    return (
        op["ns"],
        op.get("prefix"),
        op.get("start"),
        op.get("end"),
        op.get("limit", 1000),
        op.get("continuation"),
        op.get("revision"),
        op.get("keys_only", False),
    )


def range_(
    src: Source,
    limits: Limits,
    ns: str,
    prefix: str | None,
    start: str | None,
    end: str | None,
    limit: int,
    continuation: str | None,
    revision: int | None,
    keys_only: bool,
) -> dict:
    """{"revision", "kvs", "more", "continuation"?}: keys in byte order, up to `limit`."""
    after = None
    if continuation is not None:
        cont_rev, after = decode_continuation(continuation, limits)
        if revision is not None and revision != cont_rev:
            raise OpError("invalid_argument", "revision does not match the continuation")
        revision = cont_rev
    r = check_revision(revision, src.revision, src.compact_revision)
    limit = max(1, min(limit, limits.max_range_limit))
    ns_b = ns.encode()
    skip = len(ns_b) + 2
    if r == src.revision:
        lo, hi = bounds(CUR, ns_b, prefix, start, end, after)
        kvs, next_key = _range_latest(src, lo, hi, limit, keys_only, skip)
    else:
        lo, hi = bounds(HIST, ns_b, prefix, start, end, after)
        kvs, next_key = _range_hist(src.hist_iter(r), lo, hi, r, limit, keys_only, skip)
    result: dict[str, Any] = {"revision": r, "kvs": kvs, "more": next_key is not None}
    if next_key is not None:
        result["continuation"] = encode_continuation(r, next_key)
    return result


class _ClosedIterator:
    """What a ReadView reads through once its `with` has ended."""

    def __getattr__(self, name: str) -> Any:
        raise OpError("unavailable", "this read view is closed: it was used after its `with`")


_CLOSED = _ClosedIterator()


class ReadView:
    """A consistent read view: everything goes through ONE RocksDB iterator.

    (An iterator pins an implicit snapshot at creation. rocksdict's Snapshot.iter
    ignores its snapshot in 0.3.x, so it is not used.) `meta` is the view's meta record.

    The iterator keeps the whole DB open (rocksdict closes a DB only when its last
    iterator is gone), so StateMachine.read_view() calls close() when its `with` ends:
    a view still referenced after that (a `with ... as view` name lives on in its frame)
    must not hold the DB across a restore, whose reopen would fail on RocksDB's LOCK.
    """

    def __init__(self, db: Any) -> None:
        self.it: Any = db.iter(ReadOptions())
        self.meta = Meta.decode(self.point(META))
        self.revision = self.meta.revision
        self.compact_revision = self.meta.compact_revision
        self.clock = self.meta.clock  # the replicated clock (lease_info's remaining_ms)
        self.retention: Any = None  # the node's Retention settings (StateMachine.read_view)

    def point(self, k: bytes) -> bytes | None:
        it = self.it
        it.seek(k)
        if it.valid() and it.key() == k:
            return it.value()
        return None

    def close(self) -> None:
        """Release the iterator (and with it the DB); later reads raise `unavailable`."""
        self.it = _CLOSED

    def scan(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every raw (key, value) of [lo, hi) in byte order; keys.FIRST_KEY and
        keys.PAST_LAST_KEY select the whole DB (for debugging and consistency checks).
        Looks the iterator up at every step, so a suspended scan does not hold it."""
        self.it.seek(lo)
        while self.it.valid():
            k = self.it.key()
            if k >= hi:
                return
            yield k, self.it.value()
            self.it.next()

    def hist_iter(self, revision: int) -> Any:
        return self.it

    def kv_at(self, ns_b: bytes, key: str, revision: int, latest: bool) -> dict | None:
        # One seek: the newest history record <= revision (also for the latest one).
        return hist_get(self.it, hist_prefix(ns_b, key.encode()), revision, key)
