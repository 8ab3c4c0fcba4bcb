"""The simulated network: in-memory TCP connections between the nodes of one world.

pysyncobj's TcpConnection and TcpServer call the `socket` module; the simulator hands
them SimSocketModule instead (patches.py), whose sockets are SimSockets: non-blocking,
numbered with descriptors the SimSelector knows (loop.py), and owned by the Process that
made them (loop.CURRENT). What TCP guarantees is kept and nothing more:
- bytes of one connection arrive in order, exactly once, or the connection breaks;
  there is no reordering within a connection, only across connections (each send is
  delivered after its own seeded delay, never before an earlier send of its connection);
- a lost packet is a retransmission: a connection cut by a partition holds its bytes
  and delivers them when the partition heals (or the connection is reset or times out
  meanwhile, as pysyncobj's connectionTimeout does);
- connect() to an address nobody listens on is refused; across a partition its SYN is
  retransmitted (1, 3, 7, ... s) and it fails with ETIMEDOUT after 127 s, as Linux does
  with tcp_syn_retries = 6;
- a killed process's connections get a FIN after what they had sent (its kernel closes
  them); a powered-off machine's get nothing: the peer sends into silence until its own
  timeout, and once the machine is back its kernel answers old connections with a reset;
- TCP keepalive as the socket asked for it (pysyncobj sets (16, 3, 5): a probe after 16 s
  idle, every 3 s, 5 unanswered mean dead): an idle connection whose peer process is gone
  breaks with a reset at the first probe once its machine is up again, with ETIMEDOUT
  after idle + interval x count while the machine is off or cut off. Without it a
  catching-up follower (it never sends first) kept a connection to a leader that had lost
  power, and never caught up (seed 3, before this model).
Faults: partition(a, b) / heal(); reset(node) breaks every connection of a node at once.
"""

from __future__ import annotations

import errno
import random
import socket as _socket
from collections import deque
from collections.abc import Callable

from statekeeper.chaos.sim.loop import CURRENT, Process, SimLoop, context_of

SEND_BUFFER = 4 * 1024 * 1024  # as SOCKET_BUFFER_BYTES in node/raft/syncobj.py
SYN_RETRIES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)  # sums to 127 s
WORLD = context_of(None)


class SimSocketModule:
    """What pysyncobj's tcp_connection and tcp_server modules call `socket`."""

    error = OSError
    errno = errno
    inet_aton = staticmethod(_socket.inet_aton)
    inet_pton = staticmethod(_socket.inet_pton)

    def __init__(self, net: SimNetwork):
        self._net = net
        for name in dir(_socket):
            if name.isupper() and not hasattr(self, name):
                setattr(self, name, getattr(_socket, name))

    def socket(self, family=_socket.AF_INET, type=_socket.SOCK_STREAM, *args):  # noqa: A002
        return self._net.new_socket(CURRENT.get())


class SimSocket:
    def __init__(self, net: SimNetwork, fd: int, owner: Process | None):
        self.net = net
        self.fd = fd
        self.owner = owner
        self.state = "new"  # new listening connecting connected closed
        self.error = 0  # SO_ERROR
        self.peer: SimSocket | None = None
        self.inbox = bytearray()
        self.eof = False  # a FIN arrived after the inbox
        self.in_flight = 0  # bytes sent, not yet delivered
        self.queue: deque = deque()  # (bytes | None for FIN) awaiting delivery, in order
        self.last_due = 0.0
        self.address: tuple[str, int] | None = None
        self.keepalive: list = [False, 7200, 75, 9]  # on, idle s, interval s, count (Linux's)
        self.last_heard = net.loop.time()  # the peer last proved alive (data or a probe's ACK)
        self.backlog: deque = deque()  # accepted connections waiting (listening)

    # -- what the selector asks ---------------------------------------------------------
    def pollable(self) -> bool:
        return self.owner is None or (self.owner.alive and not self.owner.paused)

    def readable(self) -> bool:
        if self.state == "listening":
            return bool(self.backlog)
        return bool(self.inbox) or self.eof or bool(self.error)

    def writable(self) -> bool:
        if self.error:
            return True
        return self.state == "connected" and self.in_flight < SEND_BUFFER

    # -- the socket API pysyncobj uses --------------------------------------------------
    def fileno(self) -> int:
        return self.fd

    def setsockopt(self, level, name, value, *args) -> None:
        if name == _socket.SO_KEEPALIVE and level == _socket.SOL_SOCKET:
            self.keepalive[0] = bool(value)
        elif level == _socket.IPPROTO_TCP and name in _KEEPALIVE_SLOTS:
            self.keepalive[_KEEPALIVE_SLOTS[name]] = value

    def getsockopt(self, level, name, *args) -> int:
        if name == _socket.SO_ERROR:
            return self.error
        return 0

    def setblocking(self, flag) -> None:
        return None

    def bind(self, address) -> None:
        key = (address[0], int(address[1]))
        holder = self.net.listeners.get(key)
        if holder is not None and holder.state == "listening" and holder.pollable():
            raise OSError(errno.EADDRINUSE, "Address already in use")
        self.address = key

    def listen(self, backlog=5) -> None:
        self.state = "listening"
        self.net.listeners[self.address] = self

    def accept(self):
        if not self.backlog:
            raise BlockingIOError(errno.EAGAIN, "no connection")
        conn = self.backlog.popleft()
        return conn, ("127.0.0.1", 40000 + conn.fd)

    def connect(self, address) -> None:
        self.state = "connecting"
        self.net.start_connect(self, (address[0], int(address[1])))
        raise BlockingIOError(errno.EINPROGRESS, "connecting")

    def send(self, data) -> int:
        if self.error:
            raise OSError(self.error, _socket_strerror(self.error))
        if self.state != "connected" or self.peer is None:
            raise OSError(errno.ENOTCONN, "not connected")
        room = SEND_BUFFER - self.in_flight
        if room <= 0:
            raise BlockingIOError(errno.EAGAIN, "send buffer full")
        chunk = bytes(data[:room])
        self.net.transmit(self, chunk)
        return len(chunk)

    def recv(self, n: int) -> bytes:
        if self.inbox:
            out = bytes(self.inbox[:n])
            del self.inbox[:n]
            return out
        if self.error:
            raise OSError(self.error, _socket_strerror(self.error))
        if self.eof:
            return b""
        raise BlockingIOError(errno.EAGAIN, "nothing to read")

    def close(self) -> None:
        if self.state == "closed":
            return
        if self.state == "listening" and self.net.listeners.get(self.address) is self:
            del self.net.listeners[self.address]
        if self.state == "connected" and self.peer is not None and not self.error:
            self.net.transmit(self, None)  # FIN after what was sent
        self.state = "closed"
        self.net.forget(self)

    def shutdown(self, how) -> None:
        return None


_KEEPALIVE_SLOTS = {_socket.TCP_KEEPIDLE: 1, _socket.TCP_KEEPINTVL: 2, _socket.TCP_KEEPCNT: 3}
KEEPALIVE_SWEEP = 1.0  # s between the network's keepalive checks


def _socket_strerror(code: int) -> str:
    import os

    return os.strerror(code)


class SimNetwork:
    """Connections between simulated processes, with seeded delays and partitions."""

    def __init__(self, loop: SimLoop, rng: random.Random, node_of: Callable[[Process | None], str]):
        self.loop = loop
        self.rng = rng
        self._node_of = node_of  # a process's node id; "client" for None
        self.sockets: dict[int, SimSocket] = {}
        self.listeners: dict[tuple[str, int], SimSocket] = {}
        self._next_fd = 100_000
        self.cut: set[frozenset[str]] = set()  # pairs of node ids that cannot talk
        self.down: set[str] = set()  # powered-off machines: silence
        self.delay_ms = (0.05, 1.0)  # a send's one-way delay, uniform
        self.spike = (0.02, 5.0, 40.0)  # probability, then ms range of a delayed send
        self.bytes_delivered = 0
        self.loop.call_later(KEEPALIVE_SWEEP, self._keepalive_sweep, context=WORLD)

    def new_socket(self, owner: Process | None) -> SimSocket:
        self._next_fd += 1
        s = SimSocket(self, self._next_fd, owner)
        self.sockets[s.fd] = s
        return s

    def socket_of(self, fd: int) -> SimSocket | None:
        return self.sockets.get(fd)

    def forget(self, s: SimSocket) -> None:
        self.sockets.pop(s.fd, None)

    def _node(self, s: SimSocket) -> str:
        return self._node_of(s.owner)

    def reachable(self, a: str, b: str) -> bool:
        return frozenset((a, b)) not in self.cut and a not in self.down and b not in self.down

    def _delay(self) -> float:
        lo, hi = self.delay_ms
        ms = self.rng.uniform(lo, hi)
        p, slo, shi = self.spike
        if self.rng.random() < p:
            ms += self.rng.uniform(slo, shi)
        return ms / 1000.0

    # -- connecting -----------------------------------------------------------------
    def start_connect(self, s: SimSocket, address: tuple[str, int]) -> None:
        self._syn(s, address, 0)

    def _syn(self, s: SimSocket, address, attempt: int) -> None:
        def arrive():
            if s.state != "connecting":
                return
            listener = self.listeners.get(address)
            if listener is None or not listener.pollable():
                target = None
            else:
                target = self._node(listener)
            me = self._node(s)
            if target is not None and not self.reachable(me, target):
                if attempt >= len(SYN_RETRIES):  # the last SYN's 64 s ran out: 127 s in all
                    self._fail(s, errno.ETIMEDOUT)
                else:
                    self.loop.call_later(
                        SYN_RETRIES[attempt], self._syn, s, address, attempt + 1, context=WORLD
                    )
                return
            if target is None:
                self._fail(s, errno.ECONNREFUSED)
                return
            server = self.new_socket(listener.owner)
            server.state = "connected"
            server.peer, s.peer = s, server
            s.state = "connected"
            listener.backlog.append(server)

        self.loop.call_later(self._delay(), arrive, context=WORLD)

    def _fail(self, s: SimSocket, code: int) -> None:
        if s.state in ("connecting", "connected"):
            s.error = code

    # -- bytes ------------------------------------------------------------------------
    def transmit(self, s: SimSocket, chunk: bytes | None) -> None:
        """Queue `chunk` (None: a FIN) on s's connection, delivered in order."""
        if chunk:
            s.in_flight += len(chunk)
        s.queue.append(chunk)
        due = max(self.loop.time() + self._delay(), s.last_due)
        s.last_due = due
        self.loop.call_at(due, self._deliver_head, s, context=WORLD)

    def _deliver_head(self, s: SimSocket) -> None:
        if not s.queue:
            return
        peer = s.peer
        if peer is None:
            s.queue.clear()
            return
        a, b = self._node(s), self._node(peer)
        if not self.reachable(a, b):
            if b in self.down and peer.owner is not None and not peer.owner.alive:
                return  # the machine is off: the bytes go nowhere
            # retransmitted until the partition heals
            self.loop.call_later(self.rng.uniform(0.2, 0.6), self._deliver_head, s, context=WORLD)
            return
        chunk = s.queue.popleft()
        if chunk is not None:
            s.in_flight -= len(chunk)
        if peer.state == "closed" or (peer.owner is not None and not peer.owner.alive):
            # the receiving process is gone: its kernel answers with a reset
            if chunk is not None and s.state == "connected":
                s.error = errno.ECONNRESET
            return
        if chunk is None:
            peer.eof = True
        else:
            peer.inbox += chunk
            peer.last_heard = s.last_heard = self.loop.time()  # its ACK comes back too
            self.bytes_delivered += len(chunk)

    def _keepalive_sweep(self) -> None:
        """Probes of idle connections (the module docstring)."""
        now = self.loop.time()
        for s in list(self.sockets.values()):
            on, idle, interval, count = s.keepalive
            if (
                not on
                or s.state != "connected"
                or s.error
                or s.peer is None
                or now - s.last_heard < idle
            ):
                continue
            peer, me = s.peer, self._node(s)
            other = self._node(peer)
            gone = peer.state == "closed" or (peer.owner is not None and not peer.owner.alive)
            if self.reachable(me, other) and not gone:
                s.last_heard = now  # the probe was answered
            elif self.reachable(me, other):
                s.error = errno.ECONNRESET  # the machine is back: its kernel resets
            elif now - s.last_heard >= idle + interval * count:
                s.error = errno.ETIMEDOUT
        self.loop.call_later(KEEPALIVE_SWEEP, self._keepalive_sweep, context=WORLD)

    # -- faults -------------------------------------------------------------------------
    def partition(self, a: str, b: str) -> None:
        self.cut.add(frozenset((a, b)))

    def heal(self) -> None:
        self.cut.clear()

    def reset_node(self, node_id: str) -> None:
        """Every connection of node_id breaks at once (ECONNRESET on both sides)."""
        for s in list(self.sockets.values()):
            if s.state == "connected" and (
                self._node(s) == node_id or (s.peer and self._node(s.peer) == node_id)
            ):
                s.error = errno.ECONNRESET
                s.queue.clear()
                s.in_flight = 0

    def process_died(self, process: Process, power_off: bool) -> None:
        """A killed process's sockets close (FIN to peers); a powered-off one's go silent."""
        for s in list(self.sockets.values()):
            if s.owner is not process:
                continue
            if s.state == "listening" and self.listeners.get(s.address) is s:
                del self.listeners[s.address]
            if s.state == "connected" and s.peer is not None and not power_off:
                self.transmit(s, None)
            s.state = "closed"
            self.forget(s)
