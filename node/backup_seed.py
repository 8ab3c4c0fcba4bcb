"""Seed the data directories of a new cluster from a backup file (`statekeeper restore`).

Order, so that a bad file writes nothing: read the whole file and check its digest
(node/backup_file.py); check every target (absent or without a store, unless `force`);
only then extract the body once into a staging directory beside the first target,
checking the digest again as it goes and the snapshot's own header against its
database (node/store/snapshot.py); then give each node its own copy, each renamed into
place whole (`<data dir>/db.restoring` -> `<data dir>/db`) and fsynced.

How the restored state enters raft. Every node of the new cluster starts with the same
RocksDB and no raft directory, as a new cluster does. The store's meta record keeps
revision, compact revision, the cluster clock and the rest, but its applied_index is
reset to 0: the new raft log starts empty and numbers its entries from the start, and
StateMachine.apply skips every index <= applied_index (pysyncobj replays its journal at
start-up): a store that kept the source's index N would silently skip the new cluster's
first N entries, acknowledged writes included. With 0, the nodes hold byte-identical
state "before entry 1" and raft applies the same entries on top of it everywhere; the
first snapshot raft takes later covers it like any state (a node added or wiped later
catches up from such a snapshot). Nothing of the source's raft (log, term, membership,
addresses) is carried over, so the new cluster may have other nodes, addresses and
secret; its config is the one given to restore.

Time. The meta record's clock (the replicated cluster clock, node/cluster_clock.py) is
kept: the first leader of the new cluster anchors at it, so the cluster clock never goes
backwards, and entry times, idempotency windows and retention ages go on from the
backup. A lease keeps its expiry in that clock: it has the TTL it had left at the backup
once the new cluster has a leader (plus the grace after an election); its holder, if it
still runs, must keep it alive against the new cluster.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import msgpack

from node.backup_file import BackupError, copy_body, verify
from node.snapshot_file import fsync_dir
from node.store import snapshot
from node.store.backend import open_db, read_meta
from node.store.keys import META, Meta

# What makes a data dir "in use": a store or a raft log (node.log, node.pid may stay).
STATE_ENTRIES = ("db", "raft")


class SeedError(Exception):
    """A target the restore refuses (not empty, not writable); nothing was written."""


def used_entries(data_dir: Path) -> list[str]:
    """The store and raft entries (db, db.old, raft...) in `data_dir`, sorted."""
    if not data_dir.is_dir():
        return []
    return sorted(p.name for p in data_dir.iterdir() if p.name.split(".")[0] in STATE_ENTRIES)


def seed(
    backup: str,
    data_dirs: list[Path],
    force: bool = False,
    say: Callable[[str], None] = lambda _: None,
) -> dict:
    """Verify `backup`, then give every dir of `data_dirs` the restored store; the meta.

    Raises BackupError (the file) or SeedError (a target) before writing anything."""
    meta, digest, body = verify(backup)
    say(f"verified {backup}: revision {meta.get('revision')}, sha256 {digest}")
    for d in data_dirs:
        used = used_entries(d)
        if used and not force:
            raise SeedError(
                f"{d} already holds {', '.join(used)}: restore seeds a NEW cluster; stop "
                "it and pass --force to replace its state, or choose empty data dirs"
            )
    parent = data_dirs[0].parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=parent))
    try:
        db = _stage(backup, meta, staging)
        for d in data_dirs:
            _install(db, d, force)
            say(f"seeded {d / 'db'}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {**meta, "sha256": digest, "body_bytes": body}


def _stage(backup: str, meta: dict, staging: Path) -> Path:
    body = staging / "body.tar"
    with open(body, "wb") as f:
        copy_body(backup, f)
    try:
        db = snapshot.stage(body, staging / "x")
    except ValueError as e:
        raise BackupError(f"{backup}: the store inside is unusable: {e}") from None
    body.unlink()
    m = read_meta(db)
    if m.revision != meta.get("revision"):
        raise BackupError(
            f"{backup}: the store inside is at revision {m.revision}, its metadata says "
            f"{meta.get('revision')}"
        )
    reset_raft_position(db)
    return db


def reset_raft_position(db_path: Path) -> None:
    """Set the store's applied_index to 0 (see the module docstring), all else kept."""
    db = open_db(db_path)
    try:
        m = Meta.decode(db.get(META))
        fresh = dataclasses.replace(m, applied_index=0)
        db.put(META, fresh.encode(msgpack.Packer(use_bin_type=True).pack))
        db.flush(True)
    finally:
        db.close()


def _install(db: Path, data_dir: Path, force: bool) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    if force:
        for name in used_entries(data_dir):
            p = data_dir / name
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    tmp = data_dir / "db.restoring"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(db, tmp)
    for p in tmp.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())
    fsync_dir(str(tmp))
    os.replace(tmp, data_dir / "db")
    fsync_dir(str(data_dir))
