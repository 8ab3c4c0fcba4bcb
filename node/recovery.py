"""Start-up recovery of a node's data dir: a lost disk, a corrupt RocksDB.

node/main.py's serve() calls `note_lost_state` before anything touches the data dir and
`open_state_machine` instead of opening StateMachine itself.

RocksDB corrupt
    Before the DB is opened for real, it is opened read-only and read whole with block
    checksums verified (`verify_db`): RocksDB checks an SST's blocks only when they are
    read, so a DB whose data blocks were garbled opens fine and fails later, at some apply
    (then the node stops, node/fatal.py, and would crash again on every restart). A DB
    that fails with RocksDB's "Corruption" status, at this scan or at the real open, is
    moved aside to `db.corrupt-<UTC time>` (kept for forensics, never deleted by us; an
    operator removes it) with a CRITICAL log line, and the node starts on an empty DB.
    Any other error (the DB is locked by another process, permission denied, disk full)
    is NOT corruption and is raised as before: moving aside a DB another process uses
    would be a disaster.

    What raft does then: nothing special. The raft dir (data_dir/raft: journal, term and
    vote, snapshot.bin) is untouched, so raft safety (never forget a vote or term, never
    forget an acknowledged entry) is kept. The empty DB has applied index 0: at start
    pysyncobj loads snapshot.bin, which RaftNode restores because it is ahead of the DB
    (raft_node._load_snapshot), then re-applies the journal's entries after it; whatever
    the journal lacks comes from the leader (entries, or its snapshot if this node fell
    behind its log). Without a snapshot.bin the journal still starts at index 1 (a
    journal's prefix is dropped only once a snapshot covering it is durable) and is
    replayed whole. Known gap: a snapshot.bin that is itself unreadable makes the restore
    fail and the node stop (raft_node._deserialize); the operator then deletes the node's
    data dir (node stopped) and it rejoins as below.

Data dir lost
    A node whose raft dir is missing starts with an empty journal and an empty DB and
    catches up from the leader (pysyncobj sends its snapshot once the node is behind the
    leader's compacted log). That is also what a brand-new node looks like, so this is a
    WARNING, not an error: "no raft state ... first start, or this node lost its disk".

    Raft hazard (known limitation, not mitigated): a node that lost its term/vote record
    may vote a second time in a term it already voted in, so two leaders could be elected
    in one term if the loss happens in the middle of an election and the restarted node
    answers a second candidate of that same term. pre-vote (node/raft/prevote.py) narrows
    the window (a pre-vote is refused while a leader is heard), and the restart takes
    seconds while an election lasts under one election timeout, but nothing forbids it.
    etcd's answer is the same: a member that lost its data must be removed and re-added
    as a new member; with online membership change that is the safe procedure.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rocksdict import AccessType, Options, Rdict, ReadOptions

from node.store import snapshot

log = logging.getLogger("statekeeper.recovery")

_SM = TypeVar("_SM")


def note_lost_state(data_dir: Path) -> bool:
    """Log loudly when the node has no raft state; True if it had some."""
    raft_dir = data_dir / "raft"
    if raft_dir.is_dir():
        return True
    log.warning(
        "no raft state in %s: starting EMPTY. On a first start that is expected; if this "
        "node ran before, it LOST ITS DISK and will catch up from the leader's log or "
        "snapshot (it may not vote safely in the current term: see node/recovery.py)",
        raft_dir,
    )
    return False


def is_corruption(e: BaseException) -> bool:
    """RocksDB reports corruption with a "Corruption:" status; only that is ours to repair
    (not "IO error: lock ..." of a DB another process holds, nor a full disk)."""
    return str(e).lstrip().startswith("Corruption")


def verify_db(db_path: Path) -> int:
    """Read every key and value of the DB at `db_path` with checksums verified; the number
    of records. Raises RocksDB's exception on corruption. A missing DB verifies as 0."""
    if not (db_path / "CURRENT").exists():
        return 0
    db = Rdict(str(db_path), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        opts = ReadOptions()
        opts.set_verify_checksums(True)
        opts.fill_cache(False)  # a one-off scan must not evict what serving needs
        it = db.iter(opts)
        it.seek_to_first()
        n = 0
        while it.valid():
            it.value()
            n += 1
            it.next()
        it.status()
        del it
        return n
    finally:
        db.close()


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
    """open_sm() on a verified DB; a corrupt one is moved aside and replaced by an empty one."""
    snapshot.recover_swap(db_path)  # a restore cut short: finish it before judging the DB
    started = time.monotonic()
    try:
        records = verify_db(db_path)
        log.info("RocksDB verified in %.2f s (%d records)", time.monotonic() - started, records)
        return open_sm()
    except Exception as e:
        if not is_corruption(e):
            raise
        moved = quarantine(db_path)
        log.critical(
            "RocksDB in %s is CORRUPT (%s): moved it to %s (kept for inspection; delete it "
            "when done) and starting on an empty DB, rebuilt from this node's raft snapshot "
            "and journal, then from the leader",
            db_path,
            e,
            moved,
        )
    return open_sm()
