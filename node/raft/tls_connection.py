"""Raft TLS inside pysyncobj's transport (node/tls.py says what and why): the connection
class that runs TLS between pysyncobj's buffers and the socket, and the transport mixin
that puts every peer connection through it. With raft TLS off nothing here runs.

Split from syncobj.py (size) as mixins that import nothing of pysyncobj: syncobj.py, the
one importer, combines them with pysyncobj's classes (_TlsConnection, PeerTransport) and
sets the two pysyncobj constants they need (_POLL_ALL, _DISCONNECTED).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import time
from collections.abc import Callable

from statekeeper.node.raft.tls_pipe import TlsPipe, TlsRefused

log = logging.getLogger("statekeeper.raft")

# The same refusal of the same peer is logged at WARNING once per this period.
TLS_LOG_REPEAT_SECONDS = 10.0


_UNANSWERED = TlsRefused(
    "peer-refused",
    "the peer closed the connection without answering (it refused our certificate, "
    "or it is not a statekeeper peer with raft TLS on)",
)


def _as_refusal(e: Exception) -> TlsRefused:
    return e if isinstance(e, TlsRefused) else TlsRefused("tls", f"unexpected TLS error: {e!r}")


class TlsConnectionMixin:
    """(with syncobj._TlsConnection) pysyncobj's TcpConnection with TLS between its buffers and the socket (raft TLS on).

    The socket stays plain and non-blocking in pysyncobj's poller; only the two methods
    that touch it change: a read feeds the raw bytes to a TlsPipe (tls_pipe.py) and hands
    the plaintext to pysyncobj's read buffer, a send moves pysyncobj's write buffer (its
    length-prefixed, AES-GCM-sealed frames, unchanged) into the pipe and writes the
    ciphertext. Connections are made by pysyncobj as TcpConnection; PeerTransport turns
    them into this class (tls_setup) before any byte is read or written. Unsent ciphertext
    counts in getSendBufferSize() and keeps the write event armed (pysyncobj only looks at
    its own buffer). A refused handshake is logged once with the peer and why, its alert
    sent if the socket takes it, and the connection dropped (pysyncobj reconnects)."""

    _tls: TlsPipe | None
    _tls_out: bytearray  # ciphertext the socket has not taken yet
    _tls_label: str

    def tls_setup(
        self, new_pipe: Callable[[], TlsPipe], label: str, on_refused, dialler: bool
    ) -> None:
        self._tls_new = new_pipe
        self._tls_label = label
        self._tls_on_refused = on_refused
        self._tls_dialler = dialler
        self._tls_answered = False  # any plaintext from the peer yet
        self._tls_out = bytearray()
        self._tls = new_pipe() if self._TcpConnection__socket is not None else None

    @property
    def tls_peer_names(self) -> frozenset[str]:
        return self._tls.peer_names if self._tls is not None else frozenset()

    def connect(self, host, port):
        self._tls = self._tls_new()  # a fresh session per attempt; ClientHello queued
        self._tls_out = bytearray()
        self._tls_answered = False
        return super().connect(host, port)

    def disconnect(self):
        self._tls_out = bytearray()
        super().disconnect()

    def getSendBufferSize(self):
        pending = self._tls.pending_bytes if self._tls is not None else 0
        return super().getSendBufferSize() + len(self._tls_out) + pending

    def tls_refuse(self, refused: TlsRefused) -> None:
        if self._tls is not None:
            with contextlib.suppress(Exception):  # tell the peer why, if it listens
                self._TcpConnection__socket.send(self._tls.outgoing())
        self._tls_on_refused(self._tls_label, refused)
        self.disconnect()

    def _TcpConnection__processConnection(self, descr, eventType):
        super()._TcpConnection__processConnection(descr, eventType)  # type: ignore[misc]
        if self._tls_out and self.fileno() == descr:
            # pysyncobj re-subscribes for writes only while ITS buffer holds bytes.
            self._syncobj_poller().subscribe(
                descr,
                self._TcpConnection__processConnection,
                self._POLL_ALL,
            )

    def _syncobj_poller(self):
        return self._TcpConnection__poller

    def _TcpConnection__processSend(self) -> bool:
        buf = self._TcpConnection__writeBuffer
        if buf:
            self._TcpConnection__writeBuffer = b""
            try:
                self._tls.send(buf)
            except Exception as e:  # never out of the raft thread's poller
                self.tls_refuse(_as_refusal(e))
                return False
        self._tls_flush()
        return False  # everything the socket took is written; the rest waits for WRITE

    def _tls_flush(self) -> None:
        self._tls_out += self._tls.outgoing()
        sock = self._TcpConnection__socket
        while self._tls_out and sock is not None:
            try:
                n = sock.send(self._tls_out)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    self.disconnect()
                return
            if n <= 0:
                return
            del self._tls_out[:n]  # cheap at the front of a bytearray

    def _TcpConnection__processRead(self) -> bool:
        sock = self._TcpConnection__socket
        try:
            incoming = sock.recv(self._TcpConnection__recvBufferSize)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if not incoming:
            if self._tls_dialler and not self._tls_answered:
                # Under TLS 1.3 the dialler's handshake completes before the acceptor has
                # checked its certificate: a refusal then reaches it as a bare close.
                self._tls_on_refused(self._tls_label, _UNANSWERED)
            self.disconnect()
            return False
        try:
            plain = self._tls.feed(incoming)  # drains every complete record
        except Exception as e:  # never out of the raft thread's poller
            self.tls_refuse(_as_refusal(e))
            return False
        if plain:
            self._tls_answered = True
            self._TcpConnection__readBuffer += plain
        if self._tls.has_outgoing or self._tls_out:  # handshake replies, data held for it
            self._tls_flush()
        return self.state != self._DISCONNECTED


class TlsTransportMixin:
    """The TLS half of syncobj.PeerTransport (a pysyncobj TCPTransport): dialled
    connections name the peer's node id as server name (the context checks the
    certificate has it); accepted ones require a certificate naming some cluster node, and
    the node address it then claims (its first message after pysyncobj's key exchange)
    must be that node's."""

    def __init__(self, syncObj, selfNode, otherNodes):
        tls = syncObj._sk_tls
        self._tls = tls
        if tls is not None:
            self._tls_peer_ids = frozenset(
                n.node_id for n in otherNodes if getattr(n, "node_id", None)
            )
            self._tls_logged: dict[tuple[str, str], float] = {}
        super().__init__(syncObj, selfNode, otherNodes)

    def addNode(self, node):
        super().addNode(node)
        if self._tls is None:
            return
        node_id = getattr(node, "node_id", None)
        if not node_id:
            raise ValueError(f"raft TLS needs the node id of peer {node.address}")
        # A member added online (membership.py) may dial us: its name is now expected.
        self._tls_peer_ids = self._tls_peer_ids | {node_id}
        conn = self._connections.get(node)
        if conn is None:
            return
        dial_ctx = self._tls[1]
        conn.__class__ = self._tls_connection_class
        conn.tls_setup(
            lambda: TlsPipe(dial_ctx, server_side=False, server_hostname=node_id),
            f"to {node_id} at {node.ip}:{node.port}",
            self._tls_refused,
            dialler=True,
        )

    def dropNode(self, node):
        super().dropNode(node)
        if self._tls is not None and getattr(node, "node_id", None):
            self._tls_peer_ids = self._tls_peer_ids - {node.node_id}

    def _onNewIncomingConnection(self, conn):
        if self._tls is not None:
            try:
                host, port = conn._TcpConnection__socket.getpeername()[:2]
                label = f"from {host}:{port}"
            except OSError:
                label = "from an unknown address"
            accept_ctx, expect = self._tls[0], self._tls_peer_ids
            conn.__class__ = self._tls_connection_class
            conn.tls_setup(
                lambda: TlsPipe(accept_ctx, server_side=True, expect_any=expect),
                label,
                self._tls_refused,
                dialler=False,
            )
            # pysyncobj subscribed the plain handler; the same one, seen through the subclass.
            self._syncObj._poller.subscribe(
                conn.fileno(),
                conn._TcpConnection__processConnection,
                self._POLL_ALL,
            )
        super()._onNewIncomingConnection(conn)

    def _onIncomingMessageReceived(self, conn, message):
        # The message after the key exchange names the node the peer claims to be: its
        # certificate must name that node (one node's key must not pose as another).
        if self._tls is not None and conn.sendRandKey and not isinstance(message, list):
            node = self._nodeAddrToNode.get(message) if isinstance(message, str) else None
            node_id = getattr(node, "node_id", None)
            if node_id is None or node_id not in conn.tls_peer_names:
                names = ", ".join(sorted(conn.tls_peer_names)) or "none"
                claimed = f"{node_id} ({message})" if node_id else repr(message)[:80]
                conn.tls_refuse(
                    TlsRefused(
                        "wrong-node", f"claims to be {claimed}, its certificate names {names}"
                    )
                )
                self._unknownConnections.discard(conn)
                return
        return super()._onIncomingMessageReceived(conn, message)

    def _tls_refused(self, label: str, refused: TlsRefused) -> None:
        """Log a refused connection once, at WARNING; the same refusal of the same peer
        again within TLS_LOG_REPEAT_SECONDS (a dialler retries every 0.3 s) at DEBUG."""
        self._syncObj._sk_encryptor.rejected += 1
        key = (label.split(":")[0] if label.startswith("from") else label, refused.kind)
        now = time.monotonic()
        level = logging.WARNING
        if now - self._tls_logged.get(key, -math.inf) < TLS_LOG_REPEAT_SECONDS:
            level = logging.DEBUG
        else:
            self._tls_logged[key] = now
        log.log(level, "raft TLS: dropped the connection %s: %s", label, refused.why)
