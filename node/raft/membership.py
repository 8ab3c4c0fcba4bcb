"""MembershipMixin of syncobj._SyncObj: online membership change on pysyncobj's engine
(dynamicMembershipChange), reaching pysyncobj only through self. The rule and the
invariant (the member set is a function of the log) are in members.py.

What pysyncobj 0.3.17 does on its own, and why it is taken over here:
- it applies a change on append (leader: before appending; follower: after each
  AppendEntries, for all the message's entries) and undoes those after prevLogIdx
  whenever a message does not extend the log's end. Our journal keeps entries a repeated
  or reordered AppendEntries re-sends (log.py), so that undo would drop a member whose
  entry is still in the log. Here a change is applied when the journal really appends its
  entry, and undone when the journal really truncates it (_RaftLog.on_membership);
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
- the node removed keeps its own old member list (it never applies its own removal) but no
  member dials it or accepts its connections any more; the operator stops it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from node.raft.members import (
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
    def _init_membership(self, self_address: str, members: dict[str, Member], make_node):
        self._sk_self_address = self_address
        self.members = dict(members)  # raft address -> Member; replaced, never mutated
        self._sk_make_node = make_node  # (address, Member | None) -> pysyncobj node
        self._member_change_idx: int | None = None  # last membership entry's index
        self._member_refusal: MemberError | None = None
        self._raft_calls: deque[Callable[[], None]] = deque()  # run_on_raft_thread
        self._journal.on_membership = self._on_membership_entry
        j = self._journal
        for i in range(len(j) - 1, -1, -1):  # the last membership entry (pending or not)
            if j[i][0][:1] == MEMBERSHIP_COMMAND:
                self._member_change_idx = j[i][1]
                break

    # -- nodes --------------------------------------------------------------------------

    def node_for(self, spec):
        """pysyncobj's nodeClass: a peer object from a raft address or a member dict."""
        if isinstance(spec, dict):
            member = Member.from_dict(spec)
            return self._sk_make_node(member.raft_address, member)
        return self._sk_make_node(spec, self.members.get(spec))

    # -- hand-off -------------------------------------------------------------------------

    def run_on_raft_thread(self, fn: Callable[[], None]) -> None:
        """Run fn() on the raft thread at its next tick (pysyncobj is not thread-safe)."""
        self._raft_calls.append(fn)

    def _run_raft_calls(self) -> None:
        while self._raft_calls:
            try:
                self._raft_calls.popleft()()
            except Exception:
                log.exception("a call handed to the raft thread failed")

    # -- the leader's side ----------------------------------------------------------------

    def change_member(self, kind: str, member: Member, done: ChangeCallback) -> None:
        """Queue a change (any thread); done(None) once committed, else done(MemberError)."""
        from node.raft.syncobj import FAIL_REASON  # the one pysyncobj importer

        def on_done(_result, err) -> None:
            if err == FAIL_REASON.SUCCESS:
                done(None)
            elif err == FAIL_REASON.REQUEST_DENIED and self._member_refusal is not None:
                refusal, self._member_refusal = self._member_refusal, None
                done(refusal)
            elif err in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER):
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
        from node.raft.syncobj import FAIL_REASON

        callback(None, FAIL_REASON.REQUEST_DENIED)

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
        kind, who = change
        if reverse:
            kind = REMOVE if kind == ADD else ADD
        self.members = replay(self.members, [encode_change(kind, who)])
        request = decode_request(command)
        request[0] = kind
        super()._SyncObj__doChangeCluster(request)
        if reverse:
            if self._member_change_idx == idx:
                self._member_change_idx = None
        else:
            self._member_change_idx = idx
        log.info(
            "members (%s at index %d%s): %s",
            kind,
            idx,
            ", undone" if reverse else "",
            ", ".join(sorted(m.id for m in self.members.values())),
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
        journal = self._journal
        self.members = replay(base, (journal[i][0] for i in range(len(journal))))
        others = [
            self.node_for(m.to_dict())
            for a, m in self.members.items()
            if a != self._sk_self_address
        ]
        super()._SyncObj__updateClusterConfiguration(others)
