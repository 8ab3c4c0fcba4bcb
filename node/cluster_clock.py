"""The time the leader stamps into raft entries: bounded, and owned by the leader alone.

Apply never reads a clock; it takes time from the entries (node/entry.py) and keeps
`clock = max(clock, t)`, so whatever stamps entries decides when idempotency records
expire. Two rules keep that safe:

- Only the leader stamps: node/raft/ restamps every entry when the leader appends it,
  whatever clock the node that built it has (a follower's proposer, a forwarded write).
- A jump is bounded: on becoming leader the node anchors to the replicated clock (the
  largest time applied so far) and its monotonic clock; from then on a stamp is its wall
  clock, but never earlier than the last stamp and never more than `max_lead_ms` past
  anchor + monotonic time elapsed. A leader whose wall clock is a day ahead therefore moves
  the cluster clock at most `max_lead_ms` faster than real time: an idempotency window
  shrinks by at most that much, instead of every record expiring at once. A wall clock
  that is behind only holds the cluster clock still (records live longer, never shorter).

On a cluster that has never stamped anything (replicated clock 0) the first leader anchors
at its wall clock. After the whole cluster was down for a while, its clock resumes from the
last replicated time and lags the wall clock by the downtime: records are then kept longer
than their window, never shorter.

Everything is injected (wall, monotonic, the replicated clock), so tests drive it directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_MAX_LEAD_MS = 60_000


class ClusterClock:
    """Stamps for entries appended by this node while it leads (raft thread)."""

    def __init__(
        self,
        replicated_ms: Callable[[], int],
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        max_lead_ms: int = DEFAULT_MAX_LEAD_MS,
    ) -> None:
        self._replicated_ms = replicated_ms
        self._wall = wall
        self._mono = monotonic
        self._max_lead_ms = max_lead_ms
        self._lock = threading.Lock()
        self._anchor_ms = 0
        self._anchor_mono = 0.0
        self._last = 0

    def anchor(self) -> None:
        """Call when this node becomes leader, before it stamps its first entry."""
        with self._lock:
            replicated = self._replicated_ms()
            wall = int(self._wall() * 1000)
            self._anchor_ms = replicated if replicated > 0 else wall
            self._anchor_mono = self._mono()
            self._last = max(self._last, replicated)

    def peek(self) -> int:
        """The time a stamp taken now would carry, without taking one: what the leader
        reads when it decides something by time itself (node/lease_expiry.py). The
        replicated clock until the first anchor."""
        with self._lock:
            replicated = self._replicated_ms()
            if self._anchor_mono == 0.0 and self._anchor_ms == 0:
                return replicated
            elapsed = int((self._mono() - self._anchor_mono) * 1000)
            ceiling = self._anchor_ms + max(0, elapsed) + self._max_lead_ms
            return max(self._last, replicated, min(int(self._wall() * 1000), ceiling))

    def stamp(self) -> int:
        """The time for the next entry, in ms."""
        with self._lock:
            elapsed = int((self._mono() - self._anchor_mono) * 1000)
            ceiling = self._anchor_ms + max(0, elapsed) + self._max_lead_ms
            now = min(int(self._wall() * 1000), ceiling)
            self._last = max(self._last, now)
            return self._last
