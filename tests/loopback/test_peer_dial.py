"""node/raft/peer_encoding.py on a real dial over loopback: a peer that closes the
connection without answering our key exchange (an older node: it cannot read version 2 and
drops the connection silently) is logged by the dialler."""

from __future__ import annotations

import logging
import os
import socket

import pytest

from statekeeper.node.raft import loop_driver
from statekeeper.node.raft import peer_encoding as pe
from statekeeper.node.raft.syncobj import PeerConnection
from tests.raft_peer_helpers import NullPoller, peer_encryptor


@pytest.fixture(scope="module")
def encryptor():
    return peer_encryptor()


def _dial(encryptor, listener: socket.socket) -> tuple[PeerConnection, socket.socket]:
    """A dialled connection through pysyncobj's own steps: connect, the first event
    (CONNECTED), then our half of the key exchange."""
    conn = PeerConnection(NullPoller())
    conn.encryptor = encryptor
    assert conn.connect(*listener.getsockname())
    accepted, _ = listener.accept()
    conn._TcpConnection__processConnection(conn.fileno(), loop_driver.WRITE)
    assert conn.state == PeerConnection._CONNECTED
    conn.recvRandKey = os.urandom(32)
    conn.send(conn.recvRandKey)
    return conn, accepted


def _read_event(conn) -> None:
    for _ in range(100):
        if conn.state == PeerConnection._DISCONNECTED:
            return
        conn._TcpConnection__processConnection(conn.fileno(), loop_driver.READ)
        if conn.recvRandKey and conn.sendRandKey is None and conn.state == conn._CONNECTED:
            return


@pytest.mark.parametrize("answered", [False, True])
def test_a_dial_the_peer_closes_unanswered_is_logged(encryptor, caplog, answered) -> None:
    """An older node drops our version-2 key exchange silently: the dialler says why."""
    pe.refusals._last.clear()
    caplog.set_level(logging.WARNING, logger="statekeeper.raft")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        conn, accepted = _dial(encryptor, listener)
        with accepted:
            if answered:  # a version-2 peer answers with its key; then it closes
                peer = PeerConnection(NullPoller(), socket=accepted)
                peer.encryptor = encryptor
                peer.send(os.urandom(32))
                accepted.setblocking(True)
                _read_event(conn)
            accepted.close()
            _read_event(conn)
    assert conn.state == PeerConnection._DISCONNECTED
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if answered:
        assert warnings == []
    else:
        assert len(warnings) == 1, warnings
        assert "without answering our key exchange" in warnings[0]
        assert "upgrade all nodes together" in warnings[0]
