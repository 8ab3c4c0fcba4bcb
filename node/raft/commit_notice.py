"""When the leader tells its followers that the commit index moved (CommitNoticeMixin of
node/raft/syncobj.PatchedSyncObj; no pysyncobj import).

pysyncobj's leader (appendEntriesUseBatch off) sends every follower an AppendEntries as
soon as an entry commits, only to carry the new commit index. At one client that doubles
the peer traffic of a put: per put the leader sent two AppendEntries passes (the entry,
then its commit) and took four answers, each follower decoded two messages, wrote two
answers and ticked twice. The notice is not needed for safety (a follower's commit index
only decides when it applies, and a new leader commits by its own rules), nor for the
put's answer (the leader answers once it applied the entry itself).

So the leader defers it: the commit index rides on the next AppendEntries that carries an
entry (a closed-loop client's next put arrives within a fraction of a millisecond), and
if none is sent within DELAY a pass goes out then, carrying it. Followers apply at most
DELAY later than before; what waits on a follower's apply is told at once instead:
- an entry a follower forwarded to the leader (its writes and its read barriers: the
  follower's caller waits for its own apply) is noticed without delay: the leader
  remembers the highest log index it answered an apply_command with;
- a heartbeat (every appendEntriesPeriod) carries the commit index as before.

Invariants: nothing here changes what is sent, only when: every AppendEntries still
carries the leader's current commit index; a deferred notice is sent unless a pass (with
entries, a heartbeat or an urgent notice) already carried that commit index. The timer
runs on the raft thread (the driver's loop), like everything else that touches pysyncobj.

Measured on this machine (2 shared cores, 3 nodes on loopback, puts of 256 B at one
client): see benchmarks/RESULTS.md, issue 28's reading (AppendEntries passes per put
from about 2 to about 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Long enough for a closed-loop client's next request to carry the notice (its round trip
# to the leader is ~0.2-0.5 ms here), short enough that a follower's serializable reads
# and watches lag by no more than a scheduling hiccup.
DELAY = 0.002

Schedule = Callable[[float, Callable[[], None]], Any]  # loop.call_later's shape


class CommitNoticeMixin:
    """(with PatchedSyncObj) defers the leader's commit-only AppendEntries passes (see module)."""

    # pysyncobj's, reached through self (syncobj.PatchedSyncObj combines them)
    raftCommitIndex: int  # noqa: N815
    _isLeader: Callable[[], bool]

    def _init_commit_notice(self, schedule: Schedule) -> None:
        self._notice_schedule = schedule
        self._notice_timer: Any = None
        self._commit_sent = -1  # commit index carried by the last AppendEntries pass
        self._forwarded_upto = 0  # highest index answered to a follower's apply_command
        self.append_passes = 0  # AppendEntries passes sent (metrics, tests)
        self.deferred_notices = 0  # commit notices left to the next pass or the timer

    def note_pass_sent(self) -> None:
        """An AppendEntries pass is starting: it carries the current commit index."""
        self.append_passes += 1
        self._commit_sent = self.raftCommitIndex

    def note_forwarded(self, log_idx: int) -> None:
        """This leader appended a follower's command at `log_idx` (apply_command_response)."""
        if log_idx > self._forwarded_upto:
            self._forwarded_upto = log_idx

    def notice_now(self) -> bool:
        """Applied entries moved the commit index: send the notice now (True) or defer it
        to the next pass or DELAY (False, a timer armed)."""
        commit = self.raftCommitIndex
        if commit >= self._forwarded_upto > self._commit_sent:
            return True  # a follower waits for its own forwarded entry
        self.deferred_notices += 1
        if self._notice_timer is None:
            self._notice_timer = self._notice_schedule(DELAY, self._send_deferred_notice)
        return False

    def _send_deferred_notice(self) -> None:
        self._notice_timer = None
        if self._isLeader() and self.raftCommitIndex != self._commit_sent:
            self.send_commit_notice()

    def send_commit_notice(self) -> None:
        """One AppendEntries pass (the combining class: pysyncobj's)."""
        raise NotImplementedError
