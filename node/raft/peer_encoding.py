"""One encoding of an AppendEntries message for every follower of a send pass.

pysyncobj's TcpConnection.send turns each message into
    length | encrypt(zlib(pickle((rand_key, message))))
once per connection. In steady state the leader sends every follower the same
append_entries message (same term, commit index, prevLogIdx/prevLogTerm and entries),
so the pickle and deflate of the message itself, the expensive part, are the same
work repeated; only the connection's rand_key differs.

What is shared, and what is not:
- Shared (SharedBody, encoded once per message content per send pass): the pickle of the
  message, and its deflate.
- Per connection: the 32-byte rand_key (pysyncobj's per-connection replay protection: a
  message is accepted only with the key its receiver sent on that connection), the
  AES-GCM seal (node/raft/peers.py: random nonce per message, timestamp checked per
  connection) and the length prefix. Sealing stays per connection on purpose: a sealed
  message carries the rand_key of one connection and must not be valid on another, and
  GCM costs ~8 us per message. Authentication is not weakened in any way.

Wire format: unchanged, byte for byte decodable by pysyncobj's receiver (old nodes
included): after decryption it is one zlib stream whose content is a pickle that loads
to (rand_key, message). It is assembled from pieces:
- pickle: PROTO 5 | SHORT_BINBYTES rand_key | the message's own pickle without its
  PROTO header and with its final STOP replaced by TUPLE2 | STOP. The rand_key is not
  memoized, so the memo indices of the message's pickle are the same as when it is
  pickled alone; frame lengths are unchanged (TUPLE2 takes STOP's byte).
- deflate (RFC 1951): a stored block holding the prefix, the message's deflate blocks
  (none final, ended byte-aligned by Z_SYNC_FLUSH, no reference before their own start),
  then a final stored block holding the suffix; zlib header and the Adler-32 of the whole
  (combined from the pieces', RFC 1950) around it. This is how parallel deflaters
  concatenate independently compressed pieces.

Cache lifetime: one PassEncoder per leader send pass (syncobj._SyncObj's
__sendAppendEntries), dropped when the pass ends, so bytes are never reused once the log,
the term or the commit index can have changed. Within a pass the leader's log does not
change, so (prevLogIdx, number of entries) names the entries; the key adds the term,
commit index, prevLogTerm and the last entry's (index, term) anyway. Chunked
('transmission') and snapshot ('serialized') messages are encoded the usual way.

Measured on 2 cores shared with other work (indicative only): the pickle + deflate of a
small message (a few entries, ~2 KB) costs 40-90 us of process time, nearly all zlib's
set-up, and was paid once per follower; a frame for one more follower costs a few us.
benchmarks/cpu_per_op.py, puts of 256 B at 64 clients, base and this change alternated
three times (9 windows of 5 s each): leader 204 -> 198 us/put, followers 86 -> 82 (the
proposer puts several puts in one entry, so the per-entry saving is spread over them);
batches of 64 puts at 8 clients: leader 87 -> 83, followers 60 -> 56-58 (this change with
log.py's ENTRY_COMMAND and apply.op_digest's). Spreads overlap: a quiet machine must
confirm.
"""

from __future__ import annotations

import pickle
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

_PROTO5 = b"\x80\x05"
_SHORT_BINBYTES = b"C"
_TUPLE2_STOP = b"\x86."
_STOP = b"."
_ZLIB_HEADER = zlib.compress(b"", 3)[:2]
_ADLER_BASE = 65521
_WBITS_RAW = -15


@dataclass(frozen=True, slots=True)
class SharedBody:
    """The parts of a message's encoding that do not depend on the connection."""

    deflated: bytes  # raw deflate blocks of `size` bytes of pickle, none final
    adler: int  # Adler-32 of those bytes
    size: int


def adler32_combine(adler1: int, adler2: int, len2: int) -> int:
    """Adler-32 of A + B from adler32(A), adler32(B) and len(B) (as zlib's own)."""
    rem = len2 % _ADLER_BASE
    sum1 = adler1 & 0xFFFF
    sum2 = (rem * sum1) % _ADLER_BASE
    sum1 += (adler2 & 0xFFFF) + _ADLER_BASE - 1
    sum2 += (adler1 >> 16) + (adler2 >> 16) + _ADLER_BASE - rem
    sum1 %= _ADLER_BASE
    sum2 %= _ADLER_BASE
    return (sum2 << 16) | sum1


def _stored_block(data: bytes, final: bool) -> bytes:
    # Byte-aligned stored block: header bits (BFINAL, BTYPE=00) padded to a byte, LEN, NLEN.
    assert len(data) <= 0xFFFF
    return bytes([1 if final else 0]) + struct.pack("<HH", len(data), len(data) ^ 0xFFFF) + data


def encode_body(message: object, protocol: int, level_for: Callable[[int], int]) -> SharedBody:
    """Pickle `message` once (protocol >= 4, as the receiver's pickle.loads reads any) and
    deflate it at level_for(its size): the shared middle of every connection's encoding."""
    assert protocol >= 4  # the protocol header is replaced by our own PROTO 5
    data = pickle.dumps(message, protocol=protocol)
    assert data[:1] == b"\x80" and data[-1:] == _STOP
    body = data[2:-1] + b"\x86"  # no PROTO header; TUPLE2 in STOP's place
    c = zlib.compressobj(level_for(len(data)), zlib.DEFLATED, _WBITS_RAW)
    return SharedBody(c.compress(body) + c.flush(zlib.Z_SYNC_FLUSH), zlib.adler32(body), len(body))


def frame(rand_key: bytes, shared: SharedBody) -> bytes:
    """The zlib stream pysyncobj's receiver expects: content pickle((rand_key, message))."""
    prefix = _PROTO5 + _SHORT_BINBYTES + bytes([len(rand_key)]) + rand_key
    adler = adler32_combine(zlib.adler32(prefix), shared.adler, shared.size)
    adler = adler32_combine(adler, zlib.adler32(_STOP), 1)
    return b"".join(
        (
            _ZLIB_HEADER,
            _stored_block(prefix, final=False),
            shared.deflated,
            _stored_block(_STOP, final=True),
            struct.pack(">I", adler),
        )
    )


def message_key(message: object) -> tuple | None:
    """What makes two append_entries messages of one send pass identical; None for a
    message not shared (anything else, chunked or snapshot transfers)."""
    if not isinstance(message, dict) or message.get("type") != "append_entries":
        return None
    entries = message.get("entries")
    if not isinstance(entries, list) or "transmission" in message:
        return None
    last = (entries[-1][1], entries[-1][2]) if entries else None
    return (
        message["term"],
        message["commit_index"],
        message["prevLogIdx"],
        message["prevLogTerm"],
        len(entries),
        last,
    )


class PassEncoder:
    """The shared encodings of one leader send pass (create one per pass, then drop it).
    `level_for(size)` is the deflate level of a pickle of `size` bytes.

    Kept for reuse: encodings under `keep_below` bytes, at most MAX_KEPT of them. A pass
    sends a lagging follower its whole backlog, so an unbounded cache would hold a second
    copy of it (its write buffer holds one); large messages are stored, not deflated, so
    encoding one again is a copy, not zlib's work."""

    MAX_KEPT = 256

    def __init__(self, protocol: int, level_for: Callable[[int], int], keep_below: int):
        self._protocol = protocol
        self._level_for = level_for
        self._keep_below = keep_below
        self._bodies: dict[tuple, SharedBody] = {}
        self.encoded = 0  # bodies pickled and deflated (tests and metrics)
        self.reused = 0

    def body(self, message: object) -> SharedBody | None:
        key = message_key(message)
        if key is None:
            return None
        shared = self._bodies.get(key)
        if shared is None:
            shared = encode_body(message, self._protocol, self._level_for)
            if shared.size < self._keep_below and len(self._bodies) < self.MAX_KEPT:
                self._bodies[key] = shared
            self.encoded += 1
        else:
            self.reused += 1
        return shared


class SharedSendMixin:
    """(with syncobj._PeerTransport) send(): an append_entries message of a leader's send
    pass goes out with the pass's shared encoding (PassEncoder) under the connection's own
    rand_key and seal; everything else through pysyncobj's TcpConnection.send.
    The combining class sets _CONNECTED (pysyncobj's CONNECTION_STATE.CONNECTED) and
    _seal_clock (the clock TcpConnection.send stamps seals with: pysyncobj's monotonic,
    CLOCK_MONOTONIC_RAW). A receiver drops the connection when a seal's whole-second stamp
    goes back: stamped with time.monotonic (another clock), a shared message and a plain one
    sent around a second boundary could arrive out of stamp order; the connection dropped
    and the read rounds and entries on it were lost (a linearizable read at one client
    waited 5 s, in 1 of 2 runs of 5 s)."""

    _CONNECTED: int
    _seal_clock: Callable[[], float]

    def send(self, node, message) -> bool:
        encoder = getattr(self._syncObj, "send_pass", None)
        conn = self._connections.get(node)
        if (
            encoder is None
            or conn is None
            or conn.state != self._CONNECTED
            or not conn.sendRandKey
            or self._send_random_sleep_duration
        ):
            return super().send(node, message)
        shared = encoder.body(message)
        if shared is None:
            return super().send(node, message)
        data = frame(conn.sendRandKey, shared)
        if conn.encryptor:
            data = conn.encryptor.encrypt_at_time(data, int(self._seal_clock()))
        # What TcpConnection.send does with the bytes it made.
        conn._TcpConnection__writeBuffer += struct.pack("i", len(data)) + data
        conn._TcpConnection__trySendBuffer()
        return conn.state == self._CONNECTED
