"""The replicated state machine: an etcd-like multi-version KV store in one RocksDB.

Nothing here knows about Raft or the network. `apply(index, entry)` is called with
committed raft entries (docs/protocol.md, "Raft entries") from a single thread;
reads (`get`, `range`, `read`) may run concurrently from other threads.

Determinism: apply depends only on the DB contents, the entry bytes, `limits` and
`retention` (every node must run with the same config). Time comes only from the
entries' leader timestamp `t`; no clock, randomness or environment is read.

On-disk layout (one RocksDB, raw mode, default column family; every value is
msgpack; `rev8`/`ms8` are unsigned 64-bit big-endian so byte order == numeric
order; `ns` and `key` are UTF-8 and contain no NUL, so NUL works as separator and
byte order of the composite keys equals (ns, key, revision) order):

    b"m"                                 meta map: applied_index, revision,
                                         compact_revision, clock, pruned_rev, idem_pruned
    b"c" ns 0x00 key                     current index of live keys:
                                         [version, create_revision, mod_revision]
    b"h" ns 0x00 key 0x00 rev8           history record written at revision rev:
                                         [value, version, create_revision], or nil
                                         for a tombstone (the key was deleted at rev)
    b"s" rev8 <history key>              empty; the history record is superseded at
                                         rev (no read at >= rev needs it). A tombstone
                                         also indexes itself at its own revision so a
                                         deleted key vanishes once compacted past it.
    b"i" ns 0x00 idempotency_key         [expires_ms, revision, result, op_digest]
    b"e" ms8 ns 0x00 idempotency_key     empty; expiry index of the "i" records

The value of a key is stored once (in its "h" record); "c" holds only metadata so
writes stay cheap and reads of the latest state need no history scan.

Reads at revision R find, per key, the newest "h" record <= R. Compaction to C
(explicit `compact` op, or automatic when revision - compact_revision exceeds
retention.history_revisions plus 1/16 slack) only moves `compact_revision`; the
physical pruning deletes every "s" entry with rev <= C together with the history
record it names, a bounded number per entry (256 + 2 per history record the
entry wrote, so it keeps up with any write rate). `pruned_rev` remembers how far
it got (seek position, skips RocksDB tombstones). Reads at R >= C stay exact
because the newest record <= C of every key is never superseded at <= C.

Idempotency: a key is scoped to the op's namespace (ns-less ops such as compact use
the empty ns) and bound to the op it came with: the record keeps a 16-byte BLAKE2b
digest of the op (without its idempotency_key, dict keys sorted), and the same key
with another op fails with `idempotency_key_reused` instead of replaying a result
that belongs to a different request. `clock` = max of all entry timestamps seen
(time only the leader stamps, node/cluster_clock.py; it never runs backwards across
leader changes); a record expires at clock + idempotency_seconds when stored and is
pruned (bounded per entry) once clock passes it. Results of failed ops (errors) are
not stored: a failed op leaves no trace. Records written before keys were scoped
(b"i" idempotency_key, 3 fields) are never matched again and expire as before.

Range continuation tokens encode (revision, next key) (see node.ops); later pages
are served at the first page's revision, so paging is consistent as long as that
revision is not compacted meanwhile.

Snapshots (`snapshot`/`restore`) are a tar file: first member
"statekeeper-snapshot.msgpack" (format, applied_index, revision, compact_revision),
then "db/<file>" for every file of a RocksDB checkpoint. `restore` extracts to
"<path>.restore", then swaps directories: "<path>" -> "<path>.old", new -> "<path>";
opening a StateMachine finishes or rolls back an interrupted swap.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import heapq
import io
import os
import shutil
import struct
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import msgpack
from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Checkpoint,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from node import entry as raft_entry
from node.config import Limits, Retention
from node.errors import OpError
from node.ops import decode_continuation, encode_continuation, validate_op

META = b"m"
CUR = b"c"
HIST = b"h"
SUPERSEDED = b"s"
IDEM = b"i"
IDEM_EXP = b"e"
SEP = b"\x00"
NS_END = b"\x01"  # ns + NS_END sorts after every ns + SEP + key

_U64 = struct.Struct(">Q")
_p64 = _U64.pack
_INF = 2**64 - 1
TOMBSTONE = msgpack.packb(None)

HIST_PRUNE_MIN = 256
IDEM_PRUNE_MIN = 64

SNAPSHOT_HEADER = "statekeeper-snapshot.msgpack"
SNAPSHOT_FORMAT = 1

_MISSING = object()
DEFAULT_LIMITS = Limits()
DEFAULT_RETENTION = Retention()


def _unpack(b: bytes) -> Any:
    return msgpack.unpackb(b, raw=False)


def _u64(b: bytes) -> int:
    return _U64.unpack(b)[0]


class StorageError(Exception):
    """RocksDB failed during apply; the node must stop (state may be unknown)."""


def _kv(key: str, value: bytes | None, version: int, create: int, mod: int) -> dict:
    kv: dict[str, Any] = {"key": key}
    if value is not None:
        kv["value"] = value
    kv["version"] = version
    kv["create_revision"] = create
    kv["mod_revision"] = mod
    return kv


def _inc(prefix: bytes) -> bytes:
    # UTF-8 never contains 0xff, so bumping the last byte gives the prefix's end.
    return prefix[:-1] + bytes([prefix[-1] + 1])


def _bounds(
    tag: bytes,
    ns_b: bytes,
    prefix: str | None,
    start: str | None,
    end: str | None,
    after: str | None,
) -> tuple[bytes, bytes]:
    """[lo, hi) of a key range within namespace ns in the `tag` keyspace.

    For history keys (key 0x00 rev8) the same bounds select exactly the records of
    the keys in range, because NUL sorts before every byte of a key.
    """
    base = tag + ns_b + SEP
    if prefix:
        pb = prefix.encode()
        lo, hi = base + pb, base + _inc(pb)
    else:
        lo = base + start.encode() if start else base
        hi = base + end.encode() if end else tag + ns_b + NS_END
    if after is not None:
        lo = max(lo, base + after.encode())
    return lo, hi


def _check_revision(revision: int | None, current: int, compact: int) -> int:
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


def _hist_get(it: Any, hb: bytes, revision: int, key: str) -> dict | None:
    """kv of the newest history record of one key at or below `revision`."""
    it.seek_for_prev(hb + _p64(revision))
    if not it.valid():
        return None
    k = it.key()
    if k[:-8] != hb:
        return None
    rec = _unpack(it.value())
    if rec is None:
        return None
    return _kv(key, rec[0], rec[1], rec[2], _u64(k[-8:]))


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
        it.seek_for_prev(hb + _p64(revision))
        if it.valid():
            found = it.key()
            if found[:-8] == hb:
                rec = _unpack(it.value())
                if rec is not None:
                    key = hb[skip:-1].decode()
                    if len(kvs) == limit:
                        return kvs, key
                    value = None if keys_only else rec[0]
                    kvs.append(_kv(key, value, rec[1], rec[2], _u64(found[-8:])))
        it.seek(hb[:-1] + NS_END)  # first record of the next key
    return kvs, None


def _range_result(revision: int, kvs: list[dict], next_key: str | None) -> dict:
    result: dict[str, Any] = {"revision": revision, "kvs": kvs, "more": next_key is not None}
    if next_key is not None:
        result["continuation"] = encode_continuation(revision, next_key)
    return result


class _Source(Protocol):
    """What get/range need from a consistent view of the store."""

    def point(self, k: bytes) -> bytes | None: ...

    def scan(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]: ...

    def hist_iter(self, revision: int) -> Any: ...

    def kv_at(self, ns_b: bytes, key: str, revision: int, latest: bool) -> dict | None: ...


def _range_latest(
    src: _Source, lo: bytes, hi: bytes, limit: int, keys_only: bool, skip: int
) -> tuple[list[dict], str | None]:
    # Collect first, then look values up: the source may share one iterator.
    items = list(islice(src.scan(lo, hi), limit + 1))
    next_key = items.pop()[0][skip:].decode() if len(items) > limit else None
    kvs = []
    for ck, meta in items:
        version, create, mod = _unpack(meta)
        value = None
        if not keys_only:
            rec = src.point(HIST + ck[1:] + SEP + _p64(mod))
            value = _unpack(rec)[0] if rec is not None else b""
        kvs.append(_kv(ck[skip:].decode(), value, version, create, mod))
    return kvs, next_key


def _do_get(
    src: _Source, ns: str, key: str, revision: int | None, current: int, compact: int
) -> dict:
    r = _check_revision(revision, current, compact)
    return {"revision": r, "kv": src.kv_at(ns.encode(), key, r, r == current)}


def _do_range(
    src: _Source,
    limits: Limits,
    current: int,
    compact: int,
    ns: str,
    prefix: str | None,
    start: str | None,
    end: str | None,
    limit: int,
    continuation: str | None,
    revision: int | None,
    keys_only: bool,
) -> dict:
    after = None
    if continuation is not None:
        cont_rev, after = decode_continuation(continuation, limits)
        if revision is not None and revision != cont_rev:
            raise OpError("invalid_argument", "revision does not match the continuation")
        revision = cont_rev
    r = _check_revision(revision, current, compact)
    limit = max(1, min(limit, limits.max_range_limit))
    ns_b = ns.encode()
    skip = len(ns_b) + 2
    if r == current:
        lo, hi = _bounds(CUR, ns_b, prefix, start, end, after)
        kvs, next_key = _range_latest(src, lo, hi, limit, keys_only, skip)
    else:
        lo, hi = _bounds(HIST, ns_b, prefix, start, end, after)
        kvs, next_key = _range_hist(src.hist_iter(r), lo, hi, r, limit, keys_only, skip)
    return _range_result(r, kvs, next_key)


class _IterView:
    """A consistent read view: everything goes through ONE RocksDB iterator.

    (An iterator pins an implicit snapshot at creation. rocksdict's Snapshot.iter
    ignores its snapshot in 0.3.x, so it is not used.)
    """

    def __init__(self, db: Rdict) -> None:
        self.it = db.iter(ReadOptions())

    def point(self, k: bytes) -> bytes | None:
        it = self.it
        it.seek(k)
        if it.valid() and it.key() == k:
            return it.value()
        return None

    def scan(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        it = self.it
        it.seek(lo)
        while it.valid():
            k = it.key()
            if k >= hi:
                return
            yield k, it.value()
            it.next()

    def hist_iter(self, revision: int) -> Any:
        return self.it

    def kv_at(self, ns_b: bytes, key: str, revision: int, latest: bool) -> dict | None:
        # One seek: the newest history record <= revision (also for the latest one).
        return _hist_get(self.it, HIST + ns_b + SEP + key.encode() + SEP, revision, key)

    def meta(self) -> dict:
        raw = self.point(META)
        return _unpack(raw) if raw is not None else {}


class _RWLock:
    """Many readers or one writer; a waiting writer blocks new readers."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self.shared = _Shared(self)
        self.exclusive = _Exclusive(self)


class _Shared:
    def __init__(self, lock: _RWLock) -> None:
        self._l = lock

    def __enter__(self) -> None:
        lk = self._l
        with lk._cond:
            while lk._writer or lk._writers_waiting:
                lk._cond.wait()
            lk._readers += 1

    def __exit__(self, *exc: object) -> None:
        lk = self._l
        with lk._cond:
            lk._readers -= 1
            if not lk._readers and lk._writers_waiting:
                lk._cond.notify_all()


class _Exclusive:
    def __init__(self, lock: _RWLock) -> None:
        self._l = lock

    def __enter__(self) -> None:
        lk = self._l
        with lk._cond:
            lk._writers_waiting += 1
            while lk._writer or lk._readers:
                lk._cond.wait()
            lk._writers_waiting -= 1
            lk._writer = True

    def __exit__(self, *exc: object) -> None:
        lk = self._l
        with lk._cond:
            lk._writer = False
            lk._cond.notify_all()


def _db_options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)  # apply's point lookups of "c" keys
    opts.set_block_based_table_factory(table)
    return opts


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    for p in path.iterdir():
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    _fsync_dir(path)


def _read_meta_of(db_dir: Path) -> dict:
    db = Rdict(str(db_dir), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        raw = db.get(META)
    finally:
        db.close()
    return _unpack(raw) if raw is not None else {}


class StateMachine:
    """Multi-version KV store over one RocksDB directory; see the module docstring."""

    def __init__(
        self,
        path: str | Path,
        limits: Limits = DEFAULT_LIMITS,
        retention: Retention = DEFAULT_RETENTION,
        sync_writes: bool = False,
    ) -> None:
        self.path = Path(path)
        self.limits = limits
        self.retention = retention
        self._wopts = WriteOptions()
        self._wopts.sync = sync_writes
        self._packer = msgpack.Packer(use_bin_type=True)
        self._lock = _RWLock()
        self._db: Rdict | None = None
        self._recover_swap()
        self._open()

    # -- lifecycle -----------------------------------------------------------

    def _sibling(self, suffix: str) -> Path:
        return self.path.with_name(self.path.name + suffix)

    def _recover_swap(self) -> None:
        """Finish or roll back a restore that crashed between its two renames."""
        old = self._sibling(".old")
        if old.exists():
            if self.path.exists():
                shutil.rmtree(old)  # the new DB is in place
            else:
                os.replace(old, self.path)  # the new DB never arrived: keep the old one
        shutil.rmtree(self._sibling(".restore"), ignore_errors=True)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = Rdict(str(self.path), _db_options())
        raw = self._db.get(META)
        meta = _unpack(raw) if raw is not None else {}
        self._applied_index: int = meta.get("applied_index", 0)
        self._revision: int = meta.get("revision", 0)
        self._compact_revision: int = meta.get("compact_revision", 0)
        self._clock: int = meta.get("clock", 0)
        self._pruned_rev: int = meta.get("pruned_rev", 0)
        self._idem_pruned: int = meta.get("idem_pruned", 0)
        # Smallest expiry pending in the "e" index, None = unknown. Only lets apply
        # skip a seek when nothing can be due; the pruning itself does not depend on it.
        self._idem_next: int | None = None

    def _close_db(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def close(self) -> None:
        with self._lock.exclusive:
            self._close_db()

    @property
    def applied_index(self) -> int:
        return self._applied_index

    @property
    def clock_ms(self) -> int:
        """The largest entry time applied so far (ms): the replicated clock."""
        return self._clock

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def compact_revision(self) -> int:
        return self._compact_revision

    # -- apply ---------------------------------------------------------------

    def apply(self, index: int, entry: bytes) -> list[dict] | None:
        """Apply one committed raft entry; None if `index` was already applied."""
        with self._lock.shared:
            if index <= self._applied_index:
                return None
            return self._apply(index, entry)

    def _apply(self, index: int, entry: bytes) -> list[dict]:
        tx = _Apply(self)
        results = tx.run(entry)
        tx.prune()
        pack = self._packer.pack
        wb = WriteBatch(raw_mode=True)
        for k, v in tx.overlay.items():
            if v is None:
                wb.delete(k)
            else:
                wb.put(k, v)
        meta = {
            "applied_index": index,
            "revision": tx.revision,
            "compact_revision": tx.compact_revision,
            "clock": tx.clock,
            "pruned_rev": tx.pruned_rev,
            "idem_pruned": tx.idem_pruned,
        }
        wb.put(META, pack(meta))
        try:
            self._db.write(wb, self._wopts)
        except Exception as e:
            raise StorageError(f"RocksDB write failed: {e}") from e
        self._revision = tx.revision
        self._compact_revision = tx.compact_revision
        self._clock = tx.clock
        self._pruned_rev = tx.pruned_rev
        self._idem_pruned = tx.idem_pruned
        self._idem_next = tx.idem_next
        self._applied_index = index  # last: readers of applied_index see the rest done
        return results

    # -- reads ---------------------------------------------------------------

    def get(self, ns: str, key: str, revision: int | None = None) -> dict:
        """{"revision": served, "kv": kv or None}; raises OpError compacted/future_revision."""
        with self._lock.shared:
            return self._get(ns, key, revision)

    def _view(self) -> _IterView:
        if self._db is None:
            raise OpError("unavailable", "the state machine is closed")
        return _IterView(self._db)

    def _get(self, ns: str, key: str, revision: int | None) -> dict:
        view = self._view()
        meta = view.meta()
        return _do_get(
            view, ns, key, revision, meta.get("revision", 0), meta.get("compact_revision", 0)
        )

    def range(
        self,
        ns: str,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        limit: int = 1000,
        continuation: str | None = None,
        revision: int | None = None,
        keys_only: bool = False,
    ) -> dict:
        """{"revision", "kvs", "more", "continuation"?}; pass the continuation back
        with the same ns/prefix/start/end to get the next page (same revision)."""
        with self._lock.shared:
            return self._range(ns, prefix, start, end, limit, continuation, revision, keys_only)

    def _range(self, ns, prefix, start, end, limit, continuation, revision, keys_only) -> dict:
        view = self._view()
        meta = view.meta()
        return _do_range(
            view,
            self.limits,
            meta.get("revision", 0),
            meta.get("compact_revision", 0),
            ns,
            prefix,
            start,
            end,
            limit,
            continuation,
            revision,
            keys_only,
        )

    def read(self, op: dict) -> dict:
        """Serve a validated get or range op from local state."""
        kind = op.get("op")
        if kind == "get":
            return self.get(op["ns"], op["key"], op.get("revision"))
        if kind == "range":
            return self.range(
                op["ns"],
                op.get("prefix"),
                op.get("start"),
                op.get("end"),
                op.get("limit", 1000),
                op.get("continuation"),
                op.get("revision"),
                op.get("keys_only", False),
            )
        raise OpError("unknown_op", f"{kind!r} is not a read op")

    def raw_items(self) -> list[tuple[bytes, bytes]]:
        """Every RocksDB key/value, in order (consistency checks and tests)."""
        with self._lock.shared:
            return list(self._view().scan(b"", b"\xff" * 8))

    # -- snapshots -----------------------------------------------------------

    def snapshot(self, path: str | os.PathLike) -> None:
        """Write a consistent checkpoint of the whole DB into ONE file at `path`."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        work = self.checkpoint()
        try:
            with open(tmp, "wb") as f:
                self.write_checkpoint(work, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            tmp.unlink(missing_ok=True)

    def flush(self) -> None:
        """Write the memtable to an SST file now (any thread; applies go on meanwhile).

        A checkpoint flushes first; doing most of that work here, off the raft thread,
        keeps the checkpoint itself short."""
        try:
            self._db.flush(True)
        except Exception as e:
            raise StorageError(f"RocksDB flush failed: {e}") from e

    def checkpoint(self) -> Path:
        """A consistent checkpoint of the DB in a new directory (hard links: fast).

        Taking it is the only part of a snapshot that must happen between two applies;
        write_checkpoint() can then pack it on another thread. The caller removes it.
        """
        work = Path(tempfile.mkdtemp(prefix=self.path.name + ".ckpt-", dir=self.path.parent))
        try:
            with self._lock.shared:
                self._checkpoint(work / "db")
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        return work

    @staticmethod
    def write_checkpoint(work: Path, f: BinaryIO) -> None:
        """Pack a checkpoint() directory into `f` as the snapshot format restore() reads."""
        ckpt = work / "db"
        meta = _read_meta_of(ckpt)
        header = msgpack.packb(
            {
                "format": SNAPSHOT_FORMAT,
                "applied_index": meta.get("applied_index", 0),
                "revision": meta.get("revision", 0),
                "compact_revision": meta.get("compact_revision", 0),
            },
            use_bin_type=True,
        )
        with tarfile.open(fileobj=f, mode="w") as tar:
            info = tarfile.TarInfo(SNAPSHOT_HEADER)
            info.size = len(header)
            tar.addfile(info, io.BytesIO(header))
            for p in sorted(ckpt.iterdir()):
                tar.add(p, arcname=f"db/{p.name}", recursive=False)

    def _checkpoint(self, dest: Path) -> None:
        # Own function so the Checkpoint (which holds the DB open) dies before we return.
        Checkpoint(self._db).create_checkpoint(str(dest))

    @staticmethod
    def snapshot_info(path: str | os.PathLike) -> int:
        """applied_index recorded in a snapshot file (raises ValueError if not one)."""
        return _snapshot_header(Path(path))["applied_index"]

    def restore(self, path: str | os.PathLike) -> None:
        """Replace the whole DB with a snapshot file written by `snapshot`."""
        path = Path(path)
        header = _snapshot_header(path)
        staging = self._sibling(".restore")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            new_db = staging / "db"
            _extract_snapshot(path, staging)
            _fsync_tree(new_db)
            meta = _read_meta_of(new_db)  # refuse a broken checkpoint before the swap
            if meta.get("applied_index", 0) != header["applied_index"]:
                raise ValueError(f"{path}: snapshot header does not match its database")
            with self._lock.exclusive:
                self._close_db()
                old = self._sibling(".old")
                shutil.rmtree(old, ignore_errors=True)
                if self.path.exists():
                    os.replace(self.path, old)
                os.replace(new_db, self.path)
                _fsync_dir(self.path.parent)
                shutil.rmtree(old, ignore_errors=True)
                self._open()
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _snapshot_header(path: Path) -> dict:
    try:
        with tarfile.open(path, "r:") as tar:
            first = tar.next()
            if first is None or first.name != SNAPSHOT_HEADER or not first.isfile():
                raise ValueError(f"{path}: not a statekeeper snapshot")
            header = _unpack(tar.extractfile(first).read())
    except (tarfile.TarError, msgpack.UnpackException, ValueError) as e:
        raise ValueError(f"{path}: not a statekeeper snapshot ({e})") from e
    if not isinstance(header, dict) or header.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"{path}: unsupported snapshot format")
    return header


def _extract_snapshot(path: Path, dest: Path) -> None:
    with tarfile.open(path, "r:") as tar:
        members = []
        for m in tar.getmembers():
            if m.name == SNAPSHOT_HEADER:
                continue
            parts = m.name.split("/")
            if len(parts) != 2 or parts[0] != "db" or parts[1] in ("", ".", "..") or not m.isfile():
                raise ValueError(f"{path}: unexpected member {m.name!r}")
            members.append(m)
        (dest / "db").mkdir()
        tar.extractall(dest, members=members, filter="data")


class _Apply:
    """One entry being applied: reads see DB + overlay, writes go to the overlay.

    Each op stages its writes in `staging`; they move into `overlay` only when the
    op succeeds, so a failed op leaves no trace. The overlay becomes one WriteBatch.
    Values are packed bytes, None = delete.
    """

    def __init__(self, sm: StateMachine) -> None:
        self.db = sm._db
        self.limits = sm.limits
        self.retention = sm.retention
        self.pack = sm._packer.pack
        self.overlay: dict[bytes, bytes | None] = {}
        self.staging: dict[bytes, bytes | None] = {}
        self.base_revision = sm._revision  # everything <= this is in the DB itself
        self.revision = sm._revision
        self.compact_revision = sm._compact_revision
        self.clock = sm._clock
        self.pruned_rev = sm._pruned_rev
        self.idem_pruned = sm._idem_pruned
        self.idem_next = sm._idem_next
        self.stored_min_exp = _INF  # smallest expiry stored by this entry
        self.hist_written = 0
        self.idem_written = 0
        self.wrote = False  # the current op wrote keys (takes revision + 1)

    # -- storage access --

    def _db_get(self, k: bytes) -> bytes | None:
        try:
            return self.db.get(k)
        except Exception as e:
            raise StorageError(f"RocksDB read failed: {e}") from e

    def _db_iter(self) -> Any:
        try:
            return self.db.iter(ReadOptions())
        except Exception as e:
            raise StorageError(f"RocksDB iterator failed: {e}") from e

    def point(self, k: bytes) -> bytes | None:
        v = self.staging.get(k, _MISSING)
        if v is _MISSING:
            v = self.overlay.get(k, _MISSING)
            if v is _MISSING:
                return self._db_get(k)
        return v

    def _db_scan(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, int, bytes]]:
        it = self._db_iter()
        it.seek(lo)
        while it.valid():
            k = it.key()
            if k >= hi:
                return
            yield k, 1, it.value()
            it.next()
        _check(it)

    def scan(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Live entries of [lo, hi): the DB merged with this entry's pending writes."""
        pending: dict[bytes, bytes | None] = {}
        for d in (self.overlay, self.staging):  # staging is newer
            for k, v in d.items():
                if lo <= k < hi:
                    pending[k] = v
        staged = sorted((k, 0, v) for k, v in pending.items())
        last = None
        for k, _, v in heapq.merge(staged, self._db_scan(lo, hi)):
            if k == last:
                continue  # the DB's version of a key with a pending write
            last = k
            if v is not None:
                yield k, v

    def hist_iter(self, revision: int) -> Any:
        if revision > self.base_revision:
            raise OpError(
                "invalid_argument",
                f"revision {revision} is written by this same raft entry; read it afterwards",
            )
        return self._db_iter()

    def kv_at(self, ns_b: bytes, key: str, revision: int, latest: bool) -> dict | None:
        key_b = key.encode()
        if not latest:
            return _hist_get(
                self.hist_iter(revision), HIST + ns_b + SEP + key_b + SEP, revision, key
            )
        cur = self.point(CUR + ns_b + SEP + key_b)
        if cur is None:
            return None
        return self._kv_from_meta(ns_b, key_b, key, _unpack(cur))

    def _kv_from_meta(self, ns_b: bytes, key_b: bytes, key: str, meta: list) -> dict:
        version, create, mod = meta
        rec = self.point(HIST + ns_b + SEP + key_b + SEP + _p64(mod))
        return _kv(key, _unpack(rec)[0] if rec is not None else b"", version, create, mod)

    # -- entry --

    def run(self, entry: Any) -> list[dict]:
        try:
            t, ops = raft_entry.decode(entry)
        except raft_entry.EntryError as e:
            n = 1
            with contextlib.suppress(Exception):
                ops = msgpack.unpackb(entry, raw=False).get("ops")
                n = len(ops) if isinstance(ops, list) else 1
            return [{"error": {"code": "invalid_request", "message": str(e)}} for _ in range(n)]
        self.clock = max(self.clock, t)
        return [self._run_op(op) for op in ops]

    def _run_op(self, raw: Any) -> dict:
        saved = (self.compact_revision, self.hist_written, self.idem_written, self.stored_min_exp)
        self.wrote = False
        try:
            op = validate_op(raw, self.limits)
            ik = op.get("idempotency_key")
            old_exp = None
            if ik is not None:
                record_id = idempotency_record_id(op)
                digest = op_digest(op)
                stored = self.point(IDEM + record_id)
                if stored is not None:
                    exp, _, result, *bound_to = _unpack(stored)
                    if exp > self.clock:
                        if bound_to and bound_to[0] != digest:
                            raise OpError(
                                "idempotency_key_reused",
                                f"idempotency_key {ik!r} was already used in namespace "
                                f"{op.get('ns', '')!r} for a different request; use a new key",
                            )
                        result["replayed"] = True
                        return result
                    old_exp = exp  # expired, not pruned yet: replaced below
            result = _HANDLERS[op["op"]](self, op)
            if ik is not None and self.retention.idempotency_seconds > 0:
                self._remember(record_id, digest, old_exp, result)
            if self.wrote:
                self.revision += 1
            self.overlay.update(self.staging)
            return result
        except StorageError:
            raise
        except OpError as e:
            self.compact_revision, self.hist_written, self.idem_written, self.stored_min_exp = saved
            return {"error": e.to_dict()}
        except Exception as e:  # a bug; failing the op the same way everywhere keeps nodes equal
            self.compact_revision, self.hist_written, self.idem_written, self.stored_min_exp = saved
            return {"error": {"code": "internal", "message": f"{type(e).__name__}: {e}"}}
        finally:
            self.staging.clear()

    def _stage(self, k: bytes, v: bytes | None) -> None:
        self.staging[k] = v

    def _remember(self, ikb: bytes, digest: bytes, old_exp: int | None, result: dict) -> None:
        if old_exp is not None:
            self._stage(IDEM_EXP + _p64(old_exp) + ikb, None)
        exp = self.clock + self.retention.idempotency_seconds * 1000
        rev = self.revision + 1 if self.wrote else self.revision
        self._stage(IDEM + ikb, self.pack([exp, rev, result, digest]))
        self._stage(IDEM_EXP + _p64(exp) + ikb, b"")
        self.idem_written += 1
        self.stored_min_exp = min(self.stored_min_exp, exp)

    # -- writes (stage at revision self.revision + 1) --

    def _write_put(self, ns_b: bytes, key_b: bytes, key: str, value: bytes, want_prev: bool):
        """Stage a put; returns the previous kv when asked (None if the key was missing)."""
        rev = self.revision + 1
        ck = CUR + ns_b + SEP + key_b
        hb = HIST + ns_b + SEP + key_b + SEP
        cur = self.point(ck)
        prev = None
        if cur is not None:
            meta = _unpack(cur)
            if want_prev:
                prev = self._kv_from_meta(ns_b, key_b, key, meta)
            version, create, mod = meta
            self._stage(SUPERSEDED + _p64(rev) + hb + _p64(mod), b"")
            version += 1
        else:
            version, create = 1, rev
        self._stage(ck, self.pack([version, create, rev]))
        self._stage(hb + _p64(rev), self.pack([value, version, create]))
        self.hist_written += 1
        self.wrote = True
        return prev, (version, create, rev)

    def _write_delete(self, ck: bytes, meta: list) -> None:
        rev8 = _p64(self.revision + 1)
        hb = HIST + ck[1:] + SEP
        self._stage(ck, None)
        self._stage(SUPERSEDED + rev8 + hb + _p64(meta[2]), b"")
        self._stage(hb + rev8, TOMBSTONE)
        self._stage(SUPERSEDED + rev8 + hb + rev8, b"")  # the tombstone itself goes at rev
        self.hist_written += 1
        self.wrote = True

    # -- op handlers --

    def _op_put(self, op: dict) -> dict:
        ns_b, key = op["ns"].encode(), op["key"]
        prev, _ = self._write_put(ns_b, key.encode(), key, op["value"], op["prev_kv"])
        result: dict[str, Any] = {"revision": self.revision + 1}
        if op["prev_kv"]:
            result["prev_kv"] = prev
        return result

    def _op_delete(self, op: dict) -> dict:
        ns_b, key_b = op["ns"].encode(), op["key"].encode()
        if op["prefix"]:
            base = CUR + ns_b + SEP
            targets = list(self.scan(base + key_b, base + _inc(key_b)))
        else:
            ck = CUR + ns_b + SEP + key_b
            cur = self.point(ck)
            targets = [(ck, cur)] if cur is not None else []
        prev_kvs = []
        skip = len(ns_b) + 2
        for ck, raw in targets:
            meta = _unpack(raw)
            if op["prev_kv"]:
                k_b = ck[skip:]
                prev_kvs.append(self._kv_from_meta(ns_b, k_b, k_b.decode(), meta))
            self._write_delete(ck, meta)
        result: dict[str, Any] = {
            "revision": self.revision + 1 if targets else self.revision,
            "deleted": len(targets),
        }
        if op["prev_kv"]:
            result["prev_kvs"] = prev_kvs
        return result

    def _op_cas(self, op: dict) -> dict:
        ns_b, key = op["ns"].encode(), op["key"]
        key_b = key.encode()
        cur = self.point(CUR + ns_b + SEP + key_b)
        meta = _unpack(cur) if cur is not None else None
        expect = op["expect"]
        if "version" in expect:
            ok = (meta[0] if meta else 0) == expect["version"]
        elif "mod_revision" in expect:
            ok = (meta[2] if meta else 0) == expect["mod_revision"]
        else:
            ok = meta is None
        if not ok:
            kv = self._kv_from_meta(ns_b, key_b, key, meta) if meta else None
            return {"revision": self.revision, "succeeded": False, "kv": kv}
        _, (version, create, rev) = self._write_put(ns_b, key_b, key, op["value"], False)
        return {
            "revision": rev,
            "succeeded": True,
            "kv": _kv(key, op["value"], version, create, rev),
        }

    def _op_compact(self, op: dict) -> dict:
        target = op["revision"]
        if target > self.revision:
            raise OpError(
                "future_revision",
                f"cannot compact to {target}, above the current revision {self.revision}",
                revision=self.revision,
            )
        self.compact_revision = max(self.compact_revision, target)
        return {"revision": self.revision, "compact_revision": self.compact_revision}

    def _op_get(self, op: dict) -> dict:
        return _do_get(
            self, op["ns"], op["key"], op["revision"], self.revision, self.compact_revision
        )

    def _op_range(self, op: dict) -> dict:
        return _do_range(
            self,
            self.limits,
            self.revision,
            self.compact_revision,
            op["ns"],
            op["prefix"],
            op["start"],
            op["end"],
            op["limit"],
            op["continuation"],
            op["revision"],
            op["keys_only"],
        )

    def _compare(self, c: dict) -> bool:
        ns_b, key_b = c["ns"].encode(), c["key"].encode()
        cur = self.point(CUR + ns_b + SEP + key_b)
        target, want = c["target"], c["value"]
        if target == "exists":
            actual = cur is not None
        elif cur is None:
            if target == "value":
                return c["op"] == "!="  # a missing key has no value to order
            actual = 0
        elif target == "value":
            actual = self._kv_from_meta(ns_b, key_b, c["key"], _unpack(cur))["value"]
        else:
            actual = _unpack(cur)[_META_INDEX[target]]
        cmp = c["op"]
        if cmp == "==":
            return actual == want
        if cmp == "!=":
            return actual != want
        if cmp == "<":
            return actual < want
        return actual > want

    def _op_txn(self, op: dict) -> dict:
        succeeded = all(self._compare(c) for c in op["compare"])
        branch = op["success"] if succeeded else op["failure"]
        results = [_HANDLERS[inner["op"]](self, inner) for inner in branch]
        final = self.revision + 1 if self.wrote else self.revision
        for inner, r in zip(branch, results, strict=True):
            _fix_txn_result(r, final, inner["ns"], op["ns"])
        return {"revision": final, "succeeded": succeeded, "results": results}

    # -- pruning (after all ops of the entry) --

    def prune(self) -> None:
        history = self.retention.history_revisions
        if self.revision - self.compact_revision > history + history // 16:
            self.compact_revision = self.revision - history
        self._prune_history(HIST_PRUNE_MIN + 2 * self.hist_written)
        self._prune_idempotency(IDEM_PRUNE_MIN + 2 * self.idem_written)

    def _prune_history(self, budget: int) -> None:
        # Superseded-at entries written by this entry are not in the DB yet; they are
        # all > base_revision and get pruned by a later entry.
        target = min(self.compact_revision, self.base_revision)
        if self.pruned_rev >= target:
            return
        it = self._db_iter()
        it.seek(SUPERSEDED + _p64(self.pruned_rev + 1))
        done_to = target
        while it.valid():
            k = it.key()
            if k[:1] != SUPERSEDED:
                break
            rev = _u64(k[1:9])
            if rev > target:
                break
            if budget <= 0:
                done_to = rev - 1
                break
            self.overlay[k] = None
            self.overlay[k[9:]] = None
            budget -= 1
            it.next()
        _check(it)
        self.pruned_rev = done_to

    def _prune_idempotency(self, budget: int) -> None:
        clock = self.clock
        if self.idem_next is not None and self.idem_next > clock:
            # Nothing due: skip the seek, ending exactly where a full pass would.
            self.idem_pruned = clock
            self.idem_next = min(self.idem_next, self.stored_min_exp)
            return
        it = self._db_iter()
        it.seek(IDEM_EXP + _p64(self.idem_pruned + 1))
        next_exp = _INF  # first expiry left in the DB index after this pass
        while it.valid():
            k = it.key()
            if k[:1] != IDEM_EXP:
                break
            exp = _u64(k[1:9])
            if exp > clock or budget <= 0:
                next_exp = exp
                break
            if k not in self.overlay:  # else: replaced by a new record in this entry
                self.overlay[k] = None
                self.overlay[IDEM + k[9:]] = None
                budget -= 1
            it.next()
        _check(it)
        # Every index entry with expiry <= idem_pruned is gone; new ones expire later.
        self.idem_pruned = min(next_exp - 1, clock)
        self.idem_next = min(next_exp, self.stored_min_exp)


_META_INDEX = {"version": 0, "create_revision": 1, "mod_revision": 2}


def idempotency_record_id(op: dict) -> bytes:
    """Where an op's idempotency record lives: its ns, NUL, its key (ns has no NUL)."""
    return op.get("ns", "").encode() + SEP + op["idempotency_key"].encode()


def _canonical(v: Any) -> Any:
    if isinstance(v, dict):
        return [[k, _canonical(v[k])] for k in sorted(v)]
    if isinstance(v, list | tuple):
        return [_canonical(x) for x in v]
    return v


def op_digest(op: dict) -> bytes:
    """What binds an idempotency key to its request: a digest of the validated op without
    the key itself, independent of the order of its fields (a retry is re-validated)."""
    body = {k: v for k, v in op.items() if k != "idempotency_key"}
    packed = msgpack.packb(_canonical(body), use_bin_type=True)
    return hashlib.blake2b(packed, digest_size=16).digest()


def _fix_txn_result(result: dict, revision: int, op_ns: str, txn_ns: str) -> None:
    """Inner results report the txn's revision; kvs of another ns carry their ns."""
    result["revision"] = revision
    if "continuation" in result:
        result["continuation"] = _with_revision(result["continuation"], revision)
    if op_ns == txn_ns:
        return
    for name in ("kv", "prev_kv"):
        if result.get(name) is not None:
            result[name]["ns"] = op_ns
    for name in ("kvs", "prev_kvs"):
        for kv in result.get(name, ()):
            kv["ns"] = op_ns


def _with_revision(token: str, revision: int) -> str:
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    return encode_continuation(revision, _unpack(raw)[1])


def _check(it: Any) -> None:
    """Raise StorageError if a RocksDB iterator stopped because of an error."""
    try:
        it.status()
    except Exception as e:
        raise StorageError(f"RocksDB iterator failed: {e}") from e


_HANDLERS = {
    "put": _Apply._op_put,
    "delete": _Apply._op_delete,
    "cas": _Apply._op_cas,
    "txn": _Apply._op_txn,
    "compact": _Apply._op_compact,
    "get": _Apply._op_get,
    "range": _Apply._op_range,
}
