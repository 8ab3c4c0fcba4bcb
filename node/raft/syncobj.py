"""The one module of the node that imports pysyncobj: its SyncObj subclass with the
workarounds (the list is in node/raft/DESIGN.md), the SyncObjConf we run it with, the
peer address type, the mapping of its failure reasons, its pickle protocol, the peer codec
its connections use (peer_encoding.py) and the journal it is handed.

The ReadIndex and pre-vote logic are mixins (readindex.py, prevote.py) that reach
pysyncobj only through self."""

from __future__ import annotations

import logging
import math
import os
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import pysyncobj.dns_resolver as _dns_resolver_module
import pysyncobj.syncobj as _syncobj_module
import pysyncobj.tcp_connection as _tcp_connection_module
import pysyncobj.tcp_server as _tcp_server_module
import pysyncobj.transport as _transport_module
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf
from pysyncobj import pickle as _pysyncobj_pickle
from pysyncobj.config import SERIALIZER_STATE as SERIALIZER_STATE  # for RaftNode's snapshots
from pysyncobj.monotonic import monotonic as _pysyncobj_monotonic
from pysyncobj.node import TCPNode
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

from statekeeper.node import failpoints
from statekeeper.node.config import RAFT_ENTRY_LIMIT_BYTES, RaftSettings
from statekeeper.node.raft import loop_driver
from statekeeper.node.raft.catchup import CatchUpMixin
from statekeeper.node.raft.cluster_clock import ClusterClock
from statekeeper.node.raft.commit_notice import CommitNoticeMixin
from statekeeper.node.raft.compaction import JournalBoundMixin
from statekeeper.node.raft.conn_buffers import InPlaceBuffersMixin
from statekeeper.node.raft.install import SNAPSHOT_CHUNK_ACK, SnapshotInstallMixin, SyncBehind
from statekeeper.node.raft.interface import ApplyFn, Callback, SubmitError
from statekeeper.node.raft.log import ENTRY_COMMAND, RaftLog, entry_payload
from statekeeper.node.raft.loop_driver import LoopDriver
from statekeeper.node.raft.members import Member
from statekeeper.node.raft.membership import MembershipMixin
from statekeeper.node.raft.peer_encoding import PassEncoder, PeerCodecMixin, SharedSendMixin
from statekeeper.node.raft.peer_set import ConfigPeersMixin
from statekeeper.node.raft.peers import AuthenticatingEncryptor, UnauthenticatedSweepMixin
from statekeeper.node.raft.pickle_guard import VERSION_COMMAND, PicklePathsMixin
from statekeeper.node.raft.prevote import PREVOTE_REQUEST, PREVOTE_RESPONSE, PreVoteMixin
from statekeeper.node.raft.readindex import READ_INDEX_ACK, READ_INDEX_REQUEST, ReadIndexMixin
from statekeeper.node.raft.tls_connection import TlsConnectionMixin, TlsTransportMixin
from statekeeper.node.raft.transfer import LeadershipTransferMixin

log = logging.getLogger("statekeeper.raft")

# pysyncobj pickles with protocol 2, which encodes bytes through a latin-1 str round trip:
# 14x slower than protocol 5 for a 60 KB entry. Peer messages are msgpack now
# (peer_encoding.py), entries are journalled without pickle (log.py) and no entry is ever
# sent in pysyncobj's pickled chunks (pickle_guard.py): what pysyncobj would still pickle
# is its own VERSION and MEMBERSHIP commands, which we never write. Module globals are not
# name-mangled: this is its `__protocol`.
PEER_PICKLE_PROTOCOL = 5
setattr(_pysyncobj_pickle, "__protocol", PEER_PICKLE_PROTOCOL)

# Large entries. Measured on 2 loaded cores, 3 nodes on loopback: one entry of three 1 MiB
# random values cost the leader its term on the first try (4 of 4 runs,
# tests/integration/test_large_entries.py). Two defects of pysyncobj's TcpConnection,
# worked around here (PeerTransport; PeerConnection's codec):
# - send() writes what the socket takes and leaves the rest for the next send() on that
#   connection: one socket buffer per heartbeat (0.1 s). The entry reached the followers
#   1.5-1.8 s after it was sent, with every heartbeat queued behind it.
# - every message is deflated at level 3 on the raft thread, once per follower: 100-180 ms
#   for those 3 MiB each, a 390 ms stall of the leader's heartbeats. No peer message is
#   deflated now (peer_encoding.py says why).
# Socket buffers of peer connections (pysyncobj's default: 64 KiB; the kernel caps them at
# net.core.[rw]mem_max). With both workarounds, 3 runs of 4 such entries each: 64 KiB
# buffers let a follower go 278-432 ms without a heartbeat (a multi-MiB message crosses in
# dozens of wake-ups of both raft threads, and the receiver copies its buffer on every
# 64 KiB recv); 4 MiB buffers: 143-219 ms, batches answered in ~0.1 s.
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024

# One append_entries message may carry this many bytes of entries (more only for a lone
# entry larger than this, from an older journal: it goes as one message). The default
# (64 KiB) sends a group-committed entry of a few MiB as dozens of chunked messages; on
# loopback one message per entry is cheaper. _SyncObj__getEntries applies it: pysyncobj's
# appendEntriesBatchSizeBytes is set where no entry reaches it (_NEVER_CHUNK), because
# pysyncobj pickles a lone entry of that size or more and sends it in 'transmission'
# chunks, which followers unpickle (pickle_guard.py).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_NEVER_CHUNK = 1 << 62
assert RAFT_ENTRY_LIMIT_BYTES < MAX_MESSAGE_BYTES < _NEVER_CHUNK

# loop_driver.py speaks pysyncobj's poller event types without importing it.
assert (POLL_EVENT_TYPE.READ, POLL_EVENT_TYPE.WRITE, POLL_EVENT_TYPE.ERROR) == (
    loop_driver.READ,
    loop_driver.WRITE,
    loop_driver.ERROR,
)
assert VERSION_COMMAND == bytes([_syncobj_module._COMMAND_TYPE.VERSION])

NEXT_NODE_IDX = "next_node_idx"

_FAIL_MAP = {
    FAIL_REASON.QUEUE_FULL: SubmitError.NO_LEADER,
    FAIL_REASON.MISSING_LEADER: SubmitError.NO_LEADER,
    FAIL_REASON.NOT_LEADER: SubmitError.NO_LEADER,
    FAIL_REASON.REQUEST_DENIED: SubmitError.NO_LEADER,
    FAIL_REASON.DISCARDED: SubmitError.OUTCOME_UNKNOWN,
    FAIL_REASON.LEADER_CHANGED: SubmitError.OUTCOME_UNKNOWN,
    FAIL_REASON.UNKNOWN_OUTCOME: SubmitError.OUTCOME_UNKNOWN,
}


def submit_callback(callback: Callback) -> Callable[[object, object], None]:
    """pysyncobj's completion callback for ours: callback(result, None) once applied,
    else callback(None, SubmitError)."""

    def on_done(result, err):
        if err == FAIL_REASON.SUCCESS:
            callback(result, None)
        else:
            callback(None, _FAIL_MAP.get(err, SubmitError.OUTCOME_UNKNOWN))

    return on_done


def replicated_command_size(payload: bytes) -> int:
    """Bytes pysyncobj journals and ships for one entry carrying `payload` (the command-type
    byte + the payload, log.ENTRY_COMMAND): RaftNode.submit's bound, and what the tests
    that probe pysyncobj's chunking boundary size their entries by."""
    return len(ENTRY_COMMAND) + len(payload)


SNAPSHOT_FILE = "snapshot.bin"  # in the raft dir
# pysyncobj's no-op entry (a new leader's first); a restored node's snapshot names two.
NO_OP_COMMAND = bytes([_syncobj_module._COMMAND_TYPE.NO_OP])


def build_conf(
    raft_dir: str,
    bind_address: str,
    r: RaftSettings,
    *,
    serializer: Callable[[str, object], None],
    deserializer: Callable[[str], object],
    serialize_checker: Callable[[], int],
) -> SyncObjConf:
    """The SyncObjConf a node runs with: journal and snapshot in `raft_dir`, timings from
    `r` ([raft] in the cluster config), snapshots through the three callbacks."""
    return SyncObjConf(
        journalFile=os.path.join(raft_dir, "journal.log"),
        fullDumpFile=os.path.join(raft_dir, SNAPSHOT_FILE),
        bindAddress=bind_address,
        # No thread of pysyncobj's own: the node's asyncio loop ticks it (loop_driver.py).
        autoTick=False,
        appendEntriesUseBatch=False,
        appendEntriesBatchSizeBytes=_NEVER_CHUNK,  # batches: _SyncObj__getEntries
        sendBufferSize=SOCKET_BUFFER_BYTES,
        recvBufferSize=SOCKET_BUFFER_BYTES,
        raftMinTimeout=r.election_timeout_min,
        raftMaxTimeout=r.election_timeout_max,
        # Heartbeats well inside the election timeout.
        appendEntriesPeriod=min(0.1, r.election_timeout_min / 4),
        # Check-quorum: a leader that heard from no majority for an election timeout
        # steps down instead of serving (and hanging) for 30 s.
        leaderFallbackTimeout=r.election_timeout_max,
        logCompactionMinEntries=r.snapshot_min_entries,
        logCompactionMinTime=r.snapshot_min_seconds,
        logCompactionBatchSize=1 << 20,
        serializer=serializer,
        deserializer=deserializer,
        serializeChecker=serialize_checker,
        connectionRetryTime=0.3,
        connectionTimeout=max(1.0, 2 * r.election_timeout_max),
        # Online membership change (membership.py takes over how changes are applied).
        dynamicMembershipChange=True,
    )


class _NoPeerPickle:
    """What pysyncobj's tcp_connection calls `pickle` and `zlib`: peer messages are encoded
    by PeerConnection (peer_encoding.py); a path that still reached pysyncobj's own
    encoding must fail loudly, never put a pickle on the wire."""

    def __getattr__(self, name: str):
        raise RuntimeError(
            f"pysyncobj's tcp_connection called {name}(): raft peer messages are encoded "
            "by node/raft/peer_encoding.py, never pickled"
        )


_tcp_connection_module.pickle = _NoPeerPickle()
_tcp_connection_module.zlib = _NoPeerPickle()


_POLL_ALL = POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.WRITE | POLL_EVENT_TYPE.ERROR


class PeerConnection(InPlaceBuffersMixin, PeerCodecMixin, TcpConnection):
    """pysyncobj's TcpConnection with buffers that grow and drain in place
    (conn_buffers.py) and our wire format (peer_encoding.py: msgpack with a version byte,
    no pickle, no zlib): every peer connection, dialled or accepted, is one of these."""

    _DISCONNECTED = CONNECTION_STATE.DISCONNECTED  # for TlsConnectionMixin
    _CONNECTED = CONNECTION_STATE.CONNECTED  # for PeerCodecMixin
    _read_clock = staticmethod(_pysyncobj_monotonic)
    _seal_clock = staticmethod(_pysyncobj_monotonic)  # what TcpConnection.send stamped with


# pysyncobj's modules that bound `monotonicTime` at import, and the two that call the
# `socket` module: the names a harness swaps to run nodes on virtual time over in-memory
# sockets (chaos/sim/patches.py), so that nothing outside this module imports pysyncobj.
CLOCK_MODULES = (_syncobj_module, _tcp_connection_module, _transport_module, _dns_resolver_module)
SOCKET_MODULES = (_tcp_connection_module, _tcp_server_module)

# The two places pysyncobj makes peer connections (its transport dials, its server accepts).
_transport_module.TcpConnection = PeerConnection
_tcp_server_module.TcpConnection = PeerConnection


class _TlsConnection(TlsConnectionMixin, PeerConnection):
    """PeerConnection with raft TLS (tls_connection.TlsConnectionMixin)."""

    _POLL_ALL = _POLL_ALL
    warn_unanswered_dial = False  # TlsConnectionMixin logs an unanswered dial itself


class PeerTransport(ConfigPeersMixin, TlsTransportMixin, SharedSendMixin, TCPTransport):
    """pysyncobj's TCP transport, made to finish sending what it started, sending a
    leader's append_entries packed once for all followers (peer_encoding.SharedSendMixin),
    and (raft TLS on) running every connection through TLS.

    TcpConnection.send() writes what the socket accepts and keeps the rest, but asks the
    poller for a write event only while it was already writing; an idle connection (the
    usual case) is watched for reads only, so the rest of a message larger than the
    socket buffer waited for the next send() on that connection: a few MiB crossed at one
    buffer per heartbeat, with the heartbeats queued behind them. Here every send that
    leaves bytes behind subscribes the connection to write events again, until it drains
    (pysyncobj's own write-event handler then drops the subscription).

    TLS (the PatchedSyncObj's `tls`: (accepting ctx, dialling ctx) or None): dialled connections
    name the peer's node id as server name (the context checks the certificate has it);
    accepted ones require a certificate naming some cluster node, and the node address it
    then claims (its first message after pysyncobj's key exchange) must be that node's."""

    _tls_connection_class = _TlsConnection
    _POLL_ALL = _POLL_ALL

    def send(self, node, message) -> bool:
        kind = message.get("type") if type(message) is dict else None
        if kind == "append_entries":
            self._syncObj.chunk_offsets.stamp(node, message)  # install.ChunkOffsets
        elif kind == "apply_command_response" and "log_idx" in message:
            self._syncObj.note_forwarded(message["log_idx"])  # commit_notice.py
        sent = super().send(node, message)
        conn = self._connections.get(node)
        if sent and conn is not None and conn.getSendBufferSize() and conn.fileno() is not None:
            self._syncObj._poller.subscribe(
                conn.fileno(),
                conn._TcpConnection__processConnection,
                POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.WRITE | POLL_EVENT_TYPE.ERROR,
            )
        return sent


class DialNode(TCPNode):
    """A peer whose identity is its raft address but which is dialled elsewhere (a proxy,
    or a per-link loopback address that a fault injector can cut)."""

    def __init__(self, address: str, dial: str | None = None, node_id: str | None = None):
        super().__init__(address)
        self.node_id = node_id  # the name its TLS certificate must carry (raft TLS)
        host, port = (dial or address).rsplit(":", 1)
        self._dial_host, self._dial_port = host, int(port)

    @property
    def ip(self) -> str:
        return self._dial_host

    @property
    def port(self) -> int:
        return self._dial_port


class _TruncationLogFilter(logging.Filter):
    # pysyncobj logs this before the truncation we no longer perform.
    def filter(self, record: logging.LogRecord) -> bool:
        return "truncating already-applied" not in str(record.msg)


logging.getLogger("pysyncobj.syncobj").addFilter(_TruncationLogFilter())
_journal_patch_lock = threading.Lock()


def serve_snapshot_while_packing(serializer, on_unreadable: Callable[[Any], None] = lambda _n: None) -> None:
    """A follower that needs a snapshot while the leader packs the next one gets the
    current snapshot file, instead of the leader spinning.

    pysyncobj's Serializer answers getTransmissionData() with None while a snapshot is
    being made (its `__pid` is set from serialize() until checkSerializing() reports the
    end, which only a tick does), and SyncObj.__sendAppendEntries, for a follower whose
    next index is below the log's start, loops `while nextNodeIndex <= last index`,
    sending `serialized: None` on every pass without moving the index: it stops only when
    the connection drops, by its connectionTimeout (1.4 s) of wall time. So every lagging
    follower that (re)connected during a pack stalled the leader's loop ~1.4 s (no
    heartbeats: an election) and flooded the link; in the simulator, where a callback
    takes no virtual time, the loop never ended (`statekeeper sim run --seed 100004`,
    found by the first exploration; tests/unit/test_snapshot_while_packing.py).
    Serving the current file is safe: our packing writes a separate file and renames it
    over snapshot.bin (RaftNode._pack_snapshot), so snapshot.bin is always a whole
    snapshot, the one at the log's start; a transfer keeps its open file if the rename
    happens during it.

    With no pack to wait for, None means snapshot.bin could not be opened (gone, or no
    descriptor left), and the same loop asked again on every pass; False means a read of
    the open file failed, and the loop then raised TypeError (False[2]) out of the tick.
    Both answer None here and tell `on_unreadable(node)`, so the leader can end the loop
    (PatchedSyncObj._snapshot_unreadable); the next try opens the file from the start."""
    read = serializer.getTransmissionData

    def transmission_data(transmission_id):
        packing = serializer._Serializer__pid
        serializer._Serializer__pid = 0
        try:
            data = read(transmission_id)
        finally:
            serializer._Serializer__pid = packing
        if data is None or data is False:  # False: a read failed mid-transfer
            on_unreadable(transmission_id)
            return None
        return data

    serializer.getTransmissionData = transmission_data


class PatchedSyncObj(
    SnapshotInstallMixin,
    JournalBoundMixin,
    UnauthenticatedSweepMixin,
    ReadIndexMixin,
    CatchUpMixin,
    PreVoteMixin,
    MembershipMixin,
    LeadershipTransferMixin,
    CommitNoticeMixin,
    PicklePathsMixin,
    SyncObj,
):
    """pysyncobj's SyncObj with this node's workarounds (listed in node/raft/DESIGN.md)."""

    _REQUEST_DENIED = FAIL_REASON.REQUEST_DENIED  # for PicklePathsMixin
    _FAIL_REASON = FAIL_REASON  # for MembershipMixin

    def __init__(
        self,
        self_addr: str,
        members: dict[str, Member],  # before the journal's membership entries
        conf: SyncObjConf,
        apply_fn: ApplyFn,
        journal: RaftLog,
        encryptor: AuthenticatingEncryptor,
        *,
        clock: ClusterClock,
        max_journal_bytes: float = math.inf,
        flush_state_machine: Callable[[], None] = lambda: None,
        tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
        make_node: Callable[[str, Member | None], TCPNode],
        driver: LoopDriver,
        state_machine_restoring: Callable[[], bool] = lambda: False,
        sync_behind: SyncBehind | None = None,
        start_marker: str | None = None,
    ):
        # Built on the driver's loop thread (RaftNode): pysyncobj binds and subscribes its
        # sockets in __init__, and the loop's reader registry is not thread-safe.
        self._driver = driver
        self._init_install(state_machine_restoring, sync_behind)
        self._sk_tls = tls  # (accepting, dialling) contexts; read by PeerTransport
        self._apply_fn = apply_fn
        self._clock = clock
        self._clock_term = -1  # term in which the clock was last anchored
        self._journal = journal
        self._sk_encryptor = encryptor
        # The shared encodings of the leader's current AppendEntries pass (peer_encoding.py);
        # None outside a pass.
        self.send_pass: PassEncoder | None = None
        self._init_prevote(conf.raftMinTimeout)
        # No raft state at start: no vote (a lost disk) or no election (a new member
        # joining) until caught up (catchup.py).
        self._init_catch_up(os.path.dirname(conf.journalFile), start_marker)
        self._leadership_lost: list[Callable[[], None]] = []
        # New leaders seen (itself included), counted once per tick; read by metrics.
        self.leader_changes = 0
        self._leader_seen = None
        self._init_sweep()
        self._init_journal_bound(max_journal_bytes, flush_state_machine)
        # Leadership hand-over asked for by another thread (node/raft/transfer.py).
        self.init_transfer(FAIL_REASON.SUCCESS)
        # ReadIndex (Raft thesis 6.4): reads confirmed by a heartbeat round, no log entry.
        self._init_read_index()
        # The leader's commit-only AppendEntries ride on the next pass (commit_notice.py).
        self._init_commit_notice(driver.loop.call_later)
        self.ticks = 0  # ticks run (metrics: statekeeper_raft_ticks_total)
        self._tick_waits_for_log = False  # a tick was skipped for the leader's fdatasync
        # Raft-loop progress for the liveness check (node/api/liveness.py): stamped by every
        # tick and every applied entry (a long journal replay is progress, not a stall);
        # written by the raft thread only, read by the HTTP thread (a float: no lock).
        self.last_progress = time.monotonic()
        self.max_progress_gap = 0.0
        self._init_membership(self_addr, members, make_node)  # replays the journal over them
        peers = [self.node_for(m.to_dict()) for a, m in self.members.items() if a != self_addr]
        with _journal_patch_lock:
            originals = _syncobj_module.createJournal, _syncobj_module.createPoller
            _syncobj_module.createJournal = lambda _path: journal
            _syncobj_module.createPoller = lambda _kind: driver.poller
            try:
                super().__init__(
                    self_addr,
                    peers,
                    conf=conf,
                    nodeClass=self.node_for,
                    transportClass=PeerTransport,
                )
            finally:
                _syncobj_module.createJournal, _syncobj_module.createPoller = originals
        self._wake_by_driver()
        serve_snapshot_while_packing(self._SyncObj__serializer, self._snapshot_unreadable)
        driver.start(self._tick_once)

    def _snapshot_unreadable(self, node) -> None:
        """snapshot.bin could not be opened for `node`, which needs a snapshot. pysyncobj's
        AppendEntries loop would ask again on every pass until its period ran out: ~0.1 s
        of every tick and a logged traceback per pass, for ever on virtual time (the
        simulator's seed 200061; tests/unit/sim/test_snapshot_unreadable.py). Dropping the
        link ends the loop (it stops once the node is not connected; the link comes back
        within connectionRetryTime), and a new snapshot is packed at the next tick that has
        an applied entry to pack, so a later try finds one."""
        log.warning("snapshot.bin cannot be opened for %s, which needs it: packing a new one", node)
        conn = self._SyncObj__transport._connections.get(node)
        if conn is not None:
            conn.disconnect()
        self.forceLogCompaction()

    # The clock of pysyncobj's deadlines (election, heartbeats); prevote.py sets them too.
    raft_clock = staticmethod(_pysyncobj_monotonic)

    def _wake_by_driver(self) -> None:
        """pysyncobj queues a command, then writes a byte to a non-blocking pipe to wake
        its thread; with the pipe full that write raised BlockingIOError out of submit()
        although the command was queued (and applied). There is no such thread now: a
        queued command (or read) asks the driver for a tick, which never fails."""
        self._SyncObj__pipeNotifier.notify = self._driver.wake

    def _tick_once(self) -> None:
        # The leader's own fdatasync may still run (sync_behind in _checkCommandsToApply):
        # this tick would count its entries towards the commit index, so it waits for it,
        # and _on_log_durable ticks again. Meanwhile the loop serves HTTP and reads peer
        # messages instead of blocking in the fdatasync. (Flag first, then the check: the
        # journal's thread clears syncing_behind before it reads the flag.)
        self._tick_waits_for_log = True
        if self._journal.syncing_behind:
            return
        self._tick_waits_for_log = False
        self.ticks += 1
        self._onTick(0.0)

    def _on_log_durable(self) -> None:
        # The journal's thread, once the leader's fdatasync returned: a tick skipped for it
        # runs now; none was: no tick (waking anyway cost an extra tick per entry).
        if self._tick_waits_for_log:
            self._driver.wake()

    @property
    def encryptor(self):  # what pysyncobj's transport puts on every connection
        return self._sk_encryptor

    def _apply_entry(self, payload: bytes, callback: Callable[[object, object], None]) -> None:
        """Submit an entry: journalled as ENTRY_COMMAND + payload (log.py), not through
        @replicated's pickle; callback(result, FAIL_REASON) as pysyncobj calls it."""
        self._applyCommand(ENTRY_COMMAND + payload, callback)

    def _SyncObj__doApplyCommand(self, command: bytes):
        payload = entry_payload(command)
        if payload is None:  # NO_OP, membership: pysyncobj's (membership.py)
            if self.skipped_version_command(command):  # never unpickled (pickle_guard.py)
                return None
            return SyncObj._SyncObj__doApplyCommand(self, command)  # type: ignore[attr-defined]
        # The index being applied is not passed in; pysyncobj increments
        # raftLastApplied right after this returns.
        self.note_progress()
        return self._apply_fn(self.raftLastApplied + 1, payload)

    def leader_commit_index(self) -> int | None:
        return self._SyncObj__leaderCommitIndex  # type: ignore[attr-defined]

    # -- durability ---------------------------------------------------------------------

    def note_progress(self) -> None:
        now = time.monotonic()
        self.max_progress_gap = max(self.max_progress_gap, now - self.last_progress)
        self.last_progress = now

    def _onTick(self, timeToWait: float = 0.0) -> None:
        # sleep(S): a raft step stuck (the whole node: raft runs on the loop); N*error: from
        # the Nth on, ticks fail before they count as progress (node/api/liveness.py: not live).
        failpoints.hit("raft-tick")
        self.note_progress()
        # The leader counts itself towards the commit index inside this tick: whatever it
        # appended since the last tick must be on disk first (one fsync per tick).
        self._journal.sync()
        self._compact_if_journal_too_big()
        self._catch_up_tick()
        self._prevote_tick()
        self._sweep_unauthenticated()
        self._follow_peers()
        if self._state_machine_restoring():
            self._stand_for_no_election()
        was_leader = self._isLeader()
        self._start_read_round()
        super()._onTick(timeToWait)
        self.transfer_tick()
        self.end_hold_if_over()
        if was_leader and not self._isLeader():
            self._fail_read_rounds()
            for fn in self._leadership_lost:
                fn()
        leader = self._getLeader()
        if leader is not None and leader != self._leader_seen:
            self._leader_seen = leader
            self.leader_changes += 1
        self._answer_confirmed_reads()

    def _checkCommandsToApply(self) -> None:
        # This is where the leader appends queued commands (its own and forwarded ones):
        # each gets the leader's time (node/raft/cluster_clock.py), whoever built it.
        if self._isLeader() and self.holding_appends():
            return  # a hand-over waits for its target to catch up (transfer.py)
        if self._isLeader():
            if self._clock_term != self.raftCurrentTerm:
                self._clock.anchor()
                self._clock_term = self.raftCurrentTerm
            self._journal.stamp = self._clock.stamp
        try:
            super()._checkCommandsToApply()
        finally:
            self._journal.stamp = None
        # The leader has just appended (and already sent) new entries: fsync them now, while
        # the followers write theirs, rather than at the next tick, after their answers;
        # on the journal's own thread, so that the loop goes on meanwhile (_tick_once).
        if self._isLeader():
            self._journal.sync_behind(self._on_log_durable)

    def _SyncObj__sendAppendEntries(self) -> None:
        # One msgpack per distinct message of the pass, not per follower
        # (peer_encoding.py); the encodings die with the pass, so none is ever stale.
        self.send_pass = PassEncoder()
        self.note_pass_sent()  # commit_notice.py
        try:
            SyncObj._SyncObj__sendAppendEntries(self)  # type: ignore[attr-defined]
        finally:
            self.send_pass = None

    def _SyncObj__getEntries(self, fromIDx, count=None, maxSizeBytes=None):
        # The leader's batches (the one call with a size) stop at MAX_MESSAGE_BYTES, read
        # here at each call; pysyncobj's own limit, which would chunk, is never reached.
        if maxSizeBytes is not None:
            maxSizeBytes = min(maxSizeBytes, MAX_MESSAGE_BYTES)
        return SyncObj._SyncObj__getEntries(self, fromIDx, count, maxSizeBytes)  # type: ignore[attr-defined]

    def _SyncObj__applyLogEntries(self) -> bool:
        # True: pysyncobj's leader sends every follower the new commit index at once;
        # commit_notice.py defers that to the next pass unless a follower waits for it.
        need_send = super()._SyncObj__applyLogEntries()  # type: ignore[misc]
        return need_send and (not self._isLeader() or self.notice_now())

    def send_commit_notice(self) -> None:
        self._SyncObj__sendAppendEntries()

    def _SyncObj__sendNextNodeIdx(self, node, reset=False, nextNodeIdx=None, success=False):
        # A follower acknowledges only entries that are on disk (one fsync per message).
        self._journal.sync()
        failpoints.hit("follower-after-fsync")
        if nextNodeIdx is None:
            nextNodeIdx = self._journal[-1][1] + 1
        # pysyncobj's reply carries no term, and its leader takes any success reply: a late
        # one from an earlier term could raise matchIndex above what the follower holds now.
        # We tag replies with our term; the leader drops those not of its term.
        self._SyncObj__transport.send(
            node,
            {
                "type": NEXT_NODE_IDX,
                "next_node_idx": nextNodeIdx,
                "reset": reset,
                "success": success,
                "term": self.raftCurrentTerm,
            },
        )

    # -- safe truncation ----------------------------------------------------------------

    def _SyncObj__deleteEntriesFrom(self, fromIDx):
        # pysyncobj calls this for every AppendEntries whose prevLogIdx is not our last
        # entry; RaftLog.add truncates only at a real conflict instead.
        return None

    def _SyncObj__onMessageReceived(self, node, message):
        kind = message.get("type") if isinstance(message, dict) else None
        if self.refused_pickle_path(node, kind, message):  # pickle_guard.py
            return None
        if self.dropped_while_restoring(kind, message) or self.refused_while_catching_up(kind):
            return None
        if kind == PREVOTE_REQUEST:
            return self._on_prevote_request(node, message)
        if kind == PREVOTE_RESPONSE:
            return self._on_prevote_response(node, message)
        if kind == READ_INDEX_REQUEST:
            return self._on_read_index_request(node, message)
        if kind == READ_INDEX_ACK:
            return self._on_read_index_ack(node, message)
        if kind == SNAPSHOT_CHUNK_ACK:
            return self._on_chunk_ack(node, message)  # check-quorum (install.py)
        if kind == NEXT_NODE_IDX and message.get("term") != self.raftCurrentTerm:
            return None  # a reply to an earlier term's AppendEntries (see __sendNextNodeIdx)
        if kind == "append_entries" and message.get("term", -1) >= self.raftCurrentTerm:
            self._last_leader_contact = time.monotonic()
            self._prevote, self._prevote_won = None, False
            return self._on_append_entries(node, message)
        return SyncObj._SyncObj__onMessageReceived(self, node, message)  # type: ignore[attr-defined]
