"""TLS for a node's two ports, from the [tls] table of cluster.toml (node/config.py).

Client port: the node serves HTTPS with its certificate (`cert_file`, `key_file`, "{id}"
replaced by the node id). `client_auth` asks clients for a certificate signed by `ca_file`:
"none" (bearer tokens authenticate clients, see node/api/authz.py), "optional" (verified when
sent), "required" (mTLS: no certificate, no connection). TLS 1.2 at least, and 1.2 with
AEAD suites only (ECDHE with AES-GCM or ChaCha20-Poly1305).

Raft port (`raft = true`, the default when TLS is on): always mutual TLS 1.3. Each node
presents its certificate and checks the peer's against `ca_file`; the dialling node also
checks that the certificate names the peer's node id (a DNS subject alternative name, which
`statekeeper tls init` writes), so one node's key cannot pose as another node, and a client
certificate from the same CA (no node id) cannot join raft.

TLS wraps the peer layer's AES-GCM sealing with the cluster secret (node/raft/peers.py), it
does not replace it. Why: whatever admits a connection is the only thing between the network
and raft's state (and, before peer wire format 2, pickle); keeping the secret check inside
TLS means a mistake in certificate handling (a CA that also signs agents' client certificates, a
verification mode left at "optional") still does not open the raft port. What TLS adds is
what the shared secret cannot give: per-node identity, forward secrecy (a leaked secret does
not decrypt recorded traffic), and a standard, audited handshake. What it costs is measured
in benchmarks/ (RESULTS.md "TLS").
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from statekeeper.node.config import ClusterConfig, ConfigError

__all__ = [
    "TlsFiles",
    "client_port_context",
    "node_tls_files",
    "operator_tls_context",
    "raft_contexts",
]

# "required" is enforced by the HTTP server after the handshake (node/api/server.py says
# why): the handshake itself asks with CERT_OPTIONAL, which still refuses a bad certificate.
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_OPTIONAL}


TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL"


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path


def node_tls_files(cfg: ClusterConfig, node_id: str) -> TlsFiles:
    """The node's CA bundle, certificate and key paths (resolved; each must exist)."""
    t = cfg.tls
    base = Path(cfg.base_dir)
    files = TlsFiles(
        ca=base / t.ca_file,
        cert=base / t.cert_file.replace("{id}", node_id),
        key=base / t.key_file.replace("{id}", node_id),
    )
    for what, path in (("ca_file", files.ca), ("cert_file", files.cert), ("key_file", files.key)):
        if not path.is_file():
            raise ConfigError(f"tls.{what}: {path} does not exist (statekeeper tls init makes one)")
    return files


def _load(ctx: ssl.SSLContext, files: TlsFiles) -> ssl.SSLContext:
    try:
        ctx.load_cert_chain(files.cert, files.key)
        ctx.load_verify_locations(cafile=files.ca)
    except (ssl.SSLError, OSError) as e:  # names the files, never their content
        raise ConfigError(
            f"tls: cannot load {files.cert} / {files.key} / {files.ca}: {e}"
        ) from None
    return ctx


def client_port_context(cfg: ClusterConfig, node_id: str) -> ssl.SSLContext | None:
    """The server context of the node's HTTP port; None when [tls] is off."""
    if not cfg.tls.enabled:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # TLS 1.2: AEAD suites with forward secrecy only. Python's default list also offered
    # two CBC suites (ECDHE-ECDSA-AES128-SHA256 / AES256-SHA384; issue 27). TLS 1.3's suites
    # are all AEAD and not set here.
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.verify_mode = _CLIENT_AUTH[cfg.tls.client_auth]
    return _load(ctx, node_tls_files(cfg, node_id))


def raft_contexts(cfg: ClusterConfig, node_id: str) -> tuple[ssl.SSLContext, ssl.SSLContext] | None:
    """(accepting, dialling) contexts of the raft port; None when TLS is off there.

    Both verify the peer against the CA; the dialling side passes the peer's node id as
    the server name and checks the certificate names it."""
    if not (cfg.tls.enabled and cfg.tls.raft):
        return None
    files = node_tls_files(cfg, node_id)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname and CERT_REQUIRED
    for ctx in (server, client):
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        _load(ctx, files)
    return server, client


def operator_tls_context(cfg: ClusterConfig, node_id: str | None = None) -> ssl.SSLContext | None:
    """How a tool on a node's machine (the supervisor, the CLI), or a node itself (polling
    its peers' status, node/quota/peers.py), reaches the https port: trusting the cluster
    CA and, when the port asks for client certificates, presenting node `node_id`'s
    certificate (the first node's by default; it carries clientAuth). None when [tls] is
    off."""
    if not cfg.tls.enabled:
        return None
    files = node_tls_files(cfg, node_id or cfg.nodes[0].id)
    ctx = ssl.create_default_context(cafile=files.ca)
    if cfg.tls.client_auth != "none":
        ctx.load_cert_chain(files.cert, files.key)
    return ctx
