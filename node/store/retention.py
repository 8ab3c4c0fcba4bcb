"""Retention policies: ops retention_set, retention_delete, the node-internal gc, the
reads retention_list and retention_status, and the revision-time index written after
every entry (docs/protocol.md, "Retention").

A policy is a replicated record per (ns, target, prefix). It is enforced by the cluster,
not by a client: the leader's task (node/tasks/retention.py) computes what the policies drop
(node/store/retention_select.py) from its local store and the leader clock, and proposes
`gc` ops; apply re-checks every item, so apply never reads a clock (a key is deleted only
if its mod_revision is still the one named; a stream is only truncated forward).

Key age: kv records carry revisions, not times. After every entry whose clock moved at
least TIME_INDEX_STEP_MS past the newest index record (none: 0), apply writes a record
(clock -> revision); "older than cutoff" becomes "mod_revision <= R" with R the revision of
the newest record at or before the cutoff. So a key is dropped only when it is certainly
older; a key up to ~60 s (plus any idle time without entries) older than the cutoff may
survive until the next record. The records depend only on the entries: deterministic.

The five things:

1. Consistency. retention_set/delete and gc are raft writes, linearizable, one revision
   each (gc: one revision for the whole op, none when it applied nothing).
   retention_list/status are served like get (linearizable by default) and answer the
   current state; status evaluates the policies at the replicated clock (the last
   applied entry's time), the leader's task at its own clock: they may differ by a tick.
2. ok / failed / unknown. set/delete: retry an unknown result with the same
   idempotency_key (or just again: both are idempotent in effect). gc is proposed again
   by the leader's next tick; a lost one costs nothing.
3. Limits. At most MAX_POLICIES_PER_NS (1000) policies per namespace (413
   `too_many_policies`); prefix like a key (413 `key_too_large`); rules as in
   node/ops/retention.py (400 `invalid_argument`); a gc op: <= 500 items, <= 10000 stream
   events removed (the rest at the next tick).
4. Key layout: b"P" policies, b"g" last gc per ns, b"t" the revision-time index
   (node/store/keys.py has the rows). A b"P" record is the msgpack array [keep_last,
   keep_every, max_age_s, create_revision, mod_revision] plus, only when the policy has
   one, a 6th item `within` (a str): a record without it (every policy set before
   `within` existed, and every policy without it) decodes as within None, and a policy
   without `within` is written byte for byte as before.
5. Chaos: none yet (no chaos scenario sets a policy; chaos/checker/streams.py holds
   because nothing truncates without one).
"""

from __future__ import annotations

from itertools import islice
from typing import Any

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.retention import MAX_POLICIES_PER_NS, MAX_TRUNCATE_EVENTS
from statekeeper.node.store.apply import AFTER_ENTRY, EntryTx, handles, read_op
from statekeeper.node.store.keys import (
    RETENTION,
    RETENTION_GC,
    SEP,
    cur_key,
    inc,
    retention_key,
    time_index_key,
    unpack,
)
from statekeeper.node.store.kv import write_delete
from statekeeper.node.store.reads import Source, page_key, page_token
from statekeeper.node.store.retention_select import (
    Policy,
    load_policies,
    policy_range,
    select,
    time_index_newest,
)
from statekeeper.node.store.streams import truncate

TIME_INDEX_STEP_MS = 60_000


# -- policies ------------------------------------------------------------------------------


@handles("retention_set")
def retention_set(tx: EntryTx, op: dict) -> dict:
    """Create or replace the policy of (ns, target, prefix): {revision, policy, created}."""
    ns_b = op["ns"].encode()
    k = retention_key(ns_b, op["target"], op["prefix"])
    old = tx.point(k)
    rev = tx.revision + 1
    if old is None:
        base = RETENTION + ns_b + SEP
        n = sum(1 for _ in islice(tx.scan(base, inc(base)), MAX_POLICIES_PER_NS))
        if n >= MAX_POLICIES_PER_NS:
            raise OpError(
                "too_many_policies",
                f"namespace {op['ns']!r} has {n} retention policies, max "
                f"{MAX_POLICIES_PER_NS}; delete one first",
            )
    created = rev if old is None else unpack(old)[3]
    record = [op["keep_last"], op["keep_every"], op["max_age_s"], created, rev]
    within = op.get("within")  # absent from entries logged before it existed
    if within is not None:
        record.append(within)  # a 6th item only when set: 5-item records stay as they were
    tx.stage(k, tx.pack(record))
    tx.wrote = True
    policy = Policy(op["ns"], op["target"], op["prefix"], *record)
    return {"revision": rev, "policy": policy.info(), "created": old is None}


@handles("retention_delete")
def retention_delete(tx: EntryTx, op: dict) -> dict:
    """{revision, deleted: 0 | 1}."""
    k = retention_key(op["ns"].encode(), op["target"], op["prefix"])
    if tx.point(k) is None:
        return {"revision": tx.revision, "deleted": 0}
    tx.stage(k, None)
    tx.wrote = True
    return {"revision": tx.revision + 1, "deleted": 1}


# -- gc -------------------------------------------------------------------------------------


@handles("gc")
def gc(tx: EntryTx, op: dict) -> dict:
    """Apply the leader's gc items that still hold, at one revision:
    {revision, deleted, skipped, removed} (removed: stream events)."""
    ns_b = op["ns"].encode()
    deleted = skipped = 0
    for key, mod in op["deletes"]:
        ck = cur_key(ns_b, key.encode())
        cur = tx.point(ck)
        meta = unpack(cur) if cur is not None else None
        if meta is None or meta[2] != mod:
            skipped += 1  # deleted or rewritten since the leader looked
            continue
        write_delete(tx, ck, meta)
        deleted += 1
    budget, removed = MAX_TRUNCATE_EVENTS, 0
    for stream, before in op["truncates"]:
        _, n = truncate(tx, ns_b, stream.encode(), before, budget)
        budget -= n
        removed += n
    if tx.wrote:
        tx.stage(RETENTION_GC + ns_b, tx.pack([tx.revision + 1, tx.clock, deleted, removed]))
    rev = tx.revision + 1 if tx.wrote else tx.revision
    return {"revision": rev, "deleted": deleted, "skipped": skipped, "removed": removed}


# -- the revision-time index -----------------------------------------------------------------


def index_time(tx: EntryTx) -> None:
    """After every entry: a (clock -> revision) record once the clock moved
    TIME_INDEX_STEP_MS past the newest one (depends only on the entries)."""
    newest = tx.time_indexed
    if newest is None:
        newest = time_index_newest(tx.db_iter())
    if tx.clock >= newest + TIME_INDEX_STEP_MS:
        tx.overlay[time_index_key(tx.clock)] = tx.pack(tx.revision)
        newest = tx.clock
    tx.time_indexed = newest


AFTER_ENTRY.append(index_time)


# -- reads ----------------------------------------------------------------------------------


@read_op("retention_list")
def retention_list(src: Source, limits: Limits, op: dict) -> dict:
    """{revision, policies: [policy], more, continuation?} in (ns, target, prefix) order."""
    lo, hi = policy_range(op.get("ns"))
    token = op.get("continuation")
    if token is not None:
        lo = max(lo, RETENTION + page_key(token, "retention_list") + b"\x00")
    limit = max(1, min(op.get("limit", 1000), limits.max_range_limit))
    items = list(islice(src.scan(lo, hi), limit + 1))
    out: dict[str, Any] = {
        "revision": src.revision,
        "policies": [Policy.decode(k, v).info() for k, v in items[:limit]],
        "more": len(items) > limit,
    }
    if len(items) > limit:
        out["continuation"] = page_token(items[limit - 1][0][1:])
    return out


def _last_gc(src: Source, ns: str) -> dict | None:
    raw = src.point(RETENTION_GC + ns.encode())
    if raw is None:
        return None
    rev, clock, deleted, removed = unpack(raw)
    return {"revision": rev, "time": clock, "deleted": deleted, "removed": removed}


def policy_status(src: Source, p: Policy, policies: list[Policy], now_ms: int) -> dict:
    """What one policy holds and would free at now_ms."""
    sel = select(src, p, policies, now_ms, with_bytes=True)
    unit = "keys" if p.target == "keys" else "events"
    return {
        **p.info(),
        "holds": {"groups": sel.groups, unit: sel.items, "bytes": sel.bytes},
        "frees": {unit: sel.free_items, "bytes": sel.free_bytes},
    }


@read_op("retention_status")
def retention_status(src: Source, limits: Limits, op: dict) -> dict:
    """{revision, clock, policies: [...], last_gc: {ns: ...}, history, idempotency}."""
    policies = load_policies(src, op.get("ns"))
    clock = getattr(src, "clock", 0)
    out = [policy_status(src, p, policies, clock) for p in policies]
    last = {}
    for ns in sorted({p.ns for p in policies} | ({op["ns"]} if op.get("ns") else set())):
        last[ns] = _last_gc(src, ns)
    retention = getattr(src, "retention", None)
    return {
        "revision": src.revision,
        "clock": clock,
        "policies": out,
        "last_gc": last,
        "history": {
            "compact_revision": src.compact_revision,
            "history_revisions": getattr(retention, "history_revisions", None),
        },
        "idempotency": {"idempotency_seconds": getattr(retention, "idempotency_seconds", None)},
    }
