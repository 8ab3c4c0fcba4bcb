"""StateMachine: the store behind node.raft.FSM, tying the node/store modules together."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import msgpack
from rocksdict import Rdict, WriteOptions

from statekeeper.node.config import Limits, Retention
from statekeeper.node.errors import OpError
from statekeeper.node.store import auth as tokens
from statekeeper.node.store import reads, snapshot
from statekeeper.node.store.apply import EntryTx, as_applied, op_digest, recorded_result
from statekeeper.node.store.backend import HandleLock, StorageError, open_db, read_verified
from statekeeper.node.store.keys import IDEM, META, Meta, idem_record_id
from statekeeper.node.store.lease_state import LeaseRecord

DEFAULT_LIMITS = Limits()
DEFAULT_RETENTION = Retention()


class StateMachine:
    """Multi-version KV store over one RocksDB directory (see the package docstring).

    Implements node.raft.FSM: apply, checkpoint, write_checkpoint, restore, flush,
    applied_index, clock_ms. Reads (get, range, read, read_view) may run on any thread.
    """

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
        self._handle = HandleLock()
        # Held by each apply and by backup_checkpoint(): a backup taken off the raft
        # thread still sits between two applies.
        self._apply_lock = threading.Lock()
        self._db: Rdict | None = None
        snapshot.recover_swap(self.path)
        self._open()

    # -- lifecycle -----------------------------------------------------------

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = open_db(self.path)
        # Replaced whole after each entry, so a reader sees one entry's meta, not a mix.
        self._meta = Meta.decode(self._db.get(META))
        # Smallest expiry pending in the "e" index, None = unknown (see EntryTx).
        self._idem_next: int | None = None
        # clock_ms of the newest revision-time index record, None = unknown (see EntryTx).
        self._time_indexed: int | None = None
        # Auth tokens by id (node/store/auth.py): replaced whole, never mutated.
        view = reads.ReadView(self._db)
        try:
            self.tokens: dict[str, tokens.TokenRecord] = tokens.load_all(view)
        finally:
            view.close()

    def _close_db(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def close(self) -> None:
        with self._handle.replace:
            self._close_db()

    @property
    def applied_index(self) -> int:
        return self._meta.applied_index

    @property
    def clock_ms(self) -> int:
        """The largest entry time applied so far (ms): the replicated clock."""
        return self._meta.clock

    @property
    def revision(self) -> int:
        return self._meta.revision

    @property
    def compact_revision(self) -> int:
        return self._meta.compact_revision

    def rocksdb_bytes(self) -> tuple[int, int]:
        """(live SST files, memtables) in bytes: RocksDB's own counters, no disk walk."""
        with self._handle.use:
            db = self._db
            if db is None:
                return 0, 0
            return (
                db.property_int_value("rocksdb.live-sst-files-size") or 0,
                db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0,
            )

    # -- apply ---------------------------------------------------------------

    def apply(self, index: int, entry: bytes) -> list[dict] | None:
        """Apply one committed raft entry; None if `index` was already applied."""
        with self._handle.use, self._apply_lock:
            if index <= self._meta.applied_index:
                return None
            return self._apply(index, entry)

    def _apply(self, index: int, entry: bytes) -> list[dict]:
        tx = EntryTx(
            self._db, self.limits, self.retention, self._packer.pack, self._meta, self._idem_next
        )
        tx.time_indexed = self._time_indexed
        results = tx.apply(entry)
        wb, meta = tx.write_batch(index)
        try:
            self._db.write(wb, self._wopts)
        except Exception as e:
            raise StorageError(f"RocksDB write failed: {e}") from e
        self._idem_next = tx.idem_next
        self._time_indexed = tx.time_indexed
        if tx.tokens_changed:  # after the write: a request never sees an unapplied token
            updated = dict(self.tokens)
            for tid, rec in tokens.changes(tx.overlay).items():
                if rec is None:
                    updated.pop(tid, None)
                else:
                    updated[tid] = rec
            self.tokens = updated
        self._meta = meta  # last: readers of applied_index see the rest done
        return results

    # -- reads ---------------------------------------------------------------

    @contextlib.contextmanager
    def read_view(self) -> Iterator[reads.ReadView]:
        """A consistent view of the whole DB as of one applied entry, for as long as the
        `with` lasts. Every read goes through one; it is also the way to look at the raw
        keys (view.scan(keys.FIRST_KEY, keys.PAST_LAST_KEY)) when debugging."""
        with self._handle.use:
            if self._db is None:
                raise OpError("unavailable", "the state machine is closed")
            view = reads.ReadView(self._db)
            view.retention = self.retention  # retention_status shows the settings
            try:
                yield view
            finally:
                view.close()

    def get(self, ns: str, key: str, revision: int | None = None) -> dict:
        """{"revision": served, "kv": kv or None}; raises OpError compacted/future_revision."""
        with self.read_view() as view:
            return reads.get(view, ns, key, revision)

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
        with self.read_view() as view:
            return reads.range_(
                view, self.limits, ns, prefix, start, end, limit, continuation, revision, keys_only
            )

    def lease_ns(self, lease: int) -> str | None:
        """The namespace of a lease, None if it does not exist (node/api/authz.py)."""
        with self.read_view() as view:
            rec = LeaseRecord.load(view, lease)
        return None if rec is None else rec.ns

    def read(self, op: dict) -> dict:
        """Serve a validated read op (get, range, read_stream, ...) from local state,
        through the reader its op family registered (reads.READERS)."""
        reader = reads.READERS.get(op.get("op"))
        if reader is None:
            raise OpError("unknown_op", f"{op.get('op')!r} is not a read op")
        with self.read_view() as view:
            return reader(view, self.limits, op)

    def recorded_result(self, op: dict) -> dict | None:
        """The answer apply would replay for validated write `op` from the record of its
        idempotency key (scoped to its namespace, bound to its request), or None: no key,
        no record, or an expired one. Raises idempotency_key_reused like apply. Local
        state: the caller makes it linearizable (node/quota/gate.py)."""
        if op.get("idempotency_key") is None:
            return None
        ran = as_applied(op, self.limits)
        digest = op_digest(ran)  # not self._packer: apply uses it on the raft thread
        with self.read_view() as view:
            stored = view.point(IDEM + idem_record_id(ran.get("ns", ""), ran["idempotency_key"]))
            clock = view.clock
        return None if stored is None else recorded_result(stored, clock, digest, ran)[0]

    def verify_chunk(self, after: bytes | None, limit: int) -> tuple[int, bytes | None]:
        """Read up to `limit` raw records after key `after` with checksums verified
        (backend.read_verified), through this store's own handle, so compaction cannot
        delete a file under the scan; the `use` side of the handle lock is held for this
        chunk only, so a restore waits for one chunk, not a whole scan (node/recovery.py).
        Raises OpError("unavailable") once the store is closed."""
        with self._handle.use:
            if self._db is None:
                raise OpError("unavailable", "the state machine is closed")
            return read_verified(self._db, after, limit)

    # -- snapshots -----------------------------------------------------------

    def flush(self) -> None:
        """Write the memtable to an SST file now (any thread; applies go on meanwhile).

        A checkpoint flushes first; doing most of that work here, off the raft thread,
        keeps the checkpoint itself short."""
        try:
            self._db.flush(True)
        except Exception as e:
            raise StorageError(f"RocksDB flush failed: {e}") from e

    def reclaim(self) -> None:
        """Flush, then compact every RocksDB file (any thread; applies go on meanwhile):
        what deletes and compaction removed leaves the disk only when RocksDB rewrites its
        files. Run under the NOSPACE alarm (node/quota/disk_watch.py), like etcd's defrag."""
        with self._handle.use:
            try:
                self._db.flush(True)
                self._db.compact_range(None, None)
            except Exception as e:
                raise StorageError(f"RocksDB compaction failed: {e}") from e

    def checkpoint(self) -> Path:
        """A consistent checkpoint of the DB in a new directory (hard links: fast).

        Taking it is the only part of a snapshot that must happen between two applies;
        write_checkpoint() can then pack it on another thread. The caller removes it.
        """
        with self._handle.use:
            return snapshot.checkpoint(self._db, self.path)

    def backup_checkpoint(self) -> tuple[Path, float]:
        """checkpoint() for a backup, from any thread: (directory, seconds applies waited).

        Flushes first without the lock (applies go on), then holds the apply lock for the
        checkpoint alone, so the raft thread waits only for the hard links of the files
        (node/api/backup.py notes the pause measured)."""
        self.flush()
        with self._handle.use:
            started = time.monotonic()
            with self._apply_lock:
                work = snapshot.checkpoint(self._db, self.path)
            return work, time.monotonic() - started

    @staticmethod
    def write_checkpoint(work: Path, f: BinaryIO) -> None:
        """Pack a checkpoint() directory into `f` as the snapshot format restore() reads."""
        snapshot.write_checkpoint(work, f)

    def restore(self, path: str | os.PathLike, offset: int = 0) -> None:
        """Replace the whole DB with a snapshot written by write_checkpoint(), at `offset`
        of file `path`."""
        staging = snapshot.sibling(self.path, ".restore")
        try:
            new_db = snapshot.stage(Path(path), staging, offset)
            with self._handle.replace:
                self._close_db()
                snapshot.swap_in(new_db, self.path)
                self._open()
        finally:
            shutil.rmtree(staging, ignore_errors=True)
