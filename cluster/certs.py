"""A local certificate authority for a dev or test cluster (the `cryptography` package).

`statekeeper tls init` (cluster/tls_cli.py) and `statekeeper cluster up --tls` call
`init_cluster_tls`; tests call it too. Layout, in one directory (default `tls/` next to
cluster.toml), private keys created 0600 (never world-readable, even for a moment):

    ca.pem, ca-key.pem          the CA (EC P-256, 10 years): it signs everything below
    <node id>.pem, <node id>-key.pem
                                a node: serverAuth + clientAuth (the raft port is mutual),
                                SANs: DNS <node id> (peers check it), DNS localhost, the
                                node's host (IP or DNS), IP 127.0.0.1, and any extras
    client-<name>.pem, client-<name>-key.pem
                                a client certificate (clientAuth only; no node id, so it
                                cannot join raft), for [tls] client_auth = "optional"/"required"

For production, bring certificates from your own CA: [tls] only needs paths. EC keys make
handshakes cheap (an ECDSA P-256 signature costs ~0.1 ms against ~1.5 ms for RSA-2048).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertAuthority", "init_cluster_tls", "write_private"]

CA_DAYS = 3650
LEAF_DAYS = 825  # the longest validity clients such as macOS accept for a server certificate


def write_private(path: Path, data: bytes) -> None:
    """Create `path` (not existing) with mode 0600 from the start and write `data`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


@dataclass
class CertAuthority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, name: str, now: datetime.datetime | None = None) -> CertAuthority:
        now = now or datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertAuthority:
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey), "the CA key must be an EC key"
        return cls(key, x509.load_pem_x509_certificate(cert_path.read_bytes()))

    def issue(
        self,
        common_name: str,
        sans: list[str],
        server: bool,
        now: datetime.datetime | None = None,
        days: int = LEAF_DAYS,
    ) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of a leaf; `server`: serverAuth + clientAuth."""
        now = now or datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server:
            usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
        )
        if sans:
            unique = list(dict.fromkeys(sans))
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_san(s) for s in unique]), critical=False
            )
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def init_cluster_tls(
    directory: Path,
    nodes: list[tuple[str, str]],
    cluster_name: str = "statekeeper",
    extra_sans: list[str] | None = None,
    clients: list[str] | None = None,
) -> list[Path]:
    """Write a CA (unless `directory` has one) and a certificate per (node id, host) not
    yet there, plus client certificates named in `clients`. Returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = directory / "ca.pem", directory / "ca-key.pem"
    written: list[Path] = []
    if ca_cert.exists() and ca_key.exists():
        ca = CertAuthority.load(ca_cert, ca_key)
    else:
        ca = CertAuthority.create(cluster_name)
        write_private(ca_key, _pem_key(ca.key))
        ca_cert.write_bytes(ca.cert_pem())
        written += [ca_cert, ca_key]
    for node_id, host in nodes:
        cert_path, key_path = directory / f"{node_id}.pem", directory / f"{node_id}-key.pem"
        if cert_path.exists() and key_path.exists():
            continue
        sans = [node_id, "localhost", host, "127.0.0.1", *(extra_sans or [])]
        cert, key = ca.issue(node_id, sans, server=True)
        cert_path.unlink(missing_ok=True)
        key_path.unlink(missing_ok=True)
        write_private(key_path, key)
        cert_path.write_bytes(cert)
        written += [cert_path, key_path]
    for name in clients or []:
        cert_path = directory / f"client-{name}.pem"
        key_path = directory / f"client-{name}-key.pem"
        if cert_path.exists() and key_path.exists():
            continue
        cert, key = ca.issue(name, [], server=False)
        cert_path.unlink(missing_ok=True)
        key_path.unlink(missing_ok=True)
        write_private(key_path, key)
        cert_path.write_bytes(cert)
        written += [cert_path, key_path]
    return written
