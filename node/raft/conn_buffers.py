"""Peer connection buffers that grow and drain in place (with syncobj.PeerConnection).

pysyncobj's TcpConnection keeps its write and read buffers as `bytes`:
- send() appends each message with `buffer += data`: a copy of the whole backlog per
  message;
- after every partial socket write it keeps `buffer[sent:]`: the backlog copied again;
- every recv() is appended with `buffer += incoming` (a multi-MiB message arrives in
  many pieces: a copy of all that came before per piece);
- after parsing a message it keeps `buffer[4 + size:]`: every message still buffered
  behind it copied again.
Each is quadratic in the backlog, and all of it runs on the node's only loop. Measured
(RESULTS.md, the 10M-key point): a leader streaming a 1.47 GB snapshot to a follower
spent 30% of its samples in the send append and 11% in the partial-write slice (py-spy,
`-r 50 --nonblocking`, 30 s), the loop stalled 2.0-5.3 s at a time, leadership changed
in bursts (terms 1 -> 31 while loading 9M keys) and the snapshot crossed at ~1 MB/s.

Here both buffers are bytearrays, appended to in place and consumed from the front with
`del buffer[:n]` (CPython moves the start of a bytearray instead of copying the rest).
pysyncobj's own code keeps running unchanged: its two buffer attributes are properties
over the bytearrays, so `buffer += data` extends in place and a plain assignment
(`bytes()` on connect and disconnect) replaces the bytearray. Overridden:
- __processSend: the socket write, consuming what was sent from the front;
- __processParseMessage: one complete frame at a time is cut from the front of the read
  buffer (what is buffered behind it is never copied) and handed, without its length
  prefix, to open_frame (peer_encoding.PeerCodecMixin: seal, timestamp, version, msgpack,
  rand key); each frame handed on counts as a read for the connection's timeout (below).

The timeout. pysyncobj stamps __lastReadTime once per READ event, which reads all the
socket holds (many 1 MiB snapshot chunks), then handles the frames one by one; every send
(a chunk's acknowledgement) checks connectionTimeout against that one stamp. A follower
slower than connectionTimeout (1.4 s) to handle one read's frames dropped its OWN
connection, and the leader restarted the snapshot from zero (a receiver slowed to 0.3 s
per MiB: 13 such drops in 30 s, never caught up). The time this node spends handling what
it received is not the peer's silence: each frame is stamped as it is handed on.
Nothing of the wire format is decided here (peer_encoding.py). Imports nothing of
pysyncobj: syncobj.py combines it with TcpConnection.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable

_LENGTH = struct.Struct("i")  # pysyncobj's frame prefix: native int, the frame's size


def _as_bytearray(value) -> bytearray:
    return value if isinstance(value, bytearray) else bytearray(value)


class InPlaceBuffersMixin:
    """(with syncobj.PeerConnection) pysyncobj's TcpConnection without its quadratic
    buffer copies (module docstring)."""

    _read_clock: Callable[[], float]  # pysyncobj's clock of __lastReadTime
    _sk_out: bytearray
    _sk_in: bytearray | bytes
    open_frame: Callable[[bytes], object]  # the message in one frame, or None (dropped)

    def _get_out(self) -> bytearray:
        return self._sk_out

    def _set_out(self, value) -> None:
        self._sk_out = _as_bytearray(value)

    def _get_in(self):
        return self._sk_in

    def _set_in(self, value) -> None:
        self._sk_in = _as_bytearray(value)

    # pysyncobj's private attributes, as its name mangling spells them.
    _TcpConnection__writeBuffer = property(_get_out, _set_out)
    _TcpConnection__readBuffer = property(_get_in, _set_in)

    def _TcpConnection__processSend(self) -> bool:
        out = self._sk_out
        if not out:
            return False
        try:
            sent = self._TcpConnection__socket.send(out)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if sent < 0:
            self.disconnect()
            return False
        if sent == 0:
            return False
        del out[:sent]
        return True

    def _TcpConnection__processParseMessage(self):
        pending = self._sk_in
        if len(pending) < _LENGTH.size:
            return None
        end = _LENGTH.size + _LENGTH.unpack_from(pending)[0]
        if end < _LENGTH.size:  # a negative size: garbage, never a peer's frame
            self.disconnect()
            return None
        if len(pending) < end:
            return None
        frame = bytes(memoryview(pending)[_LENGTH.size : end])
        del pending[:end]
        self._TcpConnection__lastReadTime = self._read_clock()  # the timeout (docstring)
        # A rejected frame disconnects, which replaces the read buffer: nothing is kept.
        return self.open_frame(frame)
