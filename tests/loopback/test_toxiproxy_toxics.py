"""Measured toxics: real bytes through a proxy to a local echo server.

Bounds are generous on purpose (CI has 2 shared, noisy cores): each test
checks that a toxic clearly has its effect, not its exact timing.
"""

from __future__ import annotations

import socket
import socketserver
import statistics
import threading
import time
from collections.abc import Iterator

import pytest
import requests
from toxiproxy import Toxiproxy
from toxiproxy.proxy import Proxy

from statekeeper.chaos.toxiproxy import ToxiproxyServer

BANNER = b"hello\n"


class _EchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        server: _EchoServer = self.server  # type: ignore[assignment]
        try:
            if server.banner:
                sock.sendall(BANNER)
            while data := sock.recv(65536):
                server.received.append(data)
                sock.sendall(data)
        except OSError:
            pass


class _EchoServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, banner: bool) -> None:
        super().__init__(("127.0.0.1", 0), _EchoHandler)
        self.banner = banner
        self.received: list[bytes] = []  # everything any client sent, in order

    @property
    def address(self) -> str:
        host, port = self.server_address[:2]
        return f"{host}:{port}"


def _serve(banner: bool) -> Iterator[_EchoServer]:
    srv = _EchoServer(banner)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(scope="module")
def echo() -> Iterator[str]:
    for srv in _serve(banner=False):
        yield srv.address


@pytest.fixture(scope="module")
def banner_server() -> Iterator[_EchoServer]:
    """Echo server that greets first, so the downstream direction has data of its own."""
    yield from _serve(banner=True)


def wait_received(srv: _EchoServer, marker: bytes, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker in b"".join(srv.received):
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def proxy(tp: Toxiproxy, echo: str) -> Proxy:
    return tp.create(upstream=echo, name="echo")


def connect(proxy: Proxy, timeout: float = 5.0) -> socket.socket:
    host, port = proxy.listen.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_to_eof(sock: socket.socket) -> bytes:
    buf = bytearray()
    while chunk := sock.recv(65536):
        buf += chunk
    return bytes(buf)


def round_trip(sock: socket.socket, payload: bytes = b"ping") -> float:
    start = time.monotonic()
    sock.sendall(payload)
    assert recv_exactly(sock, len(payload)) == payload
    return time.monotonic() - start


def median_rtt(sock: socket.socket, n: int = 5) -> float:
    return statistics.median(round_trip(sock) for _ in range(n))


def assert_silent(sock: socket.socket, seconds: float) -> None:
    """No bytes and no EOF for ``seconds``: the connection hangs, open."""
    sock.settimeout(seconds)
    with pytest.raises(TimeoutError):
        sock.recv(1)


def assert_closed(sock: socket.socket, timeout: float = 5.0) -> None:
    sock.settimeout(timeout)
    try:
        assert sock.recv(65536) == b""
    except ConnectionResetError:
        pass


# -- latency and throughput ----------------------------------------------------


def test_latency_adds_delay_on_existing_and_new_connections(proxy: Proxy) -> None:
    with connect(proxy) as sock:
        base = median_rtt(sock)
        proxy.add_toxic(type="latency", attributes={"latency": 150})
        slowed = median_rtt(sock)  # the toxic reached an already open connection
    assert 0.12 <= slowed - base <= 0.6, (base, slowed)
    with connect(proxy) as sock:
        assert 0.12 <= median_rtt(sock, 3) <= 0.7
    proxy.destroy_toxic("latency_downstream")
    with connect(proxy) as sock:
        assert median_rtt(sock, 3) < 0.1


def test_latency_both_directions_add_up_and_update_applies(
    proxy: Proxy, server: ToxiproxyServer
) -> None:
    proxy.add_toxic(type="latency", stream="upstream", name="up", attributes={"latency": 100})
    proxy.add_toxic(type="latency", name="down", attributes={"latency": 100})
    with connect(proxy) as sock:
        assert 0.17 <= median_rtt(sock, 3) <= 0.8
        r = requests.post(
            f"{server.url}/proxies/echo/toxics/down", json={"attributes": {"latency": 300}}
        )
        assert r.status_code == 200
        assert 0.35 <= median_rtt(sock, 3) <= 1.2


def test_removing_latency_releases_data_in_flight(proxy: Proxy) -> None:
    proxy.add_toxic(type="latency", attributes={"latency": 5000})
    with connect(proxy) as sock:
        start = time.monotonic()
        sock.sendall(b"ping")
        time.sleep(0.2)
        proxy.destroy_toxic("latency_downstream")  # held bytes go out now, none dropped
        assert recv_exactly(sock, 4) == b"ping"
    assert time.monotonic() - start < 2.5


def test_jitter_stays_within_bounds(proxy: Proxy) -> None:
    proxy.add_toxic(type="latency", attributes={"latency": 100, "jitter": 50})
    with connect(proxy) as sock:
        samples = [round_trip(sock) for _ in range(6)]
    assert all(0.04 <= s <= 0.6 for s in samples), samples


def test_bandwidth_limits_throughput(proxy: Proxy) -> None:
    payload = bytes(range(256)) * 800  # 204,800 bytes
    proxy.add_toxic(type="bandwidth", attributes={"rate": 100})  # 100 KB/s server->client
    with connect(proxy, timeout=15) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,), daemon=True)
        start = time.monotonic()
        sender.start()
        assert recv_exactly(sock, len(payload)) == payload
        elapsed = time.monotonic() - start
        sender.join(5)
    assert 1.6 <= elapsed <= 4.5, elapsed  # ideal: 2.05 s


# -- timeout: partitions ---------------------------------------------------------


def test_timeout_zero_blackholes_until_removed(proxy: Proxy) -> None:
    with connect(proxy) as old:
        round_trip(old)
        proxy.add_toxic(type="timeout", name="partition", attributes={"timeout": 0})
        # The open connection is hit: nothing arrives, and it is not closed either.
        old.sendall(b"lost?")
        assert_silent(old, 0.6)
        with connect(proxy) as new:  # new connections are blackholed too
            new.sendall(b"ping")
            assert_silent(new, 0.3)
            assert_silent(old, 0.3)
            proxy.destroy_toxic("partition")
            # Dropped bytes make those streams unusable: Toxiproxy closes them on
            # removal, and clients reconnect (pysyncobj does).
            assert_closed(old)
            assert_closed(new)
    with connect(proxy) as sock:  # traffic flows again
        assert round_trip(sock, b"after") < 1.0


def test_timeout_closes_after_delay(proxy: Proxy) -> None:
    with connect(proxy) as sock:
        round_trip(sock)
        start = time.monotonic()
        proxy.add_toxic(type="timeout", attributes={"timeout": 300})
        sock.sendall(b"dropped")
        assert_closed(sock)
        elapsed = time.monotonic() - start
    assert 0.2 <= elapsed <= 3.0, elapsed


def test_upstream_blackhole_leaves_downstream_flowing(
    tp: Toxiproxy, banner_server: _EchoServer
) -> None:
    proxy = tp.create(upstream=banner_server.address, name="banner")
    proxy.add_toxic(type="timeout", stream="upstream", attributes={"timeout": 0})
    with connect(proxy) as sock:
        assert recv_exactly(sock, len(BANNER)) == BANNER  # server -> client still works
        sock.sendall(b"up-marker-1")  # client -> server is dropped
        assert not wait_received(banner_server, b"up-marker-1", timeout=0.5)
        assert_silent(sock, 0.1)


def test_downstream_blackhole_leaves_upstream_flowing(
    tp: Toxiproxy, banner_server: _EchoServer
) -> None:
    proxy = tp.create(upstream=banner_server.address, name="banner")
    proxy.add_toxic(type="timeout", attributes={"timeout": 0})
    with connect(proxy) as sock:
        assert_silent(sock, 0.4)  # banner blackholed
        sock.sendall(b"up-marker-2")
        assert wait_received(banner_server, b"up-marker-2")  # client -> server works
        assert_silent(sock, 0.1)  # ...but its echo is dropped


# -- connection killers ------------------------------------------------------------


def test_reset_peer_sends_rst(proxy: Proxy) -> None:
    proxy.add_toxic(type="reset_peer", attributes={"timeout": 0})
    with connect(proxy) as sock:
        sock.sendall(b"ping")
        with pytest.raises(ConnectionResetError):
            sock.recv(1024)


def test_reset_peer_waits_for_timeout(proxy: Proxy) -> None:
    proxy.add_toxic(type="reset_peer", stream="upstream", attributes={"timeout": 300})
    with connect(proxy) as sock:
        start = time.monotonic()
        sock.sendall(b"ping")
        with pytest.raises(ConnectionResetError):
            sock.recv(1024)
        elapsed = time.monotonic() - start
    assert 0.2 <= elapsed <= 3.0, elapsed


def test_limit_data_closes_after_n_bytes(proxy: Proxy) -> None:
    proxy.add_toxic(type="limit_data", attributes={"bytes": 10})
    with connect(proxy) as sock:
        sock.sendall(b"0123456")
        assert recv_exactly(sock, 7) == b"0123456"
        sock.sendall(b"789abcdef")
        assert read_to_eof(sock) == b"789"  # 10 bytes in all, then EOF


def test_slicer_delivers_everything_in_small_pieces(proxy: Proxy) -> None:
    payload = bytes(range(256)) * 16  # 4096 bytes
    proxy.add_toxic(
        type="slicer", attributes={"average_size": 100, "size_variation": 20, "delay": 3000}
    )
    with connect(proxy) as sock:
        sock.sendall(payload)
        pieces: list[bytes] = []
        while sum(map(len, pieces)) < len(payload):
            chunk = sock.recv(65536)
            assert chunk, "closed early"
            pieces.append(chunk)
    assert b"".join(pieces) == payload
    assert len(pieces) >= 5, [len(p) for p in pieces]
    assert max(map(len, pieces)) < len(payload) // 2


def test_slow_close_delays_eof(proxy: Proxy) -> None:
    def time_to_eof() -> float:
        with connect(proxy) as sock:
            round_trip(sock)
            start = time.monotonic()
            sock.shutdown(socket.SHUT_WR)  # the close travels to the server and back
            assert_closed(sock)
            return time.monotonic() - start

    assert time_to_eof() < 0.3
    proxy.add_toxic(type="slow_close", attributes={"delay": 500})
    assert 0.4 <= time_to_eof() <= 3.0


# -- toxicity --------------------------------------------------------------------


def read_to_eof_or_n(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n and (chunk := sock.recv(n - len(buf))):
        buf += chunk
    return bytes(buf)


def _truncated(proxy: Proxy) -> bool:
    with connect(proxy) as sock:
        sock.sendall(b"hello")
        return read_to_eof_or_n(sock, 5) != b"hello"


def test_toxicity_zero_never_applies(proxy: Proxy) -> None:
    proxy.add_toxic(type="limit_data", toxicity=0.0, attributes={"bytes": 1})
    assert not any(_truncated(proxy) for _ in range(20))


def test_toxicity_is_rolled_per_connection(proxy: Proxy) -> None:
    proxy.add_toxic(type="limit_data", toxicity=0.5, attributes={"bytes": 1})
    hits = [_truncated(proxy) for _ in range(40)]
    assert any(hits) and not all(hits)  # chance of failing: 2 in 2**40


def test_toxicity_zero_leaves_open_connection_alone(proxy: Proxy) -> None:
    with connect(proxy) as sock:
        proxy.add_toxic(type="timeout", toxicity=0.0, attributes={"timeout": 0})
        assert round_trip(sock) < 1.0
        proxy.destroy_toxic("timeout_downstream")  # not applied here: nothing to close
        assert round_trip(sock) < 1.0


# -- proxy lifecycle ------------------------------------------------------------


def test_disabled_proxy_refuses_and_kills_connections(proxy: Proxy) -> None:
    with connect(proxy) as sock:
        round_trip(sock)
        proxy.disable()
        assert_closed(sock)
    with pytest.raises(ConnectionRefusedError):
        connect(proxy)
    proxy.enable()
    with connect(proxy) as sock:
        assert round_trip(sock) < 1.0


def test_reset_heals_everything(tp: Toxiproxy, proxy: Proxy) -> None:
    proxy.add_toxic(type="latency", attributes={"latency": 2000})
    proxy.disable()
    tp.reset()
    with connect(proxy) as sock:
        assert round_trip(sock) < 1.0


def test_deleting_proxy_closes_connections(proxy: Proxy) -> None:
    with connect(proxy) as sock:
        round_trip(sock)
        proxy.destroy()
        assert_closed(sock)


def test_unreachable_upstream_closes_client(tp: Toxiproxy) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused
        proxy = tp.create(upstream=dead, name="dead")
        with connect(proxy) as sock:
            assert_closed(sock)
