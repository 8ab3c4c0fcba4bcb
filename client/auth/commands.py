"""The auth operations of both clients (docs/protocol.md, "Authentication and
authorization"), defined once like every operation (client/commands.py's
:class:`commands.Commands` inherits them): ``auth_token_create``, ``auth_token_revoke``
(writes), ``auth_token_list``, ``auth_whoami`` (reads).

``auth_token_create`` draws the token here (client/auth/tokens.py) and sends only its id
and the SHA-256 of its secret; the token text exists only in the returned
:class:`TokenCreated`. A retry resends the same id, hash and idempotency key, so it stands
for the same token.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..base import BaseClient, command
from ..errors import InvalidRequest
from ..responses import decode_ok
from ..wire import Request, new_idempotency_key, post
from .tokens import new_token

__all__ = ["DEFAULT_TOKEN_TTL", "AuthCommands", "TokenCreated", "TokenInfo"]

DEFAULT_TOKEN_TTL = dt.timedelta(days=30)
ROLES = ("reader", "writer", "admin")


@dataclass(frozen=True)
class TokenCreated:
    """A new token. ``token`` is the credential: shown once, stored nowhere else."""

    token: str
    id: str
    expires_ms: int  # 0: never

    def __repr__(self) -> str:  # never print the credential by accident
        return f"TokenCreated(id={self.id!r}, expires_ms={self.expires_ms})"


@dataclass(frozen=True)
class TokenInfo:
    """A token as listed (never its secret or hash); ``id`` None: auth is disabled."""

    id: str | None
    name: str
    grants: tuple[dict[str, str], ...]
    created_ms: int
    expires_ms: int  # 0: never


def _info(d: Mapping[str, Any]) -> TokenInfo:
    return TokenInfo(
        d.get("id"),
        d.get("name", ""),
        tuple(dict(g) for g in d.get("grants", ())),
        d.get("created_ms", 0),
        d.get("expires_ms", 0),
    )


def ttl_ms_of(ttl: dt.timedelta | float | None) -> int:
    """A TTL (timedelta or seconds; None or 0: never) in ms."""
    if ttl is None:
        return 0
    seconds = ttl.total_seconds() if isinstance(ttl, dt.timedelta) else float(ttl)
    if seconds < 0:
        raise InvalidRequest("ttl must be >= 0 (0: never expires)", code="invalid_argument")
    return int(seconds * 1000)


def grants_of(
    grants: Sequence[Mapping[str, str]] | None,
    ns: str | Sequence[str] | None,
    role: str | None,
    prefix: str,
) -> list[dict[str, str]]:
    """The grants argument, or one grant per ``ns`` with ``role`` and ``prefix``."""
    if grants is not None:
        if ns is not None or role is not None:
            raise InvalidRequest("give grants, or ns and role, not both", code="invalid_argument")
        return [dict(g) for g in grants]
    if ns is None or role is None:
        raise InvalidRequest("give grants, or ns and role", code="invalid_argument")
    if role not in ROLES:
        raise InvalidRequest(f"role must be one of {', '.join(ROLES)}", code="invalid_argument")
    names = [ns] if isinstance(ns, str) else list(ns)
    return [{"ns": n, "prefix": prefix, "role": role} for n in names]


def create_request(
    grants: list[dict[str, str]], ttl_ms: int, name: str, idempotency_key: str | None
) -> Request:
    token, token_id, digest = new_token()
    ik = idempotency_key or new_idempotency_key()
    body = {
        "id": token_id,
        "hash": digest,
        "name": name,
        "grants": grants,
        "ttl_ms": ttl_ms,
        "idempotency_key": ik,
    }

    def parse(status: int, ctype: str | None, raw: bytes) -> TokenCreated:
        d = decode_ok(status, ctype, raw, None)
        return TokenCreated(token, d["id"], d.get("expires_ms", 0))

    return post("/v1/auth/tokens/create", body, parse, "auth_token_create", ik)


class AuthCommands(BaseClient):
    """Token management and ``auth_whoami``."""

    @command
    def auth_token_create(
        self,
        grants: Sequence[Mapping[str, str]] | None = None,
        *,
        ns: str | Sequence[str] | None = None,
        role: str | None = None,
        prefix: str = "",
        ttl: dt.timedelta | float | None = DEFAULT_TOKEN_TTL,
        name: str = "",
        idempotency_key: str | None = None,
    ) -> TokenCreated:
        """Create a token: ``grants`` (``[{"ns", "prefix"?, "role"}]``), or ``ns`` (one or
        many) with ``role`` ("reader", "writer", "admin") and ``prefix``. ``ttl``: a
        timedelta or seconds (default 30 days; 0 or None: never expires). The caller needs
        admin over every grant it hands out.

        Returns:
            TokenCreated(token, id, expires_ms): ``token`` is shown only here.
        """
        request = create_request(
            grants_of(grants, ns, role, prefix), ttl_ms_of(ttl), name, idempotency_key
        )
        return self._execute(request)

    @command
    def auth_token_revoke(self, token_id: str, *, idempotency_key: str | None = None) -> int:
        """Revoke the token with this id; every node refuses it once it applied the revoke
        (within one raft round). Returns the revision. Raises NotFound if it does not exist."""
        ik = idempotency_key or new_idempotency_key()

        def parse(status: int, ctype: str | None, raw: bytes) -> int:
            return decode_ok(status, ctype, raw, None)["revision"]

        body = {"id": token_id, "idempotency_key": ik}
        return self._execute(post("/v1/auth/tokens/revoke", body, parse, "auth_token_revoke", ik))

    @command
    def auth_token_list(self) -> list[TokenInfo]:
        """Every token: id, name, grants, created_ms, expires_ms (never a secret)."""

        def parse(status: int, ctype: str | None, raw: bytes) -> list[TokenInfo]:
            return [_info(t) for t in decode_ok(status, ctype, raw, None)["tokens"]]

        return self._execute(post("/v1/auth/tokens/list", {}, parse, "auth_token_list"))

    @command
    def auth_whoami(self) -> TokenInfo:
        """The token this client sends: id ("root" for the root token), name, grants."""

        def parse(status: int, ctype: str | None, raw: bytes) -> TokenInfo:
            return _info(decode_ok(status, ctype, raw, None))

        return self._execute(post("/v1/auth/whoami", {}, parse, "auth_whoami"))
