"""The lease operations of both clients (docs/protocol.md, "Leases"), defined once like every
operation (see client/commands.py, whose :class:`commands.Commands` inherits them), and
their requests: ``lease_grant``, ``lease_keepalive``, ``lease_revoke`` are writes,
``lease_info`` and ``lease_list`` reads. :meth:`LeaseCommands.lease` returns a lease that
keeps itself alive in the background (client/leases/keeper.py: a thread on Client, an
asyncio task on AsyncClient; one keepalive op per client and tick for all its leases).

TTLs are seconds here (the wire's are ms). A lease argument is a lease id or a Lease.
"""

from __future__ import annotations

import threading
from typing import Any

from ..base import BaseClient, command
from ..errors import InvalidRequest
from ..ops import lease_id, ttl_ms
from ..responses import decode_ok
from ..wire import Request, new_idempotency_key, post, read_options
from .results import (
    KeepaliveResult,
    LeaseGrant,
    LeaseInfo,
    LeaseList,
    RevokeResult,
    grant_result,
    keepalive_result,
    lease_info,
    lease_list,
    revoke_result,
)

__all__ = ["MAX_KEEPALIVE_LEASES", "LeaseCommands"]

MAX_KEEPALIVE_LEASES = 1000
"""Most lease ids one lease_keepalive op takes (the keepers split larger sets)."""

_KEEPER_LOCK = threading.Lock()  # creating a client's keeper (rare; any thread)


def grant_request(ns: str, ttl: float, idempotency_key: str | None = None) -> Request:
    """POST /v1/leases/grant; ``parse`` returns a LeaseGrant."""
    ik = idempotency_key or new_idempotency_key()
    body = {"ns": ns, "ttl_ms": ttl_ms(ttl), "idempotency_key": ik}

    def parse(status: int, ctype: str | None, raw: bytes) -> LeaseGrant:
        return grant_result(decode_ok(status, ctype, raw, ns))

    return post("/v1/leases/grant", body, parse, "lease_grant", ik)


def keepalive_request(ids: list[int]) -> Request:
    """POST /v1/leases/keepalive (no idempotency key: a renewal sent twice is harmless);
    ``parse`` returns a KeepaliveResult."""
    if not 1 <= len(ids) <= MAX_KEEPALIVE_LEASES:
        raise InvalidRequest(
            f"lease_keepalive takes 1..{MAX_KEEPALIVE_LEASES} leases, got {len(ids)}",
            code="invalid_argument",
        )

    def parse(status: int, ctype: str | None, raw: bytes) -> KeepaliveResult:
        return keepalive_result(decode_ok(status, ctype, raw, None))

    return post("/v1/leases/keepalive", {"leases": ids}, parse, "lease_keepalive")


def revoke_request(lease: int, idempotency_key: str | None = None) -> Request:
    """POST /v1/leases/revoke; ``parse`` returns a RevokeResult or raises LeaseNotFound."""
    ik = idempotency_key or new_idempotency_key()

    def parse(status: int, ctype: str | None, raw: bytes) -> RevokeResult:
        return revoke_result(decode_ok(status, ctype, raw, None))

    return post(
        "/v1/leases/revoke", {"lease": lease, "idempotency_key": ik}, parse, "lease_revoke", ik
    )


def info_request(lease: int, consistency: str | None, min_revision: int | None) -> Request:
    """POST /v1/leases/info; ``parse`` returns a LeaseInfo or raises LeaseNotFound."""
    body: dict[str, Any] = {"lease": lease}
    read_options(body, None, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> LeaseInfo:
        return lease_info(decode_ok(status, ctype, raw, None))

    return post("/v1/leases/info", body, parse, "lease_info")


def list_request(
    after: int | None, limit: int | None, consistency: str | None, min_revision: int | None
) -> Request:
    """POST /v1/leases/list; ``parse`` returns a LeaseList."""
    body: dict[str, Any] = {}
    if after is not None:
        body["after"] = lease_id(after)
    if limit is not None:
        body["limit"] = limit
    read_options(body, None, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> LeaseList:
        return lease_list(decode_ok(status, ctype, raw, None))

    return post("/v1/leases/list", body, parse, "lease_list")


class LeaseCommands(BaseClient):
    """Lease operations. A transport sets ``_lease_type`` (what :meth:`lease` returns) and
    ``_keeper_type`` (what keeps its leases alive); see client/leases/keeper.py."""

    _lease_type: Any
    _keeper_type: Any
    _lease_keeper: Any = None

    def _keeper(self) -> Any:
        """This client's keepalive keeper, created on first use."""
        with _KEEPER_LOCK:
            if self._lease_keeper is None:
                self._lease_keeper = self._keeper_type(self)
            return self._lease_keeper

    def lease(self, ttl: float = 10.0, *, ns: str | None = None) -> Any:
        """A lease of ``ttl`` seconds that this client keeps alive in the background (every
        ttl/3, one keepalive op for all the client's leases) until it is revoked or the
        client is closed. Attach keys with ``put(key, value, lease=lease)`` and streams with
        ``append(stream, events, lease=lease)``.

        On a Client the lease is granted now and is a context manager that revokes it on
        exit::

            with client.lease(10) as lease:
                client.put("agent-7/alive", "yes", lease=lease)

        On an AsyncClient it is granted when awaited or entered::

            async with client.lease(10) as lease:      # or: lease = await client.lease(10)
                await client.put("agent-7/alive", "yes", lease=lease)

        ``lease.id``, ``lease.alive`` (False once revoked, reported gone, or not renewed
        within its TTL), ``lease.revoke()`` (awaited on an AsyncClient),
        ``lease.on_lost(fn)``: ``fn(lease)`` once when the lease is lost (reported gone, or
        not renewed within its TTL; see client/leases/keeper.py).
        """
        ttl_ms(ttl)  # refuse a bad TTL now, on both clients
        return self._lease_type(self, ttl, self._ns(ns))

    @command
    def lease_grant(
        self, ttl: float, *, ns: str | None = None, idempotency_key: str | None = None
    ) -> LeaseGrant:
        """Grant a lease of ``ttl`` seconds in ``ns`` (nobody keeps it alive: see
        :meth:`lease` for that).

        Returns:
            LeaseGrant(lease, ttl_ms, expires_ms, revision).

        Raises:
            InvalidRequest: ``ttl`` below the node's min_lease_ttl_ms (default 2 s) or
                above one day.
        """
        return self._execute(grant_request(self._ns(ns), ttl, idempotency_key))

    @command
    def lease_keepalive(self, *leases: Any) -> KeepaliveResult:
        """Renew these leases (ids or Leases, 1..1000) in one op: each expires ``ttl``
        after now again. Renewing is idempotent, so retries need no key.

        Returns:
            KeepaliveResult(revision, leases, missing): ``missing`` are the ids that no
            longer exist (revoked or expired; their keys are gone).
        """
        return self._execute(keepalive_request([lease_id(x) for x in leases]))

    @command
    def lease_revoke(self, lease: Any, *, idempotency_key: str | None = None) -> RevokeResult:
        """Revoke ``lease`` now: it and every key attached to it are deleted at one
        revision.

        Returns:
            RevokeResult(revision, deleted).

        Raises:
            LeaseNotFound: it does not exist (revoked or expired already).
        """
        return self._execute(revoke_request(lease_id(lease), idempotency_key))

    @command
    def lease_info(
        self,
        lease: Any,
        *,
        consistency: str | None = None,
        min_revision: int | None = None,
    ) -> LeaseInfo:
        """``lease``'s namespace, TTL, expiry, remaining time and (first 1000) keys.

        Raises:
            LeaseNotFound: it does not exist (never granted, revoked or expired).
        """
        request = info_request(lease_id(lease), self._consistency(consistency), min_revision)
        return self._execute(request)

    @command
    def lease_list(
        self,
        *,
        after: int | None = None,
        limit: int | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
    ) -> LeaseList:
        """One page of every lease (all namespaces) in id order, after lease id ``after``:
        LeaseList(leases, revision, more); for the next page pass ``after`` = the last id."""
        request = list_request(after, limit, self._consistency(consistency), min_revision)
        return self._execute(request)
