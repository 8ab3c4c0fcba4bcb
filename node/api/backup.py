"""GET /v1/admin/backup: an online backup of the store, streamed (node/backup/file.py).

Which state: the node first waits for a read barrier (ReadIndex, node/reads.py), so the
backup is at least as new as every write acknowledged before the request arrived, on
any node, leader or follower. It then takes a RocksDB checkpoint between two applies
(StateMachine.backup_checkpoint holds the apply lock for the checkpoint only): the
backup is the state after exactly one raft entry, i.e. one revision, every key as of it
and nothing later, while writes go on. The packing and the transfer run on a thread of
their own, off the raft thread and the event loop, with at most QUEUE_CHUNKS MiB in
flight (a slow client slows the packing, not the node).

The apply pause: the raft thread waits for the checkpoint (RocksDB flushes what was
written since the unlocked flush, then hard-links the files). Measured with
`python -m statekeeper.benchmarks.backup` (3-node cluster, fsync=always, 100,000 keys of ~100 B plus
5 versions of 1,000 of them and 1,000 stream events, one client putting throughout; 2
shared cores with other clusters running), two runs of three backups: 12.5, 17.6, 57.9
and 4.4, 50.1, 11.0 ms (median ~12 ms; the outliers coincide with RocksDB flushing a
memtable under the lock). A backup is 1.9-3.5 MiB (as compacted) and `statekeeper backup`
takes 2.3-5 s including the CLI's start and its check of the file; the writer's longest
gap between two acknowledged puts during the backups was 78-111 ms. Every backup
reports its own pause in its meta (apply_pause_ms) and the node's log.

What a backup holds: everything the store holds at that revision: keys and their
history back to the compact revision, streams, leases (their expiry in cluster-clock
time), locks, retention policies, idempotency records (they describe writes whose effect
is in the backup, so a retry against the restored cluster is still answered, not
re-applied) and auth tokens (hashes, like etcd's backups that include auth: a token of
the source cluster works on the restored one; revoke it there if the file leaked, and
keep backup files as private as the data: the CLI writes them 0600). What it does not
hold: anything of raft (log, term, membership, node ids and addresses) and the cluster
secret: a restore seeds a new cluster (node/backup/seed.py).

One backup at a time per node: another request meanwhile gets 503 unavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import logging
import queue
import shutil
import threading
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from statekeeper.node.backup.file import BackupWriter
from statekeeper.node.errors import OpError
from statekeeper.node.store import StateMachine, snapshot
from statekeeper.node.store.backend import read_meta

log = logging.getLogger("statekeeper.backup")

PATH = "/v1/admin/backup"
CONTENT_TYPE = "application/vnd.statekeeper.backup"
QUEUE_CHUNKS = 4
STALL_SECONDS = 120.0
_END = object()


def _version() -> str:
    try:
        return importlib.metadata.version("statekeeper")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class Backups:
    """Takes backups of one node's state machine (the route's handler calls start())."""

    def __init__(self, sm: StateMachine, cluster_name: str, node_id: str) -> None:
        self._sm = sm
        self._cluster = cluster_name
        self._node_id = node_id
        self._busy = False

    async def start(self) -> tuple[dict[str, Any], AsyncGenerator[bytes, None]]:
        """Take the checkpoint now; (its meta, the backup file's bytes as chunks)."""
        if self._busy:
            raise OpError(
                "unavailable", f"{self._node_id} is already taking a backup; retry after it"
            )
        self._busy = True
        try:
            work, pause = await asyncio.to_thread(self._sm.backup_checkpoint)
            try:
                meta = await asyncio.to_thread(self._meta, work, pause)
            except BaseException:
                shutil.rmtree(work, ignore_errors=True)
                raise
        except BaseException:
            self._busy = False
            raise
        log.info(
            "backup of revision %d (applied index %d) started; applies paused %.1f ms",
            meta["revision"],
            meta["applied_index"],
            meta["apply_pause_ms"],
        )
        chunks: queue.Queue = queue.Queue(QUEUE_CHUNKS)
        stop = threading.Event()
        threading.Thread(
            target=self._produce, args=(work, meta, chunks, stop), name="backup", daemon=True
        ).start()
        return meta, _consume(chunks, stop)

    def _meta(self, work: Path, pause: float) -> dict[str, Any]:
        m = read_meta(work / "db")
        return {
            "format": snapshot.FORMAT,
            "cluster": self._cluster,
            "source_node": self._node_id,
            "revision": m.revision,
            "compact_revision": m.compact_revision,
            "applied_index": m.applied_index,
            "clock_ms": m.clock,
            "created_ms": int(time.time() * 1000),  # the node's wall clock: informational
            "apply_pause_ms": round(pause * 1000, 2),
            "version": _version(),
        }

    def _produce(self, work: Path, meta: dict, chunks: queue.Queue, stop: threading.Event) -> None:
        """Pack `work` into the backup format, handing 1 MiB pieces to `chunks` (a thread
        of its own). It owns `work` and the busy flag: it always ends, even when nobody
        ever reads (the answer was never sent), after STALL_SECONDS without a reader."""

        def put(item: object) -> None:
            waited = 0.0
            while not stop.is_set() and waited < STALL_SECONDS:
                with contextlib.suppress(queue.Full):
                    chunks.put(item, timeout=0.5)
                    return
                waited += 0.5
            raise _Stopped

        rev = meta["revision"]
        last: object = _END
        try:
            out = BackupWriter(put)
            out.meta(meta)
            snapshot.write_checkpoint(work, out)
            digest = out.finish()
            log.info("backup of revision %d: %d bytes, sha256 %s", rev, out.size, digest)
        except _Stopped:
            log.warning("backup of revision %d abandoned: the client stopped reading", rev)
            last = None
        except Exception as e:
            log.exception("backup of revision %d failed", rev)
            last = OpError("internal", f"the backup failed: {e}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
            # Before the reader hears the end: a client's next backup must not be refused.
            self._busy = False
        with contextlib.suppress(_Stopped):
            if last is not None:
                put(last)
        with contextlib.suppress(queue.Full):
            chunks.put_nowait(_END)  # wakes a reader still waiting, if any


async def _consume(chunks: queue.Queue, stop: threading.Event) -> AsyncGenerator[bytes, None]:
    try:
        while (item := await asyncio.to_thread(chunks.get)) is not _END:
            if isinstance(item, BaseException):
                raise item  # after the head: the server aborts, the client sees truncation
            yield item
    finally:
        stop.set()


class _Stopped(Exception):
    """The response's reader went away: stop packing."""
