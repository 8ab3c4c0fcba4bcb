"""The raft journal as pysyncobj sees it (_RaftLog, over node/journal.py's DurableJournal),
and the exact shape pysyncobj expects its entries in."""

from __future__ import annotations

import os
from collections.abc import Callable

from node import entry, snapshot_file
from node.journal import DurableJournal
from node.raft.members import MEMBERSHIP_COMMAND

REGULAR_COMMAND = b"\x00"  # pysyncobj's _COMMAND_TYPE.REGULAR: a @replicated call


def _entry_tuple(e) -> tuple:
    # pysyncobj compares journal entries with ==, so they must come back as
    # (bytes, int, int) tuples exactly, or it clears the journal on restart.
    return (bytes(e[0]), int(e[1]), int(e[2]))


class _RaftLog(DurableJournal):
    """The journal as pysyncobj sees it, made safe for followers: an entry that is
    already present with the same term is kept (a repeated or reordered AppendEntries
    must not shorten the log); only a real term conflict truncates (Raft 5.3).

    While `stamp` is set (only around the leader's own appends, see
    syncobj._SyncObj._checkCommandsToApply) every regular command gets the leader's time."""

    stamp: Callable[[], int] | None = None
    # Called with (command, idx, reverse) for each membership entry appended (False) or
    # truncated by a conflict (True, last first): membership.MembershipMixin applies them.
    on_membership: Callable[[bytes, int, bool], None] | None = None

    def add(self, command: bytes, idx: int, term: int) -> None:
        if self.stamp is not None and command[:1] == REGULAR_COMMAND:
            command = entry.restamp(command, self.stamp())
        if len(self):
            first, last = self[0][1], self[-1][1]
            if first <= idx <= last:
                pos = idx - first
                if self[pos][2] == term:
                    return
                if self.on_membership is not None:
                    for gone in reversed(self[pos:]):
                        if gone[0][:1] == MEMBERSHIP_COMMAND:
                            self.on_membership(gone[0], gone[1], True)
                self.deleteEntriesFrom(pos)
        super().add(command, idx, term)
        if self.on_membership is not None and command[:1] == MEMBERSHIP_COMMAND:
            self.on_membership(command, idx, False)

    def deleteEntriesTo(self, entryTo: int) -> None:
        # Called right after pysyncobj renamed a new snapshot into place: make that rename
        # durable before the entries it covers leave the journal.
        if self.fsync_mode == "always":
            snapshot_file.fsync_dir(os.path.dirname(self.path))
        super().deleteEntriesTo(entryTo)
