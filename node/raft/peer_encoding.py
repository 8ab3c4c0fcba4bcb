"""The raft peers' wire format (its home: docs/protocol.md points here), and one encoding
of an AppendEntries message for every follower of a send pass.

Wire format, version 2 (every node of a cluster must run the same version):

    frame   = length | sealed
    length  = 4 bytes, native int (pysyncobj's prefix): the size of `sealed`
    sealed  = AES-GCM seal of `plain` (peers.py: version | timestamp | nonce | ciphertext)
    plain   = 0x02 | msgpack([rand_key, message])    once the connection exchanged keys
            | 0x02 | msgpack(message)                 the key exchange itself (a bare key)

`message` is what pysyncobj and our mixins send: a map with str keys ("type" and the
rest), or on a new connection a bare value (the 32-byte rand_key, then the node's address
string). msgpack with bin for bytes and str for text; arrays decode as lists (tuples are
sent as arrays): pysyncobj unpacks entries with `add(*entry)` and `x, y, z = ...`, never
by type. The rand_key (pysyncobj's per-connection replay protection: a message is accepted
only with the key its receiver sent on that connection) and the seal's timestamp check are
pysyncobj's, unchanged. A value msgpack cannot encode raises PeerEncodeError in the sender
(nothing falls back to pickle: pysyncobj's tcp_connection is given no pickle or zlib at
all, see syncobj.py).

The byte after decryption is the format's version. Before version 2 a message was
zlib(pickle((rand_key, message))), whose first byte is zlib's 0x78: a node that receives
that, or any other unknown version byte, logs one error naming the peer ("upgrade all
nodes together") and drops the connection (an older node given a version-2 frame fails
its zlib.decompress and drops the connection without a word: pysyncobj logs nothing).

No deflate. zlib's set-up alone cost 40-90 us per small message, and for large entries it
does not pay on loopback: deflate + inflate of 1 MiB cost 12-18 ms of CPU for JSON-like
text (ratio 0.25-0.30) and ~30 ms for random bytes, against ~1 ms for sealing, opening and
moving the whole MiB through a loopback socket (16 KiB: 0.24-0.42 ms against 0.04 ms).
Measured with process_time, /tmp/codec/deflate_pays.py of the change (in its report).

Sharing: in steady state the leader sends every follower the same append_entries message
(same term, commit index, prevLogIdx/prevLogTerm and entries), so it is packed once per
send pass (PassEncoder) and handed to each connection as a PackedMessage; the connection
prefixes the array header and its own rand_key (msgpack of [k, m] is 0x92, then k's
msgpack, then m's: the same bytes as packing the pair) and seals per connection. Sealing
stays per connection on purpose: a sealed message carries the rand_key of one connection
and must not be valid on another. Snapshot ('serialized') messages are packed per
connection. pysyncobj's chunked entries ('transmission': a pickle) are never sent, and
dropped unread when received (pickle_guard.py); nothing in this format is ever unpickled.

Measured (process time, in process, base ee342da vs this format, 3 alternated runs, medians;
2 shared, loaded cores): a leader's send pass of an append_entries to 2 followers (encode
once, seal twice) 47.9 -> 9.1 us for 1 entry of ~400 B, 617 -> 39 us for 64 such entries;
a follower's open + decode of it 13.9 -> 6.4 us and 133 -> 24 us; a next_node_idx reply
14.8 -> 5.9 us to encode and seal, 8.1 -> 5.2 us to open and decode. Bytes: 639 -> 584 and
24,091 -> 27,802 (entries of random values; deflate had saved 13% of the larger).
A put at one client is 2 passes on the leader (the entry, then the commit index) and 2
replies from each follower (counted on 3 in-process nodes, 200 puts: leader 4 frames sent,
4 opened, 2.08 packs per put; each follower 2 and 2): ~90 us less CPU per put on the
leader and ~33 us on each follower.

Cache lifetime: one PassEncoder per leader send pass (syncobj.PatchedSyncObj's
__sendAppendEntries), dropped when the pass ends, so bytes are never reused once the log,
the term or the commit index can have changed. Within a pass the leader's log does not
change, so (prevLogIdx, number of entries) names the entries; the key adds the term,
commit index, prevLogTerm and the last entry's (index, term) anyway.
"""

from __future__ import annotations

import logging
import math
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgpack

log = logging.getLogger("statekeeper.raft")

WIRE_VERSION = 2
_VERSION = bytes([WIRE_VERSION])
_ZLIB_HEADER_BYTE = 0x78  # the first byte of every message of the pickle + zlib format
_PAIR = b"\x92"  # msgpack: an array of two, [rand_key, message]
_LENGTH = struct.Struct("i")  # pysyncobj's frame prefix: native int, the frame's size
REFUSAL_LOG_REPEAT_SECONDS = 60.0  # an older node redials every 0.3 s


class PeerEncodeError(TypeError):
    """A peer message holds a value msgpack cannot encode (a bug in the sender)."""


class PeerWireVersionError(ValueError):
    """A peer speaks another wire format version."""


@dataclass(frozen=True, slots=True)
class PackedMessage:
    """A message already packed (msgpack) once for several connections."""

    packed: bytes


def pack(message: object) -> bytes:
    """msgpack of one peer message; PeerEncodeError if it holds anything msgpack cannot
    encode (never a fallback)."""
    try:
        return msgpack.packb(message, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as e:
        kind = message.get("type") if isinstance(message, dict) else type(message).__name__
        raise PeerEncodeError(f"raft peer message {kind!r} cannot be encoded: {e}") from e


def plain_frame(rand_key: bytes | None, packed: bytes) -> bytes:
    """What is sealed: VERSION | msgpack([rand_key, message]) (VERSION | msgpack(message)
    before the key exchange), from the message's msgpack."""
    if rand_key:
        return b"".join((_VERSION, _PAIR, msgpack.packb(rand_key, use_bin_type=True), packed))
    return _VERSION + packed


def unpack_plain(plain: bytes) -> object:
    """The value of an opened frame; PeerWireVersionError if it is not of this version."""
    if plain[:1] != _VERSION:
        raise PeerWireVersionError(_version_mismatch(plain[:1]))
    return msgpack.unpackb(memoryview(plain)[1:], raw=False, strict_map_key=True)


def _version_mismatch(first: bytes) -> str:
    if first == bytes([_ZLIB_HEADER_BYTE]):
        theirs = "the old pickle + zlib peer wire format (before version 2)"
    elif first:
        theirs = f"peer wire format version {first[0]}"
    else:
        theirs = "an empty message"
    return (
        f"it speaks {theirs}, this node speaks version {WIRE_VERSION}: every node must run "
        "the same peer wire format version; upgrade all nodes together "
        "(docs/protocol.md, 'Journal format and upgrades')"
    )


_UNANSWERED = (
    "it closed the connection without answering our key exchange: it runs another peer "
    "wire format version (every node must run the same peer wire format version; upgrade "
    "all nodes together), or another cluster secret (its log then says 'failed "
    "authentication')"
)


class _RefusalLog:
    """One line per peer host and reason (at `level`); the same again within
    REFUSAL_LOG_REPEAT_SECONDS at DEBUG."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], float] = {}

    def refused(
        self,
        peer: str,
        why: str,
        level: int = logging.ERROR,
        what: str = "dropped the raft peer connection with",
    ) -> None:
        key = (peer.rsplit(":", 1)[0], why)
        now = time.monotonic()
        if now - self._last.get(key, -math.inf) < REFUSAL_LOG_REPEAT_SECONDS:
            level = logging.DEBUG
        else:
            self._last[key] = now
        log.log(level, "%s %s: %s", what, peer, why)


refusals = _RefusalLog()


class PeerCodecMixin:
    """(with syncobj.PeerConnection) pysyncobj's TcpConnection.send and the decoding half
    of its parser, in the format above. conn_buffers.InPlaceBuffersMixin cuts the frames
    and hands each one (without its length prefix) to open_frame. The combining class sets
    _seal_clock (pysyncobj's monotonic, CLOCK_MONOTONIC_RAW: a receiver drops the connection
    when a seal's whole-second stamp goes back, so every seal takes the same clock) and
    _CONNECTED (pysyncobj's CONNECTION_STATE.CONNECTED).

    A node of an older version drops a connection it cannot read without a word, so when
    this node dials it (a node dials the peers whose address sorts below its own), neither
    side would say why they never connect: a dialled connection that the peer closes (or
    that times out) before it answered our key exchange is logged (WARNING) as that.
    _TlsConnection turns this off (warn_unanswered_dial): it logs its own unanswered dial."""

    _seal_clock: Callable[[], float]
    _CONNECTED: int
    warn_unanswered_dial = True
    _sk_unanswered = False  # a dial of ours that the peer has not answered yet
    sendRandKey: bytes | None
    recvRandKey: bytes | None
    recvLastTimestamp: int
    encryptor: object

    def send(self, message) -> None:
        packed = message.packed if type(message) is PackedMessage else pack(message)
        data = plain_frame(self.sendRandKey, packed)
        if self.encryptor:
            data = self.encryptor.encrypt_at_time(data, int(self._seal_clock()))
        out = self._TcpConnection__writeBuffer
        out += _LENGTH.pack(len(data))
        out += data
        self._TcpConnection__writeBuffer = out  # a bytearray, extended in place
        self._TcpConnection__trySendBuffer()

    def open_frame(self, token: bytes):
        """The message in one frame (length prefix cut off), or None with the connection
        dropped: pysyncobj's checks (seal, stamp order, rand_key), then our version."""
        try:
            if self.encryptor:
                stamp = self.encryptor.extract_timestamp(token)
                if stamp < self.recvLastTimestamp:
                    raise ValueError("a seal's timestamp went back")
                self.recvLastTimestamp = stamp
                token = self.encryptor.decrypt(token)
            message = unpack_plain(token)
            if self.recvRandKey:
                rand_key, message = message
                if rand_key != self.recvRandKey:
                    raise ValueError("wrong rand_key")
        except PeerWireVersionError as e:
            self._sk_unanswered = False  # said why already
            refusals.refused(self._peer_name(), str(e))
            self.disconnect()
            return None
        except Exception:  # pysyncobj's parser drops the connection on anything
            self._sk_unanswered = False
            self.disconnect()
            return None
        self._sk_unanswered = False
        return message

    def connect(self, host, port):
        self._sk_unanswered = self.warn_unanswered_dial
        return super().connect(host, port)  # type: ignore[misc]

    def disconnect(self):
        if self._sk_unanswered and self.state == self._CONNECTED:
            refusals.refused(self._peer_name(), _UNANSWERED, logging.WARNING)
        self._sk_unanswered = False
        return super().disconnect()  # type: ignore[misc]

    def _peer_name(self) -> str:
        try:
            host, port = self._TcpConnection__socket.getpeername()[:2]
            return f"{host}:{port}"
        except (OSError, TypeError, ValueError, AttributeError):
            return "an unknown address"


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

    Kept for reuse: encodings under `keep_below` bytes, at most MAX_KEPT of them. A pass
    sends a lagging follower its whole backlog, so an unbounded cache would hold a second
    copy of it (its write buffer holds one); packing a large message again is a copy."""

    MAX_KEPT = 256

    def __init__(self, keep_below: int = 64 * 1024):
        self._keep_below = keep_below
        self._kept: dict[tuple, PackedMessage] = {}
        self.encoded = 0  # messages packed (tests and metrics)
        self.reused = 0

    def packed(self, message: object) -> PackedMessage | None:
        key = message_key(message)
        if key is None:
            return None
        shared = self._kept.get(key)
        if shared is None:
            shared = PackedMessage(pack(message))
            if len(shared.packed) < self._keep_below and len(self._kept) < self.MAX_KEPT:
                self._kept[key] = shared
            self.encoded += 1
        else:
            self.reused += 1
        return shared


class SharedSendMixin:
    """(with syncobj.PeerTransport) send(): an append_entries message of a leader's send
    pass goes out as the pass's PackedMessage (packed once), which each connection frames
    with its own rand_key and seals (PeerCodecMixin.send); everything else is packed by
    the connection."""

    def send(self, node, message) -> bool:
        encoder = getattr(self._syncObj, "send_pass", None)
        if encoder is not None:
            message = encoder.packed(message) or message
        return super().send(node, message)  # type: ignore[misc]
