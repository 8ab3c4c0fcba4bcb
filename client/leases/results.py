"""The results of the lease operations (docs/protocol.md, "Leases"): one frozen dataclass
per kind of answer, and the parsers that build them from a decoded answer."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "KeepaliveResult",
    "LeaseGrant",
    "LeaseInfo",
    "LeaseList",
    "LeaseState",
    "RevokeResult",
    "grant_result",
    "keepalive_result",
    "lease_info",
    "lease_list",
    "revoke_result",
]


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """Result of ``lease_grant``: the new lease's id, TTL and expiry (cluster time in ms
    since the epoch: the first leader's wall clock, advanced by monotonic time since, so it
    runs behind the wall clock by the cluster's election gaps and outages), and the store's
    revision when it was granted: a grant changes no key and takes no revision of its own
    (``replayed``: an idempotent retry)."""

    lease: int
    ttl_ms: int
    expires_ms: int
    revision: int
    replayed: bool = False

    @property
    def id(self) -> int:
        """The lease's id, as on a Lease: what put(lease=), append(lease=), lease_revoke,
        lease_keepalive and lease_info take (issue 30 item 3)."""
        return self.lease

    @property
    def ttl(self) -> float:
        """The TTL in seconds."""
        return self.ttl_ms / 1000


@dataclass(frozen=True, slots=True)
class LeaseState:
    """One renewed lease of a keepalive: its TTL and new expiry (ms)."""

    lease: int
    ttl_ms: int
    expires_ms: int

    @property
    def id(self) -> int:
        """The lease's id, as on a Lease: what put(lease=), append(lease=), lease_revoke,
        lease_keepalive and lease_info take (issue 30 item 3)."""
        return self.lease


@dataclass(frozen=True, slots=True)
class KeepaliveResult:
    """Result of ``lease_keepalive``: the renewed leases, and the ids that were not
    renewed because they no longer exist (revoked or expired, their keys deleted).
    ``revision`` is the store's current revision: a keepalive takes none."""

    revision: int
    leases: list[LeaseState]
    missing: list[int]

    def __iter__(self) -> Iterator[LeaseState]:
        return iter(self.leases)


@dataclass(frozen=True, slots=True)
class RevokeResult:
    """Result of ``lease_revoke``: the lease, its ``deleted`` keys and its
    ``deleted_streams`` streams (each with all its events) are gone at ``revision``."""

    revision: int
    deleted: int
    replayed: bool = False
    deleted_streams: int = 0


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """A lease as ``lease_info`` shows it (``lease_list`` leaves out ``remaining_ms``,
    ``keys``, ``streams`` and ``revision``).

    Attributes:
        lease: its id.
        ns: its namespace (its keys are in it).
        ttl_ms: its TTL.
        expires_ms: when it expires unless renewed (leader time, ms since the epoch).
        remaining_ms: expires_ms minus the serving node's clock (0: due).
        keys: the first 1000 attached keys; ``more_keys``: there are more.
        revision: the revision the read was served at.
        streams: the first 1000 attached streams (appended to with this lease);
            ``more_streams``: there are more.
    """

    lease: int
    ns: str
    ttl_ms: int
    expires_ms: int
    remaining_ms: int | None = None
    keys: list[str] = field(default_factory=list)
    more_keys: bool = False
    revision: int = field(default=0, compare=False)
    streams: list[str] = field(default_factory=list)
    more_streams: bool = False

    @property
    def id(self) -> int:
        """The lease's id, as on a Lease (issue 30 item 3)."""
        return self.lease


@dataclass(frozen=True, slots=True)
class LeaseList:
    """One page of ``lease_list``: leases in id order; ``more``: pass ``after`` = the last
    id for the next page."""

    leases: list[LeaseInfo]
    revision: int
    more: bool = False

    def __iter__(self) -> Iterator[LeaseInfo]:
        return iter(self.leases)

    def __len__(self) -> int:
        return len(self.leases)


def grant_result(d: Mapping[str, Any]) -> LeaseGrant:
    return LeaseGrant(
        d.get("lease", 0),
        d.get("ttl_ms", 0),
        d.get("expires_ms", 0),
        d.get("revision", 0),
        bool(d.get("replayed", False)),
    )


def keepalive_result(d: Mapping[str, Any]) -> KeepaliveResult:
    renewed, missing = [], []
    for item in d.get("leases") or ():
        if "error" in item:
            missing.append(item.get("lease", 0))
        else:
            renewed.append(
                LeaseState(item.get("lease", 0), item.get("ttl_ms", 0), item.get("expires_ms", 0))
            )
    return KeepaliveResult(d.get("revision", 0), renewed, missing)


def revoke_result(d: Mapping[str, Any]) -> RevokeResult:
    return RevokeResult(
        d.get("revision", 0),
        d.get("deleted", 0),
        bool(d.get("replayed", False)),
        d.get("deleted_streams", 0),
    )


def lease_info(d: Mapping[str, Any], revision: int | None = None) -> LeaseInfo:
    return LeaseInfo(
        d.get("lease", 0),
        d.get("ns", ""),
        d.get("ttl_ms", 0),
        d.get("expires_ms", 0),
        d.get("remaining_ms"),
        list(d.get("keys") or ()),
        bool(d.get("more_keys", False)),
        d.get("revision", 0) if revision is None else revision,
        list(d.get("streams") or ()),
        bool(d.get("more_streams", False)),
    )


def lease_list(d: Mapping[str, Any]) -> LeaseList:
    leases = [lease_info(x, 0) for x in d.get("leases") or ()]
    return LeaseList(leases, d.get("revision", 0), bool(d.get("more", False)))
