"""The lock operations of both clients (docs/protocol.md, "Locks and fencing"), defined once
like every operation (see client/commands.py, whose :class:`commands.Commands` inherits
them), and their requests: ``lock_acquire`` and ``lock_release`` are writes, ``lock_list``
a read. :meth:`LockCommands.lock` returns a lock held on a lease that this client keeps
alive (client/locks/lock.py: a context manager on Client, an async one on AsyncClient).

A lock alone is advisory: pass the lock as the ``fence`` of your writes
(``put(..., fence=lock)``, ``txn(..., fence=lock)``) and the server refuses them once the
lock has moved on (``FenceMismatch``). TTLs are seconds here (the wire's are ms).
"""

from __future__ import annotations

from typing import Any

from ..base import BaseClient, command
from ..errors import InvalidRequest
from ..ops import lease_id, ttl_ms
from ..responses import decode_ok
from ..wire import Request, check_key, new_idempotency_key, post, read_options
from .results import LockAcquired, LockList, LockReleased, acquire_result, lock_list, release_result

__all__ = ["LockCommands"]


def acquire_request(
    ns: str,
    name: str,
    lease: int,
    *,
    wait: bool = True,
    owner: str | None = None,
    idempotency_key: str | None = None,
) -> Request:
    """POST /v1/locks/acquire; ``parse`` returns a LockAcquired or raises LockHeld (with
    ``wait=False``), LeaseNotFound."""
    ik = idempotency_key or new_idempotency_key()
    body: dict[str, Any] = {"ns": ns, "name": check_key(name), "lease": lease}
    if owner is not None:
        body["owner"] = owner
    if not wait:
        body["wait"] = False
    body["idempotency_key"] = ik

    def parse(status: int, ctype: str | None, raw: bytes) -> LockAcquired:
        return acquire_result(decode_ok(status, ctype, raw, ns))

    return post("/v1/locks/acquire", body, parse, "lock_acquire", ik)


def release_request(ns: str, name: str, fence: int, idempotency_key: str | None = None) -> Request:
    """POST /v1/locks/release; ``parse`` returns a LockReleased or raises LockNotHeld."""
    ik = idempotency_key or new_idempotency_key()
    body = {"ns": ns, "name": check_key(name), "fence": fence, "idempotency_key": ik}

    def parse(status: int, ctype: str | None, raw: bytes) -> LockReleased:
        return release_result(decode_ok(status, ctype, raw, ns))

    return post("/v1/locks/release", body, parse, "lock_release", ik)


def list_request(
    ns: str,
    prefix: str | None,
    after: str | None,
    limit: int | None,
    consistency: str | None,
    min_revision: int | None,
) -> Request:
    """POST /v1/locks/list; ``parse`` returns a LockList."""
    body: dict[str, Any] = {"ns": ns}
    for name, value in (("prefix", prefix), ("after", after), ("limit", limit)):
        if value is not None:
            body[name] = value
    read_options(body, None, consistency, min_revision)

    def parse(status: int, ctype: str | None, raw: bytes) -> LockList:
        return lock_list(decode_ok(status, ctype, raw, ns))

    return post("/v1/locks/list", body, parse, "lock_list")


class LockCommands(BaseClient):
    """Lock operations. A transport sets ``_lock_type`` (what :meth:`lock` returns; see
    client/locks/lock.py)."""

    _lock_type: Any

    def lock(
        self,
        name: str,
        ttl: float = 10.0,
        *,
        lease: Any = None,
        wait: bool = True,
        timeout: float | None = None,
        owner: str | None = None,
        ns: str | None = None,
    ) -> Any:
        """A fair lock: waiters get it in arrival order (a waiter key per waiter; each
        watches only the one ahead of it for its deletion, no polling). It is held on a
        lease: its own lease of ``ttl`` seconds (kept alive in the background by the
        client's lease keeper, revoked on release) or ``lease`` (a Lease or an id, e.g.
        one per session; not revoked). If the holder dies its lease expires and the
        next waiter gets the lock.

        On a Client it is acquired now (blocking) and is a context manager that releases
        it on exit::

            with client.lock("report", ttl=10) as lock:
                client.put("report/out", data, fence=lock)

        On an AsyncClient it is acquired when awaited or entered::

            async with client.lock("report", ttl=10) as lock:   # or: lock = await ...
                await client.put("report/out", data, fence=lock)

        A lock alone is advisory: a holder paused past its TTL (GC, SIGSTOP, a slow
        call) no longer holds it but may not know. Give its writes ``fence=lock``: the
        server refuses them once another holder took over (``FenceMismatch``), so a lock
        plus fenced writes is safe. ``lock.fence`` is the fencing token (it only grows
        from one holder to the next), ``lock.key`` its waiter key (delete it in a txn to
        release atomically with a write), ``lock.lease``, ``lock.held``,
        ``lock.release()`` (awaited on an AsyncClient), ``lock.lost`` (an Event set when
        the lock's lease is lost: ``lock.lost.wait(t)``, ``await lock.lost.wait()``).

        Args:
            name: the lock (1..max_key_bytes - 28 UTF-8 bytes, "/" allowed).
            ttl: seconds; the lease the lock creates (not with ``lease``).
            lease: hold the lock on this lease instead (it must be in ``ns``).
            wait: False: take the lock only if it is free, else raise LockHeld at once.
            timeout: seconds to wait at most, else LockTimeout (its waiter leaves).
            owner: free text shown by ``lock_list`` / ``statekeeper lock list``.
            ns: namespace; defaults to the client's.

        Raises:
            LockHeld: ``wait=False`` and someone holds it (``.holder_fence``).
            LockTimeout: not acquired within ``timeout`` (a LockHeld).
            LockNotHeld: the waiter's lease expired or was revoked while it waited.
            LeaseNotFound: ``lease`` does not exist.
        """
        if not check_key(name):
            raise InvalidRequest("a lock name must not be empty", code="invalid_argument")
        if lease is None:
            ttl_ms(ttl)  # refuse a bad TTL now, on both clients
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"timeout must be >= 0 seconds, not {timeout!r}")
        return self._lock_type(
            self,
            name,
            ttl,
            lease=lease,
            wait=wait,
            timeout=timeout,
            owner=owner,
            ns=self._ns(ns),
        )

    @command
    def lock_acquire(
        self,
        name: str,
        lease: Any,
        *,
        wait: bool = True,
        owner: str | None = None,
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> LockAcquired:
        """Join lock ``name``'s queue with a waiter key attached to ``lease`` (a Lease or
        an id); one raft write. The low-level step of :meth:`lock`, which also waits.

        Returns:
            LockAcquired(name, key, fence, holder_fence, acquired, ahead, revision): not
            ``acquired``: watch ``ahead`` for its deletion from ``revision`` + 1.

        Raises:
            LockHeld: ``wait=False`` and the lock is held (nothing written).
            LeaseNotFound: the lease does not exist.
            InvalidRequest: a bad name, or a lease of another namespace.
        """
        request = acquire_request(
            self._ns(ns),
            name,
            lease_id(lease),
            wait=wait,
            owner=owner,
            idempotency_key=idempotency_key,
        )
        return self._execute(request)

    @command
    def lock_release(
        self,
        name: str,
        fence: int,
        *,
        ns: str | None = None,
        idempotency_key: str | None = None,
    ) -> LockReleased:
        """Delete the waiter key of lock ``name`` whose fence is ``fence``: a holder
        releases the lock (the next waiter gets it), a waiter leaves the queue.

        Returns:
            LockReleased(name, fence, held, revision).

        Raises:
            LockNotHeld: that waiter is gone (released, or its lease expired).
        """
        return self._execute(release_request(self._ns(ns), name, fence, idempotency_key))

    @command
    def lock_list(
        self,
        prefix: str | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
        ns: str | None = None,
        consistency: str | None = None,
        min_revision: int | None = None,
    ) -> LockList:
        """One page of the locks of ``ns`` whose name starts with ``prefix``, after lock
        ``after``: LockList(locks, revision, more) of LockInfo(name, holder_fence,
        holder_lease, count, waiters); for the next page pass ``after`` = the last name."""
        request = list_request(
            self._ns(ns), prefix, after, limit, self._consistency(consistency), min_revision
        )
        return self._execute(request)
