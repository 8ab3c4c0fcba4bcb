"""The simulated network keeps what TCP promises and nothing more (chaos/sim/network.py):
bytes of a connection arrive in order whatever their delays, a partition holds them until
it heals, a dead listener refuses, a partitioned SYN times out at 127 s, a killed
process's peer reads EOF; and virtual time moves only by the loop (loop.py)."""

from __future__ import annotations

import asyncio
import errno
import random

import pytest

from statekeeper.chaos.sim.loop import Process, SimLoop, VirtualClock, context_of
from statekeeper.chaos.sim.network import SimNetwork


class Net:
    def __init__(self, seed: int = 1):
        self.clock = VirtualClock()
        self.loop = SimLoop(self.clock, lambda fd: self.net.socket_of(fd), lambda p: None)
        self.net = SimNetwork(
            self.loop, random.Random(seed), lambda p: p.node_id if p else "client"
        )
        self.a, self.b = Process("a", 1), Process("b", 1)

    def socket(self, process):
        return context_of(process).run(self.net.new_socket, process)

    def pair(self):
        server = self.socket(self.b)
        server.bind(("127.0.0.1", 9000))
        server.listen()
        client = self.socket(self.a)
        with pytest.raises(BlockingIOError):
            client.connect(("127.0.0.1", 9000))
        self.run(0.1)
        conn, _ = server.accept()
        return client, conn

    def run(self, seconds: float):
        self.loop.run_until_complete(asyncio.sleep(seconds))


def test_bytes_arrive_in_order_whatever_their_delays():
    n = Net()
    n.net.spike = (0.5, 1.0, 50.0)  # half the sends delayed a lot
    client, conn = n.pair()
    sent = b"".join(bytes([i]) * 3 for i in range(200))
    for i in range(200):
        client.send(bytes([i]) * 3)
    n.run(1.0)
    assert conn.recv(10_000) == sent


def test_a_partition_holds_bytes_until_it_heals():
    n = Net()
    client, conn = n.pair()
    n.net.partition("a", "b")
    client.send(b"held")
    n.run(5.0)
    with pytest.raises(BlockingIOError):
        conn.recv(100)
    n.net.heal()
    n.run(1.0)
    assert conn.recv(100) == b"held"


def test_nobody_listening_is_refused():
    n = Net()
    client = n.socket(n.a)
    with pytest.raises(BlockingIOError):
        client.connect(("127.0.0.1", 9999))
    n.run(0.1)
    assert client.error == errno.ECONNREFUSED and client.writable()


def test_a_syn_across_a_partition_times_out_after_127_s():
    n = Net()
    server = n.socket(n.b)
    server.bind(("127.0.0.1", 9000))
    server.listen()
    n.net.partition("a", "b")
    client = n.socket(n.a)
    with pytest.raises(BlockingIOError):
        client.connect(("127.0.0.1", 9000))
    n.run(120.0)
    assert client.error == 0 and client.state == "connecting"
    n.run(10.0)
    assert client.error == errno.ETIMEDOUT


def test_a_killed_process_peer_reads_eof_after_the_data():
    n = Net()
    client, conn = n.pair()
    client.send(b"last words")
    n.a.alive = False
    n.net.process_died(n.a, power_off=False)
    n.run(1.0)
    assert conn.recv(100) == b"last words"
    assert conn.recv(100) == b""


def test_virtual_time_jumps_to_the_next_timer():
    n = Net()
    start = n.clock.now
    n.run(3600.0)  # an hour of virtual time, at once
    assert n.clock.now - start == pytest.approx(3600.0, abs=1e-6)


def test_a_paused_process_runs_what_it_held_when_resumed():
    n = Net()
    ran: list[float] = []
    ctx = context_of(n.a)
    n.loop.call_later(1.0, lambda: ran.append(n.clock.now), context=ctx)
    n.a.paused = True
    n.run(2.0)
    assert ran == []
    n.loop.resume(n.a)
    n.run(0.1)
    assert len(ran) == 1 and ran[0] >= n.clock.now - 0.2


def test_a_killed_process_handles_are_dropped():
    n = Net()
    ran: list[int] = []
    n.loop.call_later(1.0, lambda: ran.append(1), context=context_of(n.a))
    n.a.alive = False
    n.run(2.0)
    assert ran == []


def keepalive_pair(n: Net):
    import socket

    client, conn = n.pair()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        (socket.TCP_KEEPIDLE, 16),
        (socket.TCP_KEEPINTVL, 3),
        (socket.TCP_KEEPCNT, 5),
    ):
        client.setsockopt(socket.IPPROTO_TCP, name, value)
    return client, conn


def test_keepalive_finds_a_peer_whose_machine_rebooted():
    # an idle connection to a process that lost power: silence, then a reset at the first
    # probe once the machine is back (seed 3's catching-up follower waited forever)
    n = Net()
    client, _conn = keepalive_pair(n)
    n.b.alive = False
    n.net.down.add("b")
    n.net.process_died(n.b, power_off=True)
    n.run(5.0)
    n.net.down.discard("b")
    n.run(5.0)
    assert client.error == 0  # idle for 10 s: no probe yet
    n.run(8.0)
    assert client.error == errno.ECONNRESET


def test_keepalive_times_out_a_peer_that_stays_off():
    n = Net()
    client, _conn = keepalive_pair(n)
    n.b.alive = False
    n.net.down.add("b")
    n.net.process_died(n.b, power_off=True)
    n.run(29.0)
    assert client.error == 0
    n.run(4.0)
    assert client.error == errno.ETIMEDOUT


def test_keepalive_keeps_a_live_idle_connection():
    n = Net()
    client, _conn = keepalive_pair(n)
    n.run(120.0)
    assert client.error == 0
