"""PicklePathsMixin of syncobj.PatchedSyncObj: every path on which pysyncobj 0.3.17 would unpickle
bytes that a peer chose is closed (no pysyncobj import). The project's rule is "no pickle
across a trust boundary": the cluster secret authenticates a peer, it does not make its
bytes safe to unpickle (a leaked secret or one compromised node must not mean code
execution on every node).

pysyncobj's pickle.loads sites (pysyncobj/syncobj.py of 0.3.17) and what reaches them here:
- __onMessageReceived, an AppendEntries 'transmission': the leader pickles a lone entry of
  appendEntriesBatchSizeBytes or more and sends it in chunks ('start', 'process',
  'finish'); the follower unpickles the chunks joined. Our leader never chunks
  (syncobj.build_conf sets a batch size no entry reaches, and _SyncObj__getEntries caps
  batches itself), every entry is at most config.RAFT_ENTRY_LIMIT_BYTES, and a node drops
  every AppendEntries that carries 'transmission' before pysyncobj sees it (logged at
  ERROR once a minute per peer host, never unpickled, no answer).
- __doApplyCommand, a VERSION command (pysyncobj's setCodeVersion): unpickled by every node
  that applies it, and any peer could put one in the log (a follower's forwarded
  'apply_command' is appended by the leader as it is; a leader's entries are journalled as
  they are). Our nodes never write one (setCodeVersion, and so its 'set_version' utility
  message, refuses); one in the log is applied as a no-op, the same on every node, and
  logged; the leader appends a forwarded command only if it is an entry (log.py, not the
  pickled format of older code) or a membership change, of at most the entry bound.
- __doApplyCommand, a REGULAR command (@replicated): syncobj._SyncObj__doApplyCommand takes
  every REGULAR command (log.entry_payload); pysyncobj's never sees one. The pickled
  commands of older journals go through log._LegacyUnpickler (no global but
  _codecs.encode).
- __parseChangeClusterRequest, a MEMBERSHIP command: replaced by membership.py (msgpack).
- tcp_connection's message decoding: it has no pickle at all (syncobj._NoPeerPickle;
  peer_encoding.py decodes).
- serializer.py unpickles a snapshot only without a custom deserializer, and journal.py only
  in FileJournal: we give both our own (raft_node._deserialize, node/raft/journal.py).
"""

from __future__ import annotations

import logging

from statekeeper.node.config import RAFT_ENTRY_LIMIT_BYTES
from statekeeper.node.raft.log import ENTRY_COMMAND, is_pickled
from statekeeper.node.raft.members import MEMBERSHIP_COMMAND
from statekeeper.node.raft.peer_encoding import refusals

log = logging.getLogger("statekeeper.raft")

VERSION_COMMAND = b"\x03"  # pysyncobj's _COMMAND_TYPE.VERSION (syncobj.py asserts it)
TRANSMISSION_REFUSED = (
    "an AppendEntries in pysyncobj's 'transmission' chunks (a pickled entry) was dropped "
    "unread: this node never unpickles a peer's bytes; every node must run the same code"
)
FORWARD_REFUSED = (
    "a forwarded command that is not a raft entry of at most "
    f"{RAFT_ENTRY_LIMIT_BYTES} bytes nor a membership change was refused"
)


def forwardable(command: object) -> bool:
    """What a leader appends of a follower's 'apply_command': an entry (not the pickled
    format of older code) within the entry bound, or a membership change (msgpack)."""
    if type(command) is not bytes or len(command) > RAFT_ENTRY_LIMIT_BYTES:
        return False
    if command[:1] == ENTRY_COMMAND:
        return not is_pickled(command)
    return command[:1] == MEMBERSHIP_COMMAND


class PicklePathsMixin:
    """Of syncobj.PatchedSyncObj, which sets _REQUEST_DENIED (pysyncobj's FAIL_REASON)."""

    _REQUEST_DENIED: int

    def refused_pickle_path(self, node, kind: str | None, message: dict) -> bool:
        """True: `message` would lead pysyncobj to unpickle a peer's bytes; it was dropped
        (and a forwarded command answered as denied)."""
        if kind == "append_entries" and "transmission" in message:
            refusals.refused(_peer(node), TRANSMISSION_REFUSED, what="refused a raft message of")
            return True
        if kind == "apply_command" and not forwardable(message.get("command")):
            refusals.refused(_peer(node), FORWARD_REFUSED, what="refused a raft message of")
            if "request_id" in message:
                self._SyncObj__transport.send(  # type: ignore[attr-defined]
                    node,
                    {
                        "type": "apply_command_response",
                        "request_id": message["request_id"],
                        "error": self._REQUEST_DENIED,
                    },
                )
            return True
        return False

    def skipped_version_command(self, command: bytes) -> bool:
        """True for a VERSION command: applied as a no-op instead of unpickled."""
        if command[:1] != VERSION_COMMAND:
            return False
        log.warning("a code VERSION entry in the raft log was applied as a no-op, unread")
        return True

    def setCodeVersion(self, newVersion, callback=None):  # noqa: N802 (pysyncobj's name)
        raise RuntimeError(
            "pysyncobj's code versions journal a pickle; statekeeper does not use them"
        )


def _peer(node) -> str:
    return str(getattr(node, "address", node))
