"""The idempotency operation of both clients (docs/protocol.md, "Idempotency status"),
defined once like every operation (client/commands.py's :class:`commands.Commands` inherits
it): ``idempotency_status``, a read.

Every write of this client carries an idempotency key (a uuid4, or the one given); a write
whose outcome is unknown raises with it (``err.idempotency_key``). Re-sending the write with
that key is always safe (it replays if it applied); ``idempotency_status`` answers whether
it applied without sending it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..base import BaseClient, command
from ..responses import decode_ok
from ..wire import Request, post, read_options

__all__ = ["IdempotencyCommands", "IdempotencyStatus", "status_request"]


@dataclass(frozen=True, slots=True)
class IdempotencyStatus:
    """Result of ``idempotency_status``.

    ``applied`` True: the write sent with the key was applied, at ``revision`` (the revision
    after it); its record expires at ``expires_ms`` (cluster time, ms since the epoch),
    after which a re-send with the key would apply again.

    ``applied`` False: no write with the key was applied as of ``revision`` (the revision
    the read was served at), OR one was applied at or before ``remembered_after_ms``
    (cluster time: the cluster's clock minus its idempotency_seconds) and its record has
    expired. A write sent after ``remembered_after_ms`` (by your clock, give or take the
    clocks' skew) that is not applied is not applied; but one still in flight (its request
    timed out before it committed) may apply later: re-send it with the same key to settle
    it."""

    applied: bool
    revision: int
    expires_ms: int | None = None
    remembered_after_ms: int | None = None


def _status(data: dict[str, Any]) -> IdempotencyStatus:
    return IdempotencyStatus(
        applied=data["applied"],
        revision=data["revision"],
        expires_ms=data.get("expires_ms"),
        remembered_after_ms=data.get("remembered_after_ms"),
    )


def status_request(ns: str, key: str, consistency: str | None, min_revision: int | None) -> Request:
    """POST /v1/idempotency/status; ``parse`` returns an IdempotencyStatus."""
    body: dict[str, Any] = {"ns": ns, "idempotency_key": key}
    read_options(body, None, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> IdempotencyStatus:
        return _status(decode_ok(status, ctype, raw, ns))

    return post("/v1/idempotency/status", body, parse, "idempotency_status")


class IdempotencyCommands(BaseClient):
    """What became of a write sent with an idempotency key."""

    @command
    def idempotency_status(
        self,
        key: str,
        ns: str | None = None,
        *,
        consistency: str | None = None,
        min_revision: int | None = None,
    ) -> IdempotencyStatus:
        """Was the write sent with idempotency key ``key`` (in ``ns``: keys are scoped to
        the write's namespace) applied? Linearizable by default, like every read.
        :class:`IdempotencyStatus` says what ``applied`` False can and cannot mean."""
        request = status_request(self._ns(ns), key, self._consistency(consistency), min_revision)
        return self._execute(request)
