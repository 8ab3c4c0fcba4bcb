"""History compaction and idempotency expiry: the `compact` op and the pruning after
every entry (an apply.AFTER_ENTRY hook, so every node prunes the same keys at the same
raft index).

Compaction to C (explicit `compact` op, or automatic when revision - compact_revision
exceeds retention.history_revisions plus 1/16 slack) only moves `compact_revision`; the
physical pruning deletes every change-log record ("r" rev key, read by node/api/watch.py) with
rev <= C together with the history records its value names (the ones the write at rev
superseded), a bounded number per entry (HIST_PRUNE_MIN + 2 per history record the entry
wrote, so it keeps up with any write rate). `changes_pruned` remembers how far it got
(seek position, skips RocksDB tombstones). Reads at R >= C stay exact because the newest
record <= C of every key is never superseded at <= C. A watch from at or below
compact_revision is refused (`compacted`), so no reader needs the pruned log.

Data written before issue 28 names superseded records in "s" rev8 <history key> entries
instead (and its "r" values are empty): those are pruned the same way, up to the same
revision, with `pruned_rev` as their seek position; nothing writes "s" any more.

Idempotency records are pruned the same way, in expiry order through the "e" index, once
the replicated clock has passed their expiry (IDEM_PRUNE_MIN + 2 per record stored).
"""

from __future__ import annotations

from collections.abc import Callable

from statekeeper.node.errors import OpError
from statekeeper.node.store.apply import AFTER_ENTRY, EntryTx, handles
from statekeeper.node.store.backend import check
from statekeeper.node.store.keys import CHANGE, HIST, IDEM, IDEM_EXP, INF, SEP, SUPERSEDED, p64, u64

HIST_PRUNE_MIN = 256
IDEM_PRUNE_MIN = 64


@handles("compact")
def compact(tx: EntryTx, op: dict) -> dict:
    target = op["revision"]
    if target > tx.revision:
        raise OpError(
            "future_revision",
            f"cannot compact to {target}, above the current revision {tx.revision}",
            revision=tx.revision,
        )
    tx.compact_revision = max(tx.compact_revision, target)
    return {"revision": tx.revision, "compact_revision": tx.compact_revision}


def prune(tx: EntryTx) -> None:
    """After all ops of the entry: automatic compaction, then bounded physical pruning."""
    history = tx.retention.history_revisions
    if tx.revision - tx.compact_revision > history + history // 16:
        tx.compact_revision = tx.revision - history
    _prune_history(tx, HIST_PRUNE_MIN + 2 * tx.hist_written)
    _prune_changes(tx, HIST_PRUNE_MIN + 2 * tx.hist_written)
    _prune_idempotency(tx, IDEM_PRUNE_MIN + 2 * tx.idem_written)


AFTER_ENTRY.append(prune)


def _prune_history(tx: EntryTx, budget: int) -> None:
    # Data written before issue 28: an "s" entry names the history record it supersedes,
    # both go. Nothing writes "s" now; on a newer data dir this is one seek that finds none.
    tx.pruned_rev = _prune_revision_index(tx, SUPERSEDED, tx.pruned_rev, budget, _named_by_key)


def _prune_changes(tx: EntryTx, budget: int) -> None:
    # A change-log record's value names the key's history records it superseded.
    tx.changes_pruned = _prune_revision_index(
        tx, CHANGE, tx.changes_pruned, budget, _named_by_value
    )


def _named_by_key(k: bytes, v: bytes) -> list[bytes]:
    """The history record an "s" rev8 <history key> entry names."""
    return [k[9:]]


def _named_by_value(k: bytes, v: bytes) -> list[bytes]:
    """The history records the change-log record "r" rev8 ns 0x00 key supersedes: one per
    rev8 of its value (empty for a key created at rev, and in records written before the
    value named them, whose "s" entries do)."""
    if not v:
        return []
    hb = HIST + k[9:] + SEP
    return [hb + v[i : i + 8] for i in range(0, len(v), 8)]


def _prune_revision_index(
    tx: EntryTx,
    tag: bytes,
    pruned_to: int,
    budget: int,
    named: Callable[[bytes, bytes], list[bytes]],
) -> int:
    """Delete the `tag` rev8 ... entries with rev in (pruned_to, compact target], at most
    `budget` of them, and the records `named(key, value)` says each one supersedes;
    returns the revision pruned up to. Entries written by this entry are above
    base_revision and not in the DB yet: a later entry prunes them."""
    target = min(tx.compact_revision, tx.base_revision)
    if pruned_to >= target:
        return pruned_to
    it = tx.db_iter()
    it.seek(tag + p64(pruned_to + 1))
    done_to = target
    overlay = tx.overlay
    while it.valid():
        k = it.key()
        if k[:1] != tag:
            break
        rev = u64(k[1:9])
        if rev > target:
            break
        if budget <= 0:
            done_to = rev - 1
            break
        overlay[k] = None
        for record in named(k, it.value()):
            overlay[record] = None
        budget -= 1
        it.next()
    check(it)
    return done_to


def _prune_idempotency(tx: EntryTx, budget: int) -> None:
    clock = tx.clock
    if tx.idem_next is not None and tx.idem_next > clock:
        # Nothing due: skip the seek, ending exactly where a full pass would.
        tx.idem_pruned = clock
        tx.idem_next = min(tx.idem_next, tx.stored_min_exp)
        return
    it = tx.db_iter()
    it.seek(IDEM_EXP + p64(tx.idem_pruned + 1))
    next_exp = INF  # first expiry left in the DB index after this pass
    while it.valid():
        k = it.key()
        if k[:1] != IDEM_EXP:
            break
        exp = u64(k[1:9])
        if exp > clock or budget <= 0:
            next_exp = exp
            break
        if k not in tx.overlay:  # else: replaced by a new record in this entry
            tx.overlay[k] = None
            tx.overlay[IDEM + k[9:]] = None
            budget -= 1
        it.next()
    check(it)
    # Every index entry with expiry <= idem_pruned is gone; new ones expire later.
    tx.idem_pruned = min(next_exp - 1, clock)
    tx.idem_next = min(next_exp, tx.stored_min_exp)
