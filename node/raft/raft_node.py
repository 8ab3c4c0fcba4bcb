"""RaftNode: a cluster member that replicates opaque byte entries and applies them in
order: it builds the SyncObj (syncobj.py) from the cluster config, takes snapshots for it
off the raft thread, and offers the rest of the node the small interface of
node/raft/__init__.py (pysyncobj's defects it works around: node/raft/DESIGN.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from statekeeper.node import failpoints, snapshot_file
from statekeeper.node.config import RAFT_ENTRY_LIMIT_BYTES, ClusterConfig, ConfigError
from statekeeper.node.fatal import STATE_MACHINE_EXIT_CODE, stop_now
from statekeeper.node.raft.cluster_clock import ClusterClock
from statekeeper.node.raft.data_dir import EmptyStart, prepare_raft_dir
from statekeeper.node.raft.install import SyncBehind
from statekeeper.node.raft.interface import FSM, ApplyFn, Callback, RaftStatus, SubmitError
from statekeeper.node.raft.log import RaftLog, entry_tuple
from statekeeper.node.raft.loop_driver import LoopDriver
from statekeeper.node.raft.members import Member, MemberError
from statekeeper.node.raft.membership import ChangeCallback
from statekeeper.node.raft.peers import AuthenticatingEncryptor
from statekeeper.node.raft.syncobj import (
    SERIALIZER_STATE,
    DialNode,
    PatchedSyncObj,
    build_conf,
    replicated_command_size,
    submit_callback,
)
from statekeeper.node.tls import raft_contexts

if TYPE_CHECKING:
    from statekeeper.node.metrics import NodeMetrics

log = logging.getLogger("statekeeper.raft")

# A follower that has not heard its leader for this many (max) election timeouts no longer
# counts it as known (leader_known). 2: a heartbeat goes out every ~0.1 s, so only a node
# cut off (or stalled for over a second) gets there, not one that missed a few.
LEADER_CONTACT_TIMEOUTS = 2


def initial_members(cluster: ClusterConfig, snapshot_path: str) -> dict[str, Member]:
    """The member set before the journal's membership entries (node/raft/members.py): the
    newest snapshot's, else cluster.toml's [[nodes]]."""
    toml = {n.raft_address: Member(n.id, n.host, n.raft_port, n.http_port) for n in cluster.nodes}
    if not os.path.isfile(snapshot_path):
        return toml
    header, _ = snapshot_file.read_header(snapshot_path)
    if "members" not in header:  # a snapshot from before online membership change
        return {a: toml[a] for a in header["cluster"] if a in toml} or toml
    members = (Member.from_dict(d) for d in header["members"])
    return {m.raft_address: m for m in members}


class RaftNode:
    """A cluster member: replicates opaque byte entries and applies them in order."""

    def __init__(
        self,
        cluster: ClusterConfig,
        node_id: str,
        apply_fn: ApplyFn,
        fsm: FSM,
        max_ready_lag: int = 1000,
        clock: ClusterClock | None = None,
        metrics: NodeMetrics | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        empty_start: EmptyStart = EmptyStart.LOST_DISK,
    ):
        """`loop`: the running asyncio loop of the node, which then also drives raft (one
        thread per node, loop_driver.py); call from that loop's thread. None: raft gets a
        loop on a thread of its own (an embedding without asyncio).

        `empty_start`: what a start with no raft dir is: a lost disk (no vote and no
        election until caught up), a member of a new cluster (both at once) or a new
        member joining (votes at once, stands once caught up); catchup.py. Ignored when
        the raft dir exists."""
        if not cluster.secret:
            raise ConfigError(
                "the cluster needs a secret ([cluster] secret or STATEKEEPER_SECRET): raft "
                "peers authenticate with it; `statekeeper cluster up` generates one"
            )
        self.node_id = node_id
        self._me = cluster.node(node_id)
        self._fsm = fsm
        self._max_ready_lag = max_ready_lag
        self._durable = cluster.fsync == "always"
        # A snapshot received from the leader is synced while it arrives (install.py).
        self._sync_behind = SyncBehind() if self._durable else None
        self._addr_to_id = {n.raft_address: n.id for n in cluster.nodes}
        self._raft_dir = str(cluster.node_data_dir(node_id) / "raft")
        start_marker = prepare_raft_dir(self._raft_dir, empty_start)
        self._snapshot_state = SERIALIZER_STATE.NOT_SERIALIZING
        self.snapshots_taken = 0
        # A snapshot loaded (installed from the leader) since this node's own pack started:
        # the pack must not rename its older file over it (_pack_snapshot).
        self._pack_lock = threading.Lock()
        self._pack_superseded = False
        self._metrics = metrics
        self._snapshot_started = 0.0
        # A snapshot restore is under way (_deserialize); read by PatchedSyncObj on the loop.
        self.restoring = False
        r = cluster.raft
        self._conf = conf = build_conf(
            self._raft_dir,
            self._me.raft_bind or self._me.raft_address,
            r,
            serializer=self._serialize,
            deserializer=self._deserialize,
            serialize_checker=self._snapshot_status,
        )
        dial = dict(self._me.raft_dial)
        members = initial_members(cluster, conf.fullDumpFile)

        def make_node(address: str, member: Member | None) -> DialNode:
            node_id = member.id if member is not None else self._addr_to_id.get(address)
            return DialNode(address, dial.get(node_id or ""), node_id=node_id)

        # Raft TLS (node/tls.py): None keeps the plain transport exactly as it was.
        self.raft_tls = (tls := raft_contexts(cluster, node_id)) is not None
        self._journal = RaftLog(conf.journalFile, fsync=cluster.fsync)
        if metrics is not None:
            self._journal.observe_fsync = metrics.fsync_duration.observe
        self._encryptor = AuthenticatingEncryptor(cluster.secret)
        if loop is not None:
            self._driver = LoopDriver.for_running_loop(loop, conf.autoTickPeriod)
        else:
            self._driver = LoopDriver.in_own_thread(conf.autoTickPeriod, name=f"raft-{node_id}")
        # pysyncobj binds and subscribes its sockets in __init__: on the loop's thread.
        self._obj: PatchedSyncObj = self._driver.run_sync(
            lambda: PatchedSyncObj(
                self._me.raft_address,
                members,
                conf,
                apply_fn,
                self._journal,
                self._encryptor,
                clock=clock or ClusterClock(lambda: fsm.clock_ms),
                max_journal_bytes=r.snapshot_max_journal_bytes,
                flush_state_machine=fsm.flush,
                tls=tls,
                make_node=make_node,
                driver=self._driver,
                state_machine_restoring=lambda: self.restoring,
                sync_behind=self._sync_behind,
                start_marker=start_marker,
            )
        )

    # -- snapshots (called on the raft thread by pysyncobj) ---------------------------

    def _serialize(self, path: str, data) -> None:
        """Start a snapshot: the checkpoint here, the packing on a helper thread.

        pysyncobj calls this on the raft thread and would have it write the whole file
        before returning: for a large DB that is longer than an election timeout without
        heartbeats. Only the checkpoint (hard links) has to happen between two applies;
        the thread packs it into `fullDumpFile` and _snapshot_status() reports the outcome.
        pysyncobj then tries to rename `path`, which we never create, and ignores the error.
        """
        last_entry, prev_entry, _cluster_nodes = data
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a leftover would be renamed over the snapshot
        # The configuration at the snapshot's last entry, not at the log's end (members.py's
        # invariant): pysyncobj snapshots right after appending, and a change appended
        # after that entry (uncommitted, maybe truncated later) came back from the
        # snapshot at every restart (issue 26: 2 of 3 real members then never elected).
        members = self._obj.snapshot_members(last_entry[1])
        header = {
            "last": list(last_entry),
            "prev": list(prev_entry),
            "cluster": sorted(members),
            "members": [m.to_dict() for _, m in sorted(members.items())],
        }
        self._snapshot_started = time.monotonic()
        work = self._fsm.checkpoint()
        self._snapshot_state = SERIALIZER_STATE.SERIALIZING
        self._pack_superseded = False
        threading.Thread(
            target=self._pack_snapshot, args=(work, header), name="snapshot", daemon=True
        ).start()

    def _pack_snapshot(self, work: Path, header: dict) -> None:
        final = self._conf.fullDumpFile
        tmp = final + ".packing"
        try:
            failpoints.hit("snapshot-pack")  # sleep(S): a snapshot of a large DB
            snapshot_file.write(
                tmp, header, lambda f: self._fsm.write_checkpoint(work, f), durable=self._durable
            )
            with self._pack_lock:
                if self._pack_superseded:
                    # Renamed over the leader's newer snapshot, the older file made the
                    # next start cut the journal to its own entries, dropping acknowledged
                    # ones after the installed snapshot (test_raft_defects.py).
                    log.info("a newer snapshot was installed while this one was packed: dropped")
                    self._snapshot_state = SERIALIZER_STATE.FAILED
                    return
                os.replace(tmp, final)
            if self._durable:  # before the journal drops the entries the snapshot covers
                snapshot_file.fsync_dir(self._raft_dir)
            failpoints.hit("snapshot-after-rename")
            self.snapshots_taken += 1
            if self._metrics is not None:
                self._metrics.snapshot_duration.observe(time.monotonic() - self._snapshot_started)
                self._metrics.snapshot_size.set(os.path.getsize(final))
            self._snapshot_state = SERIALIZER_STATE.SUCCESS
        except Exception:
            log.exception("writing the snapshot failed; the journal keeps its entries")
            self._snapshot_state = SERIALIZER_STATE.FAILED
        finally:
            shutil.rmtree(work, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _snapshot_status(self) -> int:
        # pysyncobj's serializeChecker, polled every tick: SUCCESS/FAILED are reported once.
        state = self._snapshot_state
        if state in (SERIALIZER_STATE.SUCCESS, SERIALIZER_STATE.FAILED):
            self._snapshot_state = SERIALIZER_STATE.NOT_SERIALIZING
        return state

    def _deserialize(self, path: str):
        """Load the snapshot at `path` (at start, or just received from the leader): raft's
        side at once, the state machine's on a helper thread (restore_in_background).

        Raft runs on the node's loop: a restore inside this raft step froze the whole node,
        HTTP included, for as long as it took (over ten minutes for a follower of a
        10M-key store, issue 17), and a liveness probe would kill it mid-restore, again on
        every restart. So this returns the snapshot's raft position as soon as the file is
        durable, and pysyncobj takes it (journal, last applied, members) while the old state
        machine is still in place. Until the restore ends (`restoring`, PatchedSyncObj's
        state_machine_restoring): nothing is applied (entries after the snapshot wait in
        the journal, which still takes and acknowledges them), no snapshot is taken, no
        snapshot is received, this node stands for no election, ReadIndex answers nothing,
        and status() reports the state machine's applied index and not ready. Reads that
        must be linearizable wait for an apply, so none is served from the old state.

        A crash during the restore: at the next start the snapshot is still ahead of the
        state machine and this runs again (the journal's entries after it are kept).

        pysyncobj catches every exception of a snapshot load, logs it and goes on, with
        the state machine closed or older than the raft position it then takes: any
        failure here or in the restore stops the node instead (node/fatal.py)."""
        try:
            with self._pack_lock:
                self._pack_superseded = True  # whatever this node is packing is older
            header, offset = self._durable_header(path)
            last = entry_tuple(header["last"])
            if last[1] > self._fsm.applied_index:
                # Restore only when the snapshot is ahead of what RocksDB already holds: on
                # a plain restart RocksDB is newer than the last snapshot and must be kept.
                self._start_restore(path, offset, last[1])
            return last, entry_tuple(header["prev"]), list(header.get("members") or header["cluster"])
        except BaseException as e:
            self._restore_failed(e)

    def _durable_header(self, path: str) -> tuple[dict, int]:
        if self._durable:  # a snapshot just received was synced, then renamed (install.py)
            snapshot_file.fsync_dir(self._raft_dir)
        return snapshot_file.read_header(path)

    def _start_restore(self, path: str, offset: int, index: int) -> None:
        log.info("restoring state machine from snapshot at index %d", index)
        self.restoring = True
        threading.Thread(
            target=self._restore_in_background,
            args=(path, offset, index),
            name="snapshot-restore",
            daemon=True,
        ).start()

    def _restore_in_background(self, path: str, offset: int, index: int) -> None:
        started = time.monotonic()
        try:
            failpoints.hit("snapshot-restore")
            # The snapshot's DB is read in place: nothing replaces this file meanwhile (no
            # snapshot is taken or received while restoring), and an open file outlives a
            # rename over it anyway.
            self._fsm.restore(path, offset)
        except BaseException as e:
            self._restore_failed(e)
        log.info(
            "state machine restored from snapshot at index %d in %.1f s",
            index,
            time.monotonic() - started,
        )
        self._driver.call(self._restore_done)

    def _restore_done(self) -> None:
        """Loop thread: the state machine holds the snapshot; apply what waited."""
        self.restoring = False
        if (obj := getattr(self, "_obj", None)) is not None:  # None: still in __init__
            obj.note_progress()
        self._driver.tick_soon()

    @staticmethod
    def _restore_failed(e: BaseException) -> None:
        stop_now("restoring the state machine from a snapshot failed", e, STATE_MACHINE_EXIT_CODE)

    # -- the small interface ------------------------------------------------------------

    def submit(self, payload: bytes, callback: Callback) -> None:
        """Replicate one entry; callback(results, None) once it is applied on this node.
        An entry over RAFT_ENTRY_LIMIT_BYTES: callback(None, ENTRY_TOO_LARGE) at once, on
        this thread, nothing queued (pickle_guard.py says why the bound)."""
        if replicated_command_size(payload) > RAFT_ENTRY_LIMIT_BYTES:
            callback(None, SubmitError.ENTRY_TOO_LARGE)
            return
        self._obj._apply_entry(payload, callback=submit_callback(callback))

    def journal_size_bytes(self) -> int:
        return self._journal.size_bytes

    def compact_journal(self) -> None:
        """Any thread: snapshot at the next tick and drop the journal entries it covers
        (what deletes freed leaves the journal only then; node/quota/disk_watch.py)."""
        self._obj.forceLogCompaction()  # sets a flag the raft thread reads

    def journal_summary(self) -> str:
        """Entries and bytes of the raft journal (for start-up logs)."""
        j = self._journal
        return f"{len(j)} entries, {j.size_bytes / 2**20:.1f} MiB"

    def read_index(self, callback: Callable[[int], None]) -> None:
        """Confirm leadership for a linearizable read without a log entry (ReadIndex).

        callback (raft thread) gets the index the read may be served at once applied (it
        is, when called), READ_INDEX_NOT_LEADER, or READ_INDEX_NOT_YET (a new leader whose
        no-op is not committed yet: use a barrier entry instead)."""
        self._obj.request_read_index(callback)

    def progress(self) -> tuple[float, float, bool]:
        """(seconds since the raft loop last ticked or applied an entry, the longest such
        gap since start, whether a snapshot restore is under way): node/api/liveness.py."""
        o = self._obj
        return time.monotonic() - o.last_progress, o.max_progress_gap, self.restoring

    def is_leader(self) -> bool:
        return self._obj._isLeader()

    def leader_known(self) -> bool:
        """Whether this node knows a leader it can reach: it leads, or it heard an
        AppendEntries of the current term within LEADER_CONTACT_TIMEOUTS election timeouts.

        pysyncobj keeps a follower's leader until an election replaces it, and with
        pre-vote an isolated follower never starts one: without the contact check a
        partitioned follower kept "knowing" its old leader, so its watches sent progress
        frames stuck at its last revision and never ended (the chaos partition-follower
        run), and writes sent to it waited out their timeout instead of failing fast."""
        o = self._obj
        if o._getLeader() is None:
            return False
        if o._isLeader():
            return True
        silent = time.monotonic() - o._last_leader_contact
        return silent < LEADER_CONTACT_TIMEOUTS * self._conf.raftMaxTimeout

    def on_leadership_lost(self, fn: Callable[[], None]) -> None:
        """fn() runs on the raft thread whenever this node stops being the leader."""
        self._obj._leadership_lost.append(fn)

    def status(self) -> RaftStatus:
        o = self._obj
        leader = o._getLeader()
        leader_id = self.member_id(leader.address) if leader is not None else None
        restoring = self.restoring
        # While a restore runs raft stands at the snapshot, the state machine before it.
        applied = self._fsm.applied_index if restoring else o.raftLastApplied
        leader_commit = o.leader_commit_index()
        caught_up = leader_commit is not None and applied >= leader_commit - self._max_ready_lag
        return RaftStatus(
            node_id=self.node_id,
            is_leader=o._isLeader(),
            leader_id=leader_id,
            term=o.raftCurrentTerm,
            commit_index=o.raftCommitIndex,
            applied_index=applied,
            leader_commit_index=leader_commit,
            has_quorum=o.hasQuorum,
            ready=leader_id is not None and o.isReady() and caught_up and not restoring,
            restoring=restoring,
            voter=not o.catching_up,
            log_truncations=self._journal.truncations,
            log_truncated_entries=self._journal.truncated_entries,
            rejected_peer_messages=self._encryptor.rejected,
        )

    # -- membership (node/raft/members.py) -------------------------------------------------

    def member_id(self, raft_address: str) -> str | None:
        m = self._obj.members.get(raft_address)
        return m.id if m is not None else self._addr_to_id.get(raft_address)

    def members(self) -> list[Member]:
        """The current member set (as this node's log says), by id."""
        return sorted(self._obj.members.values(), key=lambda m: m.id)

    def member_change_pending(self) -> bool:
        return self._obj.change_pending()

    def change_member(self, kind: str, member: Member, done: ChangeCallback) -> None:
        """Add ("add") or remove ("rem") a member through the log (leader only); done(None)
        on the raft thread once committed, else done(MemberError). One change at a time:
        a second one while the first is uncommitted fails with member_change_pending."""
        if not self._obj._isLeader():
            done(MemberError("not_leader", f"{self.node_id} is not the leader"))
            return
        self._obj.change_member(kind, member, done)

    def request_transfer(self, to_id: str | None, done: Callable[[bool], None]) -> None:
        """Hand leadership to member `to_id` (None: the most caught-up follower), on the
        raft thread; done(sent) there: False when this node is not the leader or the target
        has not replicated the whole log yet (retry)."""
        addr = None
        if to_id is not None:
            addr = next((a for a, m in self._obj.members.items() if m.id == to_id), None)
            if addr is None:
                done(False)
                return
        self._obj.request_transfer(addr, done)

    def counters(self) -> dict[str, int]:
        """Plain counters kept by raft, for metrics (read from any thread)."""
        o = self._obj
        return {
            "raft_leader_changes": o.leader_changes,
            "read_index_rounds": o._read_round,
            "snapshots": self.snapshots_taken,
            "raft_log_truncations": self._journal.truncations,
            "raft_ticks": o.ticks,
            "raft_append_entries_passes": o.append_passes,
        }

    def transfer_leadership(self) -> str:
        """Any thread: ask the raft thread to hand leadership to the most caught-up
        follower (graceful shutdown). One attempt, made at its next tick; it is denied
        while no follower has the whole log, so call again until status() shows another
        leader. Returns how the previous attempt went ("sent", "denied", "not leader", "")."""
        self._obj.request_transfer()
        return self._obj.last_transfer

    def destroy(self) -> None:
        """Any thread: stop ticking, close the peer sockets and the journal (synced), on
        the loop's thread; returns once done."""

        def on_loop() -> None:
            self._driver.stop()
            self._obj.destroy()  # autoTick off: closes the transport and the journal now

        self._driver.run_sync(on_loop)
        self._driver.join()
