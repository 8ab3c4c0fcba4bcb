"""MembershipMixin of syncobj.PatchedSyncObj: online membership change on pysyncobj's engine
(dynamicMembershipChange), reaching pysyncobj only through self. The rule and the
invariant (the member set is a function of the log) are in members.py.

What pysyncobj 0.3.17 does on its own, and why it is taken over here:
- it applies a change on append (leader: before appending; follower: after each
  AppendEntries, for all the message's entries) and undoes those after prevLogIdx
  whenever a message does not extend the log's end. Our journal keeps entries a repeated
  or reordered AppendEntries re-sends (log.py), so that undo would drop a member whose
  entry is still in the log. Here a change is applied when the journal really appends its
  entry, and undone when the journal really truncates it (RaftLog.on_membership);
  pysyncobj's own calls (append, undo, apply, restart replay) do nothing.
- its "one change at a time" check never fires (__changeClusterIDx is never set): the
  leader here refuses a change while the last membership entry is uncommitted.
- a node object travels inside the entry: ours carries a plain dict (members.Member), and
  every node builds its own peer object from it (its dial address, its TLS name).
- a new member counts towards the quorum as soon as its add entry is appended (there is
  no learner stage in pysyncobj; its read-only nodes cannot become voters in place). The
  add-node command therefore starts the node first, so it is connected and receives the
  snapshot right away, and waits until it has caught up.
- a leader cannot remove itself (pysyncobj refuses): leadership moves first.
- the node removed keeps its own old member list (it never applies its own removal). The
  others keep its connection until its removal is committed in their logs (a node whose
  log ends in an uncommitted removal must still hear the removed node if it leads:
  _follow_peers, peer_set.py); after that nobody dials it, and an incoming connection of
  it is accepted (peer_set.py) but it is in no configuration: nobody sends it entries or
  vote requests, and with its log behind and a leader heard, pre-vote denies it an
  election. The operator stops it.
- the member set is recomputed from a base and the journal's membership entries
  (members.py's invariant), not patched change by change: members_at(i) gives the
  configuration at any index still in the journal, and a snapshot records the one at its
  last index (snapshot_members), never the log's end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from statekeeper.node.raft.members import (
    ADD,
    MEMBERSHIP_COMMAND,
    REMOVE,
    Member,
    MemberError,
    check_change,
    decode_change,
    decode_request,
    encode_change,
    replay,
)

log = logging.getLogger("statekeeper.raft")

# Change outcome callback: (None) once committed, or (MemberError) when refused/failed.
ChangeCallback = Callable[[MemberError | None], None]


class MembershipMixin:
    # pysyncobj's FAIL_REASON: set by node/raft/syncobj.py's PatchedSyncObj (the one pysyncobj
    # importer), which mixes this class in; importing it from there would be a circle.
    _FAIL_REASON: Any

    def _init_membership(self, self_address: str, base: dict[str, Member], make_node):
        """`base`: the member set before the journal's membership entries (the snapshot's
        or cluster.toml's, RaftNode.initial_members)."""
        self._sk_self_address = self_address
        self._sk_make_node = make_node  # (address, Member | None) -> pysyncobj node
        self._member_refusal: MemberError | None = None
        self._journal.on_membership = self._on_membership_entry
        self._rebase_members(base)
        # The commit index the transport's peers were last checked against (-1: never).
        self._peers_commit = -1

    def _rebase_members(self, base: dict[str, Member]) -> None:
        """The base and the journal's membership entries after it, from scratch."""
        self._members_base = dict(base)
        # The journal's membership entries (index -> command) not folded into the base.
        self._member_entries: dict[int, bytes] = {}
        j = self._journal
        for i in range(len(j)):
            if j[i][0][:1] == MEMBERSHIP_COMMAND:
                self._member_entries[j[i][1]] = j[i][0]
        self.members = self.members_at(None)  # raft address -> Member; replaced, never mutated

    def members_at(self, index: int | None) -> dict[str, Member]:
        """The configuration as of entry `index` (None: the log's end): the base replayed
        over the membership entries at or below it only."""
        entries = sorted(self._member_entries.items())
        return replay(self._members_base, (c for i, c in entries if index is None or i <= index))

    def snapshot_members(self, index: int) -> dict[str, Member]:
        """The configuration a snapshot whose last entry is `index` records (members.py's
        invariant): the one at `index`, never an entry after it. The snapshot drops the
        journal's entries up to `index`, so the base moves there (replay is idempotent:
        while the journal keeps them, replaying them over the new base changes nothing)."""
        at = self.members_at(index)
        self._members_base = at
        self._member_entries = {i: c for i, c in self._member_entries.items() if i > index}
        return at

    @property
    def _member_change_idx(self) -> int | None:
        """The last membership entry's index, committed or not (None: none after the base,
        whose changes are all committed)."""
        return max(self._member_entries, default=None)

    # -- nodes --------------------------------------------------------------------------

    def node_for(self, spec):
        """pysyncobj's nodeClass: a peer object from a raft address or a member dict."""
        if isinstance(spec, dict):
            member = Member.from_dict(spec)
            return self._sk_make_node(member.raft_address, member)
        return self._sk_make_node(spec, self.members.get(spec))

    # -- the leader's side ----------------------------------------------------------------

    def change_member(self, kind: str, member: Member, done: ChangeCallback) -> None:
        """Queue a change (any thread); done(None) once committed, else done(MemberError)."""
        reason = self._FAIL_REASON

        def on_done(_result, err) -> None:
            if err == reason.SUCCESS:
                done(None)
            elif err == reason.REQUEST_DENIED and self._member_refusal is not None:
                refusal, self._member_refusal = self._member_refusal, None
                done(refusal)
            elif err in (reason.NOT_LEADER, reason.MISSING_LEADER):
                done(MemberError("not_leader", "this node is not the leader"))
            else:
                done(MemberError("outcome_unknown", f"the change's outcome is unknown ({err})"))

        self._applyCommand(encode_change(kind, member), on_done)

    def change_pending(self) -> bool:
        idx = self._member_change_idx
        return idx is not None and idx > self.raftCommitIndex

    def _SyncObj__changeCluster(self, request) -> bool:
        """The leader, before appending a change: refuse (recording why) or accept; the
        journal's append applies it (_on_membership_entry)."""
        self._member_refusal = None
        try:
            if self.raftLastApplied < (self._SyncObj__noopIDx or 0):
                raise MemberError(
                    "unavailable", "a new leader's first entry is not committed yet; retry"
                )
            if self.change_pending():
                raise MemberError(
                    "member_change_pending",
                    f"the membership change at index {self._member_change_idx} is not "
                    "committed yet; one change at a time",
                )
            kind, who = request[0], request[2] if len(request) >= 3 else None
            if kind not in (ADD, REMOVE) or not isinstance(who, dict):
                raise MemberError("invalid_argument", "not a membership change of this node")
            check_change(
                self.members, kind, Member.from_dict(who), self_address=self._sk_self_address
            )
        except MemberError as e:
            self._member_refusal = e
            return False
        return True

    def _addNodeToCluster(self, args, callback):
        # pysyncobj's utility message (syncobj_admin -add): only change_member changes members.
        callback(None, self._FAIL_REASON.REQUEST_DENIED)

    _removeNodeFromCluster = _addNodeToCluster

    # -- every node ------------------------------------------------------------------------

    def _SyncObj__parseChangeClusterRequest(self, command):
        # pysyncobj unpickles a MEMBERSHIP command here (the leader, before appending it);
        # ours are msgpack (members.py), decoded and checked without pickle.
        # A malformed one must not read as "no change" (None): pysyncobj would append it
        # as a plain command. A request of no known kind is refused by __changeCluster
        # below and ignored by every other caller (their __doChangeCluster is a no-op).
        try:
            return decode_request(command)
        except MemberError as e:
            log.warning("a malformed membership command was refused: %s", e.message)
            return ["malformed", None, None]

    def _SyncObj__doChangeCluster(self, request, reverse=False):
        return False  # pysyncobj's own calls; see the module docstring

    def _on_membership_entry(self, command: bytes, idx: int, reverse: bool) -> None:
        """The journal appended (reverse False) or truncated (True) a membership entry."""
        change = decode_change(command)
        if change is None:
            return
        if reverse:
            self._member_entries.pop(idx, None)
        else:
            self._member_entries[idx] = command
        self._take_members(self.members_at(None))
        kind, _who = change
        log.info(
            "members (%s at index %d%s): %s",
            kind,
            idx,
            ", undone" if reverse else "",
            ", ".join(sorted(m.id for m in self.members.values())),
        )

    def _take_members(self, members: dict[str, Member]) -> None:
        """Make `members` pysyncobj's configuration (who votes, who gets entries); the
        transport keeps the committed configuration's members too (_follow_peers)."""
        self.members = members
        others = [
            self.node_for(m.to_dict()) for a, m in members.items() if a != self._sk_self_address
        ]
        transport = self._SyncObj__transport
        with transport.peers_held():  # _follow_peers decides whom it talks to
            super()._SyncObj__updateClusterConfiguration(others)
        if self._isLeader():  # check-quorum reads a response time of every member
            responded = self._SyncObj__lastResponseTime
            for node in others:
                responded.setdefault(node, self.raft_clock())
        self._peers_commit = -1
        self._follow_peers()

    def _follow_peers(self) -> None:
        """Every tick: the transport talks to the members of the log's end AND of the
        committed configuration. Raft has a server process requests from servers outside
        its configuration: a node whose log ends in an uncommitted "remove X" must still
        hear X leading, else X can never truncate that entry (issue 26: it stayed cut off
        for as long as X led, and 2 of 3 nodes could not commit). A removed member is let
        go once its removal commits. Recomputed only when the commit index passes a
        membership entry (or the members changed)."""
        commit = self.raftCommitIndex
        if commit == self._peers_commit:
            return
        last = self._peers_commit
        self._peers_commit = commit
        if last >= 0 and not any(last < i <= commit for i in self._member_entries):
            return
        peers = {**self.members_at(commit), **self.members}
        peers.pop(self._sk_self_address, None)
        self._SyncObj__transport.follow_peers(
            {a: self.node_for(m.to_dict()) for a, m in peers.items()}
        )

    def _SyncObj__updateClusterConfiguration(self, new_nodes) -> None:
        """A snapshot was loaded (start, or installed from the leader): its members, then
        the membership entries of the journal after it (members.py's invariant)."""
        base: dict[str, Member] = {}
        for spec in new_nodes:
            if isinstance(spec, dict):
                member = Member.from_dict(spec)
                base[member.raft_address] = member
            elif (known := self.members.get(str(spec))) is not None:
                base[known.raft_address] = known
        self._rebase_members(base)
        self._take_members(self.members)
