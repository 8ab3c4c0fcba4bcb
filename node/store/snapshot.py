"""Snapshots of the store: take a checkpoint, pack it, restore one.

A snapshot is a tar file: first member "statekeeper-snapshot.msgpack" (format,
applied_index, revision, compact_revision), then "db/<file>" for every file of a
RocksDB checkpoint. Raft wraps it in its own snapshot file (node/snapshot_file.py).

Restoring extracts to "<db>.restore", then swaps directories: "<db>" -> "<db>.old",
new -> "<db>"; recover_swap(), run before the DB is opened, finishes or rolls back a
swap a crash interrupted, and removes checkpoint directories ("<db>.ckpt-*") a crash
left behind.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import BinaryIO

import msgpack
from rocksdict import Checkpoint, Rdict

from statekeeper.node.snapshot_file import fsync_dir
from statekeeper.node.store.backend import read_meta
from statekeeper.node.store.keys import unpack

HEADER = "statekeeper-snapshot.msgpack"
FORMAT = 1


def sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def checkpoint(db: Rdict, db_path: Path) -> Path:
    """A consistent checkpoint of `db` in a new directory beside it (hard links: fast).

    The checkpoint is `<returned dir>/db`; the caller removes the returned directory."""
    work = Path(tempfile.mkdtemp(prefix=db_path.name + ".ckpt-", dir=db_path.parent))
    try:
        _create_checkpoint(db, work / "db")
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return work


def _create_checkpoint(db: Rdict, dest: Path) -> None:
    # Own function so the Checkpoint (which holds the DB open) dies before we return.
    Checkpoint(db).create_checkpoint(str(dest))


def write_checkpoint(work: Path, f: BinaryIO) -> None:
    """Pack a checkpoint() directory into `f` as the snapshot format restore reads."""
    ckpt = work / "db"
    meta = read_meta(ckpt)
    header = msgpack.packb(
        {
            "format": FORMAT,
            "applied_index": meta.applied_index,
            "revision": meta.revision,
            "compact_revision": meta.compact_revision,
        },
        use_bin_type=True,
    )
    with tarfile.open(fileobj=f, mode="w") as tar:
        info = tarfile.TarInfo(HEADER)
        info.size = len(header)
        tar.addfile(info, io.BytesIO(header))
        for p in sorted(ckpt.iterdir()):
            tar.add(p, arcname=f"db/{p.name}", recursive=False)


def read_header(path: str | os.PathLike, offset: int = 0) -> dict:
    """The header of a snapshot file: format, applied_index, revision, compact_revision.
    `offset`: where the snapshot starts in the file (inside a raft snapshot file, after
    its own header: node/snapshot_file.py).

    Raises ValueError if `path` is not a snapshot of a format this version reads."""
    with open(path, "rb") as f:
        return _header(f, offset, Path(path))


def _header(f: BinaryIO, offset: int, path: Path) -> dict:
    try:
        with _tar_at(f, offset) as tar:
            first = tar.next()
            if first is None or first.name != HEADER or not first.isfile():
                raise ValueError(f"{path}: not a statekeeper snapshot")
            header = unpack(tar.extractfile(first).read())
    except (tarfile.TarError, msgpack.UnpackException, ValueError) as e:
        raise ValueError(f"{path}: not a statekeeper snapshot ({e})") from e
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{path}: unsupported snapshot format")
    return header


def stage(path: Path, staging: Path, offset: int = 0) -> Path:
    """Extract the snapshot at `offset` of file `path` into `staging` (made anew) and check
    it. Read in place, through one open file (a rename over `path` meanwhile changes
    nothing): a raft snapshot used to be copied out of its file first, one more write of
    the whole DB (GiBs for a 10M-key store) before the extraction's own.

    Returns the extracted DB directory, synced to disk; the caller removes `staging`."""
    with open(path, "rb") as f:
        header = _header(f, offset, path)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        new_db = staging / "db"
        _extract(f, offset, path, staging)
    _fsync_tree(new_db)
    meta = read_meta(new_db)  # refuse a broken checkpoint before the swap
    if meta.applied_index != header["applied_index"]:
        raise ValueError(f"{path}: snapshot header does not match its database")
    return new_db


def _tar_at(f: BinaryIO, offset: int) -> tarfile.TarFile:
    f.seek(offset)
    return tarfile.open(fileobj=f, mode="r:")  # members are read relative to `offset`


def _extract(f: BinaryIO, offset: int, path: Path, dest: Path) -> None:
    with _tar_at(f, offset) as tar:
        members = []
        for m in tar.getmembers():
            if m.name == HEADER:
                continue
            parts = m.name.split("/")
            if len(parts) != 2 or parts[0] != "db" or parts[1] in ("", ".", "..") or not m.isfile():
                raise ValueError(f"{path}: unexpected member {m.name!r}")
            members.append(m)
        (dest / "db").mkdir()
        tar.extractall(dest, members=members, filter="data")


def _fsync_tree(path: Path) -> None:
    for p in path.iterdir():
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fsync_dir(str(path))


def swap_in(new_db: Path, db_path: Path) -> None:
    """Move `new_db` to `db_path` (which must not be open), the old DB out of the way."""
    old = sibling(db_path, ".old")
    shutil.rmtree(old, ignore_errors=True)
    if db_path.exists():
        os.replace(db_path, old)
    os.replace(new_db, db_path)
    fsync_dir(str(db_path.parent))
    shutil.rmtree(old, ignore_errors=True)


def recover_swap(db_path: Path) -> None:
    """Finish or roll back a restore that crashed between swap_in()'s two renames."""
    old = sibling(db_path, ".old")
    if old.exists():
        if db_path.exists():
            shutil.rmtree(old)  # the new DB is in place
        else:
            os.replace(old, db_path)  # the new DB never arrived: keep the old one
    shutil.rmtree(sibling(db_path, ".restore"), ignore_errors=True)
    # Checkpoints (a raft snapshot's or a backup's) live only while this process packs
    # them: any found before the DB is opened were left by a crash mid-way.
    for leftover in db_path.parent.glob(db_path.name + ".ckpt-*"):
        shutil.rmtree(leftover, ignore_errors=True)
