"""The time the leader stamps into raft entries and decides lease expiry by: replicated
monotonic time, owned by the leader alone, never taken from a wall clock once the
cluster has a clock.

Apply never reads a clock; it takes time from the entries (node/entry.py) and keeps
`clock = max(clock, t)` (the replicated clock). Whatever stamps entries therefore decides
when leases and idempotency records expire. The rules:

- Only the leader stamps: node/raft/ restamps every entry when the leader appends it,
  whatever clock the node that built it has (a follower's proposer, a forwarded write).
- On becoming leader the node anchors: anchor = the replicated clock it has applied (its
  wall clock only on a cluster that has never stamped anything), together with its
  monotonic time. From then on its time is `now()` = max(replicated clock, anchor +
  monotonic time elapsed since the anchor); a stamp is `now()` (never below the last
  stamp of the term), and the lease expiry task (node/tasks/leases.py) decides by `now()`
  too. A wall clock plays no part, so a node whose wall clock is a day ahead or behind, or
  jumps, changes nothing.

Why the wall clock is not followed even within a bound (it was: stamps were the wall
clock, at most 60 s ahead of anchor + elapsed). A keepalive applied at entry time c sets
expires_ms = c + ttl. If a leader may stamp ahead of its monotonic time, a LATER leader
anchors at those stamps and its `now()` starts ahead of real time: a lease renewed before
the skewed stamps, under an honest leader, then expires up to the lead early (leader A
renews at real time r with stamp r, leader B with a wall clock +50 s stamps r + 1 + 50,
leader C anchors there and finds the lease due 50 s before r + ttl). No bound short of 0
makes that safe, so the clock follows monotonic time only.

Nothing expires early, with any wall-clock skew (the argument; node/tasks/leases.py
relies on it). Take real time τ, and monotonic clocks that run at the real rate. A leader
L anchored at real τ_L has the offset off_L = anchor_L - τ_L, and every time it produces
is now_L(τ) = max(replicated, off_L + τ). Claim: for any keepalive (or grant) applied
with entry clock c_k, appended at real τ_k, every leader that later decides (at τ_e,
after it applied the keepalive, so τ_e > τ_k) has now_L(τ_e) <= c_k + (τ_e - τ_k); hence
now_L(τ_e) >= c_k + ttl implies τ_e >= τ_k + ttl: the lease's TTL has run in real time
since the renewal. Proof: every stamp is either a fresh off_M + τ of its leader M or a
copy of an earlier stamp (replicated / last), so every stamp s_j taken at τ_j equals
off_M + τ_i for some fresh stamp at τ_i <= τ_j. The committed log is in append order:
entries before k were appended before τ_k, entries after k after it. (1) A stamp s_j of
an entry before k is <= c_k (c_k is the max of them), and τ_e > τ_k, so s_j <= c_k +
(τ_e - τ_k). (2) The fresh stamps of k's own leader M are off_M + τ with off_M + τ_k <=
s_k <= c_k. (3) Any later leader anchors at the max stamp of a log prefix taken before
its anchor: by (1), (2) and induction over the leaders in anchor order its offset is <=
c_k - τ_k, so its fresh stamps and its now at τ are <= c_k + (τ - τ_k). Copies do not
raise anything. That covers every term of `now_L(τ_e)`. The apply re-check
(`expires_ms <= entry time`) uses the expire entry's stamp, which is >= the now the
leader decided with, so apply agrees with the leader's decision.

What "late" is bounded by. The offset only decreases: at each election by the time
between the newest stamp the new leader has applied and its anchor (the election: about
the election timeout, plus what it had not applied yet), and by a total outage's length.
A lease is therefore late by the leader changes (and outages) since its last renewal,
plus the expiry task's grace after an election (node/tasks/leases.py) and one tick. The
price: the cluster clock runs behind real time by the sum of all election gaps and
outages in the cluster's life (it is replicated monotonic time, like etcd's lease
clock), so entry times (stream entry times, retention ages, idempotency windows) lag
the wall clock by that much: records are kept longer, never shorter.

Assumptions: monotonic clocks run at the real rate (NTP slews CLOCK_MONOTONIC by at most
500 ppm: a lease may expire 0.05 % of its TTL early; a suspended VM's monotonic clock
stops, which makes leases late, not early). A leader of a cluster that has applied no
entry at all anchors at its wall clock; if entries of an earlier leader were committed
but not yet applied there, their leases can be off by the two wall clocks' difference
(only at a cluster's birth).

Everything is injected (wall, monotonic, the replicated clock), so tests drive it directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class ClusterClock:
    """Stamps for entries appended by this node while it leads (raft thread), and the
    time the leader's tasks decide by (`now`/`peek`, asyncio loop)."""

    def __init__(
        self,
        replicated_ms: Callable[[], int],
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._replicated_ms = replicated_ms
        self._wall = wall
        self._mono = monotonic
        self._lock = threading.Lock()
        self._anchored = False
        self._anchor_ms = 0
        self._anchor_mono = 0.0
        self._last = 0

    def anchor(self) -> None:
        """Call when this node becomes leader, before it stamps its first entry."""
        with self._lock:
            replicated = self._replicated_ms()
            self._anchor_ms = replicated if replicated > 0 else int(self._wall() * 1000)
            self._anchor_mono = self._mono()
            self._last = self._anchor_ms  # a new term: nothing of an earlier one carries over
            self._anchored = True

    def _now(self) -> int:
        replicated = self._replicated_ms()
        if not self._anchored:
            return replicated
        elapsed = int((self._mono() - self._anchor_mono) * 1000)
        return max(replicated, self._anchor_ms + max(0, elapsed))

    def now(self) -> int:
        """The leader's time in ms (replicated clock until the first anchor): what it
        decides lease expiry and retention by. Never taken from the wall clock."""
        with self._lock:
            return max(self._last, self._now()) if self._anchored else self._now()

    def peek(self) -> int:
        """The time a stamp taken now would carry, without taking one (= now())."""
        return self.now()

    def stamp(self) -> int:
        """The time for the next entry, in ms: now(), never below the term's last stamp."""
        with self._lock:
            self._last = max(self._last, self._now())
            return self._last
