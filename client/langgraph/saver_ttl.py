"""Thread TTL for StatekeeperSaver (``StatekeeperSaver(ttl=...)``): a thread nobody wrote
for ``ttl`` seconds disappears, checkpoints, blobs, pending writes and run indexes
together, and the CLUSTER removes it: the client that wrote it may be long dead.

The choice: one lease per thread. The cluster offers two ways to expire keys, and only one
fits "a thread goes all at once":

- a lease (docs/protocol.md, "Leases"): every key put with ``lease=L`` is deleted when L
  expires, ALL AT ONE REVISION, by the leader on the replicated cluster clock (no client
  sweep, no wall clock);
- a retention policy with ``max_age_s`` (node/ops/retention.py, node/tasks/retention.py)
  drops each key older than the cutoff on its own, in gc ops of at most 500 keys, at
  ~60 s granularity: it would drop a live thread's old checkpoints and the blobs its
  newest checkpoint still references (an unchanged channel's blob is never rewritten), and
  a reader could see half a thread.

So every key the saver PUTS for a thread carries the thread's lease, and the lease's id
is stored in ``ttl/{thread}`` (attached to the same lease, so it goes too), which is how
several savers (processes) writing one thread find and share its one lease. The first put
of a thread grants the lease and creates the marker under a compare (version 0); every
later put compares the marker's value with the lease it attaches to, so two writers never
split a thread across two leases (the loser of a race revokes its own, keyless, lease).

Chunks (saver_chunks.py). A value too large for the txn is uploaded as chunks BEFORE the
txn, in batches of plain puts, so attaching only the txn's puts left a thread's chunks on
no lease: they outlived the thread forever. So a batch whose calls are all puts under
``chunk/`` of one thread (keys.thread_of maps a chunk key to its owner's thread) is
attached to the thread's lease as well, obtained before the upload: the known one, the
marker's, or a grant. A lease granted for the upload is not yet named by a marker; the
txn that follows then creates the marker for that SAME lease under the version-0 compare
(it would otherwise compare the marker's value, fail, and grant a second lease, leaving
the chunks on one nobody renews). If another writer's marker wins that compare, our lease
is revoked, which deletes the chunks on it: the txn on the winner's lease fails its
chunk compares, and the put plan uploads them again, now on the winner's lease. A crash
between the upload and the txn leaves chunks on a lease no marker names: it expires
after ttl * 1.1 with them (no orphan).

When a thread expires. The lease is granted for ``ttl * (1 + SLACK)`` and a write renews
it (``lease_keepalive``, before its txn) only once ``ttl * SLACK`` has passed since this
saver last renewed it: renewed at r (sent), it expires no earlier than r + ttl * 1.1, and
every write this saver sent before r + ttl * 0.1 is followed by at least ``ttl`` (less the
write's own latency). Nothing expires early; an idle thread is gone within ttl * 1.1 plus
the lease expiry's lateness (0.2 s, plus an election's gap per leader change meanwhile;
docs/protocol.md, "How late").

Costs, and what bounds them:

- keepalives: at most one per thread per ``ttl * SLACK`` per saver, whatever the put rate
  (a 1 h TTL: one per 6 min per active thread; none for idle threads). A keepalive is a
  raft write of one small record, no revision, no history (docs/protocol.md, "Keepalive
  cost"). A saver that does not know a thread's lease (a restart, or more than
  ``MAX_CACHED`` threads) reads its marker once and renews it.
- leases: one per thread alive (written within the last ttl * 1.1): a lease record and
  an expiry index record; each attached key costs two index records (``k``/``K``).
- expiry deletes the whole thread in the leader's one ``lease_expire`` apply, so apply
  time grows with the thread's key count (checkpoints + blobs + writes); a thread of 100k
  keys is one long apply. Prune long threads (``prune(strategy="keep_latest")``).
- the TTL is at most what a lease allows: ``ttl * 1.1`` <= one day (86400 s), at least
  the node's ``min_lease_ttl_ms`` (2 s by default), so ttl is 2 .. 78545 s.

What renews: put and put_writes (and copy_thread's target); with ``refresh_on_read`` also
get_tuple and a list of one thread. Maintenance (prune keep_latest, delete_for_runs)
attaches its rewritten records to the thread's existing lease and renews nothing. A thread
written before ``ttl`` was set has no lease until its next write, and then only the keys
written from then on are attached: the older ones stay until delete_thread.

Shapes accepted: ``ttl=SECONDS`` or LangGraph's TTL config as the Redis saver takes it,
``{"default_ttl": MINUTES, "refresh_on_read": bool}`` (sweep_interval_minutes is accepted
and ignored: the cluster sweeps).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import Conflict, LeaseNotFound
from ..ops import compare, ops
from ..plan import AgentPlan, BatchCall, Call
from . import keys as K

__all__ = ["MAX_CACHED", "SLACK", "ThreadLeases", "ThreadTTL", "refresh_plan", "with_ttl"]

SLACK = 0.1
"""The lease outlives a thread's TTL by this fraction; renewals are this far apart."""
MAX_CACHED = 10_000
"""Threads whose lease a saver remembers (least recently written dropped first)."""
MAX_LEASE_S = 86_400.0  # node/ops/leases.py MAX_LEASE_TTL_MS
MIN_LEASE_S = 2.0  # the node's default min_lease_ttl_ms
_ATTEMPTS = 5
_CONFIG_KEYS = frozenset({"default_ttl", "refresh_on_read", "sweep_interval_minutes"})


@dataclass(frozen=True, slots=True)
class ThreadTTL:
    """A saver's thread TTL: ``seconds`` after the last write; ``refresh_on_read``: reads
    of a thread renew it too."""

    seconds: float
    refresh_on_read: bool = False

    @classmethod
    def of(cls, ttl: Any) -> ThreadTTL | None:
        """``ttl`` as given to the saver: None, seconds, or ``{"default_ttl": minutes,
        "refresh_on_read": bool}``; ValueError naming the accepted range otherwise."""
        if ttl is None or isinstance(ttl, ThreadTTL):
            return ttl
        refresh = False
        if isinstance(ttl, Mapping):
            unknown = set(ttl) - _CONFIG_KEYS
            if unknown:
                raise ValueError(
                    f"ttl: unknown keys {sorted(unknown)}; a TTL config has {sorted(_CONFIG_KEYS)}"
                )
            if ttl.get("default_ttl") is None:
                return None
            seconds = _number(ttl["default_ttl"], "ttl['default_ttl'] (minutes)") * 60
            refresh = bool(ttl.get("refresh_on_read", False))
        else:
            seconds = _number(ttl, "ttl (seconds)")
        longest = MAX_LEASE_S / (1 + SLACK)
        if not MIN_LEASE_S <= seconds <= longest:
            raise ValueError(
                f"ttl is {seconds:g} s; a thread TTL is {MIN_LEASE_S:g}..{longest:.0f} s "
                f"(its lease, ttl * {1 + SLACK:g}, is at most one day)"
            )
        return cls(float(seconds), refresh)

    @property
    def lease_seconds(self) -> float:
        return self.seconds * (1 + SLACK)

    @property
    def renew_every(self) -> float:
        return self.seconds * SLACK


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{what} must be a number, not {v!r}")
    return float(v)


class ThreadLeases:
    """What one saver knows of its threads' leases: thread -> (lease id, when this saver
    last sent a grant or keepalive for it, monotonic), the ``MAX_CACHED`` most recent."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._known: collections.OrderedDict[str, tuple[int, float]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, thread: str) -> tuple[int, float] | None:
        with self._lock:
            return self._known.get(thread)

    def remember(self, thread: str, lease: int, sent: float) -> None:
        with self._lock:
            self._known[thread] = (lease, sent)
            self._known.move_to_end(thread)
            while len(self._known) > MAX_CACHED:
                self._known.popitem(last=False)

    def forget(self, thread: str) -> None:
        with self._lock:
            self._known.pop(thread, None)


@dataclass(frozen=True, slots=True)
class _Scope:
    ttl: ThreadTTL
    leases: ThreadLeases
    ns: str
    renew: bool  # a write of the thread: grant a lease if it has none, renew when due
    # thread -> the lease granted for its chunk upload that no marker names yet: the txn
    # that follows creates the marker for it (compare version 0)
    unmarked: dict[str, int] = field(default_factory=dict)


def _renewed(scope: _Scope, thread: str, lease: int) -> AgentPlan[bool]:
    """Keepalive ``lease`` for ``thread``: False if it is gone (the thread expired)."""
    sent = scope.leases.clock()
    res = yield Call("lease_keepalive", (lease,), {})
    if lease in res.missing:
        scope.leases.forget(thread)
        return False
    scope.leases.remember(thread, lease, sent)
    return True


def _lease_of(scope: _Scope, thread: str) -> AgentPlan[tuple[int | None, bool]]:
    """(the thread's lease, granted just now) for a txn of ``thread``: the known one
    (renewed when due), the marker's, or (a write) a new grant; (None, False) when the
    thread has none and this is not a write."""
    for _ in range(_ATTEMPTS):
        known = scope.leases.get(thread)
        if known is not None:
            lease, sent = known
            if not scope.renew or scope.leases.clock() - sent < scope.ttl.renew_every:
                return lease, False
        else:
            kv = yield Call("get", (K.ttl_key(thread),), {"ns": scope.ns, "default": None})
            if kv is None:
                if not scope.renew:
                    return None, False
                sent = scope.leases.clock()
                grant = yield Call("lease_grant", (scope.ttl.lease_seconds,), {"ns": scope.ns})
                scope.leases.remember(thread, grant.lease, sent)
                return grant.lease, True
            lease = int(kv.value)
            if not scope.renew:
                scope.leases.remember(thread, lease, float("-inf"))  # renew on the next write
                return lease, False
        if (yield from _renewed(scope, thread, lease)):
            return lease, False
    raise Conflict(f"thread {thread!r}: its lease kept expiring while it was written")


def _thread_of_puts(success: list[Any]) -> str | None:
    threads = {K.thread_of(op["key"]) for op in success if op.get("op") == "put"}
    if len(threads) > 1:
        raise ValueError(f"one txn puts keys of several threads: {sorted(threads)}")
    return threads.pop() if threads else None


def _leased_txn(scope: _Scope, step: Call) -> AgentPlan[Any]:
    """Send the txn of ``step`` with every put attached to its thread's lease, guarded by
    the thread's marker naming that lease; the result as the txn alone would answer it."""
    compares, success, *rest = step.args
    failure = list(rest[0]) if rest else []
    thread = _thread_of_puts(list(success))
    if thread is None:
        return (yield step)
    marker = K.ttl_key(thread)
    for _ in range(_ATTEMPTS):
        if thread in scope.unmarked:  # granted for this write's chunks: mark it now
            lease, fresh = scope.unmarked[thread], True
        else:
            lease, fresh = yield from _lease_of(scope, thread)
        if lease is None:
            return (yield step)
        attached = [{**op, "lease": lease} if op.get("op") == "put" else op for op in success]
        if fresh:
            guard = compare.version(marker) == 0
            attached.append(ops.put(marker, str(lease), lease=lease))
        else:
            guard = compare.value(marker) == str(lease)
        args = ([*compares, guard], attached, [*failure, ops.get(marker)])
        try:
            r = yield Call("txn", args, step.kwargs)
        except LeaseNotFound:  # it expired (the thread with it) since we renewed it
            scope.leases.forget(thread)
            scope.unmarked.pop(thread, None)
            continue
        scope.unmarked.pop(thread, None)  # marked now, or revoked below
        if r.succeeded:
            return replace(r, results=r.results[: len(success)])
        seen = r.results[-1]
        if (seen is None) if fresh else (seen is not None and seen.value == str(lease).encode()):
            return replace(r, results=r.results[:-1])  # the caller's own compare failed
        scope.leases.forget(thread)  # another writer's lease is the thread's: adopt it
        if fresh:
            try:
                yield Call("lease_revoke", (lease,), {})
            except LeaseNotFound:
                pass
    raise Conflict(f"thread {thread!r}: its lease kept changing while it was written")


def _thread_of_chunk_puts(step: BatchCall) -> str | None:
    """The thread whose chunks a batch uploads (every call a put under ``chunk/`` of one
    thread), else None: the batch is left as it is."""
    if not step.calls or any(
        c.method != "put" or not str(c.args[0]).startswith(K.CHUNK) for c in step.calls
    ):
        return None
    threads = {K.thread_of(c.args[0]) for c in step.calls}
    return threads.pop() if len(threads) == 1 else None


def _leased_upload(scope: _Scope, step: BatchCall) -> AgentPlan[Any]:
    """Send the chunk upload ``step`` with every put attached to its thread's lease (granted
    now if the thread has none: the txn that follows marks it)."""
    thread = _thread_of_chunk_puts(step)
    if thread is None:
        return (yield step)
    lease = scope.unmarked.get(thread)
    if lease is None:
        lease, fresh = yield from _lease_of(scope, thread)
        if lease is None:
            return (yield step)
        if fresh:
            scope.unmarked[thread] = lease
    attached = tuple(replace(c, kwargs={**c.kwargs, "lease": lease}) for c in step.calls)
    return (yield replace(step, calls=attached))


def with_ttl(
    plan: AgentPlan[Any], ttl: ThreadTTL, leases: ThreadLeases, ns: str, *, renew: bool
) -> AgentPlan[Any]:
    """``plan`` with each of its txns that puts keys of a thread, and each of its chunk
    uploads (batches of puts under ``chunk/``), attached to the thread's lease (``renew``: a write, which grants the lease and renews it when due; otherwise
    only an existing lease is used)."""
    scope = _Scope(ttl, leases, ns, renew)
    result: Any = None
    error: Exception | None = None
    try:
        while True:
            try:  # the plan's next step, given the last one's result or error
                step = plan.send(result) if error is None else plan.throw(error)
            except StopIteration as done:
                return done.value
            result, error = None, None
            try:
                if isinstance(step, Call) and step.method == "txn":
                    result = yield from _leased_txn(scope, step)
                elif isinstance(step, BatchCall):
                    result = yield from _leased_upload(scope, step)
                else:
                    result = yield step
            except Exception as exc:  # handed to the plan, which may catch it
                error = exc
    finally:
        plan.close()


def refresh_plan(
    ttl: ThreadTTL, leases: ThreadLeases, ns: str, thread: str, *, then: AgentPlan[Any]
) -> AgentPlan[Any]:
    """A read of ``thread`` with refresh_on_read: renew its lease when due (nothing if it
    has none), then ``then``."""
    known = leases.get(thread)
    if known is None:
        kv = yield Call("get", (K.ttl_key(thread),), {"ns": ns, "default": None})
        known = None if kv is None else (int(kv.value), float("-inf"))
    if known is not None and leases.clock() - known[1] >= ttl.renew_every:
        yield from _renewed(_Scope(ttl, leases, ns, renew=True), thread, known[0])
    return (yield from with_ttl(then, ttl, leases, ns, renew=False))
