"""node/raft/peer_encoding.py: the raft peers' wire format (version byte | msgpack, sealed),
its refusal of other versions, and one packing per AppendEntries for all followers; over
real PeerConnection pairs on a socketpair, without raft."""

from __future__ import annotations

import logging
import os
import pickle
import random
import socket
import zlib

import msgpack
import pytest
from pysyncobj.config import FAIL_REASON
from pysyncobj.node import TCPNode

from statekeeper.node.raft import peer_encoding as pe
from statekeeper.node.raft.install import CHUNK_OFFSET, SNAPSHOT_CHUNK_ACK
from statekeeper.node.raft.members import Member, encode_change
from statekeeper.node.raft.prevote import PREVOTE_REQUEST, PREVOTE_RESPONSE
from statekeeper.node.raft.readindex import READ_INDEX_ACK, READ_INDEX_REQUEST
from statekeeper.node.raft.syncobj import NEXT_NODE_IDX, PeerConnection, PeerTransport
from tests.raft_peer_helpers import NullPoller, peer_encryptor


@pytest.fixture(scope="module")
def encryptor():
    return peer_encryptor()


def _connected_pair(encryptor, keyed: bool = True):
    a, b = socket.socketpair()
    for s in (a, b):
        s.setblocking(False)
    sender = PeerConnection(NullPoller(), socket=a, recvBufferSize=1 << 20)
    receiver = PeerConnection(NullPoller(), socket=b, recvBufferSize=1 << 20)
    sender.encryptor = receiver.encryptor = encryptor
    if keyed:  # as after pysyncobj's key exchange: each side sends the key the other chose
        sender.sendRandKey = receiver.recvRandKey = os.urandom(32)
    return sender, receiver, (a, b)


@pytest.fixture
def pair(encryptor):
    sender, receiver, socks = _connected_pair(encryptor)
    yield sender, receiver
    for s in socks:
        s.close()


def _deliver(sender, receiver) -> list:
    while sender.getSendBufferSize():
        sender._TcpConnection__trySendBuffer()
        receiver._TcpConnection__tryReadBuffer()
    receiver._TcpConnection__tryReadBuffer()
    got = []
    while (m := receiver._TcpConnection__processParseMessage()) is not None:
        got.append(m)
    return got


def _as_lists(value):
    """What msgpack gives back: tuples are arrays, decoded as lists."""
    if isinstance(value, (list, tuple)):
        return [_as_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_lists(v) for k, v in value.items()}
    return value


def _append_entries(n: int, size: int, commit: int = 100) -> dict:
    rng = random.Random(n * 1000 + size)
    return {
        "type": "append_entries",
        "term": 3,
        "commit_index": commit,
        "entries": [(b"\x00" + rng.randbytes(size), 101 + i, 3) for i in range(n)],
        "prevLogIdx": 100,
        "prevLogTerm": 3,
    }


MEMBER = Member("n3", "127.0.0.1", 7103, 7003)

# Every message pysyncobj 0.3.17 and node/raft/*.py send to a peer (grep "'type'" in
# pysyncobj/syncobj.py and '"type"' in node/raft/), with the shapes they send.
EVERY_MESSAGE = [
    _append_entries(1, 400),
    _append_entries(64, 400),
    _append_entries(0, 0),  # a heartbeat
    {**_append_entries(1, 10), "entries": [(encode_change("add", MEMBER), 101, 3)]},
    {**_append_entries(1, 10), "entries": [(b"\x01", 101, 3)]},  # a new leader's NO_OP
    {  # an entry of MAX_MESSAGE_BYTES or more, in pysyncobj's chunks
        "type": "append_entries",
        "transmission": "start",
        "data": pickle.dumps((b"\x00big", 7, 3)),
        "term": 3,
        "commit_index": 6,
        "prevLogIdx": 6,
        "prevLogTerm": 3,
    },
    {  # a snapshot chunk (Serializer.getTransmissionData's tuple; install.ChunkOffsets)
        "type": "append_entries",
        "term": 3,
        "commit_index": 9,
        "serialized": (os.urandom(1000), True, False),
        CHUNK_OFFSET: 0,
    },
    {"type": "append_entries", "term": 3, "commit_index": 9, "serialized": None},
    {"type": "request_vote", "term": 4, "last_log_index": 120, "last_log_term": 3},
    {"type": "response_vote", "term": 4},
    {"type": "timeout_now", "term": 4},
    {"type": NEXT_NODE_IDX, "next_node_idx": 121, "reset": False, "success": True, "term": 3},
    {"type": "apply_command", "command": b"\x00" + os.urandom(300), "request_id": 17},
    {"type": "apply_command", "command": b"\x00abc"},
    {"type": "apply_command_response", "request_id": 17, "log_idx": 130, "log_term": 3},
    {"type": "apply_command_response", "request_id": 18, "error": FAIL_REASON.NOT_LEADER},
    {"type": PREVOTE_REQUEST, "term": 5, "last_log_term": 3, "last_log_index": 120},
    {"type": PREVOTE_RESPONSE, "term": 5, "granted": True},
    {"type": READ_INDEX_REQUEST, "term": 3, "id": 99},
    {"type": READ_INDEX_ACK, "term": 3, "id": 99},
    {"type": SNAPSHOT_CHUNK_ACK, "term": 3},
    "127.0.0.1:7101",  # the node-address handshake (pysyncobj's _sendSelfAddress)
    "readonly",
]


# ids by position and type: the messages carry random bytes, and pytest -n 2 needs every
# worker to collect the same names.
@pytest.mark.parametrize(
    "message",
    EVERY_MESSAGE,
    ids=[f"{i}-{m['type'] if isinstance(m, dict) else m}" for i, m in enumerate(EVERY_MESSAGE)],
)
def test_every_peer_message_round_trips(pair, message) -> None:
    sender, receiver = pair
    sender.send(message)
    assert _deliver(sender, receiver) == [_as_lists(message)]


def test_the_rand_key_exchange_round_trips(encryptor) -> None:
    """pysyncobj's key exchange sends the bare 32-byte key before either side has one."""
    sender, receiver, socks = _connected_pair(encryptor, keyed=False)
    key = os.urandom(32)
    sender.send(key)
    assert _deliver(sender, receiver) == [key]
    for s in socks:
        s.close()


def test_what_pysyncobj_does_with_decoded_messages_works_on_lists(pair) -> None:
    sender, receiver = pair
    sender.send(EVERY_MESSAGE[1])
    sender.send(EVERY_MESSAGE[6])
    entries, chunk = _deliver(sender, receiver)
    added = []
    for entry in entries["entries"]:  # SyncObj: self.__raftLog.add(*entry)
        added.append((lambda command, idx, term: (command, idx, term))(*entry))
    assert added == list(EVERY_MESSAGE[1]["entries"])
    assert entries["entries"][-1][1] + 1 == 165  # nextNodeIdx = newEntries[-1][1] + 1
    data, first, last = chunk["serialized"]  # Serializer.setTransmissionData
    assert (data, first, last) == EVERY_MESSAGE[6]["serialized"]


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "x", "node": TCPNode("127.0.0.1:1")},
        {"type": "x", "ids": {1, 2}},
        {"type": "x", "big": 2**64},
    ],
)
def test_a_message_msgpack_cannot_encode_fails_loudly(pair, bad) -> None:
    sender, _ = pair
    with pytest.raises(pe.PeerEncodeError, match="'x' cannot be encoded"):
        sender.send(bad)
    assert sender.getSendBufferSize() == 0


def test_a_map_with_keys_other_than_str_or_bytes_is_refused_by_the_receiver() -> None:
    with pytest.raises(ValueError):
        pe.unpack_plain(pe.plain_frame(None, pe.pack({1.5: "x"})))


def test_pysyncobjs_own_encoding_is_never_used() -> None:
    from pysyncobj import tcp_connection

    with pytest.raises(RuntimeError, match="never pickled"):
        tcp_connection.pickle.dumps({"type": "x"})
    with pytest.raises(RuntimeError, match="never pickled"):
        tcp_connection.zlib.decompress(b"x")


def _old_format_frame(encryptor, rand_key: bytes, message) -> bytes:
    """A frame as the code before version 2 sent it (pysyncobj's TcpConnection.send)."""
    plain = zlib.compress(pickle.dumps((rand_key, message), 5), 3)
    token = encryptor.encrypt_at_time(plain, 1)
    return len(token).to_bytes(4, "little", signed=True) + token


@pytest.mark.parametrize("fmt", ["old", "unknown"])
def test_another_wire_version_is_refused_with_one_clear_error(pair, encryptor, caplog, fmt) -> None:
    sender, receiver = pair
    pe.refusals._last.clear()
    if fmt == "old":
        frame = _old_format_frame(encryptor, receiver.recvRandKey, {"type": "request_vote"})
        what = "old pickle + zlib peer wire format"
    else:
        token = encryptor.encrypt_at_time(b"\x07" + msgpack.packb([1, 2]), 1)
        frame = len(token).to_bytes(4, "little", signed=True) + token
        what = "peer wire format version 7"
    caplog.set_level(logging.DEBUG, logger="statekeeper.raft")
    receiver._TcpConnection__readBuffer += frame
    assert receiver._TcpConnection__processParseMessage() is None
    assert receiver.state == PeerConnection._DISCONNECTED
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, caplog.text
    text = errors[0].getMessage()
    assert what in text and "upgrade all nodes together" in text
    assert "every node must run the same peer wire format version" in text
    assert "dropped the raft peer connection with" in text
    # The older node redials every 0.3 s: the same refusal again is not another error.
    _, receiver2, socks = _connected_pair(encryptor)
    receiver2._TcpConnection__readBuffer += frame
    receiver2.recvRandKey = receiver.recvRandKey
    assert receiver2._TcpConnection__processParseMessage() is None
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    for s in socks:
        s.close()


def test_an_old_node_cannot_read_a_version_2_message() -> None:
    """What the code before version 2 does with our frames: zlib.decompress fails, and
    pysyncobj's parser drops the connection (silently: it logs nothing)."""
    plain = pe.plain_frame(os.urandom(32), pe.pack({"type": "request_vote", "term": 1}))
    with pytest.raises(zlib.error):
        pickle.loads(zlib.decompress(plain))


def test_a_wrong_rand_key_drops_without_a_version_error(pair, caplog) -> None:
    sender, receiver = pair
    caplog.set_level(logging.ERROR, logger="statekeeper.raft")
    sender.sendRandKey = os.urandom(32)  # not the key the receiver sent
    sender.send({"type": "response_vote", "term": 1})
    assert _deliver(sender, receiver) == []
    assert receiver.state == PeerConnection._DISCONNECTED
    assert not caplog.records


def test_a_seal_stamp_going_back_drops_the_connection(pair) -> None:
    sender, receiver = pair
    sender._seal_clock = lambda: 10.0
    sender.send({"type": "a"})
    sender._seal_clock = lambda: 9.0
    sender.send({"type": "b"})
    assert _deliver(sender, receiver) == [{"type": "a"}]
    assert receiver.state == PeerConnection._DISCONNECTED


def test_seals_are_stamped_with_pysyncobjs_clock(encryptor) -> None:
    """pysyncobj stamps seals with CLOCK_MONOTONIC_RAW and a receiver drops the connection
    when a stamp goes back: every seal must take the same clock (a shared message stamped
    with time.monotonic crossed a second boundary out of order: a 5 s stall)."""
    from pysyncobj import tcp_connection

    assert PeerConnection._seal_clock is tcp_connection.monotonicTime
    sender = PeerConnection(NullPoller())  # no socket: the frame stays in the buffer
    sender.encryptor = encryptor
    sender._seal_clock = lambda: 7.9
    sender.send({"type": "x"})
    assert encryptor.extract_timestamp(bytes(sender._TcpConnection__writeBuffer[4:])) == 7


def test_large_peer_messages_are_not_deflated_on_the_raft_thread() -> None:
    """pysyncobj deflated every peer message at level 3 on the raft thread, once per
    follower: 100-180 ms for a 3 MiB entry of incompressible bytes, which with two
    followers stopped the leader's heartbeats for ~0.4 s (an election timeout). The entry's
    bytes now go out as they are: the frame holds them verbatim."""
    conn = PeerConnection(NullPoller())  # no socket, no seal: the frame stays in the buffer
    value = os.urandom(3 * 1024 * 1024)
    conn.send({**_append_entries(0, 0), "entries": [(value, 101, 3)]})
    frame = bytes(conn._TcpConnection__writeBuffer)
    assert value in frame and len(frame) < len(value) + 200


def test_plain_frame_is_the_version_byte_then_the_pair_packed_whole() -> None:
    key = os.urandom(32)
    for message in EVERY_MESSAGE:
        packed = pe.pack(message)
        assert pe.plain_frame(key, packed) == b"\x02" + msgpack.packb((key, message))
        assert pe.plain_frame(None, packed) == b"\x02" + msgpack.packb(message)


def test_message_key_names_only_shareable_messages() -> None:
    m = _append_entries(2, 10)
    assert pe.message_key(m) == pe.message_key(_append_entries(2, 10))
    assert pe.message_key(m) != pe.message_key(_append_entries(2, 10, commit=101))
    assert pe.message_key(m) != pe.message_key(_append_entries(3, 10))
    assert pe.message_key({**m, "entries": []}) is not None  # a heartbeat
    assert pe.message_key({**m, "transmission": "start", "data": b"x"}) is None
    assert pe.message_key({"type": "append_entries", "term": 3, "serialized": None}) is None
    assert pe.message_key({"type": "next_node_idx"}) is None
    assert pe.message_key(("not", "a dict")) is None


def test_pass_encoder_packs_each_distinct_message_once() -> None:
    enc = pe.PassEncoder()
    a1, a2, b = _append_entries(2, 10), _append_entries(2, 10), _append_entries(1, 10)
    assert enc.packed(a1) is enc.packed(a2)
    assert enc.packed(b) is not enc.packed(a1)
    assert enc.packed({"type": "request_vote"}) is None
    assert (enc.encoded, enc.reused) == (2, 2)


def test_pass_encoder_keeps_only_small_encodings() -> None:
    # A lagging follower gets its whole backlog in one pass: no second copy of it is kept.
    enc = pe.PassEncoder(keep_below=64 * 1024)
    large = _append_entries(1, 70 * 1024)
    assert enc.packed(large) is not enc.packed(large)
    assert (enc.encoded, enc.reused) == (2, 0)
    few = pe.PassEncoder()
    few.MAX_KEPT = 1
    a, b = _append_entries(1, 10), _append_entries(2, 10)
    few.packed(a), few.packed(b), few.packed(b)
    assert (few.encoded, few.reused) == (3, 0)


class _Base:
    """What SharedSendMixin calls next: pysyncobj's TCPTransport.send, reduced."""

    def send(self, node, message) -> bool:
        self._connections[node].send(message)
        return True


class _Transport(pe.SharedSendMixin, _Base):
    def __init__(self, conns, encoder) -> None:
        self._connections = conns
        self._syncObj = type("S", (), {"send_pass": encoder})()


def test_the_shared_encoding_is_the_per_connection_encoding_byte_for_byte() -> None:
    # No encryptor (a seal's nonce is random) and no socket: the bytes stay in the buffers.
    shared_conn, plain_conn = PeerConnection(NullPoller()), PeerConnection(NullPoller())
    shared_conn.sendRandKey = plain_conn.sendRandKey = os.urandom(32)
    encoder = pe.PassEncoder()
    _Transport({"b": shared_conn}, encoder).send("b", _append_entries(3, 256))
    _Transport({"b": plain_conn}, None).send("b", _append_entries(3, 256))
    assert encoder.encoded == 1
    shared = bytes(shared_conn._TcpConnection__writeBuffer)
    assert shared and shared == bytes(plain_conn._TcpConnection__writeBuffer)


def test_each_follower_gets_its_own_key_and_seal(encryptor) -> None:
    senders, receivers, socks = [], [], []
    for _ in range(2):
        s, r, pair_socks = _connected_pair(encryptor)
        senders.append(s), receivers.append(r), socks.extend(pair_socks)
    encoder = pe.PassEncoder()
    transport = _Transport({"b": senders[0], "c": senders[1]}, encoder)
    message = _append_entries(3, 256)
    transport.send("b", dict(message))
    transport.send("c", dict(message))
    assert (encoder.encoded, encoder.reused) == (1, 1)
    for s, r in zip(senders, receivers, strict=True):
        assert _deliver(s, r) == [_as_lists(message)]
    # One follower's frame is not valid on the other's connection (its own rand_key).
    senders[0].send(message)
    data = bytes(senders[0]._TcpConnection__writeBuffer)
    receivers[1]._TcpConnection__readBuffer += data
    assert receivers[1]._TcpConnection__processParseMessage() is None
    for s in socks:
        s.close()


def test_the_transport_shares_through_the_peer_transport() -> None:
    assert issubclass(PeerTransport, pe.SharedSendMixin)
    assert issubclass(PeerConnection, pe.PeerCodecMixin)
