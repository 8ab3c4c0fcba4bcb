"""The raft layer: the only package that knows pysyncobj (only syncobj.py imports it).

Interface (what the rest of the node uses):
    RaftNode(cluster_config, node_id, apply_fn, fsm, loop=None)
                                 fsm: the FSM below; apply_fn: fsm.apply or a wrapper;
                                 loop: the node's running asyncio loop, which then runs raft
                                 too ("the raft thread" below is that loop's thread;
                                 loop_driver.py); None: a loop on a thread of raft's own
    .submit(payload, callback)   payload: bytes; callback(results | None, SubmitError | None)
                                 called from the raft thread once the entry is applied HERE
    .read_index(callback)        ReadIndex: callback(index | READ_INDEX_NOT_LEADER |
                                 READ_INDEX_NOT_YET) on the raft thread
    .is_leader() / .leader_known() / .status() -> RaftStatus / .journal_summary()
    .progress()                  (seconds since the raft loop last ticked or applied, the
                                 longest such gap, restoring a snapshot?): node/liveness.py
    .on_leadership_lost(fn)      fn() called on the raft thread when this node stops leading
    .transfer_leadership() -> str  any thread: one hand-over attempt at the raft thread's
                                 next tick (denied while no follower has the whole log:
                                 call again); returns how the previous attempt went
    .members() / .member_change_pending()
    .change_member(kind, member, done)   online membership change, leader only: kind "add" or
                                 "rem", member a members.Member; done(None | MemberError)
                                 on the raft thread once committed / refused
    .request_transfer(to_id, done)       leadership hand-over on the raft thread; done(sent)
    .destroy()
    write_seed_snapshot(cluster_config, node_id, index, write_body)
                                 the raft snapshot a restored node starts from
                                 (node/backup_seed.py)

The package, one job per module:
    interface.py   SubmitError, RaftStatus, FSM (the state machine as raft sees it)
    raft_node.py   RaftNode: builds the SyncObj from the cluster config, snapshots off the
                   raft thread, the interface above
    syncobj.py     the one importer of pysyncobj: PatchedSyncObj (the workarounds below),
                   build_conf, DialNode, _PeerTransport, _TlsConnection, the FAIL_REASON
                   mapping, the pickle protocol, the peer codec its connections use,
                   handing pysyncobj our journal
    tls_connection.py  raft TLS as mixins (no pysyncobj import): TlsConnectionMixin of
                   syncobj._TlsConnection, TlsTransportMixin of _PeerTransport
    readindex.py   ReadIndexMixin of PatchedSyncObj: leadership confirmed by one message round
    members.py     Member, the membership entry format and the rule "members are a function
                   of the log" (no pysyncobj, no I/O)
    membership.py  MembershipMixin of PatchedSyncObj: dynamic membership on pysyncobj's engine
    peer_set.py    ConfigPeersMixin of _PeerTransport: whom the transport talks to (the
                   members of the log's end and of the committed configuration, and any
                   authenticated peer that connects; no pysyncobj import)
    prevote.py     PreVoteMixin of PatchedSyncObj
    catchup.py     CatchUpMixin of PatchedSyncObj: a node that started without raft state votes
                   only once caught up (node/raft_state.py creates the raft dir)
    install.py     SnapshotInstallMixin of PatchedSyncObj: the follower's side of snapshots (commit
                   bound, chunk acks, journal kept on load, gates while restoring)
    log.py         RaftLog: the journal as pysyncobj sees it
    loop_driver.py LoopPoller, LoopDriver: pysyncobj ticked by the node's asyncio loop
    seed.py        write_seed_snapshot: a restored node's raft snapshot
    peers.py       AuthenticatingEncryptor: AES-GCM peer messages; UnauthenticatedSweepMixin
                   of PatchedSyncObj: connections that never authenticate are dropped
    compaction.py  JournalBoundMixin of PatchedSyncObj: a snapshot once the journal is too big
    pickle_guard.py  PicklePathsMixin of PatchedSyncObj: every path where pysyncobj would unpickle
                   a peer's bytes, closed (its docstring lists each pickle.loads site)
    commit_notice.py  CommitNoticeMixin of PatchedSyncObj: the leader's commit-only AppendEntries
                   ride on the next pass (or go out after 2 ms; at once for forwarded entries)
    peer_encoding.py  the peers' wire format (version byte | msgpack, sealed; its home):
                   PeerCodecMixin of _PeerConnection, and one packing of an AppendEntries
                   for all followers (SharedSendMixin of _PeerTransport; no pysyncobj import)
    tls_pipe.py    TlsPipe: sans-IO TLS (ssl.SSLObject over memory BIOs) for the raft port
    conn_buffers.py  InPlaceBuffersMixin of _PeerConnection: peer connection buffers that
                   grow and drain in place (no pysyncobj import)

pysyncobj 0.3.17 defects this package works around (see ../shared/DESIGN.md), each with
where the fix lives and its test (tests/integration/ unless the path says otherwise):
- FileJournal never fsyncs: we hand it DurableJournal (node/journal.py) instead, and sync
  it once per received AppendEntries before the follower answers, and at the start of every
  tick, before the leader counts its own entries towards the commit index. The leader's
  fdatasync of what it just appended and sent runs on the journal's thread
  (DurableJournal.sync_behind); no tick runs until it returned. [syncobj.py]
  Tests: test_power_loss.py; test_raft_safety.py::
  test_fsync_failure_stops_the_node_and_loses_nothing_acknowledged; tests/unit/test_journal.py
  (sync_behind: test_sync_behind_returns_before_the_fdatasync_and_sync_waits_for_it)
- followers truncate everything after prevLogIdx on every AppendEntries: we ignore that
  truncation and let RaftLog.add truncate only where a term really conflicts (Raft 5.3),
  and we bound the follower's commit index by the last entry the message vouched for.
  [log.py, syncobj.py] Tests: test_raft_safety.py::test_followers_never_truncate_under_pipelined_load;
  the bound: test_raft_defects.py::test_snapshot_install_message_never_commits_a_stale_tail
- peer messages were pickle (now msgpack, below): every peer must hold the cluster secret
  (AES-GCM, also ~15x faster than pysyncobj's Fernet), and a message failing
  authentication is logged and its connection dropped before anything is decoded. pysyncobj checks a connection's timeout
  only when bytes arrive: a connection that has not authenticated within a grace period is
  dropped. [peers.py, syncobj.py] Tests: test_raft_safety.py::
  test_crafted_pickle_and_garbage_on_the_raft_port_are_rejected and
  ::test_a_node_with_the_wrong_secret_cannot_join; tests/unit/test_peer_auth.py
- a leader cut off from the majority stays leader for 30 s and a rejoining node deposes a
  healthy leader: leaderFallbackTimeout ~ one election timeout (check-quorum), plus pre-vote.
  [syncobj.build_conf, prevote.py] Tests: test_partitions.py::
  test_partitioned_leader_steps_down_and_the_majority_keeps_serving and
  ::test_node_returning_from_a_partition_does_not_depose_the_leader
- appendEntriesUseBatch=True sends only every 0.1 s: disabled, we batch ourselves
  (node/proposer.py). [syncobj.build_conf] No test of its own: a latency matter (benchmarks/).
- journalFile without fullDumpFile comes back empty after the first compaction: both set.
  [syncobj.build_conf] Test: test_raft_workarounds.py::
  test_restart_after_log_compaction_keeps_data_and_accepts_writes
- restart re-applies journal entries after the last snapshot: apply_fn skips indexes the
  state machine already recorded (the index being applied is raftLastApplied + 1).
  [syncobj.PatchedSyncObj._SyncObj__doApplyCommand, FSM.apply] Test: the same one
- one thread does networking, elections, apply and callbacks: callbacks must not block.
  A rule for callers, nothing to test; the snapshot follows from it (next item). That
  thread was pysyncobj's own (autoTick); it is now the node's asyncio loop (autoTick off,
  loop_driver.py: pysyncobj's poller on the loop's add_reader/add_writer, ticks on
  events, commands and a 50 ms timer), so an entry no longer crosses threads twice.
  [loop_driver.py, syncobj.build_conf, raft_node.py] Tests: tests/unit/test_loop_driver.py,
  and every cluster test (nothing else runs raft)
- a custom serializer runs on the raft thread and must write the whole snapshot before
  returning: a large DB stops heartbeats for longer than an election timeout. Only the
  checkpoint runs there; a helper thread packs it and serializeChecker reports the outcome.
  [raft_node.py] Test: test_raft_workarounds.py::test_a_slow_snapshot_does_not_stall_raft
- a custom deserializer runs on the raft thread too, which is the node's loop: restoring a
  large DB there froze the node, HTTP included (over ten minutes for a 10M-key store). It
  returns the snapshot's raft position at once and restores the state machine on a helper
  thread; meanwhile nothing is applied, no snapshot is taken or received, the node stands
  for no election and answers no ReadIndex, and it reports not ready.
  [raft_node.py _deserialize, install.py] Test:
  test_restore_off_loop.py::test_a_node_restoring_a_snapshot_answers_and_serves_nothing_stale
- snapshot chunks carry no position: a chunk lost with a dropped connection left a gap in
  the follower's file, which it installed (a restore found no CURRENT; the node stopped, and
  again at every start): the leader stamps each chunk's offset, a follower drops a transfer
  at the first gap and the leader starts it again. [install.ChunkOffsets, syncobj.
  _PeerTransport.send] Test: tests/unit/test_raft_install.py
- the sweep of unauthenticated connections ran after a long loop step before the reads that
  were waiting, and dropped a peer that had authenticated in time: a connection is dropped
  only once several sweeps saw it unauthenticated. [peers.py] Test: tests/unit/
  test_raft_install.py::test_a_loop_stall_does_not_drop_a_peer_whose_message_waits_to_be_read
- a node's own snapshot, packed on a helper thread, was renamed over a newer one the leader
  sent meanwhile; the next start cut the journal to the older snapshot's entries and lost
  acknowledged ones: a pack that a loaded snapshot superseded is dropped.
  [raft_node.py _pack_snapshot] Test: test_raft_defects.py::
  test_a_snapshot_packed_while_a_newer_one_is_installed_does_not_replace_it
- pysyncobj's deadlines are on CLOCK_MONOTONIC_RAW, not time.monotonic (they drift apart
  with uptime): pre-vote reads and sets them through `raft_clock`. [prevote.py] Test:
  tests/unit/test_prevote.py
- compaction counts only entries and time, and a restart reads the whole journal back into
  memory: a snapshot is also taken once the journal holds [raft] snapshot_max_journal_bytes
  (the state machine flushed first, on a helper thread). [compaction.py]
  Test: test_raft_workarounds.py::test_journal_size_bounds_the_journal
- pysyncobj pickles with protocol 2, which encodes bytes through a latin-1 str (14x slower
  than protocol 5 for a 60 KB entry): protocol 5 is set whenever node.raft is imported
  (what still pickles: nothing we send or journal; pysyncobj's own VERSION and MEMBERSHIP
  commands, which we never write; older journals' commands are read back by a restricted
  unpickler, log.py). [syncobj.py] Test: tests/unit/test_peer_auth.py::
  test_pysyncobj_pickles_with_a_modern_protocol
- a crash between a snapshot's rename and the journal's prefix drop made the next start
  cut the journal to the snapshot's two entries, losing acknowledged entries after it:
  loading keeps the entries after the snapshot's last one (Raft's InstallSnapshot rule).
  [install.SnapshotInstallMixin._SyncObj__loadDumpFile, log.py] Test: test_raft_defects.py::
  test_crash_after_snapshot_rename_keeps_later_entries
- a snapshot-install message (no prevLogIdx) set commit = min(leaderCommit, last index),
  applying a deposed leader's never-committed tail: it now commits at most the snapshot.
  [install.SnapshotInstallMixin._on_append_entries] Test: test_raft_defects.py::
  test_snapshot_install_message_never_commits_a_stale_tail
- replies to AppendEntries carry no term and the leader takes any success: we tag them with
  the term and the leader drops other terms' replies. [syncobj.py] Test: test_raft_defects.py::
  test_stale_term_reply_is_ignored
- pre-vote counted its majority only when a reply arrived: a one-node cluster never elected
  a leader. [prevote.py] Test: test_raft_defects.py::test_one_node_cluster_elects_itself
- submit() raised BlockingIOError when the wake-up pipe was full although the command was
  queued (and so applied later): the pipe is no longer written, a queued command asks the
  loop driver for a tick. [syncobj.PatchedSyncObj._wake_by_driver] Tests:
  test_raft_defects.py::test_full_wakeup_pipe_does_not_fail_submit; tests/unit/test_proposer.py
- a peer message larger than the socket buffer was sent only as far as the socket took it;
  the rest waited for the next message on that connection (one buffer per heartbeat): a
  3 MiB entry took 1.5 s to reach followers, heartbeats queued behind it, elections. Such a
  send now re-arms the connection's write event; peer socket buffers are 4 MiB.
  [syncobj._PeerTransport, syncobj.build_conf] Test: test_large_entries.py::
  test_an_entry_larger_than_the_socket_buffers_reaches_the_followers_at_once (and the
  cluster tests there)
- every peer message is deflated at level 3 on the raft thread, once per follower (~40 ms
  per MiB of incompressible bytes): no peer message is deflated now (the codec below).
  [peer_encoding.py] Test: tests/unit/test_peer_encoding.py::
  test_large_peer_messages_are_not_deflated_on_the_raft_thread
- TLS on the raft port ([tls] raft, node/tls.py says why it WRAPS the AES-GCM layer):
  pysyncobj reads and writes its non-blocking sockets itself, in several places. Its
  connections are turned into _TlsConnection, whose read and send (the only socket
  calls) go through a TlsPipe: the poller, framing, AES-GCM and the codec stay as they are.
  Raft TLS off: no _TlsConnection, the transport is what it was. Three things pysyncobj
  would get wrong on its own: unsent ciphertext is not in its write buffer, so it would
  drop the write event (a 3 MiB entry then crossed one buffer per heartbeat and lost the
  term): kept armed while ciphertext waits; the dialler names the peer's node id as
  server name (check_hostname), and the acceptor, which has no name to check, requires a
  certificate naming a peer and then that the address the peer claims (its first message
  after the key exchange) is the node its certificate names, else one node's key (or a
  client certificate of the same CA) could join as any node; a refused handshake is
  logged (WARNING, peer and why; repeats of the same refusal within 10 s at DEBUG) and
  the connection dropped, before any byte reaches pysyncobj's buffers; a dialler whose
  peer closes before answering logs that too (under TLS 1.3 the acceptor's refusal of
  the dialler's certificate comes after the dialler's handshake completed).
  [tls_pipe.py, tls_connection.py, syncobj._TlsConnection, syncobj._PeerTransport, raft_node.py] Tests:
  tests/unit/test_raft_tls_pipe.py; test_raft_tls.py (the write event:
  ::test_a_tls_cluster_replicates_and_a_large_entry_crosses_at_once, the claimed node:
  ::test_a_node_presenting_another_nodes_certificate_cannot_join, and the cluster tests)
- dynamic membership: pysyncobj undoes membership changes after prevLogIdx on every
  AppendEntries that does not extend the log's end (with our never-shortening journal it
  would drop members whose entry is still there), and its "one change at a time" check never
  fires (it never records the pending index). Changes are applied when the journal appends
  their entry and undone when it truncates it; the leader refuses a change while the last
  one is uncommitted; entries and snapshot headers carry each member's id and ports.
  [members.py, membership.py, log.py, raft_node.py] Tests: tests/unit/test_members.py;
  test_membership.py
- a snapshot recorded the members of the log's end (pysyncobj snapshots right after
  appending): a change appended after its last index, never committed and later
  truncated, came back at every restart (a node restarted without a real member; 2 of 3
  real members never elected): a snapshot at S records the configuration at S, the base
  replayed over the membership entries at or below S only. [membership.snapshot_members,
  raft_node._serialize] Test: test_membership_committed.py::
  test_a_snapshot_carries_the_configuration_at_its_last_index
- the transport knew only the members of the log's end: it dropped a member at the
  append of its (uncommitted) removal and refused incoming connections of any address it
  did not know, so a node whose log ended in "remove X" never heard X leading and its
  stale entry was never truncated (2 of 3 nodes could not commit). The transport keeps the
  members of the committed configuration too, and accepts an authenticated peer of any
  configuration (raft TLS: only peers its log names). [peer_set.py, membership.
  _follow_peers, syncobj._PeerTransport] Tests: test_membership_committed.py::
  test_a_node_whose_log_ends_in_an_uncommitted_removal_hears_the_removed_leader and
  ::test_a_follower_takes_entries_from_a_leader_outside_its_configuration; both items:
  `statekeeper chaos run --fault membership-uncommitted`
- a snapshot install streams 1 MiB chunks and the follower answers only the last one, while
  the leader drops a connection that sent nothing for connectionTimeout even as it writes
  to it: a stream longer than that restarted from scratch again and again (a 200 MiB store
  never reached a new member in 300 s; one install missed a chunk and the node exited).
  Followers acknowledge each chunk (its arrival is what counts; check-quorum: below).
  [install.SnapshotInstallMixin._on_append_entries] Measured, no test of its own:
  benchmarks/membership_catchup.py --mib 200 (before: not caught up after 300 s; after: 96 s)
- entries carry the time of whichever node built them: the leader restamps every regular
  command it appends (node/cluster_clock.py bounds that time). [syncobj.py, log.py] Test:
  test_raft_defects.py::test_a_follower_clock_a_day_ahead_does_not_expire_idempotency
- the leader pickles and deflates the same AppendEntries once per follower (a small
  message: ~70 us, mostly zlib's set-up, on 2 shared cores): one encoding per distinct
  message of a send pass, each connection keeping its own rand_key and AES-GCM seal; the
  bytes on the wire are those of packing the message for that connection alone.
  [peer_encoding.py, syncobj._SyncObj__sendAppendEntries, syncobj._PeerTransport] Tests:
  test_raft_encoding.py::test_followers_share_one_encoding_per_append_entries;
  tests/unit/test_peer_encoding.py::
  test_the_shared_encoding_is_the_per_connection_encoding_byte_for_byte
- every peer message is zlib(pickle((rand_key, message))): zlib's set-up costs tens of us
  per small message, deflate does not pay on loopback even for large entries, and pickle
  is code execution for whoever gets past the seal. Peer messages are version byte 0x02 |
  msgpack([rand_key, message]) inside the same AES-GCM seal, with pysyncobj's rand_key and
  stamp checks kept; pysyncobj's tcp_connection gets no pickle or zlib (a call raises); a
  value msgpack cannot encode raises PeerEncodeError; a node receiving another version
  (the old format's 0x78, or an unknown byte) logs one ERROR naming the peer ("upgrade all
  nodes together") and drops the connection. Every node of a cluster must run the same
  version. [peer_encoding.PeerCodecMixin, conn_buffers.py, syncobj._PeerConnection]
  Tests: tests/unit/test_peer_encoding.py (every message kind round-trips; ::
  test_another_wire_version_is_refused_with_one_clear_error); the cluster tests
- @replicated wraps every entry in a pickle (dumps on the leader, loads of journal data on
  every node: ~1 us at 400 B, ~1.2 ms at 1 MiB): entries are journalled as the REGULAR
  type byte + the entry itself and dispatched by _SyncObj__doApplyCommand; journals of the
  pickled format (told apart by the body's first byte) replay through an unpickler that
  builds only bytes and tuples. Every node of a cluster must run this code: older code
  fails to unpickle such an entry and stops (it never skips it). [log.py, syncobj.py] Tests:
  test_raft_encoding.py::test_a_journal_of_pickled_commands_still_replays;
  tests/unit/test_journal_commands.py
- a received snapshot is written unsynced: a helper thread syncs it every 64 MiB while it
  arrives, so the install's fsync on the loop is short (1.5 GB: 0.8-1.1 s -> 0.02 s).
  [install.SyncBehind] Test: tests/unit/test_raft_install.py
- pysyncobj renames a received snapshot over snapshot.bin before anything syncs it; a power
  cut after the rename (LazyFS) left snapshot.bin 0 bytes and the node failed at every
  start: the file is fsynced before pysyncobj handles the last chunk (a failed sync drops
  the transfer), and the directory after the rename, before raft takes the snapshot's
  position. [install.SnapshotInstallMixin._sync_before_rename, raft_node._durable_header]
  Tests: tests/unit/test_raft_install.py::
  test_a_received_snapshot_is_synced_before_it_is_renamed_into_place; the chaos scenario
  power-loss-during-snapshot-install
- TcpConnection's write and read buffers are `bytes`, rebuilt whole on every message
  appended, every partial socket write, every recv and every message parsed: quadratic in
  the backlog, on the node's loop (a leader streaming a 1.47 GB snapshot spent 41% of its
  samples there, stalled 2-5 s at a time and lost its term in bursts). Every peer
  connection is a _PeerConnection, whose buffers are bytearrays extended in place and
  consumed from the front; pysyncobj's parser sees one frame at a time.
  [conn_buffers.py, syncobj._PeerConnection] Test: tests/unit/test_conn_buffers.py
- a connection stamps its last-read time once per READ event, which reads everything the
  socket holds, and then handles the frames one by one: a follower slower than
  connectionTimeout to handle one read's snapshot chunks timed out its own connection
  when it acknowledged one, and the snapshot restarted from zero (a receiver slowed to
  0.3 s per MiB: 13 drops in 30 s, never caught up). Each frame handed on is stamped.
  [conn_buffers.py, syncobj._PeerConnection] Test: tests/unit/test_conn_buffers.py::
  test_a_slow_handler_does_not_time_out_its_own_connection
- check-quorum (leaderFallbackTimeout) counts only replies to AppendEntries, and a follower
  receiving a snapshot answers none until the last chunk: when it was the leader's majority,
  the leader stepped down again and again (a receiver slowed to 0.3 s per MiB: 16 losses,
  28.8 s leaderless). Chunk acks carry the follower's term; one of the leader's term counts
  as contact. [install.SnapshotInstallMixin._on_chunk_ack, syncobj.py] Tests:
  test_raft_defects.py::test_a_snapshot_chunk_ack_counts_for_check_quorum;
  tests/unit/test_raft_install.py::test_a_chunk_ack_carries_the_followers_term
- a node that lost its disk restarts empty and pysyncobj grants its vote at once: a
  candidate missing a write this node had acknowledged won with it (the write lost, the
  old leader's store diverged; it could also vote twice in one term). A start without raft
  state (and without --new-cluster) writes raft/catching-up first; until it holds a
  committed entry of its leader's term it grants no vote or pre-vote, stands for no
  election and takes no hand-over. [catchup.py, node/raft_state.py, syncobj.py] Tests:
  test_lost_disk.py; tests/unit/test_raft_state.py
- pysyncobj unpickles a peer's bytes in two places our codec does not cover: a lone entry
  of appendEntriesBatchSizeBytes (64 MiB here) or more is pickled by the leader and sent
  in 'transmission' chunks that the follower joins and unpickles, and a VERSION command
  (setCodeVersion; or any peer's forwarded 'apply_command', which the leader appended as it
  came) is unpickled by every node that applies it: code execution on every node for a
  peer holding the cluster secret. The leader never chunks (a batch size no entry reaches;
  _SyncObj__getEntries caps batches at MAX_MESSAGE_BYTES), one entry holds at most
  config.RAFT_ENTRY_LIMIT_BYTES = 32 MiB (RaftNode.submit refuses more: 413
  request_too_large; config keeps max_request_bytes and max_entry_bytes at 16 MiB or
  less), a node drops every AppendEntries carrying 'transmission' unread (ERROR once a
  minute per peer host), a leader appends a forwarded command only if it is an entry or a
  membership change within the bound (else answered REQUEST_DENIED), VERSION entries
  apply as no-ops and setCodeVersion refuses. [pickle_guard.py, syncobj.build_conf,
  syncobj.PatchedSyncObj, raft_node.RaftNode.submit, node/config.py] Tests:
  test_raft_pickle_paths.py (a sealed 'transmission' carrying a pickle that creates a file:
  ::test_a_sealed_transmission_carrying_a_pickle_is_dropped_unread; ::
  test_the_leader_never_chunks_a_large_entry; ::test_version_commands_are_never_unpickled;
  ::test_an_entry_over_the_bound_is_refused_and_nothing_is_journalled);
  tests/unit/test_pickle_guard.py; tests/unit/test_config.py::
  test_request_and_batch_sizes_stay_under_half_the_raft_entry_bound
- the leader (appendEntriesUseBatch off) sends a pass of AppendEntries only to carry a new
  commit index after every applied entry: at one client two passes per put, four answers
  to decode, two messages for each follower. The notice rides on the next pass, or goes
  out after 2 ms, and at once when a follower forwarded the entry (its caller waits for
  its own apply). [commit_notice.py, syncobj.py] Tests: test_commit_notice.py
"""

from node.raft.interface import FSM, RaftStatus, SubmitError
from node.raft.raft_node import RaftNode
from node.raft.readindex import READ_INDEX_NOT_LEADER, READ_INDEX_NOT_YET
from node.raft.seed import write_seed_snapshot
from node.raft.syncobj import NEXT_NODE_IDX, PEER_PICKLE_PROTOCOL, replicated_command_size

__all__ = [
    "FSM",
    "NEXT_NODE_IDX",
    "PEER_PICKLE_PROTOCOL",
    "READ_INDEX_NOT_LEADER",
    "READ_INDEX_NOT_YET",
    "RaftNode",
    "RaftStatus",
    "SubmitError",
    "replicated_command_size",
    "write_seed_snapshot",
]
