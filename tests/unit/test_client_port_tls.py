"""The client port's TLS 1.2 suites (node/tls.py): AEAD with forward secrecy only (issue 27
item 14: the node also offered two CBC suites). Handshakes in memory against the context
the node really builds, with certificates `statekeeper tls init` makes."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from statekeeper.cluster.certs import init_cluster_tls
from statekeeper.node.config import ClusterConfig, NodeConfig, TlsSettings
from statekeeper.node.tls import client_port_context

CBC_SUITES = "ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA384:ECDHE-ECDSA-AES128-SHA"
AEAD_SUITES = ("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> ClusterConfig:
    base = tmp_path_factory.mktemp("tls")
    init_cluster_tls(base / "tls", [("node-0", "127.0.0.1")], clients=[])
    tls = TlsSettings(
        enabled=True, ca_file="tls/ca.pem", cert_file="tls/{id}.pem", key_file="tls/{id}-key.pem"
    )
    nodes = (NodeConfig(id="node-0", host="127.0.0.1", raft_port=7100, http_port=7000),)
    return ClusterConfig(nodes=nodes, tls=tls, base_dir=str(base))


def _handshake(server_ctx: ssl.SSLContext, ciphers: str, ca: Path) -> str:
    """The suite a TLS 1.2 client offering only `ciphers` agrees on (raises ssl.SSLError)."""
    client_ctx = ssl.create_default_context(cafile=str(ca))
    client_ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    client_ctx.set_ciphers(ciphers)
    bios = [ssl.MemoryBIO() for _ in range(4)]
    client = client_ctx.wrap_bio(bios[0], bios[1], server_hostname="127.0.0.1")
    server = server_ctx.wrap_bio(bios[2], bios[3], server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for name, end in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        if bios[1].pending:  # client -> server
            bios[2].write(bios[1].read())
        if bios[3].pending:  # server -> client
            bios[0].write(bios[3].read())
        if all(done.values()):
            return client.cipher()[0]
    raise AssertionError("the handshake did not finish")


def test_a_tls12_client_offering_only_cbc_suites_is_refused(cluster: ClusterConfig) -> None:
    ca = Path(cluster.base_dir) / "tls/ca.pem"
    with pytest.raises(ssl.SSLError):
        _handshake(client_port_context(cluster, "node-0"), CBC_SUITES, ca)


@pytest.mark.parametrize("suite", AEAD_SUITES)
def test_aead_suites_are_served_over_tls12(cluster: ClusterConfig, suite: str) -> None:
    ca = Path(cluster.base_dir) / "tls/ca.pem"
    assert _handshake(client_port_context(cluster, "node-0"), suite, ca) == suite
