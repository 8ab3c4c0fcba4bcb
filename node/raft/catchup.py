"""A node without raft state votes only once it has caught up (issue 26, defect 5).

The hazard. A node whose data dir is lost (a dead disk, a fresh volume) restarts with an
empty log and has forgotten its term and vote. Its acknowledgements counted towards
commits it no longer holds, and pysyncobj granted its vote at once: in
probe_lost_disk_vote.py 'acked' was committed by {L, A}; A lost its disk, L stopped; B
(never saw 'acked') won term 2 with A's vote, the acknowledged write was lost and L's
applied copy was overwritten when it rejoined. The forgotten vote lets it vote twice in
one term too. "Vote only for candidates whose log is at least as long" does not help: an
empty log is shorter than anyone's, and a brand-new member's log is empty as well.

The rule. A node that starts with no raft dir writes raft/catching-up (fsynced, inside a
raft dir renamed into place, so no crash leaves a raft dir without it: node/raft/data_dir.py)
before anything else and, while that file exists, it
- grants no vote (pysyncobj's request_vote is dropped: no answer, no term change) and no
  pre-vote (answered "not granted");
- stands for no election (its election deadline is pushed on at every tick, as while a
  snapshot is restored) and ignores a leader's timeout_now (no hand-over to it);
- still follows a leader: it appends, acknowledges and applies entries.
It is caught up once it knows a leader and the entry at its own commit index is of the
current term. Why not "its log reached the commit index the leader named when first
heard" (the first idea): a leader just elected may not have committed anything in its
term yet, so its commit index can lie below an entry committed in an earlier term with
this node's lost acknowledgement; caught up to that index, the node would vote again
while the entry lives on one node. Our condition: that leader was elected without this
node's vote, so by quorum intersection its log holds every committed entry (one lost disk
at a time); its first entry of its term comes after them all; a committed entry of that
term in our log means we hold them all too, durably (a follower syncs its journal before
it acknowledges, and the tick syncs it again before the file is removed). Only then is
the file deleted (and the raft dir fsynced); a restart before that finds the file and
stays a non-voter. A snapshot installed from the leader counts the same way (its last
entry is the journal's first).

Its acknowledgements still count for commit and for check-quorum, and its ReadIndex acks
for leadership: each is of entries it really holds, durably, in the leader's current term.
Safe, because every quorum argument that matters pairs such a majority with an ELECTING
majority, which never contains a non-voter, so the two share a voter that did both. What a
non-voter does not do is help elect. In a 3-node cluster a lost disk therefore leaves the
other two to elect: one of them down as well means no leader until it is back (rather than
a leader missing acknowledged writes).

A new member joining online (issue 32, seed 810258). The change takes effect at its
append, so the configuration's quorum counts the new member from then on: a one-member
cluster whose lone leader restarted before the add committed needs the new member's
vote, and a new member started like a lost disk withheld it until a leader caught it up,
which no one could be: no leader, for good. A member that never held data has
acknowledged nothing and voted for no one, so Raft's rule holds for it and it may vote
at once (a removed member's data deleted counts as new: every entry it acknowledged was
in every log of the majority that committed its removal). `--join` (`cluster add-node`
passes it) writes raft/joining instead: such a node grants votes and pre-votes by the
usual rules from its first start, and, like a catching-up node, stands for no election
and takes no hand-over until caught up. Standing would be unsafe: its configuration
comes from cluster.toml, not a log, and two new members (or one and a stale
configuration) voting for each other's empty logs elected a leader missing every
committed entry (seen in the simulator at once when the joiners stood). Whether a start
is a join cannot be told from the disk either: the operator says it, as for a new
cluster below.

Telling a new cluster from a lost disk. Every node of a brand-new cluster has no raft
state and someone must vote, so emptiness cannot decide it (a committed entry held by
two nodes of which one lost its disk and the other is down, next to a never-started
third, looks exactly like a new cluster). Creating a raft dir is the explicit act that
says "this node is a member of a cluster being created": `RaftNode(new_cluster=True)`
(`statekeeper node --new-cluster`, like etcd's --initial-cluster-state new), or
node.raft.data_dir.bootstrap_new_cluster, which `statekeeper cluster up` (LocalCluster) runs
when no node of the config has raft state yet. An existing raft dir is raft state; a
missing one at a start without that flag is a lost disk or a member added online
(cluster add-node): both catch up first. A one-node cluster whose disk is lost has no
leader to catch up from: start it with --new-cluster (its data is gone anyway).

A mixin of the SyncObj subclass (syncobj.py) like prevote.py: pysyncobj only through self.
"""

from __future__ import annotations

import logging
import os

from statekeeper.node.raft.data_dir import CATCHING_UP_FILE, JOINING_FILE
from statekeeper.node.snapshot_file import fsync_dir

log = logging.getLogger("statekeeper.raft")


class CatchUpMixin:
    """Call _init_catch_up(raft_dir, marker) before SyncObj.__init__ (marker: the file
    data_dir.prepare_raft_dir found or wrote, or None); the subclass calls
    _catch_up_tick() at every tick before _prevote_tick(), and drops the messages
    `refused_while_catching_up` names. Listed before PreVoteMixin: its may_vote() is the
    one pre-vote asks before granting."""

    def _init_catch_up(self, raft_dir: str, marker: str | None) -> None:
        self._catch_up_raft_dir = raft_dir
        self._catch_up_marker = marker
        self.catching_up = marker == CATCHING_UP_FILE  # a lost disk: no vote either
        self.joining = marker == JOINING_FILE  # a new member: votes, does not stand

    def may_vote(self) -> bool:  # overrides PreVoteMixin's
        return not self.catching_up

    def refused_while_catching_up(self, kind: str | None) -> bool:
        """No vote (its old one is forgotten) and no hand-over to a node still behind."""
        if self.catching_up:
            return kind in ("request_vote", "timeout_now")
        return self.joining and kind == "timeout_now"

    def _catch_up_tick(self) -> None:
        if not (self.catching_up or self.joining):
            return
        if self._caught_up():
            self._journal.sync()  # what it holds is durable before it may vote on it
            try:
                os.unlink(os.path.join(self._catch_up_raft_dir, self._catch_up_marker))
                fsync_dir(self._catch_up_raft_dir)
            except OSError as e:  # stays as it is; tried again at the next tick
                log.error("could not remove %s: %s", self._catch_up_marker, e)
                self._stand_for_no_election()
                return
            log.info(
                "caught up to commit index %d of term %d: this node %s from now on",
                self.raftCommitIndex,
                self.raftCurrentTerm,
                "votes" if self.catching_up else "stands for election",
            )
            self.catching_up = self.joining = False
            return
        self._stand_for_no_election()  # install.py: pushes the election deadline on

    def _caught_up(self) -> bool:
        """A leader is known and our commit index is at an entry of the current term."""
        if self._getLeader() is None or self._isLeader():
            return False
        journal = self._journal
        if not len(journal):
            return False
        position = self.raftCommitIndex - journal[0][1]
        if not 0 <= position < len(journal):
            return False
        return journal[position][2] == self.raftCurrentTerm
