"""TLS on the raft port (node/tls.py, node/raft/tls_pipe.py, syncobj._TlsConnection).

Raft nodes in this process (tests/integration/raft_harness.py), each with its own config
so one member can be given another certificate: a TLS cluster elects and replicates (a
3 MiB entry too, through socket buffers far smaller than it); a node whose certificate
comes from another CA, is a client certificate of the same CA, or is another node's,
cannot join; a plaintext peer is dropped before anything is unpickled. Every refusal is
logged once with the peer and why."""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import os
import pickle
import shutil
import socket
import ssl
import time
import uuid
import zlib
from pathlib import Path

import pytest

from statekeeper.client import Client
from statekeeper.cluster.certs import init_cluster_tls
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node import entry
from statekeeper.node.config import ClusterConfig, TlsSettings
from statekeeper.node.raft import syncobj
from statekeeper.node.raft.peers import AuthenticatingEncryptor
from tests.integration.raft_harness import Exploit, Member, config, leader_of, raft_frame, wait_for

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
TLS = TlsSettings(
    enabled=True, ca_file="tls/ca.pem", cert_file="tls/{id}.pem", key_file="tls/{id}-key.pem"
)


def tls_config(base: Path, size: int = 3, **kw) -> ClusterConfig:
    cfg = config(base, size, fsync="never", **kw)
    init_cluster_tls(base / "tls", [(n.id, n.host) for n in cfg.nodes], clients=["agent"])
    return dataclasses.replace(cfg, base_dir=str(base), tls=TLS)


def with_cert(cfg: ClusterConfig, base: Path, cert: Path, key: Path) -> ClusterConfig:
    """The same cluster, seen by a node that presents `cert` (its CA file unchanged)."""
    own = base / "own"
    own.mkdir(parents=True, exist_ok=True)
    shutil.copy(cert, own / "cert.pem")
    shutil.copy(key, own / "key.pem")
    tls = dataclasses.replace(
        TLS,
        ca_file=str(Path(cfg.base_dir) / TLS.ca_file),
        cert_file="own/cert.pem",
        key_file="own/key.pem",
    )
    return dataclasses.replace(cfg, base_dir=str(base), tls=tls)


def put(m: Member, key: str, value: bytes) -> int:
    op = {"op": "put", "ns": "a", "key": key, "value": value}
    _, err = m.submit(entry.encode(int(time.time() * 1000), [op]), timeout=10)
    assert err is None, err
    return m.obj.raftLastApplied


def tls_refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "raft TLS: dropped" in r.getMessage()
    ]


def test_a_tls_cluster_replicates_and_a_large_entry_crosses_at_once(
    tmp_path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    """Socket buffers far smaller than the entry: the rest of the ciphertext must go out
    on write events (_TlsConnection keeps them armed), not one buffer per heartbeat."""
    monkeypatch.setattr(syncobj, "SOCKET_BUFFER_BYTES", 64 * 1024)
    cfg = tls_config(tmp_path)
    members = [Member(cfg, n.id) for n in cfg.nodes]
    try:
        assert all(m.raft.raft_tls for m in members)
        leader = leader_of(members)
        term = leader.obj.raftCurrentTerm
        index = put(leader, "small", b"v")
        wait_for(lambda: all(m.obj.raftLastApplied >= index for m in members), 5, "replication")
        t0 = time.monotonic()
        index = put(leader, "big", os.urandom(3 * MIB))
        took = time.monotonic() - t0
        wait_for(lambda: all(m.obj.raftLastApplied >= index for m in members), 5, "the big one")
        all_took = time.monotonic() - t0
        assert took < 2.5 and all_took < 3.5, f"{took:.2f} s / {all_took:.2f} s"
        assert [m.obj.raftCurrentTerm for m in members] == [term] * 3
        for m in members:
            assert m.sm.get("a", "big") is not None
        # Every peer connection is TLS.
        for m in members:
            conns = m.obj._SyncObj__transport._connections.values()
            assert conns and all(isinstance(c, syncobj._TlsConnection) for c in conns)
        assert tls_refusals(caplog) == []
    finally:
        for m in members:
            m.close()


def _join_attempt(cfg: ClusterConfig, impostor_cfg: ClusterConfig, impostor: str) -> None:
    """The other members elect and replicate; the impostor never learns the entries."""
    members = [Member(cfg, n.id) for n in cfg.nodes if n.id != impostor]
    bad = Member(impostor_cfg, impostor)
    try:
        leader = leader_of(members)
        index = put(leader, "k", b"v")
        wait_for(lambda: all(m.obj.raftLastApplied >= index for m in members), 5, "replication")
        time.sleep(1.5)  # a few of the impostor's and the others' connection attempts
        assert bad.obj.raftLastApplied < index and bad.obj._getLeader() is None
        assert put(leader, "k2", b"v") > index  # the others keep working
    finally:
        bad.close()
        for m in members:
            m.close()


def _highest(cfg: ClusterConfig) -> str:
    # pysyncobj: the node with the greater address dials; this one dials every other.
    return max(cfg.nodes, key=lambda n: n.raft_address).id


def test_a_node_with_a_certificate_from_another_ca_cannot_join(tmp_path, caplog) -> None:
    cfg = tls_config(tmp_path / "c")
    impostor = _highest(cfg)
    other = tmp_path / "other"
    init_cluster_tls(other, [(impostor, "127.0.0.1")], cluster_name="other")
    bad_cfg = with_cert(
        cfg, tmp_path / "bad", other / f"{impostor}.pem", other / f"{impostor}-key.pem"
    )
    _join_attempt(cfg, bad_cfg, impostor)
    refusals = tls_refusals(caplog)
    assert any("from 127.0.0.1" in r and "does not verify" in r for r in refusals), refusals
    # The impostor logs the others' refusal of its certificate (their alert).
    assert any("refused the handshake" in r for r in refusals), refusals


def test_a_client_certificate_of_the_same_ca_cannot_join(tmp_path, caplog) -> None:
    cfg = tls_config(tmp_path / "c")
    impostor = _highest(cfg)
    t = tmp_path / "c" / "tls"
    bad_cfg = with_cert(cfg, tmp_path / "bad", t / "client-agent.pem", t / "client-agent-key.pem")
    _join_attempt(cfg, bad_cfg, impostor)
    refusals = tls_refusals(caplog)
    assert any("names none of this node's peers" in r for r in refusals), refusals


def test_a_node_presenting_another_nodes_certificate_cannot_join(tmp_path, caplog) -> None:
    """The impostor holds a valid node certificate of the cluster's CA, but another node's.
    Dialled, it fails the dialler's name check; dialling, the address it claims is not the
    node its certificate names (the acceptor's check after pysyncobj's key exchange)."""
    cfg = tls_config(tmp_path / "c")
    impostor = _highest(cfg)
    victim = next(n.id for n in cfg.nodes if n.id != impostor)
    t = tmp_path / "c" / "tls"
    bad_cfg = with_cert(cfg, tmp_path / "bad", t / f"{victim}.pem", t / f"{victim}-key.pem")
    _join_attempt(cfg, bad_cfg, impostor)
    refusals = tls_refusals(caplog)
    assert any("claims to be" in r and victim in r for r in refusals), refusals


def test_a_plaintext_peer_is_refused_before_anything_is_unpickled(tmp_path, caplog) -> None:
    """The old peers' bytes (a frame sealed with the right cluster secret, AES-GCM only),
    a plaintext pickle and garbage: each connection is dropped at the TLS layer."""
    cfg = tls_config(tmp_path, size=1)
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    sealed = AuthenticatingEncryptor(cfg.secret).encrypt_at_time(
        zlib.compress(pickle.dumps(Exploit(marker))), int(time.monotonic())
    )
    payloads = [
        raft_frame(sealed),
        raft_frame(zlib.compress(pickle.dumps(Exploit(marker)))),
        os.urandom(4096),
    ]
    m = Member(cfg, cfg.nodes[0].id)
    try:
        leader_of([m])
        node = cfg.nodes[0]
        for payload in payloads:
            with socket.create_connection((node.host, node.raft_port), timeout=5) as s:
                s.sendall(payload)
                s.settimeout(5)
                try:
                    reply = s.recv(4096)
                    while reply and s.recv(4096):
                        pass  # an alert may come first; then the close
                    closed = True
                except ConnectionResetError:
                    closed = True
                assert closed
        time.sleep(0.3)
        assert not marker.exists(), "a peer message was unpickled"
        refusals = tls_refusals(caplog)
        assert any("not TLS" in r for r in refusals), refusals
        assert m.raft.status().rejected_peer_messages >= 1
        put(m, "still", b"serving")
    finally:
        m.close()


# -- real node processes (tests/integration/cluster_fixture.py, tls=True) ------------------


def _ca(cluster: LocalCluster) -> str:
    return str(Path(cluster.config.base_dir) / cluster.config.tls.ca_file)


def _swap_cert(cluster: LocalCluster, node_id: str, cert: Path, key: Path) -> None:
    """Give the stopped `node_id` another certificate (for both its ports)."""
    cfg = cluster.config
    base = Path(cfg.base_dir)
    for src, dst in ((cert, cfg.tls.cert_file), (key, cfg.tls.key_file)):
        path = base / dst.replace("{id}", node_id)
        path.unlink()
        shutil.copy(src, path)


def _status_unverified(cluster: LocalCluster, node_id: str) -> dict | None:
    """/v1/status of a node whose certificate the cluster CA does not vouch for."""
    n = cluster.config.node(node_id)
    ctx = ssl._create_unverified_context()
    conn = http.client.HTTPSConnection(n.host, n.http_port, timeout=2, context=ctx)
    try:
        conn.request("GET", "/v1/status", headers={"Accept": "application/json"})
        r = conn.getresponse()
        return json.loads(r.read()) if r.status == 200 else None
    except (OSError, ValueError):
        return None
    finally:
        conn.close()


def _cannot_join(cluster: LocalCluster, victim: str) -> str:
    """Restart the stopped `victim` with the certificate it was given: the others keep
    electing and serving, the victim never learns a leader nor the new writes. Returns
    the victim's log."""
    others = [n for n in cluster.node_ids if n != victim]
    cluster.start_node(victim)
    st = wait_for(lambda: _status_unverified(cluster, victim), 30, f"{victim} answers /v1/status")
    with Client([cluster.url(n) for n in others], ca=_ca(cluster)) as c:
        rev = c.put("after-restart", b"1").revision
        time.sleep(3)  # many connection attempts, both ways
        rev = c.put("after-restart", b"2").revision
    st = _status_unverified(cluster, victim)
    assert st is not None and st["leader"] is None and st["revision"] < rev, st
    for n in others:
        assert cluster.status(n)["revision"] >= rev
    log = cluster.log_file(victim).read_text()
    assert "raft TLS: dropped the connection" in log, log[-3000:]
    return log


def _others_log(cluster: LocalCluster, victim: str) -> str:
    return "".join(cluster.log_file(n).read_text() for n in cluster.node_ids if n != victim)


def test_a_tls_cluster_elects_and_replicates(shared_cluster: LocalCluster) -> None:
    leader = shared_cluster.leader_id()
    assert leader is not None
    with Client(shared_cluster.url(leader), ca=_ca(shared_cluster)) as c:
        rev = 0
        for i in range(20):
            rev = c.put(f"tls-{i}", f"v{i}".encode()).revision
    for nid in shared_cluster.node_ids:
        with Client(shared_cluster.url(nid), ca=_ca(shared_cluster)) as c:
            kv = c.get("tls-19", consistency="serializable", min_revision=rev)
            assert kv.value == b"v19", nid
    for nid in shared_cluster.node_ids:
        log = shared_cluster.log_file(nid).read_text()
        assert "raft TLS" not in log, (nid, log[-2000:])


def test_a_3_mib_entry_reaches_the_followers_with_raft_tls(shared_cluster: LocalCluster) -> None:
    """One batch of three 1 MiB puts: one ~3 MiB raft entry (test_large_entries.py)."""
    leader = shared_cluster.leader_id()
    terms = {n: shared_cluster.status(n)["term"] for n in shared_cluster.node_ids}
    values = [os.urandom(MIB) for _ in range(3)]
    with Client(shared_cluster.url(leader), ca=_ca(shared_cluster), timeout=30) as c:
        with c.batch() as b:
            for i, v in enumerate(values):
                b.put(f"big-{i}", v)
        revs = [r.revision for r in b.results]
    for nid in shared_cluster.node_ids:
        with Client(shared_cluster.url(nid), ca=_ca(shared_cluster), timeout=30) as c:
            for i, v in enumerate(values):
                kv = c.get(f"big-{i}", consistency="serializable", min_revision=max(revs))
                assert kv.value == v, (nid, i)
    assert {n: shared_cluster.status(n)["term"] for n in shared_cluster.node_ids} == terms


@pytest.mark.cluster_options(tls=True)
def test_a_node_process_with_another_cas_certificate_cannot_join(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    victim = cluster.node_ids[2]
    cluster.stop_node(victim)
    other = tmp_path / "other-ca"
    init_cluster_tls(other, [(victim, "127.0.0.1")], cluster_name="other")
    _swap_cert(cluster, victim, other / f"{victim}.pem", other / f"{victim}-key.pem")
    _cannot_join(cluster, victim)
    assert "the peer's certificate does not verify" in _others_log(cluster, victim)


@pytest.mark.cluster_options(tls=True)
def test_a_node_process_with_a_client_certificate_cannot_join(cluster: LocalCluster) -> None:
    """The fixture's client certificate (clientAuth, no node id) as a node's."""
    victim = cluster.node_ids[2]
    cluster.stop_node(victim)
    tls_dir = Path(cluster.config.base_dir) / "tls"
    _swap_cert(cluster, victim, tls_dir / "client-test.pem", tls_dir / "client-test-key.pem")
    _cannot_join(cluster, victim)
    others = _others_log(cluster, victim)
    assert (
        "names none of this node's peers" in others
        or "the peer's certificate does not verify" in others
    ), others[-3000:]


def test_a_plaintext_peer_is_refused_on_a_tls_raft_port(
    shared_cluster: LocalCluster, tmp_path: Path
) -> None:
    """What a peer without TLS sends (a frame sealed with the right cluster secret, the
    AES-GCM-only protocol), a plaintext pickle and garbage: dropped before anything is
    unpickled, and the cluster keeps serving."""
    target = shared_cluster.node_ids[1]
    node = shared_cluster.config.node(target)
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    sealed = AuthenticatingEncryptor(shared_cluster.config.secret).encrypt_at_time(
        zlib.compress(pickle.dumps(Exploit(marker))), int(time.monotonic())
    )
    payloads = [
        raft_frame(sealed),
        raft_frame(zlib.compress(pickle.dumps(Exploit(marker)))),
        os.urandom(4096),
    ]
    for payload in payloads:
        with socket.create_connection((node.host, node.raft_port), timeout=5) as s:
            s.sendall(payload)
            s.settimeout(10)
            try:
                while s.recv(4096):
                    pass  # an alert, then the close
            except ConnectionResetError:
                pass
    time.sleep(0.5)
    assert not marker.exists(), "a peer message was unpickled"
    urls = [shared_cluster.url(n) for n in shared_cluster.node_ids]
    with Client(urls, ca=_ca(shared_cluster)) as c:
        rev = c.put("still-serving", b"yes").revision
    with Client(shared_cluster.url(target), ca=_ca(shared_cluster)) as c:
        assert c.get("still-serving", consistency="serializable", min_revision=rev).value == b"yes"
    assert shared_cluster.status(target)["rejected_peer_messages"] >= 1
    assert "not TLS" in shared_cluster.log_file(target).read_text()
