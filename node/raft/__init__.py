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
                                 longest such gap, restoring a snapshot?): node/api/liveness.py
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
                                 (node/backup/seed.py)

The package, one job per module:
    interface.py   SubmitError, RaftStatus, FSM (the state machine as raft sees it)
    raft_node.py   RaftNode: builds the SyncObj from the cluster config, snapshots off the
                   raft thread, the interface above
    syncobj.py     the one importer of pysyncobj: PatchedSyncObj (the workarounds below),
                   build_conf, DialNode, PeerTransport, _TlsConnection, the FAIL_REASON
                   mapping, the pickle protocol, the peer codec its connections use,
                   handing pysyncobj our journal
    tls_connection.py  raft TLS as mixins (no pysyncobj import): TlsConnectionMixin of
                   syncobj._TlsConnection, TlsTransportMixin of PeerTransport
    readindex.py   ReadIndexMixin of PatchedSyncObj: leadership confirmed by one message round
    members.py     Member, the membership entry format and the rule "members are a function
                   of the log" (no pysyncobj, no I/O)
    membership.py  MembershipMixin of PatchedSyncObj: dynamic membership on pysyncobj's engine
    peer_set.py    ConfigPeersMixin of PeerTransport: whom the transport talks to (the
                   members of the log's end and of the committed configuration, and any
                   authenticated peer that connects; no pysyncobj import)
    prevote.py     PreVoteMixin of PatchedSyncObj
    catchup.py     CatchUpMixin of PatchedSyncObj: a node that started without raft state votes
                   only once caught up (node/raft/data_dir.py creates the raft dir)
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
                   PeerCodecMixin of PeerConnection, and one packing of an AppendEntries
                   for all followers (SharedSendMixin of PeerTransport; no pysyncobj import)
    tls_pipe.py    TlsPipe: sans-IO TLS (ssl.SSLObject over memory BIOs) for the raft port
    conn_buffers.py  InPlaceBuffersMixin of PeerConnection: peer connection buffers that
                   grow and drain in place (no pysyncobj import)

pysyncobj 0.3.17's defects this package works around, each with where the fix lives and
its test, and what pysyncobj's source does that they follow from: node/raft/DESIGN.md.
Every workaround of pysyncobj gets an entry there.
"""

from statekeeper.node.raft.interface import FSM, RaftStatus, SubmitError
from statekeeper.node.raft.raft_node import RaftNode
from statekeeper.node.raft.readindex import READ_INDEX_NOT_LEADER, READ_INDEX_NOT_YET
from statekeeper.node.raft.seed import write_seed_snapshot

__all__ = [
    "FSM",
    "READ_INDEX_NOT_LEADER",
    "READ_INDEX_NOT_YET",
    "RaftNode",
    "RaftStatus",
    "SubmitError",
    "write_seed_snapshot",
]
