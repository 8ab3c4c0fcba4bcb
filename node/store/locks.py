"""Locks with fencing: ops lock_acquire, lock_release, the read lock_list, and the fence
check that node/store/apply.py runs before every write op carrying a `fence`
(docs/protocol.md, "Locks and fencing"; validated by node/ops/locks.py).

A lock is a queue of waiter keys, ordinary kv keys of the namespace (etcd's recipe, made
by the server so it can name them by revision):

    "__lock/{name}/{rev:020d}"  value msgpack {} or {"owner": str}; attached to a lease

lock_acquire puts one at the revision rev it takes (so the key's create_revision is rev),
attached to the op's lease. Arrival order = revision order = key byte order (20 digits,
zero-padded), and the FIRST waiter key holds the lock: its create_revision is the lock's
fencing token (`holder_fence`). A waiter leaves by lock_release, a plain delete of its key,
or its lease's revoke or expiry (the lease deletes its keys: node/store/leases.py); the
next waiter then holds the lock. No waiter is ever granted anything: holding is a fact of
the queue, computed when asked, so the lease's expiry and the lock's loss are one write.

Invariants: a holder's fence is larger than every earlier holder's (revisions only grow and
a waiter enqueued after the holder has a larger revision than it), so fences only grow.
A waiter key is recognized by its last segment of exactly 20 digits: keys of a lock named
"a/b" also start with "__lock/a/" and are skipped when looking at lock "a".

Fence check (`check_fence`, registered in apply.BEFORE_HANDLER for node/ops/locks.py's
FENCED_OPS): a write op with
`fence: {name, token}` applies only if the first waiter key of lock `name` in the op's
namespace exists and has create_revision == token; otherwise OpError `fence_mismatch`
(409, with `holder_fence`: the current holder's fence or null) and nothing is applied. It
runs after the idempotency lookup (a retry of a write that applied replays its result even
if the lock has moved on since) and before the handler, against the state left by the
entry's earlier ops. Deterministic: it reads only the store.

The five things (docs/protocol.md, "Locks and fencing", has them for users):

1. Consistency: acquire and release are raft writes taking a revision; the holder at R is
   the first waiter key at R, so lock_list (served like get), a range and the fence check
   agree. A fence check is exact at its op's place in the log.
2. ok / failed / unknown: acquire unknown: retry with its idempotency_key (same waiter)
   or revoke the lease; release unknown: retry, or read lock_not_held as done; a fenced
   write refused with fence_mismatch changed nothing.
3. Limits: names 1..max_key_bytes - 28 bytes (400 / 413 key_too_large); fence exactly
   {name, token >= 1} (400), not inside a txn branch (400); lease must exist (404) in
   the op's namespace (400); owner 1..256 chars (400); lock_held 409 (wait=false).
4. Key layout: "__lock/{name}/{rev:020d}" kv keys (+ the lease attachment records).
5. Chaos: tests/integration/test_locks.py (fairness, hand-over, Kleppmann with SIGSTOP);
   a chaos lock workload is chaos/lock_workload.py's job.

Cost: acquire and the fence check scan the queue of one lock (acquire to its end, the check
to its first waiter); lock_list scans the locks of a prefix. Keys under "__lock/" belong to
these ops: a put there (or a delete of another's waiter key) is not refused, and breaks the
lock as surely as deleting someone's etcd lock key does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.locks import (
    FENCED_OPS,
    LOCK_PREFIX,
    TOKEN_DIGITS,
    waiter_key,
    waiter_prefix,
)
from statekeeper.node.store import apply, lease_state
from statekeeper.node.store.apply import EntryTx, handles, read_op
from statekeeper.node.store.keys import cur_key, cur_lease, hist_prefix_of, inc, p64, unpack
from statekeeper.node.store.kv import write_delete, write_put
from statekeeper.node.store.reads import Source

MAX_WAITERS_SHOWN = 100  # per lock, in lock_list
_SUFFIX = TOKEN_DIGITS + 1  # "/" and the digits
_SLASH = ord("/")


def _is_token(rest: bytes) -> bool:
    return len(rest) == TOKEN_DIGITS and rest.isdigit()


def _queue(src: Source, ns_b: bytes, name: str) -> Iterator[tuple[bytes, int]]:
    """(cur key, create_revision) of every waiter of lock `name`, first (holder) first."""
    lo = cur_key(ns_b, waiter_prefix(name).encode())
    skip = len(lo)
    for ck, raw in src.scan(lo, inc(lo)):
        if _is_token(ck[skip:]):
            yield ck, unpack(raw)[1]


def holder_fence(src: Source, ns_b: bytes, name: str) -> int | None:
    """The fence (create_revision) of the lock's holder, None when nobody holds it."""
    for _, create in _queue(src, ns_b, name):
        return create
    return None


def _key_of(ck: bytes, ns_b: bytes) -> str:
    return ck[len(ns_b) + 2 :].decode()


def check_fence(tx: EntryTx, op: dict) -> None:
    """Refuse (fence_mismatch) the op unless its fence's token is the holder's fence (an op
    without a fence passes)."""
    fence = op.get("fence")
    if fence is None:
        return
    name, token = fence["name"], fence["token"]
    current = holder_fence(tx, op["ns"].encode(), name)
    if current != token:
        held = f"is held with fence {current}" if current is not None else "is not held"
        raise OpError(
            "fence_mismatch",
            f"fence {token} of lock {name!r} is not the holder's: the lock {held} in "
            f"namespace {op['ns']!r}; nothing was applied",
            name=name,
            token=token,
            holder_fence=current,
        )


for _name in FENCED_OPS:
    apply.BEFORE_HANDLER.setdefault(_name, []).append(check_fence)


@handles("lock_acquire")
def lock_acquire(tx: EntryTx, op: dict) -> dict:
    """Enqueue a waiter key at the revision this op takes (its fence), attached to the
    lease; {revision, name, key, fence, holder_fence, acquired, ahead}."""
    ns, name = op["ns"], op["name"]
    ns_b = ns.encode()
    lease, _ = lease_state.for_put(tx, op)  # 404 lease_not_found (also another ns)
    first = last = None
    for ck, create in _queue(tx, ns_b, name):
        if first is None:
            first = create
        last = ck
    if first is not None and not op["wait"]:
        raise OpError(
            "lock_held",
            f"lock {name!r} is held with fence {first}; nothing was written",
            name=name,
            holder_fence=first,
        )
    rev = tx.revision + 1
    key = waiter_key(name, rev)
    value = tx.pack({} if op["owner"] is None else {"owner": op["owner"]})
    write_put(tx, ns_b, key.encode(), key, value, False, lease)
    return {
        "revision": rev,
        "name": name,
        "key": key,
        "fence": rev,
        "holder_fence": rev if first is None else first,
        "acquired": first is None,
        "ahead": None if last is None else _key_of(last, ns_b),
    }


@handles("lock_release")
def lock_release(tx: EntryTx, op: dict) -> dict:
    """Delete the waiter key of fence `fence`; {revision, name, fence, held} (held: it was
    the holder, so the lock passed on). 404 lock_not_held when the key is gone."""
    ns, name, fence = op["ns"], op["name"], op["fence"]
    ns_b = ns.encode()
    ck = cur_key(ns_b, waiter_key(name, fence).encode())
    cur = tx.point(ck)
    if cur is None:
        raise OpError(
            "lock_not_held",
            f"lock {name!r} has no waiter with fence {fence} in namespace {ns!r} (released "
            "already, or its lease expired or was revoked)",
            name=name,
            fence=fence,
        )
    held = holder_fence(tx, ns_b, name) == fence
    write_delete(tx, ck, unpack(cur))
    return {"revision": tx.revision + 1, "name": name, "fence": fence, "held": held}


# -- reads ---------------------------------------------------------------------------------




def _collect(
    src: Source, lo: bytes, hi: bytes, skip: int, prefix: str, limit: int
) -> tuple[dict, bool]:
    """{name: [count, [(cur key, cur record)...first MAX_WAITERS_SHOWN]]} of the first
    `limit` locks in [lo, hi) whose name starts with `prefix` (lock "a"'s keys start with
    "__lock/a/" too), in key order, and whether more follow; `skip` = the length of
    c ns 0x00 "__lock/". Collected before any lookup: a ReadView's scan and point share
    one iterator."""
    groups: dict[str, list[Any]] = {}
    for ck, raw in src.scan(lo, hi):
        rest = ck[skip:]  # name "/" 20 digits
        if len(rest) <= _SUFFIX or rest[-_SUFFIX] != _SLASH or not _is_token(rest[1 - _SUFFIX :]):
            continue
        name = rest[:-_SUFFIX].decode()
        if not name.startswith(prefix):
            continue
        group = groups.get(name)
        if group is None:
            if len(groups) == limit:
                return groups, True
            group = groups[name] = [0, []]
        group[0] += 1
        if len(group[1]) < MAX_WAITERS_SHOWN:
            group[1].append((ck, raw))
    return groups, False


def _owner(src: Source, ck: bytes, mod: int) -> str | None:
    rec = src.point(hist_prefix_of(ck) + p64(mod))
    try:
        value = unpack(unpack(rec)[0]) if rec is not None else None
    except Exception:  # not written by lock_acquire: no owner to show
        return None
    owner = value.get("owner") if isinstance(value, dict) else None
    return owner if isinstance(owner, str) else None


def _waiter(src: Source, ns_b: bytes, ck: bytes, raw: bytes) -> dict:
    meta = unpack(raw)
    create, mod = meta[1], meta[2]
    lease = lease_state.key_lease(src, ck[1:], cur_lease(meta))
    return {
        "key": _key_of(ck, ns_b),
        "fence": create,
        "lease": lease or None,
        "owner": _owner(src, ck, mod),
    }


@read_op("lock_list")
def lock_list(src: Source, limits: Limits, op: dict) -> dict:
    """{revision, locks: [{name, holder_fence, holder_lease, count, waiters}], more}: the
    locks whose name starts with `prefix`, after lock `after`, in the byte order of their
    waiter keys; `waiters` is the queue, holder first (the first MAX_WAITERS_SHOWN)."""
    ns_b = op["ns"].encode()
    base = cur_key(ns_b, LOCK_PREFIX.encode())
    prefix = op.get("prefix") or ""
    lo = base + prefix.encode()
    hi = inc(lo)
    after = op.get("after")
    if after is not None:
        past = cur_key(ns_b, waiter_key(after, 10**TOKEN_DIGITS - 1).encode()) + b"\x00"
        lo = max(lo, past)
    limit = max(1, min(op.get("limit", 1000), limits.max_range_limit))
    groups, more = _collect(src, lo, hi, len(base), prefix, limit) if lo < hi else ({}, False)
    locks = []
    for name, (count, items) in groups.items():
        waiters = [_waiter(src, ns_b, ck, raw) for ck, raw in items]
        locks.append(
            {
                "name": name,
                "holder_fence": waiters[0]["fence"],
                "holder_lease": waiters[0]["lease"],
                "count": count,
                "waiters": waiters,
            }
        )
    return {"revision": src.revision, "locks": locks, "more": more}
