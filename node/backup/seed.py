"""Seed the data directories of a new cluster from a backup file (`statekeeper restore`).

Order, so that a bad file writes nothing: read the whole file and check its digest
(node/backup/file.py); check every target (no store and no raft state, unless `force`);
only then extract the body once into a staging directory beside the first target,
checking the digest again as it goes and the snapshot's own header against its
database (node/store/snapshot.py); then give each node its own copy, renamed into place
whole (`<data dir>/db.restoring` -> `<data dir>/db`), and its raft snapshot, all fsynced.

How the restored state enters raft: as a raft snapshot. Each node gets the store (its
meta record unchanged: revision, compact revision, cluster clock, and applied_index N,
the source's raft index) and `raft/snapshot.bin` covering index N (two no-op entries of
term 0, the config's nodes as members; raft_node.write_seed_snapshot), and no journal.
At start pysyncobj loads the snapshot and continues the log at N + 1; RaftNode keeps
RocksDB as it is since it is not behind the snapshot. Why a snapshot and not a fresh
log over a seeded DB: the restored state must be part of raft's own state, or a node
that later loses its DB (moved aside as corrupt, node/recovery.py) or its whole data
dir, or a member added later, would rebuild from the log alone, on an empty store.
With the snapshot, the first restores from its local snapshot.bin and the others get
the leader's (its log starts at N - 1), until the leader takes one of its own. Why keep
N: StateMachine.apply skips every index <= applied_index, so store and raft must agree
on it; an N below 2 (a backup of a cluster that applied nothing) becomes 2, the least
a snapshot can cover. Nothing of the source's raft (log, term, membership, addresses)
is carried over: the new cluster's members, addresses and secret are its config's.

Time. The meta record's clock (the replicated cluster clock, node/raft/cluster_clock.py) is
kept: the first leader of the new cluster anchors at it, so the cluster clock never goes
backwards, and entry times, idempotency windows and retention ages go on from the
backup (behind real time by the time between backup and restore). A lease keeps its
expiry in that clock: it has the TTL it had left at the backup once the new cluster has
a leader (plus the grace after an election); its holder, if it still runs, must keep it
alive against the new cluster.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import msgpack

from statekeeper.node.backup.file import BackupError, copy_body, verify
from statekeeper.node.config import ClusterConfig
from statekeeper.node.raft import write_seed_snapshot
from statekeeper.node.snapshot_file import fsync_dir
from statekeeper.node.store import snapshot
from statekeeper.node.store.backend import open_db, read_meta
from statekeeper.node.store.keys import META, Meta

# What makes a data dir "in use": a store or a raft log (node.log, node.pid may stay).
STATE_ENTRIES = ("db", "raft")
MIN_INDEX = 2  # a raft snapshot covers (prev, last): index 1 and 2 at least


class SeedError(Exception):
    """A target the restore refuses (not empty); nothing was written."""


def used_entries(data_dir: Path) -> list[str]:
    """The store and raft entries (db, db.old, raft...) in `data_dir`, sorted."""
    if not data_dir.is_dir():
        return []
    return sorted(p.name for p in data_dir.iterdir() if p.name.split(".")[0] in STATE_ENTRIES)


def seed(
    backup: str,
    cluster: ClusterConfig,
    node_ids: Sequence[str],
    force: bool = False,
    say: Callable[[str], None] = lambda _: None,
) -> dict:
    """Verify `backup`, then seed the data dir of each of `node_ids` (nodes of `cluster`,
    stopped) with its state; returns the backup's meta, its sha256 and the raft index.

    Raises BackupError (the file) or SeedError (a target) before writing anything."""
    meta, digest, body = verify(backup)
    say(f"verified {backup}: revision {meta.get('revision')}, sha256 {digest}")
    dirs = {nid: cluster.node_data_dir(nid) for nid in node_ids}
    for d in dirs.values():
        used = used_entries(d)
        if used and not force:
            raise SeedError(
                f"{d} already holds {', '.join(used)}: restore seeds a NEW cluster; stop "
                "it and pass --force to replace its state, or choose empty data dirs"
            )
    parent = next(iter(dirs.values())).parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=parent))
    try:
        db, index = _stage(backup, meta, staging)
        packed = staging / "snapshot.tar"  # the store snapshot again, at `index`
        with open(packed, "wb") as f:
            snapshot.write_checkpoint(db.parent, f)
        for nid, d in dirs.items():
            _install(db, d, force)
            write_seed_snapshot(cluster, nid, index, lambda f: _copy(packed, f))
            say(f"seeded {nid}: {d / 'db'}, raft snapshot at index {index}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {**meta, "sha256": digest, "body_bytes": body, "raft_index": index}


def _stage(backup: str, meta: dict, staging: Path) -> tuple[Path, int]:
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
    if m.applied_index < MIN_INDEX:
        set_applied_index(db, MIN_INDEX)
    return db, max(m.applied_index, MIN_INDEX)


def set_applied_index(db_path: Path, index: int) -> None:
    """Set the store's applied_index (see the module docstring), all else kept."""
    db = open_db(db_path)
    try:
        m = Meta.decode(db.get(META))
        new = dataclasses.replace(m, applied_index=index)
        db.put(META, new.encode(msgpack.Packer(use_bin_type=True).pack))
        db.flush(True)
    finally:
        db.close()


def _copy(path: Path, out) -> None:
    with open(path, "rb") as f:
        shutil.copyfileobj(f, out, 1 << 20)


def _install(db: Path, data_dir: Path, force: bool) -> None:
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # node/file_modes.py
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
