"""History compaction and idempotency expiry: the `compact` op and the pruning after
every entry (an apply.AFTER_ENTRY hook, so every node prunes the same keys at the same
raft index).

Compaction to C (explicit `compact` op, or automatic when revision - compact_revision
exceeds retention.history_revisions plus 1/16 slack) only moves `compact_revision`; the
physical pruning deletes every "s" entry with rev <= C together with the history record
it names, a bounded number per entry (HIST_PRUNE_MIN + 2 per history record the entry
wrote, so it keeps up with any write rate). `pruned_rev` remembers how far it got (seek
position, skips RocksDB tombstones). Reads at R >= C stay exact because the newest record
<= C of every key is never superseded at <= C.

The change log ("r" rev key, read by node/watch.py) is pruned the same way and with the
same budget, up to the same compact revision: `changes_pruned` is its seek position. A
watch from at or below compact_revision is refused (`compacted`), so no reader needs it.

Idempotency records are pruned the same way, in expiry order through the "e" index, once
the replicated clock has passed their expiry (IDEM_PRUNE_MIN + 2 per record stored).
"""

from __future__ import annotations

from node.errors import OpError
from node.store.apply import AFTER_ENTRY, EntryTx, handles
from node.store.backend import check
from node.store.keys import CHANGE, IDEM, IDEM_EXP, INF, SUPERSEDED, p64, u64

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
    # An "s" entry names the history record it supersedes: both go.
    tx.pruned_rev = _prune_revision_index(tx, SUPERSEDED, tx.pruned_rev, budget, True)


def _prune_changes(tx: EntryTx, budget: int) -> None:
    tx.changes_pruned = _prune_revision_index(tx, CHANGE, tx.changes_pruned, budget, False)


def _prune_revision_index(
    tx: EntryTx, tag: bytes, pruned_to: int, budget: int, with_record: bool
) -> int:
    """Delete the `tag` rev8 ... entries with rev in (pruned_to, compact target], at most
    `budget` of them (and, `with_record`, the record each one names after its rev8);
    returns the revision pruned up to. Entries written by this entry are above
    base_revision and not in the DB yet: a later entry prunes them."""
    target = min(tx.compact_revision, tx.base_revision)
    if pruned_to >= target:
        return pruned_to
    it = tx.db_iter()
    it.seek(tag + p64(pruned_to + 1))
    done_to = target
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
        tx.overlay[k] = None
        if with_record:
            tx.overlay[k[9:]] = None
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
