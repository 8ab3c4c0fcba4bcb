"""A durable raft journal for pysyncobj (its FileJournal writes into an mmap and never fsyncs).

`DurableJournal` implements the duck-typed interface pysyncobj's SyncObj calls on its journal
(add / clear / deleteEntriesFrom / deleteEntriesTo / __getitem__ / __len__ / _destroy /
setRaftCommitIndex / getRaftCommitIndex / setCurrentTerm / getCurrentTerm / getVotedForNodeId /
onOneSecondTimer / flush) plus `sync()`, which node/raft/syncobj.py calls once before a follower
answers an AppendEntries and once per tick before the leader counts itself.

Durability contract
    add() only appends to a user-space buffer (no syscall). sync() writes the whole buffer with
    one pwrite and, in fsync="always" mode, one fdatasync; it is a no-op when nothing changed.
    Entries are durable once sync() has returned, never before. setCurrentTerm() is durable
    when it returns. deleteEntriesFrom / deleteEntriesTo / clear are durable when they return
    (except in fsync="never" mode, which never fsyncs but still pushes every byte to the
    kernel, so a process crash loses nothing; only a power loss / kernel crash can).

    sync_behind(on_durable) is sync() without the wait (the leader's, node/raft/syncobj.py):
    the buffer is written at once and the fdatasync runs on the journal's own thread;
    the entries are durable once on_durable() was called (syncing_behind is then False),
    never before, and sync() and every call that truncates or replaces the file first wait
    for it (a failure there fails the journal as below).

    Any OSError from write / fsync / truncate / rename calls `on_fatal` (default: log CRITICAL
    and os._exit(71)). The journal never retries a failed fsync: after a failed fsync Linux may
    have dropped the dirty pages and report the next fsync as a success ("fsyncgate"), so the
    log can no longer be trusted. If on_fatal returns or raises, the journal stays failed:
    every later mutating call and sync() raises JournalFailedError, so nothing written after
    the failure is ever reported as durable.

Files (all next to `path`)
    <path>          the log: an 8-byte header b"SKJLOG\\x00\\x01", then records, each
                    u32 LE payload length | u32 LE zlib.crc32(payload) | payload, where
                    payload = msgpack [command (bin), idx (int), term (int)].
                    (Always zlib's CRC-32, never "crc32c if installed": the file format must
                    not depend on which optional package happens to be importable.)
    <path>.meta     term / votedFor / commit index: the 8-byte header b"SKJMETA\\x01", then one
                    record framed as above whose payload is a msgpack map
                    {"v": 1, "term": int, "voted_for": str | None, "commit": int}.
                    Replaced atomically: write <path>.meta.tmp, fsync it, rename, fsync dir.
    <path>.commit   the lazily persisted commit index: u64 LE commit | u32 LE crc32 of those 8
                    bytes, overwritten in place, never fsynced. It is kept out of .meta on
                    purpose: replacing .meta by an unsynced rename once a second could, after a
                    power loss, leave an empty .meta and lose term/votedFor (a double vote);
                    losing the commit index is harmless (pysyncobj recomputes it). A torn or
                    missing .commit falls back to the commit index stored in .meta, then to 1.
    <path>.tmp      scratch file of a prefix rewrite (deleteEntriesTo); removed on open.

Recovery on open
    Records are read until the first one that is short, has a bad CRC, or does not unpack to
    (bytes, int, int). Everything from that record on is treated as a torn write from a crash:
    a WARNING names the offset and the number of bytes dropped, the file is truncated there
    (and fsynced in "always" mode), and the journal continues with the valid prefix. A bad
    record in the MIDDLE followed by valid ones is handled the same way (we stop at the first
    bad record): an append-only log written with one write per sync() can only be torn in its
    last, unacknowledged write, and a record boundary after garbage cannot be trusted (its
    length field may be garbage too), so replaying past it could replay garbage. Dropping an
    entry this node had acknowledged is repaired by raft from the other replicas; replaying a
    wrong one is not. A file whose header is not ours (e.g. a pysyncobj FileJournal) or a .meta
    that is corrupt in "always" mode raises JournalCorruptError instead of being overwritten.

Memory
    All entries live in memory as a list of (command, idx, term) tuples, as pysyncobj slices
    the journal constantly (__getitem__ returns list items / list slices directly), plus an
    array of 8-byte record offsets. Per entry that is roughly len(command) + ~150 bytes
    (tuple, bytes object, offset); pysyncobj's log compaction (deleteEntriesTo after a
    snapshot) is what bounds it. The log is read whole into memory once on open.

Thread safety
    Mutations and sync() hold one lock (sync() holds it during fdatasync); reads are plain
    list operations. pysyncobj drives everything from its single raft thread anyway.

Size
    ~670 lines, over the project's ~500 on purpose: one job (the durable record pysyncobj
    writes through), and its three files share one lock, one fatal-I/O path and the one
    durability contract above; split, the contract would be argued across modules.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
import time
import zlib
from array import array
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NoReturn, TypeVar

import msgpack

from statekeeper.node import failpoints
from statekeeper.node.config import FSYNC_MODES
from statekeeper.node.fatal import JOURNAL_EXIT_CODE, stop_now

log = logging.getLogger("statekeeper.journal")

FATAL_EXIT_CODE = JOURNAL_EXIT_CODE

LOG_MAGIC = b"SKJLOG\x00\x01"
META_MAGIC = b"SKJMETA\x01"
_REC = struct.Struct("<II")  # payload length, crc32(payload)
_COMMIT = struct.Struct("<QI")  # commit index, crc32 of the packed index
_COPY_CHUNK = 1 << 20

_T = TypeVar("_T")
Entry = tuple[bytes, int, int]
FatalHandler = Callable[[str, BaseException], NoReturn]
FsyncFn = Callable[[int], None]


class JournalError(Exception):
    """Base class of journal errors."""


class JournalCorruptError(JournalError):
    """A journal file exists but is not one we can read without losing data silently."""


class JournalFailedError(JournalError):
    """The journal hit an I/O error earlier and must not be used (the node must stop)."""


def _default_on_fatal(msg: str, exc: BaseException) -> NoReturn:
    # Never continue, and never acknowledge anything, with a log we cannot trust.
    stop_now(msg, exc, FATAL_EXIT_CODE)


def _encode_record(payload: bytes) -> bytes:
    return _REC.pack(len(payload), zlib.crc32(payload)) + payload


def _decode_record(data: memoryview, pos: int) -> tuple[memoryview | None, str]:
    """The payload of the record at `pos`, or (None, why it is invalid)."""
    avail = len(data) - pos
    if avail < _REC.size:
        return None, f"short record header ({avail} bytes)"
    length, crc = _REC.unpack_from(data, pos)
    if length == 0 or length > avail - _REC.size:
        return None, f"record length {length} does not fit the {avail - _REC.size} bytes left"
    payload = data[pos + _REC.size : pos + _REC.size + length]
    if zlib.crc32(payload) != crc:
        return None, "CRC mismatch"
    return payload, ""


def _unpack_entry(payload: memoryview) -> Entry | None:
    try:
        obj = msgpack.unpackb(payload, use_list=False, raw=False)
    except Exception:  # msgpack raises assorted errors on garbage
        return None
    if (
        type(obj) is tuple
        and len(obj) == 3
        and type(obj[0]) is bytes
        and type(obj[1]) is int
        and type(obj[2]) is int
    ):
        return obj
    return None


def _to_bytes(command: object) -> bytes:
    # pysyncobj's own FileJournal accepts str too (to_bytes); memory must equal what reopening
    # returns, so the converted value is what we keep.
    if isinstance(command, str):
        return command.encode("utf-8")
    if isinstance(command, bytes | bytearray | memoryview):
        return bytes(command)
    raise TypeError(f"journal command must be bytes, not {type(command).__name__}")


class DurableJournal:
    """pysyncobj's journal interface over an fsynced append-only file (see the module doc).

    Positions vs indexes: deleteEntriesFrom(p) / deleteEntriesTo(p) and __getitem__ take
    POSITIONS (0-based offsets from the first entry held), as pysyncobj passes them; the raft
    index is the entry's second field.
    """

    def __init__(
        self,
        path: str,
        fsync: str = "always",
        fsync_fn: FsyncFn = os.fdatasync,
        on_fatal: FatalHandler = _default_on_fatal,
    ) -> None:
        if fsync not in FSYNC_MODES:
            raise ValueError(f"fsync must be one of {FSYNC_MODES}, not {fsync!r}")
        self.path: str = os.fspath(path)
        self.fsync_mode: str = fsync
        self._always = fsync == "always"
        self._on_fatal = on_fatal
        self._fsync_fn = self._fault_hook(fsync_fn)
        self._lock = threading.Lock()  # not reentrant: internals assume it is held
        self._failed: BaseException | None = None
        self._closed = False
        self._pack = msgpack.Packer(use_bin_type=True).pack

        self._meta_path = self.path + ".meta"
        self._commit_path = self.path + ".commit"
        self._tmp_path = self.path + ".tmp"

        # Counters (read by the status endpoint from another thread; plain ints are fine).
        self.truncations = 0  # deleteEntriesFrom calls that dropped >= 1 entry
        self.truncated_entries = 0  # entries dropped by them in total
        self.fsyncs = 0  # fsync calls made (all files)
        self.syncs = 0  # sync() calls that had something to do
        # Called with each fsync's duration in seconds (node/metrics.py), or None.
        self.observe_fsync: Callable[[float], None] | None = None

        self._entries: list[Entry] = []
        self._offsets = array("q")  # file offset of each entry's record
        self._buf = bytearray()  # records added since the last write
        self._written = 0  # file size as far as the kernel knows (end of written records)
        self._unsynced = False  # bytes/truncations the kernel has that were not fdatasynced
        # sync_behind(): the fdatasync running on the journal's own thread, and that thread.
        self._behind: Future | None = None
        self._behind_running = False  # cleared by the journal's thread before on_durable()
        self._behind_pool: ThreadPoolExecutor | None = None

        self._term = 0
        self._voted_for: str | None = None
        self._commit = 1  # pysyncobj's FileJournal default
        self._saved_commit = 1

        self._fd = -1
        self._commit_fd = -1
        self._dir_fd = os.open(
            os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY | os.O_DIRECTORY
        )
        try:
            for stale in (self._tmp_path, self._meta_path + ".tmp"):
                try:
                    os.unlink(stale)  # a rewrite that crashed before its rename
                except FileNotFoundError:
                    pass
            self._open_log()
            self._load_meta()
            self._commit_fd = os.open(
                self._commit_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
        except BaseException:
            self._close_fds()
            raise

    # -- pysyncobj's interface ----------------------------------------------------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        """Append an entry to memory and the write buffer (no syscall; see sync())."""
        if type(command) is not bytes:
            command = _to_bytes(command)
        if type(idx) is not int or type(term) is not int:
            # A float would be written fine and then rejected as corrupt on reopen.
            raise TypeError(
                f"idx and term must be int, not {type(idx).__name__}/{type(term).__name__}"
            )
        entry = (command, idx, term)
        with self._lock:
            if self._failed is not None or self._closed:
                self._refuse()
            payload = self._pack(entry)
            self._entries.append(entry)
            self._offsets.append(self._written + len(self._buf))
            self._buf += _REC.pack(len(payload), zlib.crc32(payload))
            self._buf += payload

    def clear(self) -> None:
        """Drop every entry (durable on return)."""
        with self._lock:
            self._check_usable()
            self._wait_behind()
            self._truncate_at(0)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        """Drop entries at positions >= entryFrom (tail truncation; durable on return)."""
        with self._lock:
            self._check_usable()
            self._wait_behind()
            start = slice(entryFrom, None).indices(len(self._entries))[0]
            dropped = len(self._entries) - start
            if dropped <= 0:
                return
            self._truncate_at(start)
            self.truncations += 1
            self.truncated_entries += dropped

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Drop entries at positions < entryTo (prefix drop after a snapshot; durable on return)."""
        with self._lock:
            self._check_usable()
            self._wait_behind()
            start = slice(entryTo, None).indices(len(self._entries))[0]
            if start == 0:
                return
            if start >= len(self._entries):
                self._truncate_at(0)
                return
            self._rewrite_from(start)

    def __getitem__(self, item: int | slice) -> Entry | list[Entry]:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        """Write out what is buffered, persist the commit index and close the files."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._failed is None:
                    self._wait_behind()
                    self._sync_locked()
                    self._save_commit()
            finally:
                self._closed = True
                if self._behind_pool is not None:  # no fdatasync may outlive its fd
                    self._behind_pool.shutdown(wait=True)
                self._close_fds()

    def close(self) -> None:
        self._destroy()

    def __enter__(self) -> DurableJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self._destroy()

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        # Called for nearly every message: memory only, persisted lazily (onOneSecondTimer).
        self._commit = raftCommitIndex

    def getRaftCommitIndex(self) -> int:
        return self._commit

    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:
        """Store term and vote; durable before returning (the caller grants a vote next)."""
        with self._lock:
            self._check_usable()
            self._term = term
            self._voted_for = votedForNodeId
            self._write_meta()
            self._save_commit()

    def getCurrentTerm(self) -> int:
        return self._term

    def getVotedForNodeId(self) -> str | None:
        return self._voted_for

    def onOneSecondTimer(self) -> None:
        with self._lock:
            if self._failed is not None or self._closed:
                return
            # Safety net for entries nobody sync()ed: hand them to the kernel (no fsync).
            self._write_buffer()
            self._save_commit()

    def flush(self) -> None:
        """Push buffered records to the kernel without fsync (survives a process crash)."""
        with self._lock:
            self._check_usable()
            self._write_buffer()

    # -- ours ---------------------------------------------------------------------------------

    def sync(self) -> None:
        """Make every entry added so far durable: one write + (in "always" mode) one fdatasync.

        A no-op when nothing changed since the last sync.
        """
        with self._lock:
            if self._failed is not None or self._closed:
                self._refuse()
            self._wait_behind()
            self._sync_locked()

    def sync_behind(self, on_durable: Callable[[], None]) -> None:
        """Start making every entry added so far durable without waiting for it: the buffer
        is written now (one pwrite), the fdatasync runs on the journal's own thread, which
        calls on_durable() once it returned. Until then `syncing_behind` is True, and sync()
        (and every call that changes the file but add()) first waits for it.

        Why: the leader's fdatasync blocked the node's loop (HTTP and raft share it) for
        ~0.3-1 ms per entry, ~9% of its time at 64 clients (py-spy, wall clock); only the
        leader's own vote towards the commit needs it, and its next tick waits for it
        (node/raft/syncobj.py). In "never" mode this is sync()."""
        with self._lock:
            if self._failed is not None or self._closed:
                self._refuse()
            if not self._always or self._behind is not None:
                # "never": nothing to wait for; one in flight: the next sync() does the rest.
                self._write_buffer()
                return
            self._write_buffer()
            if not self._unsynced:
                return
            self.syncs += 1
            self._unsynced = False  # set again by any write made while it runs
            self._behind_running = True
            if self._behind_pool is None:
                self._behind_pool = ThreadPoolExecutor(1, thread_name_prefix="journal-fsync")
            self._behind = self._behind_pool.submit(self._fsync_behind, self._fd, on_durable)

    @property
    def syncing_behind(self) -> bool:
        """True while a sync_behind() fdatasync runs (the entries it covers are not durable).
        It turns False before on_durable() is called: a caller that saw True and then
        returned is told by on_durable()."""
        return self._behind_running

    def _fsync_behind(self, fd: int, on_durable: Callable[[], None]) -> None:
        # On the journal's thread, without the lock: only this thread touches the fd until
        # _wait_behind() collects it (everything that would replace or truncate it waits).
        try:
            self._fsync(fd, "fdatasync of the log")
        finally:
            self._behind_running = False
            on_durable()  # wakes the raft loop; a failure is raised to it by _wait_behind()

    def _wait_behind(self) -> None:
        """(lock held) Wait for the sync_behind() fdatasync, if any; its failure raises here
        (the journal already failed: _fatal ran on the journal's thread)."""
        behind, self._behind = self._behind, None
        if behind is None:
            return
        try:
            behind.result()
        except BaseException as exc:
            if self._failed is None:
                self._failed = exc
            self._refuse()

    def _sync_locked(self) -> None:
        if not self._buf and not self._unsynced:
            return
        self.syncs += 1
        self._write_buffer()
        if self._unsynced:
            self._fsync(self._fd, "fdatasync of the log")
            self._unsynced = False

    @property
    def size_bytes(self) -> int:
        """Bytes of the log file (written or buffered)."""
        return self._written + len(self._buf)

    @property
    def dirty(self) -> bool:
        """True if some change is not yet durable (sync() would do something)."""
        return bool(self._buf) or self._unsynced

    @property
    def failed(self) -> bool:
        return self._failed is not None

    # -- internals: log file ------------------------------------------------------------------

    def _open_log(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        with open(self._fd, "rb", closefd=False) as f:
            data = f.read()
        if len(data) < len(LOG_MAGIC):
            if data != LOG_MAGIC[: len(data)]:
                raise JournalCorruptError(f"{self.path}: not a statekeeper journal (bad header)")
            # New, or a crash while creating it: (re)write the header.
            self._guard("write of the log header", os.ftruncate, self._fd, 0)
            self._pwrite_all(self._fd, LOG_MAGIC, 0, "write of the log header")
            if self._always:
                self._fsync(self._fd, "fsync of the new log")
                self._fsync(self._dir_fd, "fsync of the journal directory")
            self._written = len(LOG_MAGIC)
            return
        if data[: len(LOG_MAGIC)] != LOG_MAGIC:
            raise JournalCorruptError(
                f"{self.path}: not a statekeeper journal (header {bytes(data[:8])!r}); "
                "refusing to overwrite it"
            )
        entries, offsets = self._entries, self._offsets
        pos, end, why = len(LOG_MAGIC), len(data), ""
        view = memoryview(data)
        while pos < end:
            payload, why = _decode_record(view, pos)
            if payload is None:
                break
            entry = _unpack_entry(payload)
            if entry is None:
                why = "payload is not msgpack [bytes, int, int]"
                break
            entries.append(entry)
            offsets.append(pos)
            pos += _REC.size + len(payload)
        if pos < end:
            log.warning(
                "journal %s: torn or corrupt record at offset %d (%s): dropping %d bytes "
                "from there to the end; keeping %d entries",
                self.path,
                pos,
                why,
                end - pos,
                len(entries),
            )
            self._guard("truncation of the torn tail", os.ftruncate, self._fd, pos)
            if self._always:
                self._fsync(self._fd, "fsync after dropping the torn tail")
        self._written = pos

    def _write_buffer(self) -> None:
        if not self._buf:
            return
        self._pwrite_all(self._fd, self._buf, self._written, "write to the log")
        self._written += len(self._buf)
        self._buf.clear()
        self._unsynced = self._always

    def _truncate_at(self, pos: int) -> None:
        """Drop entries at positions >= pos from memory, buffer and file."""
        cut = self._offsets[pos] if pos < len(self._offsets) else self._written + len(self._buf)
        del self._entries[pos:]
        del self._offsets[pos:]
        if cut >= self._written:
            # Only buffered records go: nothing on disk changes.
            del self._buf[cut - self._written :]
            return
        self._buf.clear()
        self._guard("truncation of the log", os.ftruncate, self._fd, cut)
        self._written = cut
        if self._always:
            self._fsync(self._fd, "fsync after truncating the log")
            self._unsynced = False

    def _rewrite_from(self, start: int) -> None:
        """Keep entries at positions >= start: copy their records to a new file, swap it in."""
        src_from = self._offsets[start]
        shift = src_from - len(LOG_MAGIC)
        tmp_fd = -1
        try:
            tmp_fd = self._guard(
                "creation of the rewritten log",
                os.open,
                self._tmp_path,
                os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                0o600,
            )
            self._pwrite_all(tmp_fd, LOG_MAGIC, 0, "write of the rewritten log")
            out = len(LOG_MAGIC)
            # Records already in the old file are copied as they are (no re-encoding).
            src = src_from
            while src < self._written:
                chunk = self._guard(
                    "read of the log",
                    os.pread,
                    self._fd,
                    min(_COPY_CHUNK, self._written - src),
                    src,
                )
                if not chunk:
                    self._fatal("read of the log", OSError(errno.EIO, "log shorter than written"))
                self._pwrite_all(tmp_fd, chunk, out, "write of the rewritten log")
                src += len(chunk)
                out += len(chunk)
            # Then the buffered records, minus those before `start` when it is in the buffer.
            kept = self._buf[max(0, src_from - self._written) :]
            self._pwrite_all(tmp_fd, kept, out, "write of the rewritten log")
            out += len(kept)
            if self._always:
                self._fsync(tmp_fd, "fsync of the rewritten log")
            failpoints.hit("journal-prefix-drop")
            self._guard("rename of the rewritten log", os.replace, self._tmp_path, self.path)
            failpoints.hit("journal-prefix-dropped")
            if self._always:
                self._fsync(self._dir_fd, "fsync of the journal directory")
        except BaseException:
            _close_quietly(tmp_fd)
            raise
        os.close(self._fd)
        self._fd = tmp_fd
        del self._entries[:start]
        self._offsets = array("q", [o - shift for o in self._offsets[start:]])
        self._written = out
        self._buf.clear()
        self._unsynced = False

    # -- internals: meta and commit files ---------------------------------------------------

    def _load_meta(self) -> None:
        meta_commit = None
        try:
            with open(self._meta_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = None
        if data is not None:
            meta = self._parse_meta(data)
            if meta is None:
                msg = f"{self._meta_path} is corrupt (term / votedFor unreadable)"
                if self._always:
                    # Starting with term 0 and no vote could make this node vote twice.
                    raise JournalCorruptError(msg + "; refusing to start")
                log.error("%s; fsync=never, so starting from term 0 with no vote", msg)
            else:
                self._term, self._voted_for, meta_commit = meta
        commit = self._read_commit_file()
        if commit is None:
            commit = meta_commit
        if commit is not None:
            if self._entries and commit > self._entries[-1][1]:
                # The log lost its unsynced tail (never mode, power loss): nothing past it can
                # be applied from here, the leader resends it.
                log.warning(
                    "journal %s: stored commit index %d is past the last entry %d; clamping",
                    self.path,
                    commit,
                    self._entries[-1][1],
                )
                commit = self._entries[-1][1]
            self._commit = self._saved_commit = commit

    @staticmethod
    def _parse_meta(data: bytes) -> tuple[int, str | None, int] | None:
        if data[: len(META_MAGIC)] != META_MAGIC:
            return None
        payload, _ = _decode_record(memoryview(data), len(META_MAGIC))
        if payload is None or len(META_MAGIC) + _REC.size + len(payload) != len(data):
            return None
        try:
            m = msgpack.unpackb(payload, raw=False)
            term, voted, commit = m["term"], m["voted_for"], m["commit"]
        except Exception:
            return None
        if (
            type(term) is not int
            or type(commit) is not int
            or not (voted is None or type(voted) is str)
        ):
            return None
        return term, voted, commit

    def _write_meta(self) -> None:
        payload = msgpack.packb(
            {"v": 1, "term": self._term, "voted_for": self._voted_for, "commit": self._commit},
            use_bin_type=True,
        )
        data = META_MAGIC + _encode_record(payload)
        tmp = self._meta_path + ".tmp"
        fd = self._guard(
            "creation of the meta file",
            os.open,
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
            0o600,
        )
        try:
            self._pwrite_all(fd, data, 0, "write of the meta file")
            if self._always:
                self._fsync(fd, "fsync of the meta file")
        finally:
            _close_quietly(fd)
        self._guard("rename of the meta file", os.replace, tmp, self._meta_path)
        if self._always:
            self._fsync(self._dir_fd, "fsync of the journal directory")

    def _read_commit_file(self) -> int | None:
        try:
            with open(self._commit_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        if len(data) != _COMMIT.size:
            return None
        commit, crc = _COMMIT.unpack(data)
        if zlib.crc32(data[:8]) != crc:
            return None
        return commit

    def _save_commit(self) -> None:
        commit = self._commit
        if commit == self._saved_commit:
            return
        raw = struct.pack("<Q", commit)
        # One 12-byte in-place write, no fsync: a torn or lost one only costs a recomputation.
        self._pwrite_all(
            self._commit_fd, raw + struct.pack("<I", zlib.crc32(raw)), 0, "write of the commit file"
        )
        self._saved_commit = commit

    # -- internals: I/O with the fatal path -----------------------------------------------------

    @staticmethod
    def _fault_hook(fsync_fn: FsyncFn) -> FsyncFn:
        # The failpoint journal-fsync (node/failpoints.py) can make fsyncs fail, to show
        # that the node then stops and loses nothing it acknowledged.
        def fsync(fd: int) -> None:
            failpoints.hit("journal-fsync")
            fsync_fn(fd)

        return fsync

    def _fsync(self, fd: int, what: str) -> None:
        self.fsyncs += 1
        observe = self.observe_fsync
        if observe is None:
            self._guard(what, self._fsync_fn, fd)
            return
        t0 = time.perf_counter()
        self._guard(what, self._fsync_fn, fd)
        observe(time.perf_counter() - t0)

    def _pwrite_all(self, fd: int, data: bytes | bytearray, offset: int, what: str) -> None:
        with memoryview(data) as view:
            done = 0
            while done < len(view):
                done += self._guard(what, os.pwrite, fd, view[done:], offset + done)

    def _guard(self, what: str, fn: Callable[..., _T], *args: object) -> _T:
        try:
            return fn(*args)
        except OSError as exc:
            self._fatal(what, exc)

    def _fatal(self, what: str, exc: BaseException) -> NoReturn:
        self._failed = exc
        msg = f"journal {self.path}: {what} failed ({exc!r}); the log can no longer be trusted"
        try:
            self._on_fatal(msg, exc)
        finally:
            self._close_fds()
        raise JournalFailedError(msg) from exc

    def _check_usable(self) -> None:
        if self._failed is not None or self._closed:
            self._refuse()

    def _refuse(self) -> NoReturn:
        if self._failed is not None:
            raise JournalFailedError(f"journal {self.path} failed earlier ({self._failed!r})")
        raise JournalError(f"journal {self.path} is closed")

    def _close_fds(self) -> None:
        for name in ("_fd", "_commit_fd", "_dir_fd"):
            fd = getattr(self, name)
            setattr(self, name, -1)
            _close_quietly(fd)


def _close_quietly(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass
