"""The raft journal as pysyncobj sees it (RaftLog, over node/raft/journal.py's DurableJournal),
the exact shape pysyncobj expects its entries in, and the command formats in it.

A journal command is one type byte and a body:
- ENTRY_COMMAND (ours, written since issue 17): pysyncobj's REGULAR type byte, then the
  raft entry itself (node/entry.py: msgpack, first byte 0x82), nothing around it.
  syncobj.PatchedSyncObj submits these and dispatches them to the state machine itself, without
  pysyncobj's @replicated.
- the same type byte then a pickle of (method id, (entry,)): pysyncobj's @replicated call,
  written before. A pickle of protocol 2 or later (pysyncobj never wrote another) starts
  with PROTO, 0x80: that first body byte tells the two apart. Journals and snapshots of
  that format still replay: entry_payload reads them with an unpickler that can build
  nothing but tuples, ints and bytes (the one global a protocol-2 pickle of bytes needs,
  _codecs.encode, is the only one allowed).
- pysyncobj's NO_OP, MEMBERSHIP (members.py) and VERSION commands are left to it.
Why: the @replicated pickle cost a pickle.dumps on the leader and a pickle.loads of
journal data on every node for each entry; measured (2 shared cores, process time):
0.6 + 0.6 us for a 400-byte entry, 5 + 4 us at 64 KiB, 450 + 760 us at 1 MiB, against
0.1-45 us for the raw concatenation and slice.
Why the REGULAR byte and not a type byte of our own: a node still running older code skips
a command of a type it does not know and counts it applied, so a cluster in the middle of
an upgrade would silently lose those writes on that node. Under the REGULAR byte, older
code fails to unpickle the entry (the entry's first byte, 0x82, is pickle's EXT1: "ValueError:
unregistered extension code 161"). The error leaves pysyncobj's tick before the tick reads
the network; its tick thread logs it and retries every 0.05 s, failing the same way. That
node applies nothing more (its state stops just before the entry: it never diverges) and
reads no peer message (no acknowledgement, vote or leadership), while its process stays up
and answers HTTP. Every node must run this code: stop all, upgrade, start (docs/protocol.md,
"Journal format and upgrades", has what a mixed cluster did when tried).
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Callable

from statekeeper.node import entry, snapshot_file
from statekeeper.node.raft.journal import DurableJournal
from statekeeper.node.raft.members import MEMBERSHIP_COMMAND

REGULAR_COMMAND = b"\x00"  # pysyncobj's _COMMAND_TYPE.REGULAR
ENTRY_COMMAND = REGULAR_COMMAND  # + the entry as it is (see above)
_PICKLE_PROTO = b"\x80"  # the first byte of the body of an older @replicated command


class _LegacyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) == ("_codecs", "encode"):  # how protocol 2 pickles bytes
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global {module}.{name} refused in a journal command")


def _legacy_payload(body: bytes) -> bytes:
    try:
        decoded = _LegacyUnpickler(io.BytesIO(body)).load()
        _method, (payload,) = decoded
    except Exception:
        return b""  # not an entry: the state machine fails its ops, the same on every node
    return payload if isinstance(payload, bytes) else b""


def is_pickled(command: bytes) -> bool:
    """A command in the @replicated format of earlier code."""
    return command[:1] == REGULAR_COMMAND and command[1:2] == _PICKLE_PROTO


def entry_payload(command: bytes) -> bytes | None:
    """The raft entry a journal command carries (the entry as it is, or the @replicated
    pickle of earlier code), or None for pysyncobj's own command types."""
    if command[:1] != REGULAR_COMMAND:
        return None
    if is_pickled(command):
        return _legacy_payload(command[1:])
    return command[1:]


def entry_tuple(e) -> tuple:
    # pysyncobj compares journal entries with ==, so they must come back as
    # (bytes, int, int) tuples exactly, or it clears the journal on restart.
    return (bytes(e[0]), int(e[1]), int(e[2]))


class RaftLog(DurableJournal):
    """The journal as pysyncobj sees it, made safe for followers: an entry that is
    already present with the same term is kept (a repeated or reordered AppendEntries
    must not shorten the log); only a real term conflict truncates (Raft 5.3).

    While `stamp` is set (only around the leader's own appends, see
    syncobj.PatchedSyncObj._checkCommandsToApply) every regular command gets the leader's time."""

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
