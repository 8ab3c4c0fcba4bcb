"""The results of the lock operations (docs/protocol.md, "Locks and fencing"): one frozen
dataclass per kind of answer, and the parsers that build them from a decoded answer."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LockAcquired",
    "LockInfo",
    "LockList",
    "LockReleased",
    "LockWaiter",
    "acquire_result",
    "lock_list",
    "release_result",
]


@dataclass(frozen=True, slots=True)
class LockAcquired:
    """Result of ``lock_acquire``: this waiter's ``key`` and ``fence`` (the revision that
    enqueued it), the holder's fence, whether this waiter holds the lock, and the key of the
    waiter just ahead (None if acquired), to watch for its deletion from ``revision`` + 1."""

    name: str
    key: str
    fence: int
    holder_fence: int
    acquired: bool
    ahead: str | None
    revision: int
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class LockReleased:
    """Result of ``lock_release``: the waiter key is gone at ``revision``; ``held``: it
    held the lock (the next waiter holds it now)."""

    name: str
    fence: int
    held: bool
    revision: int
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class LockWaiter:
    """One waiter of a lock: its key, fence, lease (None if detached) and owner."""

    key: str
    fence: int
    lease: int | None
    owner: str | None


@dataclass(frozen=True, slots=True)
class LockInfo:
    """A lock as ``lock_list`` shows it: the holder's fence and lease, how many wait
    (holder included), and the queue holder first (the first 100)."""

    name: str
    holder_fence: int
    holder_lease: int | None
    count: int
    waiters: list[LockWaiter] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LockList:
    """One page of ``lock_list``; iterate it for the LockInfos. ``more``: pass ``after`` =
    the last name for the next page."""

    locks: list[LockInfo]
    revision: int
    more: bool

    def __iter__(self) -> Iterator[LockInfo]:
        return iter(self.locks)


def acquire_result(d: Mapping[str, Any]) -> LockAcquired:
    return LockAcquired(
        d.get("name", ""),
        d.get("key", ""),
        d.get("fence", 0),
        d.get("holder_fence", 0),
        bool(d.get("acquired", False)),
        d.get("ahead"),
        d.get("revision", 0),
        bool(d.get("replayed", False)),
    )


def release_result(d: Mapping[str, Any]) -> LockReleased:
    return LockReleased(
        d.get("name", ""),
        d.get("fence", 0),
        bool(d.get("held", False)),
        d.get("revision", 0),
        bool(d.get("replayed", False)),
    )


def _waiter(d: Mapping[str, Any]) -> LockWaiter:
    return LockWaiter(d.get("key", ""), d.get("fence", 0), d.get("lease"), d.get("owner"))


def lock_list(d: Mapping[str, Any]) -> LockList:
    locks = [
        LockInfo(
            x.get("name", ""),
            x.get("holder_fence", 0),
            x.get("holder_lease"),
            x.get("count", 0),
            [_waiter(w) for w in x.get("waiters") or ()],
        )
        for x in d.get("locks") or ()
    ]
    return LockList(locks, d.get("revision", 0), bool(d.get("more", False)))
