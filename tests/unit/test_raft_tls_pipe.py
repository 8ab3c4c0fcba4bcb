"""The raft port's sans-IO TLS pipe (node/raft/tls_pipe.py), two pipes paired in memory,
with the contexts the node really builds (node.tls.raft_contexts) from certificates that
cluster.certs writes."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from statekeeper.cluster.certs import CertAuthority, init_cluster_tls, write_private
from statekeeper.node.config import ClusterConfig, NodeConfig, TlsSettings
from statekeeper.node.raft.tls_pipe import TlsPipe, TlsRefused
from statekeeper.node.tls import raft_contexts

IDS = ("n1", "n2", "n3")


def _cluster(base: Path) -> ClusterConfig:
    nodes = tuple(NodeConfig(i, "127.0.0.1", 7000 + k, 8000 + k) for k, i in enumerate(IDS))
    tls = TlsSettings(
        enabled=True, ca_file="tls/ca.pem", cert_file="tls/{id}.pem", key_file="tls/{id}-key.pem"
    )
    return ClusterConfig(nodes=nodes, tls=tls, base_dir=str(base))


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("tls")
    init_cluster_tls(base / "tls", [(i, "127.0.0.1") for i in IDS], clients=["agent"])
    return base


def _contexts(base: Path, node_id: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ctxs = raft_contexts(_cluster(base), node_id)
    assert ctxs is not None
    return ctxs


def _client_context(cert: Path, key: Path, ca: Path) -> ssl.SSLContext:
    """A dialling context like raft_contexts' but with any certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(cafile=ca)
    return ctx


def _server_context(cert: Path, key: Path, ca: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(cafile=ca)
    return ctx


def _pump(a: TlsPipe, b: TlsPipe, got_a: list[bytes], got_b: list[bytes], rounds: int = 50):
    """Move ciphertext both ways until neither side has anything to say."""
    for _ in range(rounds):
        ab, ba = a.outgoing(), b.outgoing()
        if not ab and not ba:
            return
        if ab:
            got_b.append(b.feed(ab))
        if ba:
            got_a.append(a.feed(ba))
    raise AssertionError("the pipes never went quiet")


def _pair(base: Path, dialler: str = "n1", acceptor: str = "n2") -> tuple[TlsPipe, TlsPipe]:
    _, dial_ctx = _contexts(base, dialler)
    accept_ctx, _ = _contexts(base, acceptor)
    client = TlsPipe(dial_ctx, server_side=False, server_hostname=acceptor)
    server = TlsPipe(accept_ctx, server_side=True, expect_any={i for i in IDS if i != acceptor})
    return client, server


def test_handshake_and_data_both_ways(tls_dir):
    client, server = _pair(tls_dir)
    client.send(b"hello before the handshake")  # held until it completes
    assert client.pending_bytes == len(b"hello before the handshake")
    got_c, got_s = [], []
    _pump(client, server, got_c, got_s)
    assert client.handshake_done and server.handshake_done
    assert b"".join(got_s) == b"hello before the handshake"
    assert client.pending_bytes == 0
    assert "n2" in client.peer_names and "n1" in server.peer_names
    server.send(b"and back")
    _pump(client, server, got_c, got_s)
    assert b"".join(got_c) == b"and back"


def test_several_mib_both_ways(tls_dir):
    client, server = _pair(tls_dir)
    got_c, got_s = [], []
    _pump(client, server, got_c, got_s)
    up, down = os.urandom(5 * 2**20 + 17), os.urandom(3 * 2**20 + 5)
    client.send(up)
    server.send(down)
    # Delivered in socket-sized slices, as the poller would.
    wire_up, wire_down = client.outgoing(), server.outgoing()
    assert len(wire_up) > len(up)
    for i in range(0, len(wire_up), 65536):
        got_s.append(server.feed(wire_up[i : i + 65536]))
    for i in range(0, len(wire_down), 1 << 20):
        got_c.append(client.feed(wire_down[i : i + (1 << 20)]))
    assert b"".join(got_s) == up
    assert b"".join(got_c) == down


def test_a_half_written_record_waits_for_the_rest(tls_dir):
    client, server = _pair(tls_dir)
    _pump(client, server, [], [])
    client.send(b"x" * 1000)
    wire = client.outgoing()
    assert server.feed(wire[:7]) == b""
    assert server.feed(wire[7:-1]) == b""
    assert server.feed(wire[-1:]) == b"x" * 1000


def test_a_peer_from_another_ca_is_refused(tls_dir, tmp_path):
    other = tmp_path / "other"
    init_cluster_tls(other, [("n2", "127.0.0.1")], cluster_name="other")
    # The dialler checks the acceptor's certificate: another CA's n2 is refused.
    _, dial_ctx = _contexts(tls_dir, "n1")
    impostor = _server_context(other / "n2.pem", other / "n2-key.pem", other / "ca.pem")
    client = TlsPipe(dial_ctx, server_side=False, server_hostname="n2")
    server = TlsPipe(impostor, server_side=True)
    with pytest.raises(TlsRefused) as e:
        _pump(client, server, [], [])
    assert e.value.kind == "bad-cert", e.value.why
    assert "verify" in e.value.why
    # The acceptor checks the dialler's: another CA's n1 is refused.
    accept_ctx, _ = _contexts(tls_dir, "n2")
    impostor = _client_context(other / "n2.pem", other / "n2-key.pem", tls_dir / "tls/ca.pem")
    client = TlsPipe(impostor, server_side=False, server_hostname="n2")
    server = TlsPipe(accept_ctx, server_side=True, expect_any={"n1", "n3"})
    with pytest.raises(TlsRefused) as e:
        _pump(client, server, [], [])
    assert e.value.kind == "bad-cert", e.value.why


def test_the_dialler_refuses_a_certificate_without_the_node_id(tls_dir, tmp_path):
    """On n2's address: a client certificate of the same CA (no node id, no serverAuth),
    a server certificate of the same CA naming only localhost, and another node's valid
    certificate: all refused by the dialler, the last two by its name check."""
    t = tls_dir / "tls"
    ca = CertAuthority.load(t / "ca.pem", t / "ca-key.pem")
    cert, key = ca.issue("localhost", ["localhost", "127.0.0.1"], server=True)
    (tmp_path / "lh.pem").write_bytes(cert)
    write_private(tmp_path / "lh-key.pem", key)
    _, dial_ctx = _contexts(tls_dir, "n1")
    for cert_path, key_path, kinds in (
        (t / "client-agent.pem", t / "client-agent-key.pem", ("bad-cert", "wrong-node")),
        (tmp_path / "lh.pem", tmp_path / "lh-key.pem", ("wrong-node",)),
        (t / "n3.pem", t / "n3-key.pem", ("wrong-node",)),
    ):
        client = TlsPipe(dial_ctx, server_side=False, server_hostname="n2")
        server = TlsPipe(_server_context(cert_path, key_path, t / "ca.pem"), server_side=True)
        with pytest.raises(TlsRefused) as e:
            _pump(client, server, [], [])
        assert e.value.kind in kinds, (cert_path.name, e.value.why)
        # The acceptor learns it from the dialler's alert.
        with pytest.raises(TlsRefused) as e:
            server.feed(client.outgoing())
        assert e.value.kind == "peer-refused", e.value.why


def test_the_acceptor_refuses_a_client_certificate(tls_dir):
    t = tls_dir / "tls"
    accept_ctx, _ = _contexts(tls_dir, "n2")
    agent = _client_context(t / "client-agent.pem", t / "client-agent-key.pem", t / "ca.pem")
    client = TlsPipe(agent, server_side=False, server_hostname="n2")
    server = TlsPipe(accept_ctx, server_side=True, expect_any={"n1", "n3"})
    client.send(b"anything")
    got_s: list[bytes] = []
    with pytest.raises(TlsRefused) as e:
        _pump(client, server, [], got_s)
    assert e.value.kind == "wrong-node" and "none of this node's peers" in e.value.why
    assert b"".join(got_s) == b""  # nothing of the dialler's data came out


def test_a_dialler_without_a_certificate_is_refused(tls_dir):
    t = tls_dir / "tls"
    accept_ctx, _ = _contexts(tls_dir, "n2")
    anonymous = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    anonymous.load_verify_locations(cafile=t / "ca.pem")
    client = TlsPipe(anonymous, server_side=False, server_hostname="n2")
    server = TlsPipe(accept_ctx, server_side=True, expect_any={"n1", "n3"})
    with pytest.raises(TlsRefused) as e:
        _pump(client, server, [], [])
    assert e.value.kind in ("tls", "bad-cert"), e.value.why


@pytest.mark.parametrize(
    "raw",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        # The old peers' first frame: a 4-byte length, then an AES-GCM token (version 1).
        b"\x2d\x00\x00\x00\x01" + os.urandom(44),
        os.urandom(4096),
        b"\x16\x03\x01\xff\xff" + b"\x00" * 300,  # a handshake record header, then nonsense
    ],
    ids=["http", "aes-gcm-peer", "random", "bad-handshake"],
)
def test_plaintext_and_garbage_are_refused(tls_dir, raw):
    accept_ctx, _ = _contexts(tls_dir, "n2")
    server = TlsPipe(accept_ctx, server_side=True, expect_any={"n1", "n3"})
    with pytest.raises(TlsRefused) as e:
        server.feed(raw)
    assert e.value.kind in ("not-tls", "tls"), e.value.why
    with pytest.raises(TlsRefused):  # and it stays refused
        server.feed(b"")


def test_the_dialler_refuses_a_plaintext_answer(tls_dir):
    _, dial_ctx = _contexts(tls_dir, "n1")
    client = TlsPipe(dial_ctx, server_side=False, server_hostname="n2")
    assert client.outgoing()  # the ClientHello
    with pytest.raises(TlsRefused) as e:
        client.feed(b"\x05\x00\x00\x00hello")
    assert e.value.kind == "not-tls", e.value.why


def test_cert_authority_helper_is_usable_for_odd_certs(tmp_path):
    """A node certificate signed by the right CA but naming another node id poses as
    nobody: the acceptor's expect_any check sees its names."""
    init_cluster_tls(tmp_path / "tls", [(i, "127.0.0.1") for i in IDS])
    ca = CertAuthority.load(tmp_path / "tls/ca.pem", tmp_path / "tls/ca-key.pem")
    cert, key = ca.issue("stranger", ["stranger", "localhost"], server=True)
    (tmp_path / "stranger.pem").write_bytes(cert)
    write_private(tmp_path / "stranger-key.pem", key)
    accept_ctx, _ = _contexts(tmp_path, "n2")
    dial = _client_context(
        tmp_path / "stranger.pem", tmp_path / "stranger-key.pem", tmp_path / "tls/ca.pem"
    )
    client = TlsPipe(dial, server_side=False, server_hostname="n2")
    server = TlsPipe(accept_ctx, server_side=True, expect_any={"n1", "n3"})
    with pytest.raises(TlsRefused) as e:
        _pump(client, server, [], [])
    assert e.value.kind == "wrong-node" and "stranger" in e.value.why
