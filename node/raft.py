"""The only module that knows pysyncobj.

Interface (what the rest of the node uses):
    RaftNode(cluster_config, node_id, apply_fn, fsm)
                                 fsm: the FSM below; apply_fn: fsm.apply or a wrapper
    .submit(payload, callback)   payload: bytes; callback(results | None, SubmitError | None)
                                 called from the raft thread once the entry is applied HERE
    .leader_known() / .status() -> RaftStatus
    .on_leadership_lost(fn)      fn() called on the raft thread when this node stops leading
    .transfer_leadership()
    .destroy()

pysyncobj 0.3.17 defects this module works around (see ../shared/DESIGN.md), each with a
test in tests/integration/ (test_raft_workarounds.py, test_raft_safety.py,
test_raft_defects.py) unless named:
- FileJournal never fsyncs: we hand it DurableJournal (node/journal.py) instead, and sync
  it once per received AppendEntries before the follower answers, and at the start of every
  tick, before the leader counts its own entries towards the commit index.
- followers truncate everything after prevLogIdx on every AppendEntries: we ignore that
  truncation and let _RaftLog.add truncate only where a term really conflicts (Raft 5.3),
  and we bound the follower's commit index by the last entry the message vouched for.
- peer messages are pickle: every peer must hold the cluster secret (AES-GCM), and a message
  failing authentication is logged and its connection dropped before anything is unpickled.
- a leader cut off from the majority stays leader for 30 s and a rejoining node deposes a
  healthy leader: leaderFallbackTimeout ~ one election timeout (check-quorum), plus pre-vote.
- appendEntriesUseBatch=True sends only every 0.1 s: disabled, we batch ourselves.
- journalFile without fullDumpFile comes back empty after the first compaction: both set.
- restart re-applies journal entries after the last snapshot: apply_fn skips indexes the
  state machine already recorded (the index being applied is raftLastApplied + 1).
- one thread does networking, elections, apply and callbacks: callbacks must not block.
- a crash between a snapshot's rename and the journal's prefix drop made the next start
  cut the journal to the snapshot's two entries, losing acknowledged entries after it:
  loading keeps the entries after the snapshot's last one (Raft's InstallSnapshot rule).
  Test: tests/integration/test_raft_defects.py::test_crash_after_snapshot_rename_keeps_later_entries
- a snapshot-install message (no prevLogIdx) set commit = min(leaderCommit, last index),
  applying a deposed leader's never-committed tail: it now commits at most the snapshot.
  Test: test_snapshot_install_message_never_commits_a_stale_tail
- replies to AppendEntries carry no term and the leader takes any success: we tag them with
  the term and the leader drops other terms' replies. Test: test_stale_term_reply_is_ignored
- pre-vote counted its majority only when a reply arrived: a one-node cluster never elected
  a leader. Test: test_one_node_cluster_elects_itself
- submit() raised BlockingIOError when the wake-up pipe was full although the command was
  queued (and so applied later): a full pipe is ignored. Test: tests/unit/test_proposer.py
- entries carry the time of whichever node built them: the leader restamps every regular
  command it appends (node/cluster_clock.py bounds that time). Test: test_raft_defects.py::
  test_a_follower_clock_a_day_ahead_does_not_expire_idempotency
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import BinaryIO, Protocol

import pysyncobj.syncobj as _syncobj_module
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj import pickle as _pysyncobj_pickle
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.node import TCPNode

from node import entry, failpoints, snapshot_file
from node.cluster_clock import ClusterClock
from node.config import ClusterConfig, ConfigError
from node.journal import DurableJournal

log = logging.getLogger("statekeeper.raft")

# pysyncobj pickles every command and peer message with protocol 2, which encodes bytes
# through a latin-1 str round trip: 14x slower than protocol 5 for a 60 KB entry, and our
# entries are all bytes. Module globals are not name-mangled: this is its `__protocol`.
PEER_PICKLE_PROTOCOL = 5
setattr(_pysyncobj_pickle, "__protocol", PEER_PICKLE_PROTOCOL)

# One append_entries message may carry this many bytes of entries. The default (64 KiB)
# sends a group-committed entry of a few MiB as dozens of chunked messages; on loopback
# one message per entry is cheaper.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

# An incoming raft connection must authenticate within this time and these many bytes.
UNAUTHENTICATED_GRACE = 2.0
MAX_UNAUTHENTICATED_BYTES = 64 * 1024

# Fixed and public on purpose: it only has to differ from other uses of the same secret.
_KDF_SALT = b"statekeeper raft peers v1"

PREVOTE_REQUEST = "sk_prevote"
PREVOTE_RESPONSE = "sk_prevote_resp"
READ_INDEX_REQUEST = "sk_readindex"
READ_INDEX_ACK = "sk_readindex_ack"
# read_index() answers: the leader could not confirm itself / has not committed its no-op.
READ_INDEX_NOT_LEADER = -1
READ_INDEX_NOT_YET = -2
_LEADER = 2  # pysyncobj's _RAFT_STATE.LEADER
REGULAR_COMMAND = b"\x00"  # pysyncobj's _COMMAND_TYPE.REGULAR: a @replicated call
NEXT_NODE_IDX = "next_node_idx"


class SubmitError(Enum):
    """Why a submitted entry has no result."""

    # Definitely not applied: safe to retry anywhere.
    NO_LEADER = "no_leader"
    # May or may not be applied: retry only with the same idempotency key.
    OUTCOME_UNKNOWN = "outcome_unknown"


_FAIL_MAP = {
    FAIL_REASON.QUEUE_FULL: SubmitError.NO_LEADER,
    FAIL_REASON.MISSING_LEADER: SubmitError.NO_LEADER,
    FAIL_REASON.NOT_LEADER: SubmitError.NO_LEADER,
    FAIL_REASON.REQUEST_DENIED: SubmitError.NO_LEADER,
    FAIL_REASON.DISCARDED: SubmitError.OUTCOME_UNKNOWN,
    FAIL_REASON.LEADER_CHANGED: SubmitError.OUTCOME_UNKNOWN,
    FAIL_REASON.UNKNOWN_OUTCOME: SubmitError.OUTCOME_UNKNOWN,
}


@dataclass(frozen=True)
class RaftStatus:
    node_id: str
    is_leader: bool
    leader_id: str | None
    term: int
    commit_index: int
    applied_index: int
    leader_commit_index: int | None
    has_quorum: bool
    ready: bool
    log_truncations: int
    log_truncated_entries: int
    rejected_peer_messages: int


class FSM(Protocol):
    """The replicated state machine, as raft sees it (hashicorp/raft's FSM shape).

    Raft knows nothing of what the entries mean; the state machine knows nothing of raft.
    node.store.StateMachine implements this; a test can hand in any object that does.
    apply and the snapshot calls come from the raft thread, except write_checkpoint
    and flush, which run on a helper thread while applies go on.
    """

    def apply(self, index: int, entry: bytes) -> object:
        """Apply the committed entry at raft `index`; None if it is already applied
        (`index <= applied_index`: pysyncobj replays the journal on restart)."""
        ...

    def checkpoint(self) -> Path:
        """A consistent copy of the state in a new directory, taken between two applies."""
        ...

    def write_checkpoint(self, work: Path, f: BinaryIO) -> None:
        """Pack a checkpoint() directory into the snapshot bytes restore() reads."""
        ...

    def restore(self, path: str) -> None:
        """Replace the whole state with a snapshot file written by write_checkpoint()."""
        ...

    def flush(self) -> None:
        """Make the next checkpoint() quick (done before one, off the raft thread)."""
        ...

    @property
    def applied_index(self) -> int:
        """The last raft index applied (durably, as far as a restart is concerned)."""
        ...

    @property
    def clock_ms(self) -> int:
        """The largest entry time applied so far (the replicated clock)."""
        ...


ApplyFn = Callable[[int, bytes], object]
Callback = Callable[[object, "SubmitError | None"], None]


def _entry_tuple(e) -> tuple:
    # pysyncobj compares journal entries with ==, so they must come back as
    # (bytes, int, int) tuples exactly, or it clears the journal on restart.
    return (bytes(e[0]), int(e[1]), int(e[2]))


def replicated_command_size(payload: bytes) -> int:
    """Bytes pysyncobj journals and ships for one entry carrying `payload`
    (command-type byte + its pickle of (method id, args)); used by tests that probe
    pysyncobj's chunking boundary."""
    return 1 + len(_pysyncobj_pickle.dumps((0, (payload,))))


class _RaftLog(DurableJournal):
    """The journal as pysyncobj sees it, made safe for followers: an entry that is
    already present with the same term is kept (a repeated or reordered AppendEntries
    must not shorten the log); only a real term conflict truncates (Raft 5.3).

    While `stamp` is set (only around the leader's own appends, see
    _SyncObj._checkCommandsToApply) every regular command gets the leader's time."""

    stamp: Callable[[], int] | None = None

    def add(self, command: bytes, idx: int, term: int) -> None:
        if self.stamp is not None and command[:1] == REGULAR_COMMAND:
            command = entry.restamp(command, self.stamp())
        if len(self):
            first, last = self[0][1], self[-1][1]
            if first <= idx <= last:
                pos = idx - first
                if self[pos][2] == term:
                    return
                self.deleteEntriesFrom(pos)
        super().add(command, idx, term)

    def deleteEntriesTo(self, entryTo: int) -> None:
        # Called right after pysyncobj renamed a new snapshot into place: make that rename
        # durable before the entries it covers leave the journal.
        if self.fsync_mode == "always":
            snapshot_file.fsync_dir(os.path.dirname(self.path))
        super().deleteEntriesTo(entryTo)


class _AuthenticatingEncryptor:
    """What pysyncobj's transport calls for every peer message, with AES-GCM instead of
    its Fernet (AES-CBC + HMAC + base64: ~120 us per message here, GCM ~8 us). A token is
    version | 8-byte timestamp | 12-byte nonce | ciphertext+tag, the first 9 bytes
    authenticated as associated data. A message failing authentication is logged (pysyncobj
    drops such connections silently); nothing unauthenticated is ever decompressed or
    unpickled, because pysyncobj decrypts first. Every node must run this same scheme."""

    _VERSION = b"\x01"
    _HEAD = 9  # version + timestamp

    def __init__(self, secret: str):
        kdf = PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=_KDF_SALT, iterations=200_000)
        self._aead = AESGCM(kdf.derive(secret.encode()))
        self.rejected = 0
        self._last_log = 0.0

    def reject(self, why: str = "message failed authentication") -> None:
        self.rejected += 1
        now = time.monotonic()
        if now - self._last_log > 1.0:  # a flood of garbage must not flood the log
            self._last_log = now
            log.warning(
                "dropped a raft peer connection: %s (wrong cluster secret, or not a "
                "statekeeper peer); %d rejected so far",
                why,
                self.rejected,
            )

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        head = self._VERSION + struct.pack(">Q", current_time)
        nonce = os.urandom(12)
        return head + nonce + self._aead.encrypt(nonce, data, head)

    def extract_timestamp(self, token: bytes) -> int:
        if len(token) < self._HEAD + 12 + 16 or token[:1] != self._VERSION:
            self.reject()
            raise ValueError("not a statekeeper peer message")
        return struct.unpack(">Q", token[1 : self._HEAD])[0]

    def decrypt(self, token: bytes) -> bytes:
        head, nonce = token[: self._HEAD], token[self._HEAD : self._HEAD + 12]
        try:
            return self._aead.decrypt(nonce, token[self._HEAD + 12 :], head)
        except (InvalidTag, ValueError):
            self.reject()
            raise


class _DialNode(TCPNode):
    """A peer whose identity is its raft address but which is dialled elsewhere (a proxy,
    or a per-link loopback address that a fault injector can cut)."""

    def __init__(self, address: str, dial: str | None = None):
        super().__init__(address)
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


class _SyncObj(SyncObj):
    def __init__(
        self,
        self_addr: str,
        peers: list[TCPNode],
        conf: SyncObjConf,
        apply_fn: ApplyFn,
        journal: _RaftLog,
        encryptor: _AuthenticatingEncryptor,
        *,
        clock: ClusterClock,
        max_journal_bytes: float = math.inf,
        flush_state_machine: Callable[[], None] = lambda: None,
    ):
        # Everything the raft thread touches must exist before SyncObj.__init__ starts it.
        self._apply_fn = apply_fn
        self._clock = clock
        self._clock_term = -1  # term in which the clock was last anchored
        self._installed_snapshot: int | None = None  # last index of a snapshot just installed
        self._journal = journal
        self._sk_encryptor = encryptor
        self._election_timeout_min = conf.raftMinTimeout
        self._last_leader_contact = -math.inf
        self._prevote: tuple[int, set] | None = None
        self._prevote_won = False
        self._leadership_lost: list[Callable[[], None]] = []
        self._unknown_since: dict[object, float] = {}
        self._next_sweep = 0.0
        self._max_journal_bytes = max_journal_bytes
        self._flush_state_machine = flush_state_machine
        self._preflush_started: float | None = None
        # ReadIndex (Raft thesis 6.4): reads confirmed by a heartbeat round, no log entry.
        self._read_lock = threading.Lock()
        self._read_requests: list[Callable[[int], None]] = []  # from the HTTP thread
        self._read_round = 0  # id of the last confirmation round sent
        self._read_rounds: dict[int, tuple[int, set, list[Callable[[int], None]]]] = {}
        self._reads_confirmed: list[tuple[int, Callable[[int], None]]] = []
        with _journal_patch_lock:
            original = _syncobj_module.createJournal
            _syncobj_module.createJournal = lambda _path: journal
            try:
                super().__init__(self_addr, peers, conf=conf)
            finally:
                _syncobj_module.createJournal = original
        self._tolerate_full_wakeup_pipe()

    def _tolerate_full_wakeup_pipe(self) -> None:
        """pysyncobj queues a command, then writes a byte to a non-blocking pipe to wake
        the raft thread; with the pipe full (the raft thread busy for a while) that write
        raises BlockingIOError out of submit() although the command IS queued and will be
        applied. A full pipe already guarantees a wake-up, so the error means nothing."""
        notifier = self._SyncObj__pipeNotifier
        write = notifier.notify

        def notify() -> None:
            with contextlib.suppress(BlockingIOError):
                write()

        notifier.notify = notify

    @property
    def encryptor(self):  # what pysyncobj's transport puts on every connection
        return self._sk_encryptor

    @replicated
    def _apply_entry(self, payload: bytes):
        # The index being applied is not passed in; pysyncobj increments
        # raftLastApplied right after this returns.
        return self._apply_fn(self.raftLastApplied + 1, payload)

    def leader_commit_index(self) -> int | None:
        return self._SyncObj__leaderCommitIndex  # type: ignore[attr-defined]

    # -- durability ---------------------------------------------------------------------

    def _onTick(self, timeToWait: float = 0.0) -> None:
        # The leader counts itself towards the commit index inside this tick: whatever it
        # appended since the last tick must be on disk first (one fsync per tick).
        self._journal.sync()
        if self._journal.size_bytes <= self._max_journal_bytes:
            self._preflush_started = None
        elif self._preflush_started is None or time.monotonic() - self._preflush_started > 30:
            # The checkpoint (raft thread) flushes RocksDB's memtable first: ~0.3 s for a
            # full one, a stall every snapshot. Flush on a helper thread, then snapshot;
            # once per journal overflow (again after 30 s if the snapshot failed).
            self._preflush_started = time.monotonic()
            threading.Thread(target=self._flush_then_compact, name="preflush", daemon=True).start()
        self._prevote_tick()
        self._sweep_unauthenticated()
        was_leader = self._isLeader()
        self._start_read_round()
        super()._onTick(timeToWait)
        if was_leader and not self._isLeader():
            self._fail_read_rounds()
            for fn in self._leadership_lost:
                fn()
        self._answer_confirmed_reads()

    def _checkCommandsToApply(self) -> None:
        # This is where the leader appends queued commands (its own and forwarded ones):
        # each gets the leader's time (node/cluster_clock.py), whoever built it.
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
        # the followers write theirs, rather than at the next tick, after their answers.
        if self._isLeader():
            self._journal.sync()

    def _SyncObj__sendNextNodeIdx(self, node, reset=False, nextNodeIdx=None, success=False):
        # A follower acknowledges only entries that are on disk (one fsync per message).
        self._journal.sync()
        failpoints.hit("follower-after-fsync")
        if nextNodeIdx is None:
            nextNodeIdx = self._journal[-1][1] + 1
        # pysyncobj's reply carries no term, and its leader takes any success reply: a late
        # one from an earlier term could raise matchIndex above what the follower holds now.
        # We tag replies with our term; the leader drops those not of its term.
        self._SyncObj__transport.send(node, {
            "type": NEXT_NODE_IDX,
            "next_node_idx": nextNodeIdx,
            "reset": reset,
            "success": success,
            "term": self.raftCurrentTerm,
        })

    # -- peers that never authenticate -------------------------------------------------

    def _sweep_unauthenticated(self) -> None:
        """pysyncobj checks a connection's timeout only when bytes arrive, so a client that
        sends half a frame (or a huge length prefix) and waits is kept forever. A real peer
        authenticates within one round trip: drop connections that have not done so."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + 0.2
        transport = self._SyncObj__transport
        unknown = getattr(transport, "_unknownConnections", set())
        for conn in list(unknown):
            since = self._unknown_since.setdefault(conn, now)
            buffered = len(getattr(conn, "_TcpConnection__readBuffer", b""))
            if now - since > UNAUTHENTICATED_GRACE or buffered > MAX_UNAUTHENTICATED_BYTES:
                self._sk_encryptor.reject("connection sent no authenticated message in time")
                conn.disconnect()
                unknown.discard(conn)
        for conn in list(self._unknown_since):
            if conn not in unknown:
                del self._unknown_since[conn]

    # -- safe truncation ----------------------------------------------------------------

    def _SyncObj__deleteEntriesFrom(self, fromIDx):
        # pysyncobj calls this for every AppendEntries whose prevLogIdx is not our last
        # entry; _RaftLog.add truncates only at a real conflict instead.
        return None

    def _SyncObj__onMessageReceived(self, node, message):
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == PREVOTE_REQUEST:
            return self._on_prevote_request(node, message)
        if kind == PREVOTE_RESPONSE:
            return self._on_prevote_response(node, message)
        if kind == READ_INDEX_REQUEST:
            return self._on_read_index_request(node, message)
        if kind == READ_INDEX_ACK:
            return self._on_read_index_ack(node, message)
        if kind == NEXT_NODE_IDX and message.get("term") != self.raftCurrentTerm:
            return None  # a reply to an earlier term's AppendEntries (see __sendNextNodeIdx)
        if kind == "append_entries" and message.get("term", -1) >= self.raftCurrentTerm:
            self._last_leader_contact = time.monotonic()
            self._prevote, self._prevote_won = None, False
            return self._on_append_entries(node, message)
        return SyncObj._SyncObj__onMessageReceived(self, node, message)  # type: ignore[attr-defined]

    def _on_append_entries(self, node, message: dict) -> None:
        """pysyncobj sets commit = min(leaderCommit, our last index) after any AppendEntries.
        Our log may end in a stale term's entries (we truncate only at a real conflict), so
        commit only what THIS message vouched for: up to prevLogIdx + its entries, or, for a
        snapshot-install message (no prevLogIdx: a chunk, or None while the leader is still
        packing), up to the snapshot's last index once it is installed, else not at all."""
        before = self.raftCommitIndex
        self._installed_snapshot = None
        SyncObj._SyncObj__onMessageReceived(self, node, message)  # type: ignore[attr-defined]
        if "prevLogIdx" in message:
            n = 1 if message.get("transmission") == "finish" else len(message.get("entries", ()))
            vouched = min(message["commit_index"], message["prevLogIdx"] + n)
        else:
            vouched = self._installed_snapshot or 0
        bound = max(before, vouched)
        if self.raftCommitIndex > bound:
            self._SyncObj__raftCommitIndex = bound
            self._journal.setRaftCommitIndex(bound)

    def _SyncObj__loadDumpFile(self, clearJournal: bool) -> None:
        """Load the snapshot at start (clearJournal False) or after receiving it from the
        leader (True). pysyncobj keeps the journal only if it starts exactly with the
        snapshot's (prev, last) entries, and otherwise cuts it to those two: after a crash
        between the snapshot's rename and the journal's prefix drop that threw away every
        entry after the snapshot, entries this node had fsynced, acknowledged and applied.
        Raft's rule instead: if the journal holds the snapshot's last entry (same index and
        term), keep what follows it and drop only what precedes; else start from the
        snapshot alone."""
        try:
            header, _ = snapshot_file.read_header(self._SyncObj__conf.fullDumpFile)
            prev, last = _entry_tuple(header["prev"]), _entry_tuple(header["last"])
        except Exception:
            log.exception("reading the snapshot header failed")
            return SyncObj._SyncObj__loadDumpFile(self, clearJournal)  # type: ignore[attr-defined]
        if clearJournal:
            failpoints.hit("snapshot-install")
        self._cut_journal_before(prev, last)
        SyncObj._SyncObj__loadDumpFile(self, False)  # type: ignore[attr-defined]
        if clearJournal:
            self._installed_snapshot = last[1]

    def _cut_journal_before(self, prev: tuple, last: tuple) -> None:
        j = self._journal
        if len(j) < 2 or not j[0][1] <= prev[1] < j[-1][1]:
            return
        pos = prev[1] - j[0][1]
        if j[pos] == prev and j[pos + 1] == last and pos > 0:
            j.deleteEntriesTo(pos)  # crash-safe: new file, fsync, rename, fsync dir

    def _flush_then_compact(self) -> None:
        try:
            self._flush_state_machine()
        except Exception:
            log.exception("flushing the state machine before a snapshot failed")
        # Only sets a flag; the raft thread snapshots at its next tick.
        self.forceLogCompaction()

    # -- ReadIndex ------------------------------------------------------------------------

    def request_read_index(self, callback: Callable[[int], None]) -> None:
        """Any thread. callback(index) on the raft thread once this node has confirmed it
        still leads (a majority acknowledged a round sent after this call) and has applied
        up to the commit index it had when the round started; or callback(READ_INDEX_*)."""
        with self._read_lock:
            self._read_requests.append(callback)
        self._SyncObj__pipeNotifier.notify()  # wake the raft thread now, not at its next tick

    def _start_read_round(self) -> None:
        with self._read_lock:
            waiting, self._read_requests = self._read_requests, []
        if not waiting:
            return
        if not self._isLeader():
            for cb in waiting:
                cb(READ_INDEX_NOT_LEADER)
            return
        commit = self.raftCommitIndex
        # Until its no-op is committed a new leader may not know the latest commit index.
        if commit < self._SyncObj__noopIDx:
            for cb in waiting:
                cb(READ_INDEX_NOT_YET)
            return
        self._read_round += 1
        self._read_rounds[self._read_round] = (commit, {self.selfNode}, waiting)
        request = {"type": READ_INDEX_REQUEST, "term": self.raftCurrentTerm, "id": self._read_round}
        transport = self._SyncObj__transport
        for peer in self.otherNodes:
            transport.send(peer, request)
        self._confirm_read_rounds()  # a one-node cluster needs no answers

    def _on_read_index_request(self, node, m: dict) -> None:
        # Only the leader of our term sends these (one leader per term): same term = we have
        # not moved on to a newer leader, which is what the leader needs to hear.
        if m.get("term") == self.raftCurrentTerm and not self._isLeader():
            self._SyncObj__transport.send(node, {"type": READ_INDEX_ACK, "term": m["term"], "id": m.get("id")})

    def _on_read_index_ack(self, node, m: dict) -> None:
        if not self._isLeader() or m.get("term") != self.raftCurrentTerm or not isinstance(m.get("id"), int):
            return
        # An answer to round n was sent after every round <= n started: it confirms them all.
        for rid, (_, acks, _) in self._read_rounds.items():
            if rid <= m["id"]:
                acks.add(node)
        self._confirm_read_rounds()

    def _confirm_read_rounds(self) -> None:
        quorum = (len(self.otherNodes) + 1) / 2
        for rid in sorted(self._read_rounds):
            index, acks, callbacks = self._read_rounds[rid]
            if len(acks) <= quorum:
                break  # later rounds cannot be confirmed before earlier ones
            del self._read_rounds[rid]
            self._reads_confirmed.extend((index, cb) for cb in callbacks)
        self._answer_confirmed_reads()

    def _answer_confirmed_reads(self) -> None:
        if not self._reads_confirmed:
            return
        applied = self.raftLastApplied
        ready = [(i, cb) for i, cb in self._reads_confirmed if i <= applied]
        if ready:
            self._reads_confirmed = [(i, cb) for i, cb in self._reads_confirmed if i > applied]
            for index, cb in ready:
                cb(index)

    def _fail_read_rounds(self) -> None:
        rounds, self._read_rounds = self._read_rounds, {}
        for _, _, callbacks in rounds.values():
            for cb in callbacks:
                cb(READ_INDEX_NOT_LEADER)

    # -- pre-vote -------------------------------------------------------------------------

    def _log_position(self) -> tuple[int, int]:
        last = self._journal[-1]
        return last[2], last[1]  # (term, index): compared as a tuple

    def _prevote_tick(self) -> None:
        """Hold back pysyncobj's election until a majority says it would vote for us, so a
        node returning from a partition cannot raise the term and depose a healthy leader."""
        if self._isLeader() or self._SyncObj__transferInProgress:
            self._prevote, self._prevote_won = None, False
            return
        now = time.monotonic()
        if self._SyncObj__raftElectionDeadline >= now:
            return
        if self._prevote_won:  # pysyncobj starts the real election in this tick
            self._prevote_won = False
            return
        if not self._SyncObj__connectedToAnyone():
            return
        term = self.raftCurrentTerm + 1
        self._prevote = (term, {self.selfNode})
        last_term, last_index = self._log_position()
        request = {"type": PREVOTE_REQUEST, "term": term, "last_log_term": last_term, "last_log_index": last_index}
        transport = self._SyncObj__transport
        for peer in self.otherNodes:
            transport.send(peer, request)
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        self._count_prevotes()  # a one-node cluster has its majority already

    def _on_prevote_request(self, node, m: dict) -> None:
        heard_from_leader = time.monotonic() - self._last_leader_contact < self._election_timeout_min
        up_to_date = (m.get("last_log_term", -1), m.get("last_log_index", -1)) >= self._log_position()
        granted = (
            isinstance(m.get("term"), int)
            and m["term"] > self.raftCurrentTerm
            and up_to_date
            and not self._isLeader()
            and not heard_from_leader
        )
        self._SyncObj__transport.send(node, {"type": PREVOTE_RESPONSE, "term": m.get("term"), "granted": granted})

    def _on_prevote_response(self, node, m: dict) -> None:
        if self._prevote is None or m.get("term") != self._prevote[0] or not m.get("granted"):
            return
        self._prevote[1].add(node)
        self._count_prevotes()

    def _count_prevotes(self) -> None:
        if self._prevote is not None and len(self._prevote[1]) > (len(self.otherNodes) + 1) / 2:
            self._prevote, self._prevote_won = None, True
            self._SyncObj__raftElectionDeadline = 0


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
    ):
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
        self._addr_to_id = {n.raft_address: n.id for n in cluster.nodes}
        self._raft_dir = str(cluster.node_data_dir(node_id) / "raft")
        os.makedirs(self._raft_dir, exist_ok=True)
        self._snapshot_tmp = os.path.join(self._raft_dir, "snapshot.db.tmp")
        self._snapshot_state = SERIALIZER_STATE.NOT_SERIALIZING
        self.snapshots_taken = 0
        r = cluster.raft
        self._conf = conf = SyncObjConf(
            journalFile=os.path.join(self._raft_dir, "journal.log"),
            fullDumpFile=os.path.join(self._raft_dir, "snapshot.bin"),
            bindAddress=self._me.raft_bind or self._me.raft_address,
            appendEntriesUseBatch=False,
            appendEntriesBatchSizeBytes=MAX_MESSAGE_BYTES,
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
            serializer=self._serialize,
            deserializer=self._deserialize,
            serializeChecker=self._snapshot_status,
            connectionRetryTime=0.3,
            connectionTimeout=max(1.0, 2 * r.election_timeout_max),
            dynamicMembershipChange=False,
        )
        dial = dict(self._me.raft_dial)
        peers = [_DialNode(n.raft_address, dial.get(n.id)) for n in cluster.peers_of(node_id)]
        self._journal = _RaftLog(conf.journalFile, fsync=cluster.fsync)
        self._encryptor = _AuthenticatingEncryptor(cluster.secret)
        self._obj = _SyncObj(
            self._me.raft_address, peers, conf, apply_fn, self._journal, self._encryptor,
            clock=clock or ClusterClock(lambda: fsm.clock_ms),
            max_journal_bytes=r.snapshot_max_journal_bytes,
            flush_state_machine=fsm.flush,
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
        last_entry, prev_entry, cluster_nodes = data
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a leftover would be renamed over the snapshot
        header = {
            "last": list(last_entry),
            "prev": list(prev_entry),
            "cluster": sorted(n.address for n in cluster_nodes),
        }
        work = self._fsm.checkpoint()
        self._snapshot_state = SERIALIZER_STATE.SERIALIZING
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
            os.replace(tmp, final)
            if self._durable:  # before the journal drops the entries the snapshot covers
                snapshot_file.fsync_dir(self._raft_dir)
            failpoints.hit("snapshot-after-rename")
            self.snapshots_taken += 1
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
        if self._durable:  # a snapshot just received from the leader was renamed unsynced
            with open(path, "rb") as f:
                os.fsync(f.fileno())
            snapshot_file.fsync_dir(self._raft_dir)
        header, offset = snapshot_file.read_header(path)
        last = _entry_tuple(header["last"])
        # Restore only when the snapshot is ahead of what RocksDB already holds: on a
        # plain restart RocksDB is newer than the last snapshot and must be kept.
        if last[1] > self._fsm.applied_index:
            log.info("restoring state machine from snapshot at index %d", last[1])
            snapshot_file.extract_body(path, offset, self._snapshot_tmp)
            self._fsm.restore(self._snapshot_tmp)
            os.unlink(self._snapshot_tmp)
        return last, _entry_tuple(header["prev"]), list(header["cluster"])

    # -- the small interface ------------------------------------------------------------

    def submit(self, payload: bytes, callback: Callback) -> None:
        """Replicate one entry; callback(results, None) once it is applied on this node."""

        def on_done(result, err):
            if err == FAIL_REASON.SUCCESS:
                callback(result, None)
            else:
                callback(None, _FAIL_MAP.get(err, SubmitError.OUTCOME_UNKNOWN))

        self._obj._apply_entry(payload, callback=on_done)

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

    def is_leader(self) -> bool:
        return self._obj._isLeader()

    def leader_known(self) -> bool:
        return self._obj._getLeader() is not None

    def on_leadership_lost(self, fn: Callable[[], None]) -> None:
        """fn() runs on the raft thread whenever this node stops being the leader."""
        self._obj._leadership_lost.append(fn)

    def status(self) -> RaftStatus:
        o = self._obj
        leader = o._getLeader()
        leader_id = self._addr_to_id.get(leader.address) if leader is not None else None
        applied = o.raftLastApplied
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
            ready=leader_id is not None and o.isReady() and caught_up,
            log_truncations=self._journal.truncations,
            log_truncated_entries=self._journal.truncated_entries,
            rejected_peer_messages=self._encryptor.rejected,
        )

    def transfer_leadership(self) -> None:
        """Ask the most caught-up follower to take over (used on graceful shutdown)."""
        if self._obj._isLeader():
            self._obj.transferLeadership()

    def destroy(self) -> None:
        self._obj.destroy_synchronous()  # also closes the journal
