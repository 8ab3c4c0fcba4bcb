"""The change log, read for watches (node/api/watch.py): what changed at each revision.

Format (node/store/keys.py): every put and delete at revision rev stages the empty record
b"r" rev8 ns 0x00 key (node/store/kv.py, `write_put`/`write_delete`), so the log is sorted
by (revision, ns, key) and "what changed at revision r" is one seek. The key's "h" record
at rev says what happened: a value (put) or the tombstone (delete). compaction.py prunes
the log with the history, up to compact_revision (`changes_pruned`).

Invariants a reader relies on:
- a revision's changes are all in the log, written by the same entry (one WriteBatch);
- one revision changes a key at most once (a txn may not write a key twice);
- above compact_revision the log and the "h" records (the one at rev, and the key's
  previous one, for prev_kv) are intact: pruning stops at compact_revision, and the newest
  record <= compact_revision of every key is never pruned. So `read_changes` refuses
  a first revision <= compact_revision (`compacted`), checked on the same view it reads.

Frames (the watch protocol, docs/protocol.md "Watch"): one per revision that changed a
watched key, `{"events": [event, ...], "revision": r}` with events in key byte order;
an event is `{"type": "put"|"delete", "kv": kv, "prev_kv"?: kv}`; a delete's kv is
`{key, version: 0, create_revision: 0, mod_revision: r}` (no value).

Bounded: one call reads at most `max_changes` changes, moves the iterator at most
`max_steps` times and stops after the revision that takes its values past `max_bytes`, but
never splits a revision (the one in progress is finished, so a page may exceed the bounds
by the size of one revision: a prefix delete, a lease revoke, a large txn).
Revisions that changed no watched key cost at most two seeks; revisions that changed
nothing at all (stream appends, barriers) cost none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statekeeper.node.errors import OpError
from statekeeper.node.store.backend import check
from statekeeper.node.store.keys import CHANGE, HIST, NS_END, SEP, bounds, p64, u64, unpack
from statekeeper.node.store.reads import ReadView, hist_get, kv

MAX_PAGE_CHANGES = 1000
MAX_PAGE_STEPS = 4096
MAX_PAGE_BYTES = 4 * 1024 * 1024  # values (and prev values) read into one page


def selection(
    ns: str, key: str | None, prefix: str | None, start: str | None, end: str | None
) -> tuple[bytes, bytes]:
    """[lo, hi) of the watched `ns 0x00 key` suffixes of change-log records."""
    ns_b = ns.encode()
    if key is not None:
        lo = ns_b + SEP + key.encode()
        return lo, lo + SEP  # keys hold no NUL: only `key` itself sorts in between
    if not prefix and not start and not end:
        return ns_b + SEP, ns_b + NS_END
    return bounds(b"", ns_b, prefix, start, end, None)


@dataclass(frozen=True, slots=True)
class ChangePage:
    """What one `read_changes` call found.

    frames: the frames of the revisions first..scanned_to that changed a watched key;
    scanned_to: every revision up to here has been looked at (first - 1: none);
    more: stopped at a bound before the view's revision (read again at once);
    revision: the view's revision (the node's applied revision when it was read).
    """

    frames: list[dict]
    scanned_to: int
    more: bool
    revision: int


def compacted(first: int, view: ReadView) -> OpError:
    c = view.compact_revision
    return OpError(
        "compacted",
        f"revision {first} is compacted (compact_revision {c}); watch again from at least "
        f"{c + 1} after reading the current state",
        compact_revision=c,
        revision=view.revision,
    )


def _scan(
    it: Any, lo: bytes, hi: bytes, first: int, last: int, max_changes: int, max_steps: int
) -> tuple[list[tuple[int, bytes]], int]:
    """(rev, suffix) of the watched changes from revision `first` on, and the revision
    scanned up to; stops only between two revisions."""
    changes: list[tuple[int, bytes]] = []
    steps = 0
    current = -1
    it.seek(CHANGE + p64(first) + lo)
    while it.valid():
        k = it.key()
        if k[:1] != CHANGE:
            break
        rev = u64(k[1:9])
        if rev > last:
            break
        if rev != current:
            if changes and len(changes) >= max_changes or steps >= max_steps:
                return changes, rev - 1
            current = rev
        suffix = k[9:]
        steps += 1
        if suffix < lo:
            it.seek(CHANGE + p64(rev) + lo)
        elif suffix >= hi:
            it.seek(CHANGE + p64(rev + 1) + lo)
        else:
            changes.append((rev, suffix))
            it.next()
    check(it)
    return changes, last


def _event(it: Any, rev: int, suffix: bytes, skip: int, prev_kv: bool) -> dict:
    key = suffix[skip:].decode()
    hb = HIST + suffix + SEP
    it.seek(hb + p64(rev))
    if not it.valid() or it.key() != hb + p64(rev):
        check(it)
        raise OpError("internal", f"the change log names {key!r} at {rev} but its history lacks it")
    rec = unpack(it.value())
    if rec is None:
        event: dict[str, Any] = {"type": "delete", "kv": kv(key, None, 0, 0, rev)}
    else:
        event = {"type": "put", "kv": kv(key, rec[0], rec[1], rec[2], rev)}
    if prev_kv:
        prev = hist_get(it, hb, rev - 1, key)
        if prev is not None:
            event["prev_kv"] = prev
    return event


def read_changes(
    view: ReadView,
    lo: bytes,
    hi: bytes,
    first: int,
    prev_kv: bool = False,
    max_changes: int = MAX_PAGE_CHANGES,
    max_steps: int = MAX_PAGE_STEPS,
    max_bytes: int = MAX_PAGE_BYTES,
) -> ChangePage:
    """The frames of revisions first.. of the watched keys [lo, hi) (`selection`), one page
    (see the module docstring). Raises OpError `compacted` (with compact_revision and
    revision) when `first` <= the view's compact_revision."""
    if first <= view.compact_revision:
        raise compacted(first, view)
    last = view.revision
    if first > last:
        return ChangePage([], first - 1, False, last)
    it = view.hist_iter(last)
    changes, scanned_to = _scan(it, lo, hi, first, last, max_changes, max_steps)
    skip = lo.index(SEP) + 1  # len(ns) + 1
    frames: list[dict] = []
    size = 0
    for rev, suffix in changes:  # collected first: the events move the same iterator
        same = bool(frames) and frames[-1]["revision"] == rev
        if not same and size >= max_bytes:  # a revision boundary past the byte bound
            scanned_to = rev - 1
            break
        event = _event(it, rev, suffix, skip, prev_kv)
        if same:
            frames[-1]["events"].append(event)
        else:
            frames.append({"events": [event], "revision": rev})
        size += len(event["kv"].get("value", b""))
        size += len(event.get("prev_kv", {}).get("value", b""))
    return ChangePage(frames, scanned_to, scanned_to < last, last)
