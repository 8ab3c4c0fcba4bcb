"""Start-up recovery of a node's data dir: a lost disk, a corrupt RocksDB.

node/main.py's serve() calls `note_lost_state` before anything touches the data dir and
`open_state_machine` instead of opening StateMachine itself; once the node is up it runs a
`BackgroundVerify`, and an apply or that scan failing with Corruption calls `mark_corrupt`
before the node stops.

RocksDB corrupt
    RocksDB checks an SST's block checksums only when a block is read, so a DB whose data
    blocks were garbled opens fine and fails later, at some apply: the node stops
    (node/fatal.py) and, if nothing else changed, would fail again on every restart (a
    crash loop). Until this change every start read the whole DB with checksums verified
    before opening it; at 1M keys of 256 B that took 3.04 s of a 3.41 s restart-to-ready
    (4,224,576 records), so the scan now runs after the start, and the repair happens at
    the next start:

    - At start the DB is opened without a scan. A "Corruption" status at that open (a
      garbled MANIFEST, CURRENT, or a block the open reads) is handled at once, as below.
    - Once the node is ready (or 10 s after the start, whichever is first) a
      `BackgroundVerify` thread reads every record through the state machine's own handle
      (so compaction cannot delete a file under it) with checksums verified and the block
      cache bypassed, in chunks of CHUNK_RECORDS re-seeking after the last key, holding the
      handle lock's `use` side for one chunk only (a snapshot restore waits for one chunk),
      and sleeping PAUSE_SECONDS between chunks so the raft/HTTP thread gets the GIL.
      (rocksdict 0.3.29 exposes no DB::VerifyChecksum, hence a Python loop over the
      records, 0.72 us each.) A restore during the scan swaps the DB under it: the scan
      goes on in the new DB after the same key, so that DB's lower keys go unchecked.
    - A "Corruption" (`is_corruption`: RocksDB's status, or an error raised from one, like
      an apply's StorageError) found by that scan or by any apply writes the marker
      `<db>.corrupt-detected` next to the DB (`db.corrupt-detected` in the data dir: the
      time and the error text, fsynced with its directory) and stops the node
      (status 70, node/fatal.py); its supervisor restarts it.
    - A start that finds the marker moves the DB aside before opening anything, then
      removes the marker (in that order: a crash between the two finds the marker and no
      DB, and only removes the marker). So a corrupt DB costs one extra restart, never a
      loop; the window in which a node serves from a DB with an undetected bad block is
      the scan's length (reads of a bad block fail with an error, they return nothing wrong).
      A client read meeting a bad block gets an error and marks nothing; a restore failing
      on one stops the node unmarked (node/raft/raft_node.py), as before.

    Moving aside: the DB is renamed to `db.corrupt-<UTC time>` (kept for forensics, never
    deleted by us; an operator removes it) with a CRITICAL log line, and the node starts on
    an empty DB. Any other error (the DB is locked by another process, permission denied,
    disk full) is NOT corruption and is raised as before: moving aside a DB another process
    uses would be a disaster.

    What raft does then: nothing special. The raft dir (data_dir/raft: journal, term and
    vote, snapshot.bin) is untouched, so raft safety (never forget a vote or term, never
    forget an acknowledged entry) is kept. The empty DB has applied index 0: at start
    pysyncobj loads snapshot.bin, which RaftNode restores because it is ahead of the DB
    (raft_node._deserialize), then re-applies the journal's entries after it; whatever
    the journal lacks comes from the leader (entries, or its snapshot if this node fell
    behind its log). Without a snapshot.bin the journal still starts at index 1 (a
    journal's prefix is dropped only once a snapshot covering it is durable) and is
    replayed whole. Known gap: a snapshot.bin that is itself unreadable makes the restore
    fail and the node stop (raft_node._deserialize); the operator then deletes the node's
    data dir (node stopped) and it rejoins as below.

Data dir lost
    A node whose raft dir is missing has forgotten the entries it acknowledged and the
    vote it cast. Started without --new-cluster it writes raft/catching-up first and does
    not vote, nor stand for election, until it has caught up from the leader (its
    entries, or its snapshot if the node is behind the leader's compacted log);
    node/raft/catchup.py says why and what "caught up" means. Before this (issue 26) it
    voted at once, and a candidate missing an acknowledged write could win with its vote.
    A member of a cluster being created has no raft state either: `cluster up` creates
    the raft dirs of a cluster none of whose nodes has any (node/raft/data_dir.py), and
    `statekeeper node --new-cluster` does it for one node; `--join` (which `cluster
    add-node` passes) for a node added online. A lost disk restarted with either flag
    votes at once, as before: restart it without (docs/protocol.md, "A lost disk").
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from statekeeper.node.raft.data_dir import EmptyStart, has_raft_state
from statekeeper.node.snapshot_file import fsync_dir
from statekeeper.node.store import snapshot

log = logging.getLogger("statekeeper.recovery")

_SM = TypeVar("_SM")

MARKER_SUFFIX = ".corrupt-detected"
CHUNK_RECORDS = 20_000  # ~15 ms of reading at 0.72 us a record (3.04 s / 4,224,576)
PAUSE_SECONDS = 0.01  # between chunks


def note_lost_state(data_dir: Path, empty_start: EmptyStart = EmptyStart.LOST_DISK) -> bool:
    """Log loudly when the node has no raft state; True if it had some."""
    if has_raft_state(data_dir):
        return True
    if empty_start is not EmptyStart.LOST_DISK:
        log.info("no raft state in %s: a new member (--%s)", data_dir, empty_start.value)
        return False
    log.warning(
        "no raft state in %s: starting EMPTY. If this node ran before, it LOST ITS DISK; "
        "otherwise it is a new member. Either way it catches up from the leader's log or "
        "snapshot and votes only then (node/raft/catchup.py)",
        data_dir,
    )
    return False


def is_corruption(e: BaseException | None) -> bool:
    """RocksDB reports corruption with a "Corruption:" status; only that is ours to repair
    (not "IO error: lock ..." of a DB another process holds, nor a full disk). The error
    may be wrapped (StorageError("RocksDB write failed: ...") from it): the `__cause__`
    chain is followed, not `__context__` (an error raised while handling one is not it)."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if str(e).lstrip().startswith("Corruption"):
            return True
        e = e.__cause__
    return False


def marker_path(db_path: Path) -> Path:
    """Where a run that found `db_path` corrupt leaves word for the next start."""
    return db_path.with_name(db_path.name + MARKER_SUFFIX)


def mark_corrupt(db_path: Path, error: BaseException, now: Callable[[], float] = time.time) -> None:
    """Write the marker (time and error text), fsynced with its directory, so the next
    start moves the DB aside. Best effort: the caller stops the node either way."""
    path = marker_path(db_path)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now()))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, f"{stamp} {error}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(str(path.parent))
    except OSError as e:  # a full or failing disk: the stop's log line still says why
        log.critical("could not write %s: %s", path, e)


def _quarantine_if_marked(db_path: Path) -> None:
    """A previous run found the DB corrupt: move it aside, then forget the marker."""
    marker = marker_path(db_path)
    try:
        reason = marker.read_text(errors="replace").strip()
    except FileNotFoundError:
        return
    if db_path.exists():
        moved = quarantine(db_path)
        fsync_dir(str(db_path.parent))
        _log_quarantined(db_path, f"found by the previous run: {reason}", moved)
    marker.unlink()
    fsync_dir(str(db_path.parent))


def _log_quarantined(db_path: Path, why: object, moved: Path) -> None:
    log.critical(
        "RocksDB in %s is CORRUPT (%s): moved it to %s (kept for inspection; delete it "
        "when done) and starting on an empty DB, rebuilt from this node's raft snapshot "
        "and journal, then from the leader",
        db_path,
        why,
        moved,
    )


def quarantine(db_path: Path, now: Callable[[], float] = time.time) -> Path:
    """Move the DB directory aside (same filesystem: a rename); return where it went."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now()))
    target = db_path.with_name(f"{db_path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = db_path.with_name(f"{db_path.name}.corrupt-{stamp}-{n}")
    os.replace(db_path, target)
    return target


def open_state_machine(db_path: Path, open_sm: Callable[[], _SM]) -> _SM:
    """open_sm(), after moving aside a DB the previous run marked corrupt; a DB whose open
    fails with Corruption is moved aside too and an empty one opened."""
    snapshot.recover_swap(db_path)  # a restore cut short: finish it before judging the DB
    _quarantine_if_marked(db_path)
    try:
        return open_sm()
    except Exception as e:
        if not is_corruption(e):
            raise
        moved = quarantine(db_path)
        _log_quarantined(db_path, e, moved)
    return open_sm()


class BackgroundVerify:
    """Reads the whole DB once, chunk by chunk, on its own thread (see the docstring).

    `read_chunk(after, limit)` is StateMachine.verify_chunk; `on_corruption(error)` is
    called with a Corruption it raised (the node marks the DB and stops). Any other error
    (the store closed at shutdown) ends the scan with an INFO line."""

    def __init__(
        self,
        read_chunk: Callable[[bytes | None, int], tuple[int, bytes | None]],
        on_corruption: Callable[[BaseException], object],
        chunk_records: int = CHUNK_RECORDS,
        pause: float = PAUSE_SECONDS,
    ) -> None:
        self._read_chunk = read_chunk
        self._on_corruption = on_corruption
        self._chunk_records = chunk_records
        self._pause = pause
        self._stop = threading.Event()
        self.records = 0
        self.done = False  # the whole DB was read without error

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="verify-db", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        """End the scan after the chunk in progress (shutdown)."""
        self._stop.set()

    def run(self) -> None:
        started = time.monotonic()
        after: bytes | None = None
        while not self._stop.is_set():
            try:
                n, after = self._read_chunk(after, self._chunk_records)
            except Exception as e:
                if is_corruption(e):
                    self._on_corruption(e)
                else:
                    log.info("RocksDB verification stopped after %d records: %s", self.records, e)
                return
            self.records += n
            if after is None:
                self.done = True
                log.info(
                    "RocksDB verified in the background in %.2f s (%d records)",
                    time.monotonic() - started,
                    self.records,
                )
                return
            self._stop.wait(self._pause)  # the GIL goes to the raft/HTTP thread meanwhile
