"""The RocksDB handle under the store: opening it, checked access, and the lock guarding it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from rocksdict import AccessType, BlockBasedOptions, Options, Rdict, ReadOptions

from statekeeper.node.store.keys import META, Meta


class StorageError(Exception):
    """RocksDB failed during apply; the node must stop (state may be unknown)."""


def open_db(path: Path) -> Rdict:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)  # apply's point lookups of "c" keys
    opts.set_block_based_table_factory(table)
    return Rdict(str(path), opts)


def read_meta(db_dir: Path) -> Meta:
    """The meta record of a DB directory that is not open (a checkpoint), read-only."""
    db = Rdict(str(db_dir), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        raw = db.get(META)
    finally:
        db.close()
    return Meta.decode(raw)


def db_get(db: Rdict, k: bytes) -> bytes | None:
    try:
        return db.get(k)
    except Exception as e:
        raise StorageError(f"RocksDB read failed: {e}") from e


def db_iter(db: Rdict) -> Any:
    """A new iterator (it pins an implicit snapshot of the DB at creation)."""
    try:
        return db.iter(ReadOptions())
    except Exception as e:
        raise StorageError(f"RocksDB iterator failed: {e}") from e


def read_verified(db: Rdict, after: bytes | None, limit: int) -> tuple[int, bytes | None]:
    """Read up to `limit` records (key and value) of `db` in key order, starting after key
    `after` (at the first key when None), with every block's checksum verified and without
    filling the block cache (a scan must not evict what serving reads); (records read, the
    last key read, or None once the end of the DB was reached). Raises RocksDB's own
    exception ("Corruption: ...") on a bad block (node/recovery.py)."""
    opts = ReadOptions()
    opts.set_verify_checksums(True)
    opts.fill_cache(False)
    it = db.iter(opts)
    try:
        if after is None:
            it.seek_to_first()
        else:
            it.seek(after + b"\x00")  # the smallest key above `after`, bytewise
        n = 0
        last = None
        while n < limit and it.valid():
            last = it.key()
            it.value()
            n += 1
            it.next()
        if it.valid():
            return n, last
        it.status()  # an iterator stopped by a bad block is invalid; this raises its error
        return n, None
    finally:
        del it


def check(it: Any) -> None:
    """Raise StorageError if a RocksDB iterator stopped because of an error."""
    try:
        it.status()
    except Exception as e:
        raise StorageError(f"RocksDB iterator failed: {e}") from e


class HandleLock:
    """Guards the RocksDB handle, not the data in it.

    `use`: apply, reads and checkpoints, any number at once (RocksDB orders their reads
    and writes itself: a read sees whole WriteBatches, i.e. whole raft entries).
    `replace`: close and restore, which take the handle away; one at a time and alone,
    and a waiting one keeps new users out until it is done.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._users = 0
        self._replacing = False
        self._replacers_waiting = 0
        self.use = _Use(self)
        self.replace = _Replace(self)


class _Use:
    def __init__(self, lock: HandleLock) -> None:
        self._l = lock

    def __enter__(self) -> None:
        lk = self._l
        with lk._cond:
            while lk._replacing or lk._replacers_waiting:
                lk._cond.wait()
            lk._users += 1

    def __exit__(self, *exc: object) -> None:
        lk = self._l
        with lk._cond:
            lk._users -= 1
            if not lk._users and lk._replacers_waiting:
                lk._cond.notify_all()


class _Replace:
    def __init__(self, lock: HandleLock) -> None:
        self._l = lock

    def __enter__(self) -> None:
        lk = self._l
        with lk._cond:
            lk._replacers_waiting += 1
            while lk._replacing or lk._users:
                lk._cond.wait()
            lk._replacers_waiting -= 1
            lk._replacing = True

    def __exit__(self, *exc: object) -> None:
        lk = self._l
        with lk._cond:
            lk._replacing = False
            lk._cond.notify_all()
