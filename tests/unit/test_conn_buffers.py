"""node/raft/conn_buffers.py: peer connection buffers grow and drain in place.

pysyncobj's TcpConnection rebuilt its `bytes` buffers on every append, partial write and
parsed message (a copy of the whole backlog each time: quadratic, on the raft loop).
"Copied" is observed here as the buffer object being replaced: each test fails on
pysyncobj's own TcpConnection (CONNECTION_CLASS below), no timing involved."""

from __future__ import annotations

import random
import socket
import struct

import pysyncobj.tcp_connection as tcp_connection_module
import pysyncobj.tcp_server as tcp_server_module
import pysyncobj.transport as transport_module
import pytest

from statekeeper.node.raft import loop_driver
from statekeeper.node.raft.syncobj import PeerConnection

_READ = loop_driver.READ  # pysyncobj's READ event (syncobj.py asserts they agree)

CONNECTION_CLASS = PeerConnection  # pysyncobj's TcpConnection here: the two "copied" tests fail


class _Poller:
    def subscribe(self, *args) -> None:
        pass

    def unsubscribe(self, *args) -> None:
        pass


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.setblocking(False)
    sender = CONNECTION_CLASS(_Poller(), socket=a, recvBufferSize=64 * 1024)
    receiver = CONNECTION_CLASS(_Poller(), socket=b, recvBufferSize=64 * 1024)
    yield sender, receiver
    a.close()
    b.close()


def _messages(n: int) -> list[dict]:
    rng = random.Random(n)  # incompressible, as entries of random values are
    return [{"type": "append_entries", "i": i, "data": rng.randbytes(20_000)} for i in range(n)]


def _drain_into(receiver, sender) -> None:
    """Move everything the sender holds into the receiver's read buffer."""
    while sender.getSendBufferSize():
        receiver._TcpConnection__tryReadBuffer()
        sender._TcpConnection__trySendBuffer()
    receiver._TcpConnection__tryReadBuffer()


def test_a_backlog_grows_and_drains_in_one_buffer(pair) -> None:
    sender, receiver = pair
    buffer = sender._TcpConnection__writeBuffer
    for m in _messages(200):  # ~4 MB: far more than the socket takes
        sender.send(m)
    assert sender.getSendBufferSize() > 1_000_000, "the socket took everything"
    assert sender._TcpConnection__writeBuffer is buffer, "appending copied the backlog"
    before = sender.getSendBufferSize()
    receiver._TcpConnection__tryReadBuffer()  # room in the socket: a partial write
    sender._TcpConnection__trySendBuffer()
    assert 0 < sender.getSendBufferSize() < before
    assert sender._TcpConnection__writeBuffer is buffer, "a partial write copied the rest"


def test_frames_are_parsed_one_at_a_time_without_copying_the_rest(pair) -> None:
    sender, receiver = pair
    sent = _messages(120)
    for m in sent:
        sender.send(m)
    _drain_into(receiver, sender)
    pending = receiver._TcpConnection__readBuffer
    got = []
    while (m := receiver._TcpConnection__processParseMessage()) is not None:
        got.append(m)
        assert receiver._TcpConnection__readBuffer is pending, "parsing copied what follows"
    assert got == sent
    assert len(pending) == 0


def test_a_garbled_frame_drops_the_connection_and_its_buffer(pair) -> None:
    sender, receiver = pair
    receiver._TcpConnection__readBuffer += struct.pack("i", 5) + b"junk!" + b"more"
    assert receiver._TcpConnection__processParseMessage() is None
    assert receiver.state == PeerConnection._DISCONNECTED
    assert len(receiver._TcpConnection__readBuffer) == 0


def test_a_negative_length_prefix_drops_the_connection(pair) -> None:
    sender, receiver = pair
    receiver._TcpConnection__readBuffer += struct.pack("i", -3) + b"x" * 10
    assert receiver._TcpConnection__processParseMessage() is None
    assert receiver.state == PeerConnection._DISCONNECTED


def test_a_partial_frame_waits_for_the_rest(pair) -> None:
    sender, receiver = pair
    sender.send({"a": 1})
    _drain_into(receiver, sender)
    whole = bytes(receiver._TcpConnection__readBuffer)
    receiver._TcpConnection__readBuffer = whole[:-1]
    assert receiver._TcpConnection__processParseMessage() is None
    receiver._TcpConnection__readBuffer += whole[-1:]
    assert receiver._TcpConnection__processParseMessage() == {"a": 1}


def test_pysyncobj_makes_every_peer_connection_of_this_class() -> None:
    assert transport_module.TcpConnection is PeerConnection  # the ones it dials
    assert tcp_server_module.TcpConnection is PeerConnection  # the ones it accepts


def test_a_slow_handler_does_not_time_out_its_own_connection(pair, monkeypatch) -> None:
    """One READ event reads everything the socket holds, then handles its frames one by one;
    pysyncobj stamped the last-read time once per read, so a follower slow to handle a burst
    of snapshot chunks (a throttled disk) timed out its OWN connection when it acknowledged
    one of them, and the leader restarted the snapshot from zero (probe: 0.3 s/MiB, 13 such
    disconnects in 30 s, never caught up). A frame handled counts as a read."""
    sender, receiver = pair
    now = [tcp_connection_module.monotonicTime()]
    clock = lambda: now[0]  # noqa: E731
    monkeypatch.setattr(tcp_connection_module, "monotonicTime", clock)
    monkeypatch.setattr(PeerConnection, "_read_clock", staticmethod(clock), raising=False)
    receiver._TcpConnection__timeout = 1.4  # connectionTimeout at the default election timeout
    handled = []

    def handle_slowly(message) -> None:  # 0.6 s per chunk, then its acknowledgement
        now[0] += 0.6
        handled.append(message["i"])
        receiver.send({"type": "sk_snapshot_chunk_ack"})

    receiver.setOnMessageReceivedCallback(handle_slowly)
    for m in _messages(4):
        sender.send(m)
    sender._TcpConnection__trySendBuffer()
    receiver._TcpConnection__processConnection(receiver.fileno(), _READ)
    assert receiver.state != PeerConnection._DISCONNECTED, (
        f"the receiver dropped its own connection after handling chunks {handled}"
    )
    assert handled == [0, 1, 2, 3]
