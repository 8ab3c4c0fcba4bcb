"""Leases: ops lease_grant, lease_keepalive, lease_revoke, the node-internal lease_expire,
and the reads lease_info, lease_list (docs/protocol.md, "Leases"). Records and key
attachment (put's `lease` / `ttl_ms`) are in node/store/lease_state.py.

A lease is a TTL in a namespace: granted with `ttl_ms`, it expires at `expires_ms` = the
entry's leader time (`tx.clock`) + ttl_ms, moved to clock + ttl_ms by every keepalive.
Keys put with `lease`, and streams appended to with `lease`, are attached to it;
revoking it, or its expiry, deletes every attached key and stream at ONE revision (like a
prefix delete). Apply never reads a clock: expiry is
decided by the leader (node/tasks/leases.py), which proposes `lease_expire` with the
leases its local store shows due, and apply re-checks each one against the entry's time
(`expires_ms <= tx.clock`; a keepalive may have won the race): a lease not due is left
alone. A lease exists until a revoke or an applied expiry removes it, so a keepalive that
arrives late (after expires_ms, before the leader expired it) still renews it.

The five things (docs/protocol.md has them for users):

1. Consistency. Every lease op is one raft write, linearizable. Revisions count key
   changes only (etcd's rule): revoke and expire take one (all the keys they delete go
   at it; they take it even when the lease had no key), a grant or keepalive changes no
   key and takes none, answering the current revision, so keepalives from thousands of
   clients do not eat the history window, and watchers see nothing of them. Lease
   records are replicated state all the same (every node applies every renewal).
   lease_info/lease_list are served like get (linearizable by default: read-your-writes
   after a grant or keepalive; a serializable read with `min_revision` is not enough for
   those two, as they do not move the revision) and answer the current state. Expiry
   time is replicated state: a new leader resumes every lease's remaining TTL.
2. ok / failed / unknown. grant: ok, the lease exists; unknown: retry with the same
   idempotency_key (replays the same lease id) or let the unknown lease expire.
   keepalive: per lease, renewed or `lease_not_found`; unknown: just send it again (no
   idempotency key: renewing twice is harmless). revoke: ok, the lease and its keys are
   gone at `revision`; unknown: retry with the same idempotency_key, or read
   `lease_not_found` as "gone".
3. Limits. ttl_ms within limits.min_lease_ttl_ms (default 2000) .. 86400000 (400
   `invalid_argument`); 1..1000 ids per keepalive (400); an unknown, revoked or expired
   lease: 404 `lease_not_found` (revoke, info, put with `lease`; per id in keepalive); a
   put with `lease` in another namespace than the lease's, or with `lease` and `ttl_ms`:
   400 `invalid_argument` (an append with `lease` likewise). lease_info lists the first
   1000 keys (`more_keys`) and the first 1000 streams (`more_streams`).
4. Key layout: node/store/lease_state.py (b"l", b"x", b"k", b"K"), and
   node/store/stream_leases.py (b"j", b"J").
5. Chaos: none yet (weak point; see docs/protocol.md).

Streams attach too (an append's `lease`; node/store/stream_leases.py stages its own
records and its hook in REVOKE_HOOKS deletes them, each stream with all its records, at
the same revision as the keys): revoke/expire answer `deleted` (keys) and
`deleted_streams`. Locks are keys, so key attachment covers them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import islice
from typing import Any

from statekeeper.node.config import Limits
from statekeeper.node.ops.leases import MAX_LEASE_KEYS_SHOWN
from statekeeper.node.store import lease_state, stream_leases
from statekeeper.node.store.apply import EntryTx, handles, read_op
from statekeeper.node.store.keys import (
    CUR,
    LEASE,
    LEASE_EXP,
    SEP,
    inc,
    lease_key,
    lease_keys_prefix,
    p64,
    u64,
    unpack,
)
from statekeeper.node.store.kv import write_delete
from statekeeper.node.store.lease_state import LeaseRecord
from statekeeper.node.store.reads import Source

# (result field, hook(tx, lease, record) -> how many deleted), run by every revoke and
# expiry in order: attached keys ("deleted"), then attached streams ("deleted_streams").
REVOKE_HOOKS: list[tuple[str, Callable[[EntryTx, int, LeaseRecord], int]]] = []


def _attached(src: Source, lease: int) -> Any:
    """(ns 0x00 key) of every key attached to the lease, in byte order."""
    prefix = lease_keys_prefix(lease)
    skip = len(prefix)
    # The next lease's prefix bounds this one (lease8 may end in 0xff: no inc()).
    for k, _ in src.scan(prefix, lease_keys_prefix(lease + 1)):
        yield k[skip:]


def _delete_keys(tx: EntryTx, lease: int, rec: LeaseRecord) -> int:
    members = list(_attached(tx, lease))  # collect first: the deletes detach them
    deleted = 0
    for member in members:
        ck = CUR + member
        cur = tx.point(ck)
        if cur is not None:  # always, by the invariant
            write_delete(tx, ck, unpack(cur))
            deleted += 1
    return deleted


REVOKE_HOOKS.append(("deleted", _delete_keys))
REVOKE_HOOKS.append(("deleted_streams", stream_leases.delete_streams))


def revoke(tx: EntryTx, lease: int, rec: LeaseRecord) -> dict[str, int]:
    """Delete the lease and everything attached to it (at revision + 1); how many of
    each kind ({"deleted": keys, "deleted_streams": streams})."""
    counts = {name: hook(tx, lease, rec) for name, hook in REVOKE_HOOKS}
    lease_state.remove(tx, lease, rec)
    return counts


def _revision(tx: EntryTx) -> int:
    return tx.revision + 1 if tx.wrote else tx.revision


@handles("lease_grant")
def lease_grant(tx: EntryTx, op: dict) -> dict:
    """A new lease; changes no key, so it takes no revision (`revision`: the current one)."""
    lease, rec = lease_state.grant(tx, op["ns"], op["ttl_ms"], tx.revision)
    return {
        "revision": tx.revision,
        "lease": lease,
        "ttl_ms": rec.ttl_ms,
        "expires_ms": rec.expires_ms,
    }


@handles("lease_keepalive")
def lease_keepalive(tx: EntryTx, op: dict) -> dict:
    """Renew each lease that exists (expires = clock + ttl); report the others. Changes
    no key: takes no revision (`revision`: the current one), so thousands of clients
    renewing do not eat the history window (retention.history_revisions)."""
    out: list[dict[str, Any]] = []
    for lease in op["leases"]:
        rec = LeaseRecord.load(tx, lease)
        if rec is None:
            out.append({"lease": lease, "error": "lease_not_found"})
            continue
        new = replace(rec, expires_ms=tx.clock + rec.ttl_ms)
        lease_state.save(tx, lease, new, rec)
        out.append({"lease": lease, "ttl_ms": new.ttl_ms, "expires_ms": new.expires_ms})
    return {"revision": tx.revision, "leases": out}


@handles("lease_revoke")
def lease_revoke(tx: EntryTx, op: dict) -> dict:
    lease = op["lease"]
    counts = revoke(tx, lease, lease_state.load_existing(tx, lease))
    return {"revision": tx.revision + 1, **counts}


@handles("lease_expire")
def lease_expire(tx: EntryTx, op: dict) -> dict:
    """Revoke those of the named leases that are due at the entry's time, one revision."""
    expired: list[int] = []
    totals = dict.fromkeys((name for name, _ in REVOKE_HOOKS), 0)
    for lease in op["leases"]:
        rec = LeaseRecord.load(tx, lease)
        if rec is None or rec.expires_ms > tx.clock:
            continue  # gone already, or renewed since the leader looked
        for name, n in revoke(tx, lease, rec).items():
            totals[name] += n
        expired.append(lease)
    return {"revision": _revision(tx), "expired": expired, **totals}


# -- reads ---------------------------------------------------------------------------------


@read_op("lease_info")
def lease_info(src: Source, limits: Limits, op: dict) -> dict:
    """{revision, lease, ns, ttl_ms, expires_ms, remaining_ms, keys, more_keys, streams,
    more_streams}."""
    lease = op["lease"]
    rec = lease_state.load_existing(src, lease)
    members = list(islice(_attached(src, lease), MAX_LEASE_KEYS_SHOWN + 1))
    streams = list(islice(stream_leases.attached_streams(src, lease), MAX_LEASE_KEYS_SHOWN + 1))
    clock = src.clock  # type: ignore[attr-defined]  # ReadView and EntryTx have it
    return {
        "revision": src.revision,
        **rec.info(lease),
        "remaining_ms": max(0, rec.expires_ms - clock),
        "keys": [m.split(SEP, 1)[1].decode() for m in members[:MAX_LEASE_KEYS_SHOWN]],
        "more_keys": len(members) > MAX_LEASE_KEYS_SHOWN,
        "streams": [m.split(SEP, 1)[1].decode() for m in streams[:MAX_LEASE_KEYS_SHOWN]],
        "more_streams": len(streams) > MAX_LEASE_KEYS_SHOWN,
    }


@read_op("lease_list")
def lease_list(src: Source, limits: Limits, op: dict) -> dict:
    """{revision, leases: [{lease, ns, ttl_ms, expires_ms}], more}: id order, after `after`."""
    start = (op.get("after") or 0) + 1
    limit = max(1, min(op.get("limit", 1000), limits.max_range_limit))
    items = list(islice(src.scan(lease_key(start), inc(LEASE)), limit + 1))
    leases = [LeaseRecord(*unpack(v)).info(u64(k[1:])) for k, v in items[:limit]]
    return {"revision": src.revision, "leases": leases, "more": len(items) > limit}


def due_leases(src: Source, now_ms: int, limit: int) -> list[int]:
    """Ids of up to `limit` leases whose expires_ms <= now_ms, soonest first (what the
    leader's expiry task proposes; apply decides again with the entry's time)."""
    hi = LEASE_EXP + p64(now_ms + 1)
    return [u64(k[-8:]) for k, _ in islice(src.scan(LEASE_EXP, hi), limit)]
