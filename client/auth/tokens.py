"""The bearer token format (docs/protocol.md, "Authentication and authorization"), shared by
the clients, the CLI and the node (node/api/authz.py).

A token is ``sk_<id>_<secret>``: ``id`` is 16 lowercase hex digits (public: it names the
token in listings, logs and denials), ``secret`` 32 random bytes in unpadded base64url. The
creator (client side) draws both here and sends the node only ``{id, hash}``, ``hash`` =
SHA-256 of the secret (hex): the token itself never crosses the wire at creation and never
reaches the store, a log or a backup.

The root token ``sk_root_<base64url(HMAC-SHA256(cluster secret, ROOT_LABEL))>`` is derived
from the cluster secret: whoever holds the secret (which already lets them join raft) can
derive it; it may do everything, never expires and changes only with the secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

__all__ = ["ROOT_LABEL", "new_token", "parse_token", "root_token", "secret_hash"]

ROOT_LABEL = b"statekeeper/root-token/v1"
ROOT_PREFIX = "sk_root_"
TOKEN_ID = re.compile(r"^[0-9a-f]{16}$")
_TOKEN = re.compile(r"^sk_([0-9a-f]{16})_([A-Za-z0-9_-]{16,128})$")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def root_token(secret: str) -> str:
    """The root token of the cluster whose secret is ``secret``."""
    if not secret:
        raise ValueError("the cluster secret is empty")
    return ROOT_PREFIX + _b64(hmac.new(secret.encode(), ROOT_LABEL, hashlib.sha256).digest())


def secret_hash(secret: str) -> str:
    """What the store keeps of a token's secret: SHA-256, 64 hex digits."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token() -> tuple[str, str, str]:
    """A fresh token: (token text, id, hash of its secret)."""
    token_id = secrets.token_hex(8)
    secret = _b64(secrets.token_bytes(32))
    return f"sk_{token_id}_{secret}", token_id, secret_hash(secret)


def parse_token(text: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed non-root token, else None."""
    m = _TOKEN.match(text)
    return (m.group(1), m.group(2)) if m else None
