"""Leadership hand-over (Raft's TimeoutNow), one mechanism for graceful shutdown and for
removing the leader (a mixin of syncobj.PatchedSyncObj; no pysyncobj import).

pysyncobj's transferLeadership sends TimeoutNow only to a follower whose match index is
the leader's last index, and denies it otherwise. Under a steady write load that is
almost never true at the instant it checks: the leader appends new entries every few ms,
and the removal of a loaded leader was refused for 60 s in a row (test_membership, 1 run
in 3). So, as etcd does while a transfer is pending, the leader stops appending new
commands for at most HOLD_TIMEOUTS x the minimum election timeout: they wait in
pysyncobj's queue (appended when the hold ends, or forwarded to the new leader), the
target catches up within a round trip, and the hand-over is asked again on every tick
until it is sent. A TimeoutNow already sent is not followed by another for one minimum
election timeout: two candidates would split the vote.

Threads: request_transfer may be called from any thread (it hands the request over);
everything else runs on the raft thread.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

# The hold lasts at most this many minimum election timeouts (0.4 s each by default).
HOLD_TIMEOUTS = 1.0

Done = Callable[[bool], None]


def _ignore(_sent: bool) -> None:
    pass


class LeadershipTransferMixin:
    _election_timeout_min: float

    def init_transfer(self, success: object) -> None:
        self._transfer_success = success  # pysyncobj's FAIL_REASON.SUCCESS
        self._transfer_wanted: tuple[str | None, Done] | None = None
        self._transfer_sent_at = -math.inf
        self._hold_appends_until = -math.inf
        self.last_transfer = ""  # how the last attempt went: sent / denied / not leader

    def request_transfer(self, address: str | None = None, done: Done | None = None) -> None:
        """Any thread: hand leadership to `address` ("host:port"; None: the most caught-up
        follower) at the raft thread's next tick; done(sent) there: True once TimeoutNow
        is sent, False if this node does not lead or no follower caught up within the
        hold. Whether another node then leads shows in status()."""
        self._transfer_wanted = (address, done or _ignore)
        self._SyncObj__pipeNotifier.notify()

    def holding_appends(self) -> bool:
        """The leader appends no new command now (a hand-over is waiting for its target)."""
        return time.monotonic() < self._hold_appends_until

    def transfer_tick(self) -> None:
        """Raft thread, once per tick: act on a wanted hand-over."""
        if self._transfer_wanted is None:
            return
        address, done = self._transfer_wanted
        self._transfer_wanted = None
        now = time.monotonic()
        if not self._isLeader():
            self.last_transfer = "not leader"
            self._hold_appends_until = -math.inf
            done(False)
            return
        if now - self._transfer_sent_at < self._election_timeout_min:
            done(False)  # the last target is electing itself; status() will tell
            return
        outcome: list = []
        self.transferLeadership(address, lambda _r, err: outcome.append(err))
        if outcome and outcome[0] == self._transfer_success:
            self.last_transfer = "sent"
            self._transfer_sent_at = now
            # Keep holding while the target elects itself: an entry appended meanwhile
            # would make the voters' logs newer than the target's, and they would refuse it.
            held = self._hold_appends_until
            self._hold_appends_until = max(held, now + self._election_timeout_min)
            done(True)
            return
        self.last_transfer = "denied"
        if self._hold_appends_until == -math.inf:
            self._hold_appends_until = now + HOLD_TIMEOUTS * self._election_timeout_min
        if now < self._hold_appends_until:
            self._transfer_wanted = (address, done)  # again at the next tick, still holding
        else:
            self._hold_appends_until = -math.inf
            done(False)

    def end_hold_if_over(self) -> None:
        """Raft thread: a hold past its time, or of a node that no longer leads, ends."""
        if self._transfer_wanted is None and (
            not self._isLeader() or time.monotonic() >= self._hold_appends_until
        ):
            self._hold_appends_until = -math.inf
