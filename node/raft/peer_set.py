"""ConfigPeersMixin of syncobj.PeerTransport (no pysyncobj import): whom the raft
transport talks to is decided by the log, not by pysyncobj's configuration changes.

pysyncobj's transport knows exactly the members of the node's current configuration
(its log's END, uncommitted changes included): it drops a member's connection the moment
a "remove" entry is appended, and refuses an incoming connection from any address it does
not know. Raft needs more: a server processes requests from servers outside its own
configuration. Measured (issue 26, probe_membership_uncommitted_removal.py): a node whose
log ended in an uncommitted "remove X" never heard X once X led, so X could never truncate
that entry; the node stayed cut off and 2 of the 3 real members could not commit for 10 s.

Here:
- the transport's peers are those membership.MembershipMixin._follow_peers names: the
  members of the log's end and of the committed configuration. pysyncobj's own add/drop
  calls (configuration changes) are held while membership.py applies one.
- an incoming connection that authenticated (its first message, the key exchange, decrypted
  with the cluster secret: peers.py) and then names an address this node does not know is
  kept as a connection to that address (a peer of a configuration this node's log does not
  have yet, e.g. a new member that leads while this node lags), instead of being dropped.
  It is never dialled and never counted in a quorum (pysyncobj counts only its
  configuration's members); it lasts as long as the connection. Under raft TLS such a peer
  is still refused: its certificate must name a node this node knows (tls_connection.py).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator


class ConfigPeersMixin:
    """Of syncobj.PeerTransport; reaches pysyncobj's TCPTransport only through self."""

    def __init__(self, syncObj, selfNode, otherNodes):
        self._peers_held = False
        self._transient: dict[object, object] = {}  # node -> its accepted connection
        super().__init__(syncObj, selfNode, otherNodes)

    @contextlib.contextmanager
    def peers_held(self) -> Iterator[None]:
        """pysyncobj's addNode/dropNode calls inside are no-ops (follow_peers decides)."""
        self._peers_held = True
        try:
            yield
        finally:
            self._peers_held = False

    def addNode(self, node):
        if self._peers_held or node in self._nodes:
            return
        self._transient.pop(node, None)  # its accepted connection is now a member's
        super().addNode(node)

    def dropNode(self, node):
        if not self._peers_held:
            super().dropNode(node)

    def follow_peers(self, peers: dict) -> None:
        """Talk to exactly these peers (raft address -> node): connect to the new ones
        (or wait for them to dial), disconnect the others."""
        for node in list(self._nodes):
            if node.address not in peers:
                self.dropNode(node)
        for address, node in peers.items():
            if address not in self._nodeAddrToNode:
                self.addNode(node)

    def _onIncomingMessageReceived(self, conn, message):
        if self._accepts_unknown(conn, message):
            node = self._syncObj.node_for(message)
            self._unknownConnections.discard(conn)
            self._transient[node] = conn
            self._connections[node] = conn
            conn.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, node))
            self._onNodeConnected(node)
            return None
        return super()._onIncomingMessageReceived(conn, message)

    def _accepts_unknown(self, conn, message) -> bool:
        """The address message of an authenticated connection, naming a peer this node
        does not know (raft TLS off)."""
        if self._tls is not None or not conn.sendRandKey or not isinstance(message, str):
            return False
        if message in self._nodeAddrToNode or message == self._selfNode.address:
            return False
        host, _, port = message.rpartition(":")
        return bool(host) and port.isdigit() and 0 < int(port) < 65536

    def _onDisconnected(self, conn):
        node = next((n for n, c in self._transient.items() if c is conn), None)
        if node is None:
            return super()._onDisconnected(conn)
        del self._transient[node]
        if self._connections.get(node) is conn:
            del self._connections[node]
        self._onNodeDisconnected(node)
        return None

    def destroy(self):
        super().destroy()
        for conn in list(self._transient.values()):
            conn.disconnect()
        self._transient.clear()
