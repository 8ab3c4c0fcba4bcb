"""node/raft/peer_encoding.py: one pickle + deflate per AppendEntries, decodable exactly as
pysyncobj's receiver decodes every peer message."""

from __future__ import annotations

import io
import os
import pickle
import random
import struct
import zlib

import pytest

from node.raft import peer_encoding as pe
from node.raft.peers import _AuthenticatingEncryptor


def _level(size: int) -> int:
    return 3 if size < 64 * 1024 else 0


def _message(n: int, size: int, commit: int = 100) -> dict:
    rng = random.Random(n * 1000 + size)
    return {
        "type": "append_entries",
        "term": 3,
        "commit_index": commit,
        "entries": [(b"\x01" + rng.randbytes(size), 101 + i, 3) for i in range(n)],
        "prevLogIdx": 100,
        "prevLogTerm": 3,
    }


def _loads_both_ways(data: bytes) -> object:
    """pickle.loads (what pysyncobj calls) and the pure-Python unpickler (its fallback)."""
    fast = pickle.loads(data)
    slow = pickle._Unpickler(io.BytesIO(data)).load()  # type: ignore[attr-defined]
    assert fast == slow
    return fast


@pytest.mark.parametrize(
    ("n", "size"),
    [(0, 0), (1, 10), (3, 300), (50, 1000), (1, 70 * 1024), (3, 200 * 1024)],
)
def test_frame_is_a_zlib_stream_of_the_pickled_pair(n: int, size: int) -> None:
    message = _message(n, size)
    key = os.urandom(32)
    data = pe.frame(key, pe.encode_body(message, 5, _level))
    assert _loads_both_ways(zlib.decompress(data)) == (key, message)


def test_the_same_body_serves_different_keys() -> None:
    message = _message(4, 256)
    shared = pe.encode_body(message, 5, _level)
    k1, k2 = os.urandom(32), os.urandom(32)
    assert pickle.loads(zlib.decompress(pe.frame(k1, shared))) == (k1, message)
    assert pickle.loads(zlib.decompress(pe.frame(k2, shared))) == (k2, message)


def test_large_messages_are_stored_small_ones_deflated() -> None:
    small = _message(1, 100)
    small["entries"][0] = (b"a" * 2000, 101, 3)
    large = _message(1, 100)
    large["entries"][0] = (b"a" * 100_000, 101, 3)
    assert len(pe.encode_body(small, 5, _level).deflated) < 200
    assert len(pe.encode_body(large, 5, _level).deflated) > 100_000


def test_adler32_combine_matches_zlib() -> None:
    rng = random.Random(7)
    for _ in range(200):
        a, b = rng.randbytes(rng.randrange(0, 3000)), rng.randbytes(rng.randrange(0, 70_000))
        combined = pe.adler32_combine(zlib.adler32(a), zlib.adler32(b), len(b))
        assert combined == zlib.adler32(a + b)


def test_message_key_names_only_shareable_messages() -> None:
    m = _message(2, 10)
    assert pe.message_key(m) == pe.message_key(_message(2, 10))
    assert pe.message_key(m) != pe.message_key(_message(2, 10, commit=101))
    assert pe.message_key(m) != pe.message_key(_message(3, 10))
    assert pe.message_key({**m, "entries": []}) is not None  # a heartbeat
    assert pe.message_key({**m, "transmission": "start", "data": b"x"}) is None
    assert pe.message_key({"type": "append_entries", "term": 3, "serialized": None}) is None
    assert pe.message_key({"type": "next_node_idx"}) is None
    assert pe.message_key(("not", "a dict")) is None


def test_pass_encoder_encodes_each_distinct_message_once() -> None:
    enc = pe.PassEncoder(5, _level, 64 * 1024)
    a1, a2, b = _message(2, 10), _message(2, 10), _message(1, 10)
    assert enc.body(a1) is enc.body(a2)
    assert enc.body(b) is not enc.body(a1)
    assert enc.body({"type": "request_vote"}) is None
    assert (enc.encoded, enc.reused) == (2, 2)


def test_pass_encoder_keeps_only_small_encodings() -> None:
    # A lagging follower gets its whole backlog in one pass: no second copy of it is kept.
    enc = pe.PassEncoder(5, _level, 64 * 1024)
    large = _message(1, 70 * 1024)
    assert enc.body(large) is not enc.body(large)
    assert (enc.encoded, enc.reused) == (2, 0)
    few = pe.PassEncoder(5, _level, 64 * 1024)
    few.MAX_KEPT = 1
    a, b = _message(1, 10), _message(2, 10)
    few.body(a), few.body(b), few.body(b)
    assert (few.encoded, few.reused) == (3, 0)


class _Conn:
    """The parts of pysyncobj's TcpConnection SharedSendMixin touches."""

    def __init__(self, encryptor) -> None:
        self.state = "connected"
        self.sendRandKey = os.urandom(32)
        self.encryptor = encryptor
        self._TcpConnection__writeBuffer = b""
        self.flushed = 0

    def _TcpConnection__trySendBuffer(self) -> None:
        self.flushed += 1


class _Base:
    def __init__(self) -> None:
        self.fallback: list = []

    def send(self, node, message) -> bool:
        self.fallback.append((node, message))
        return True


class _Transport(pe.SharedSendMixin, _Base):
    _CONNECTED = "connected"
    _seal_clock = staticmethod(lambda: 1000.5)

    def __init__(self, conns, encoder) -> None:
        super().__init__()
        self._connections = conns
        self._send_random_sleep_duration = 0
        self._syncObj = type("S", (), {"send_pass": encoder})()


@pytest.fixture(scope="module")
def encryptor() -> _AuthenticatingEncryptor:
    return _AuthenticatingEncryptor("test-secret")


def _receive(conn: _Conn, encryptor: _AuthenticatingEncryptor) -> object:
    # What pysyncobj's TcpConnection.__processParseMessage does with the bytes.
    buf = conn._TcpConnection__writeBuffer
    (n,) = struct.unpack("i", buf[:4])
    assert len(buf) == 4 + n
    token = buf[4:]
    encryptor.extract_timestamp(token)
    rand_key, message = pickle.loads(zlib.decompress(encryptor.decrypt(token)))
    assert rand_key == conn.sendRandKey
    return message


def test_each_follower_gets_its_own_key_and_seal(encryptor) -> None:
    conns = {"b": _Conn(encryptor), "c": _Conn(encryptor)}
    enc = pe.PassEncoder(5, _level, 64 * 1024)
    t = _Transport(conns, enc)
    message = _message(3, 256)
    assert t.send("b", dict(message)) and t.send("c", dict(message))
    assert _receive(conns["b"], encryptor) == message
    assert _receive(conns["c"], encryptor) == message
    assert conns["b"]._TcpConnection__writeBuffer != conns["c"]._TcpConnection__writeBuffer
    assert (enc.encoded, enc.reused, t.fallback) == (1, 1, [])
    assert conns["b"].flushed == conns["c"].flushed == 1


def test_outside_a_pass_and_for_other_messages_pysyncobj_encodes(encryptor) -> None:
    conns = {"b": _Conn(encryptor)}
    t = _Transport(conns, None)
    t.send("b", _message(1, 10))
    t._syncObj.send_pass = pe.PassEncoder(5, _level, 64 * 1024)
    t.send("b", {"type": "request_vote"})
    t.send("x", _message(1, 10))  # no connection
    conns["b"].state = "disconnected"
    t.send("b", _message(1, 10))
    assert len(t.fallback) == 4
    assert conns["b"]._TcpConnection__writeBuffer == b""


def test_shared_seals_are_stamped_with_the_transports_clock(encryptor) -> None:
    """pysyncobj stamps seals with CLOCK_MONOTONIC_RAW and a receiver drops the connection
    when a stamp goes back; stamped with time.monotonic, shared messages and plain ones
    crossed a second boundary out of order (a read round lost: a 5 s stall)."""
    conns = {"b": _Conn(encryptor)}
    t = _Transport(conns, pe.PassEncoder(5, _level, 64 * 1024))
    t._seal_clock = lambda: 7.9  # far from time.monotonic() on any machine up > 8 s
    t.send("b", _message(3, 16))
    token = conns["b"]._TcpConnection__writeBuffer[4:]
    assert encryptor.extract_timestamp(token) == 7


def test_the_transport_stamps_with_pysyncobjs_clock() -> None:
    from pysyncobj import tcp_connection

    from node.raft.syncobj import _PeerTransport

    assert _PeerTransport._seal_clock is tcp_connection.monotonicTime
