"""The client side of TLS: which CA to trust and which certificate to present.

Both clients take ``ca=`` (a PEM bundle that signed the nodes' certificates; without it the
system's trust store is used), ``cert=`` / ``key=`` (a client certificate, for a cluster
with ``[tls] client_auth``), or a ready ``tls=ssl.SSLContext``. Unset arguments fall back
to the environment, like etcdctl's ETCDCTL_CACERT: ``STATEKEEPER_CA_FILE``,
``STATEKEEPER_CERT_FILE``, ``STATEKEEPER_KEY_FILE``. The context verifies the server's
certificate and its name (the URL's host must be among its subject alternative names;
`statekeeper tls init` writes the node's host, ``localhost`` and ``127.0.0.1``).
"""

from __future__ import annotations

import os
import ssl

__all__ = ["CA_ENV", "CERT_ENV", "KEY_ENV", "client_tls_context"]

CA_ENV = "STATEKEEPER_CA_FILE"
CERT_ENV = "STATEKEEPER_CERT_FILE"
KEY_ENV = "STATEKEEPER_KEY_FILE"


def client_tls_context(
    ca: str | os.PathLike[str] | None = None,
    cert: str | os.PathLike[str] | None = None,
    key: str | os.PathLike[str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> ssl.SSLContext:
    """The context for https endpoints (``tls`` itself when given)."""
    if tls is not None:
        return tls
    ca = ca or os.environ.get(CA_ENV) or None
    cert = cert or os.environ.get(CERT_ENV) or None
    key = key or os.environ.get(KEY_ENV) or None
    if key and not cert:
        raise ValueError(f"a client key needs its certificate (cert= or ${CERT_ENV})")
    ctx = ssl.create_default_context(cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx
