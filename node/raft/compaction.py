"""A snapshot once the journal grows too big, a mixin of syncobj.PatchedSyncObj (no pysyncobj
import). pysyncobj compacts its log by entry count and time only, and a restart reads the
whole journal back into memory: a node also snapshots once its journal holds
`[raft] snapshot_max_journal_bytes`, the state machine flushed first on a helper thread."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

log = logging.getLogger("statekeeper.raft")


class JournalBoundMixin:
    """Call _init_journal_bound() before SyncObj.__init__ and _compact_if_journal_too_big()
    from every tick."""

    def _init_journal_bound(
        self,
        max_journal_bytes: float = math.inf,
        flush_state_machine: Callable[[], None] = lambda: None,
    ) -> None:
        self._max_journal_bytes = max_journal_bytes
        self._flush_state_machine = flush_state_machine
        self._preflush_started: float | None = None
        self._preflush_snapshot = None  # pysyncobj's last snapshot entry when it started

    def _compact_if_journal_too_big(self) -> None:
        """The checkpoint (raft thread) flushes RocksDB's memtable first: ~0.3 s for a full
        one, a stall every snapshot. So flush on a helper thread, then snapshot; once per
        journal overflow, again once that snapshot is done if the journal is still too big
        (entries kept coming while it was taken: test_journal_size_bounds_the_journal saw a
        follower keep a 3 MiB journal for 20 s waiting out the retry), and again after 30 s
        if it failed."""
        if self._journal.size_bytes <= self._max_journal_bytes:
            self._preflush_started = None
            return
        done = self._SyncObj__lastSerializedEntry  # type: ignore[attr-defined]
        if (
            self._preflush_started is None
            or time.monotonic() - self._preflush_started > 30
            or done != self._preflush_snapshot
        ):
            self._preflush_started = time.monotonic()
            self._preflush_snapshot = done
            threading.Thread(target=self._flush_then_compact, name="preflush", daemon=True).start()

    def _flush_then_compact(self) -> None:
        try:
            self._flush_state_machine()
        except Exception:
            log.exception("flushing the state machine before a snapshot failed")
        # Only sets a flag; the raft thread snapshots at its next tick.
        self.forceLogCompaction()
