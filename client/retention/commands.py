"""The retention operations of both clients (docs/protocol.md, "Retention"), defined once
like every operation (client/commands.py's :class:`commands.Commands` inherits them):
``retention_set`` and ``retention_delete`` are writes, ``retention_list`` and
``retention_status`` reads, and ``truncate_stream`` is the stream primitive policies use.
Results are the node's answers as dicts. Policies are enforced by the cluster (the
leader's GC task), not by this client.

Ages are seconds here (a number, a ``datetime.timedelta``, or a text like ``"30d"``,
``"12h"``, ``"90m"``, ``"45s"``); the wire's ``max_age_s`` is whole seconds.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from ..base import BaseClient, command
from ..errors import InvalidRequest
from ..responses import decode_ok
from ..wire import new_idempotency_key, post, read_options

__all__ = ["RetentionCommands", "parse_age"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_age(age: Any) -> int:
    """Whole seconds (>= 1) of an age: seconds, a timedelta, or "30d" / "12h" / "90m"."""
    if isinstance(age, datetime.timedelta):
        seconds = age.total_seconds()
    elif isinstance(age, int | float) and not isinstance(age, bool):
        seconds = float(age)
    elif isinstance(age, str) and (m := _AGE.match(age)):
        seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    else:
        raise InvalidRequest(
            f"max_age must be seconds, a timedelta or a text like '30d', got {age!r}",
            code="invalid_argument",
        )
    if seconds < 1:
        raise InvalidRequest(f"max_age must be at least 1 s, got {age!r}", code="invalid_argument")
    return int(seconds)


def _request(path: str, body: dict[str, Any], op: str, ns: str | None, ik: str | None = None):
    def parse(status: int, ctype: str | None, raw: bytes) -> dict[str, Any]:
        return decode_ok(status, ctype, raw, ns)

    return post(path, body, parse, op, ik)


class RetentionCommands(BaseClient):
    """Retention policies and stream truncation."""

    @command
    def retention_set(
        self,
        prefix: str,
        *,
        target: str = "keys",
        keep_last: int | None = None,
        keep_every: int | None = None,
        max_age: Any = None,
        within: str | None = None,
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Create or replace the policy of (ns, target, prefix): keep the ``keep_last``
        newest keys of each group (keys grouped by their last "/") or events of each
        stream, also every ``keep_every``-th older key (those whose key ends in a
        multiple of it: checkpoint numbers), and drop what is older than ``max_age``
        (keep_last still protects the newest N). ``within`` (target "keys" only): a
        directory name; the rules then apply only to the groups whose directory's last
        segment is it and leave every other key under the prefix alone (agents:
        ``retention_set("agent/", within="ckpt", ...)`` trims checkpoint manifests, never
        their chunks or heads). Returns {revision, policy, created}."""
        ns = self._ns(ns)
        ik = idempotency_key or new_idempotency_key()
        body: dict[str, Any] = {"ns": ns, "prefix": prefix, "target": target}
        if keep_last is not None:
            body["keep_last"] = keep_last
        if keep_every is not None:
            body["keep_every"] = keep_every
        if max_age is not None:
            body["max_age_s"] = parse_age(max_age)
        if within is not None:
            body["within"] = within
        body["idempotency_key"] = ik
        return self._execute(_request("/v1/retention/set", body, "retention_set", ns, ik))

    @command
    def retention_delete(
        self,
        prefix: str,
        *,
        target: str = "keys",
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Remove the policy of (ns, target, prefix): {revision, deleted: 0 | 1}."""
        ns = self._ns(ns)
        ik = idempotency_key or new_idempotency_key()
        body = {"ns": ns, "prefix": prefix, "target": target, "idempotency_key": ik}
        return self._execute(_request("/v1/retention/delete", body, "retention_delete", ns, ik))

    @command
    def retention_list(
        self,
        *,
        ns: str | None = None,
        all_namespaces: bool = False,
        limit: int | None = None,
        continuation: str | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
    ) -> dict[str, Any]:
        """One page of policies (of ``ns``, or of every namespace with
        ``all_namespaces=True``): {revision, policies, more, continuation?}."""
        body: dict[str, Any] = {} if all_namespaces else {"ns": self._ns(ns)}
        if limit is not None:
            body["limit"] = limit
        if continuation is not None:
            body["continuation"] = continuation
        read_options(body, None, self._consistency(consistency), min_revision)
        return self._execute(_request("/v1/retention/list", body, "retention_list", None))

    @command
    def retention_status(
        self,
        *,
        ns: str | None = None,
        all_namespaces: bool = False,
        consistency: str | None = None,
        min_revision: int | None = None,
    ) -> dict[str, Any]:
        """What each policy holds and would free now, the last gc per namespace, and the
        store-wide history and idempotency retention (docs/protocol.md, "Retention")."""
        body: dict[str, Any] = {} if all_namespaces else {"ns": self._ns(ns)}
        read_options(body, None, self._consistency(consistency), min_revision)
        return self._execute(_request("/v1/retention/status", body, "retention_status", None))

    @command
    def truncate_stream(
        self,
        stream: str,
        before_seq: int,
        *,
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Remove ``stream``'s events with seq < ``before_seq`` (and their id dedup
        records): {revision, stream, first_seq, last_seq, removed, more}; ``more`` means
        more than one op's worth (10000 events) remained: call again.

        Raises:
            StreamNotFound: the stream does not exist.
        """
        ns = self._ns(ns)
        ik = idempotency_key or new_idempotency_key()
        body = {"ns": ns, "stream": stream, "before_seq": before_seq, "idempotency_key": ik}
        return self._execute(_request("/v1/streams/truncate", body, "truncate_stream", ns, ik))
