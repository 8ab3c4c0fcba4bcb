"""What retention policies select: a pure function of a store view and a time.

Used by the leader's GC task (node/tasks/retention.py: `plan_gc` -> gc ops to propose) and
by the retention_status read (node/store/retention.py: `policy_status`). Nothing here
writes; everything reads through a reads.Source (a ReadView shares ONE iterator between
scan and point, so every scan is collected before any point read).

The five things: 1. consistency: a plan is computed from one view; apply re-checks every
item (node/store/retention.py `gc`), so a stale plan costs an entry, never a wrong
delete. 2. ok/failed/unknown: nothing is proposed from here. 3. limits: ops of at most
MAX_GC_ITEMS items. 4. key layout: reads b"P", b"t", b"c", b"h", b"Q", b"q"
(node/store/keys.py). 5. chaos: not covered (no chaos scenario sets a policy).

Which policy governs a key or stream: among the namespace's policies of that target, the
one with the LONGEST prefix it starts with (a more specific policy overrides a broader
one). Keys are grouped by everything up to and including their last "/" and ordered by
key within a group (zero-padded step numbers sort by step). A keys policy with `within`
covers only the groups whose directory's last segment is that name (within "ckpt":
agent/{id}/ckpt/); the other keys under its prefix are still ITS keys for the longest-
prefix rule (a broader policy does not take them over) but nothing touches them, nor
counts them in `holds`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from statekeeper.node.ops.retention import MAX_GC_ITEMS
from statekeeper.node.store.keys import (
    CUR,
    INF,
    RETENTION,
    SEP,
    STREAM_META,
    TIME_INDEX,
    bounds,
    hist_prefix,
    inc,
    p64,
    stream_event_prefix,
    time_index_key,
    u64,
    unpack,
)


@dataclass(frozen=True, slots=True)
class Policy:
    """One b"P" record: [keep_last, keep_every, max_age_s, create_revision, mod_revision]
    and, only when set, [within] (records without it decode as within None)."""

    ns: str
    target: str
    prefix: str
    keep_last: int | None
    keep_every: int | None
    max_age_s: int | None
    create_revision: int
    mod_revision: int
    within: str | None = None

    @classmethod
    def decode(cls, k: bytes, v: bytes) -> Policy:
        ns_b, target_b, prefix_b = k[1:].split(SEP, 2)
        return cls(ns_b.decode(), target_b.decode(), prefix_b.decode(), *unpack(v))

    def info(self) -> dict:
        return {
            "ns": self.ns,
            "target": self.target,
            "prefix": self.prefix,
            "keep_last": self.keep_last,
            "keep_every": self.keep_every,
            "max_age_s": self.max_age_s,
            "create_revision": self.create_revision,
            "mod_revision": self.mod_revision,
            "within": self.within,
        }

    def covers_group(self, group: str) -> bool:
        """The policy applies to the key group `group` (everything up to and including a
        key's last "/"): always without `within`, else when the group's directory's last
        segment is `within` (agent/a/ckpt/ for "ckpt"; "" has no directory)."""
        if self.within is None:
            return True
        return group[:-1].rpartition("/")[2] == self.within if group else False


def policy_range(ns: str | None) -> tuple[bytes, bytes]:
    if ns is None:
        return RETENTION, inc(RETENTION)
    base = RETENTION + ns.encode() + SEP
    return base, inc(base)


def load_policies(src: Any, ns: str | None = None) -> list[Policy]:
    """Every policy (of one namespace, or all), in (ns, target, prefix) byte order."""
    return [Policy.decode(k, v) for k, v in list(src.scan(*policy_range(ns)))]


def revision_at(src: Any, cutoff_ms: int) -> int:
    """R such that every revision <= R was applied at or before cutoff_ms (the newest
    revision-time index record at or before it; 0 when there is none)."""
    if cutoff_ms < 0:
        return 0
    for _, v in src.scan(time_index_key(cutoff_ms), inc(TIME_INDEX)):
        return unpack(v)
    return 0


def _governs(policy: Policy, others: list[Policy], name: str) -> bool:
    """`policy` is the longest-prefix policy of `name` among `others` (same ns, target)."""
    n = len(policy.prefix)
    return not any(len(o.prefix) > n and name.startswith(o.prefix) for o in others)


def key_number(key: str) -> int | None:
    """The decimal number the key ends with (agent/a/ckpt/000000000042 -> 42), or None."""
    end = len(key)
    start = end
    while start > 0 and key[start - 1].isascii() and key[start - 1].isdigit():
        start -= 1
    return int(key[start:end]) if start < end else None


def drops_older(p: Policy, i: int, mod: int, number: int | None, old_rev: int) -> bool:
    """Whether the policy drops the key at position i (0 = oldest) of its group, given
    that it is NOT among the group's newest keep_last keys (those are always kept).

    keep_every K keeps, among the older keys, those whose number (the decimal digits the
    key ends with) is a multiple of K, so repeated gcs keep the same ones; a key without a
    number falls back to its position from the oldest (i % K), which a later gc counts
    again on fewer keys: use numbered keys with keep_every."""
    if p.keep_last is not None:
        if p.keep_every is None:
            return True
        if (number if number is not None else i) % p.keep_every != 0:
            return True
    return p.max_age_s is not None and mod <= old_rev


def doomed(
    n: int, mods: list[int], p: Policy, old_rev: int, numbers: list[int | None] | None = None
) -> list[int]:
    """Positions (0 = oldest) of a group of n keys that the policy drops (`numbers[i]`:
    key_number of the i-th key, needed only with keep_every)."""
    newest = n - p.keep_last if p.keep_last is not None else n
    return [
        i
        for i in range(newest)
        if drops_older(p, i, mods[i], numbers[i] if numbers is not None else None, old_rev)
    ]


@dataclass
class Selection:
    """What one policy holds and what it would free now."""

    groups: int = 0
    items: int = 0  # keys, or events
    bytes: int = 0
    free_items: int = 0
    free_bytes: int = 0
    deletes: list = None  # type: ignore[assignment]  # [[key, mod_revision]]
    truncates: list = None  # type: ignore[assignment]  # [[stream, before_seq]]

    def __post_init__(self) -> None:
        self.deletes, self.truncates = [], []


def stored_value_len(src: Any, ns_b: bytes, key: str, mod: int) -> int:
    raw = src.point(hist_prefix(ns_b, key.encode()) + p64(mod))
    return 0 if raw is None else len(unpack(raw)[0])


def select_keys(
    src: Any, p: Policy, others: list[Policy], now_ms: int, with_bytes: bool = False
) -> Selection:
    """The keys policy `p` governs, grouped; `deletes` names those it drops now."""
    ns_b = p.ns.encode()
    lo, hi = bounds(CUR, ns_b, p.prefix or None, None, None, None)
    skip = len(ns_b) + 2
    groups: dict[str, list[tuple[str, int]]] = {}
    for k, v in list(src.scan(lo, hi)):
        key = k[skip:].decode()
        if not _governs(p, others, key):
            continue
        group = key[: key.rfind("/") + 1]
        if not p.covers_group(group):
            continue  # within: another directory (chunks, head, ...): left alone
        groups.setdefault(group, []).append((key, unpack(v)[2]))
    old_rev = 0
    if p.max_age_s is not None:
        old_rev = revision_at(src, now_ms - p.max_age_s * 1000)
    sel = Selection(groups=len(groups))
    for members in groups.values():  # each in key order: the scan is
        mods = [m for _, m in members]
        sel.items += len(members)
        numbers = [key_number(k) for k, _ in members] if p.keep_every else None
        for i in doomed(len(members), mods, p, old_rev, numbers):
            sel.deletes.append([members[i][0], mods[i]])
        if with_bytes:
            sel.bytes += sum(stored_value_len(src, ns_b, k, m) for k, m in members)
    sel.free_items = len(sel.deletes)
    if with_bytes:
        sel.free_bytes = sum(stored_value_len(src, ns_b, k, m) for k, m in sel.deletes)
    return sel


class _OpenGroup:
    """One key group while the scan is inside it: its position counter and its newest
    keep_last keys so far (the only ones still undecided)."""

    __slots__ = ("name", "n", "newest")

    def __init__(self, name: str) -> None:
        self.name, self.n = name, 0
        self.newest: deque[tuple[int, str, int]] = deque()


def iter_key_deletes(src: Any, p: Policy, others: list[Policy], now_ms: int) -> Iterator[list]:
    """[key, mod_revision] of each key policy `p` drops now, as ONE scan goes: the same
    set as select_keys' `deletes`, but a caller that needs only the first N stops the scan
    there (the leader's GC task, whatever the backlog). A key is decided once keep_last
    newer keys of its group have been seen; the group's keys are contiguous in the scan
    (they all start with the group), so the open groups form a stack of prefixes of the
    current key: memory is O(depth x keep_last), not O(keys)."""
    ns_b = p.ns.encode()
    lo, hi = bounds(CUR, ns_b, p.prefix or None, None, None, None)
    skip = len(ns_b) + 2
    old_rev = 0
    if p.max_age_s is not None:  # before the scan: a ReadView has one iterator
        old_rev = revision_at(src, now_ms - p.max_age_s * 1000)
    keep = p.keep_last or 0
    stack: list[_OpenGroup] = []
    for k, v in src.scan(lo, hi):
        key = k[skip:].decode()
        if not _governs(p, others, key):
            continue
        group = key[: key.rfind("/") + 1]
        if not p.covers_group(group):
            continue
        while stack and not key.startswith(stack[-1].name):
            stack.pop()  # its scan range is over; its undecided keys are its newest: kept
        if not stack or stack[-1].name != group:
            stack.append(_OpenGroup(group))
        g = stack[-1]
        g.newest.append((g.n, key, unpack(v)[2]))
        g.n += 1
        if len(g.newest) > keep:
            i, old_key, mod = g.newest.popleft()
            number = key_number(old_key) if p.keep_every else None
            if drops_older(p, i, mod, number, old_rev):
                yield [old_key, mod]


def _event_time(src: Any, prefix: bytes, seq: int) -> int:
    raw = src.point(prefix + p64(seq))
    return unpack(raw)[2] if raw is not None else 0


def _first_young(src: Any, prefix: bytes, first: int, last: int, cutoff_ms: int) -> int:
    """The first seq whose time_ms >= cutoff_ms (last + 1 if none); times never decrease."""
    lo, hi = first, last + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _event_time(src, prefix, mid) < cutoff_ms:
            lo = mid + 1
        else:
            hi = mid
    return lo


def stream_cut(src: Any, p: Policy, ns_b: bytes, name: str, meta: list, now_ms: int) -> int:
    """The before_seq the policy wants for one stream (<= first_seq: nothing to drop)."""
    first, last = meta[0], meta[1]
    cut = first
    newest = last - p.keep_last + 1 if p.keep_last is not None else last + 1
    if p.keep_last is not None:
        cut = max(cut, newest)
    if p.max_age_s is not None and first <= last:
        prefix = stream_event_prefix(ns_b, name.encode())
        young = _first_young(src, prefix, first, last, now_ms - p.max_age_s * 1000)
        cut = max(cut, min(young, newest))
    return cut


def select_streams(src: Any, p: Policy, others: list[Policy], now_ms: int) -> Selection:
    """The streams policy `p` governs; `truncates` names how far each is cut now. Freed
    bytes are estimated (the stream's bytes times the share of events dropped)."""
    ns_b = p.ns.encode()
    lo, hi = bounds(STREAM_META, ns_b, p.prefix or None, None, None, None)
    skip = len(ns_b) + 2
    streams = [(k[skip:].decode(), unpack(v)) for k, v in list(src.scan(lo, hi))]
    sel = Selection()
    for name, meta in streams:
        if not _governs(p, others, name):
            continue
        first, count, size = meta[0], meta[2], meta[3]
        sel.groups += 1
        sel.items += count
        sel.bytes += size
        cut = stream_cut(src, p, ns_b, name, meta, now_ms)
        if cut > first:
            sel.truncates.append([name, cut])
            sel.free_items += cut - first
            sel.free_bytes += size * (cut - first) // count if count else 0
    return sel


def select(src: Any, p: Policy, policies: list[Policy], now_ms: int, with_bytes=False):
    """The Selection of one policy, given every policy of the store (or of its ns)."""
    others = [o for o in policies if o.ns == p.ns and o.target == p.target and o is not p]
    if p.target == "keys":
        return select_keys(src, p, others, now_ms, with_bytes)
    return select_streams(src, p, others, now_ms)


def _chunks(ns: str, deletes: list, truncates: list, size: int) -> Iterable[dict]:
    items = [("d", x) for x in deletes] + [("t", x) for x in truncates]
    for i in range(0, len(items), size):
        chunk = items[i : i + size]
        yield {
            "op": "gc",
            "ns": ns,
            "deletes": [x for tag, x in chunk if tag == "d"],
            "truncates": [x for tag, x in chunk if tag == "t"],
        }


def _policy_items(src: Any, p: Policy, policies: list[Policy], now_ms: int) -> Iterator:
    """The items of one policy, lazily: ("d", [key, mod]) or ("t", [stream, before])."""
    others = [o for o in policies if o.ns == p.ns and o.target == p.target and o is not p]
    if p.target == "keys":
        return (("d", x) for x in iter_key_deletes(src, p, others, now_ms))
    return (("t", x) for x in select_streams(src, p, others, now_ms).truncates)


def plan_gc(
    src: Any, now_ms: int, max_items: int = MAX_GC_ITEMS, max_ops: int | None = None
) -> list[dict]:
    """The gc ops enforcing every policy at now_ms (each at most max_items items, one
    namespace each), in (ns, target, prefix) order; [] when nothing is due. With max_ops,
    at most that many ops: planning stops (mid-scan) once it has max_ops x max_items
    items, so what a plan costs does not grow with the backlog (the leader's GC task;
    retention_status counts everything through `select`)."""
    size = max(1, min(max_items, MAX_GC_ITEMS))
    budget = None if max_ops is None else max(1, max_ops) * size
    policies = load_policies(src)
    per_ns: dict[str, tuple[list, list]] = {}
    for p in policies:
        if budget is not None and budget <= 0:
            break
        items = _policy_items(src, p, policies, now_ms)
        taken = list(items if budget is None else islice(items, budget))
        deletes, truncates = per_ns.setdefault(p.ns, ([], []))
        for tag, x in taken:
            (deletes if tag == "d" else truncates).append(x)
        if budget is not None:
            budget -= len(taken)
    ops: list[dict] = []
    for ns, (deletes, truncates) in per_ns.items():
        ops.extend(_chunks(ns, deletes, truncates, size))
    return ops


def time_index_newest(db_iter: Any) -> int:
    """clock_ms of the newest revision-time index record (0 when there is none)."""
    db_iter.seek(TIME_INDEX)
    if db_iter.valid():
        k = db_iter.key()
        if k[:1] == TIME_INDEX:
            return INF - u64(k[1:9])
    return 0
