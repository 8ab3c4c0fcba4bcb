"""Read-only views of the threads StatekeeperSaver stored: one definition shared by
`statekeeper langgraph threads|history|show` (cluster/langgraph_cli.py, a blocking Client)
and the console's LangGraph page (console/views/langgraph.py, the user's AsyncClient).

The reads are plans (client/plan.py: generators yielding client calls), run with
``run(client, plan)`` or ``await arun(aclient, plan)``; they read through the saver's own
key layout (keys.py) and decode with its codec (saver_codec.py: the serde given, LangGraph's
JsonPlusSerializer by default, never pickle).

- :func:`threads_plan`: a page of threads from the ``ckpt/`` keys (keys only), each with its
  checkpoint count, the newest root-graph checkpoint's step, source and time, and its TTL
  lease; ``after`` a thread id, at most ``limit`` threads (None: every one).
- :func:`history_plan`: a page of one thread's checkpoint records (key order: checkpoint
  namespaces in order, each NEWEST first), each with its parent and its count of pending
  writes; ``after`` the last key of the previous page.
- :func:`shown`: a CheckpointTuple (the saver's get_tuple) as JSON-ready data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..plan import AgentPlan, BatchCall, Call
from . import keys as K

__all__ = [
    "CheckpointRow",
    "HistoryPage",
    "ThreadPage",
    "ThreadSummary",
    "default_serde",
    "history_plan",
    "jsonable",
    "row_of",
    "shown",
    "thread_summaries",
    "threads_plan",
    "write_counts",
]

_KEY_PAGE = 1000  # keys per range page (keys only)
_BATCH_THREADS = 100  # threads per batch request: two gets each
# The key right after k is k + "\x01": keys hold no NUL (the server refuses it, also in a
# range's start), so nothing sorts between them.


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    """One checkpoint as a history lists it (its record decoded; no channel values):
    ``parent`` is its parent checkpoint id (None for a thread's first), ``writes`` its
    pending writes (chunk keys not counted), ``run`` the run_id of its metadata."""

    checkpoint_ns: str
    checkpoint_id: str
    parent: str | None
    step: Any
    source: Any
    ts: Any
    run: str | None
    writes: int


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """A thread as `langgraph threads` lists it: its checkpoints (every checkpoint
    namespace), the step, source and time of its newest root-graph checkpoint (of its
    first subgraph's when it has no root one), and its TTL lease id (saver ttl=) or None."""

    thread_id: str
    checkpoints: int
    step: Any
    source: Any
    ts: Any
    lease: int | None


@dataclass(frozen=True, slots=True)
class ThreadPage:
    """One page of threads in thread id order; ``next_after``: pass it as ``after`` for
    the next page (None: this was the last one); ``revision``: the read's."""

    threads: tuple[ThreadSummary, ...]
    next_after: str | None
    revision: int


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """One page of a thread's checkpoints in key order (namespaces in order, each newest
    first); ``next_after``: the last key read, for the next page (None: the last page)."""

    rows: tuple[CheckpointRow, ...]
    next_after: str | None
    revision: int


def default_serde() -> Any:
    """The saver's default serde (LangGraph's JsonPlusSerializer: msgpack, no pickle)."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer()


def row_of(key: str, value: bytes, writes: int, serde: Any) -> CheckpointRow:
    """The history row of one ``ckpt/`` kv (metadata and ts decoded with ``serde``)."""
    from .saver_codec import loads, unpack_record

    _, cns, cid = K.parse_ckpt_key(key)
    rec = unpack_record(value)
    meta, ckpt = loads(serde, rec.meta), loads(serde, rec.ckpt)
    return CheckpointRow(
        cns, cid, rec.parent, meta.get("step"), meta.get("source"), ckpt.get("ts"), rec.run, writes
    )


def write_counts(keys: Iterable[str], thread: str) -> dict[tuple[str, str], int]:
    """Pending writes per (checkpoint_ns, checkpoint_id), from ``writes/{thread}/`` keys
    (chunk keys not counted)."""
    out: dict[tuple[str, str], int] = {}
    depth = K.writes_prefix(thread).count("/") + 3  # {cns}/{cid}/{task}/{idx}
    for key in keys:
        if K.main_key(key, depth)[1] is not None:
            continue
        cns, cid = key.split("/")[2:4]
        k = (K.unpart(cns), K.unpart(cid))
        out[k] = out.get(k, 0) + 1
    return out


def thread_summaries(keys: Iterable[str]) -> dict[str, tuple[int, str]]:
    """thread -> (checkpoints, the key of its newest root-graph checkpoint), from ``ckpt/``
    keys in key order: a thread's first key is it (the root namespace "" sorts first and
    each namespace is newest first), or its first subgraph's newest when it has no root."""
    out: dict[str, tuple[int, str]] = {}
    for key in keys:
        thread = K.parse_ckpt_key(key)[0]
        n, newest = out.get(thread, (0, key))
        out[thread] = (n + 1, newest)
    return out


def _range(start: str, end: str, limit: int, revision: int | None, keys_only: bool) -> Call:
    kw: dict[str, Any] = {"start": start, "end": end, "limit": limit}
    if revision is not None:
        kw["revision"] = revision
    if keys_only:
        kw["keys_only"] = True
    return Call("range", (), kw)


def _counted_threads(
    ns: str, after: str | None, limit: int | None
) -> AgentPlan[tuple[dict[str, tuple[int, str]], bool, int]]:
    """(thread summaries of at most ``limit`` complete threads after ``after``, whether
    more threads follow, the revision), reading ``ckpt/`` keys until one more thread shows
    (so the last one's count is complete) or the keys end."""
    start = K.CKPT if after is None else K.prefix_end(K.ckpt_prefix(after))
    end, revision = K.prefix_end(K.CKPT), None
    found: dict[str, tuple[int, str]] = {}
    while True:
        call = _range(start, end, _KEY_PAGE, revision, keys_only=True)
        page = yield Call(call.method, call.args, {**call.kwargs, "ns": ns})
        revision = page.revision if revision is None else revision
        for thread, (n, newest) in thread_summaries(kv.key for kv in page.kvs).items():
            if limit is not None and thread not in found and len(found) == limit:
                return found, True, revision
            m, first = found.get(thread, (0, newest))
            found[thread] = (m + n, first)
        if not page.more or not page.kvs:
            return found, False, revision
        start = page.kvs[-1].key + "\x01"


def threads_plan(
    ns: str, serde: Any, *, after: str | None = None, limit: int | None = None
) -> AgentPlan[ThreadPage]:
    """A page of threads (see the module docstring): keys-only ranges of ``ckpt/``, then
    one batch request per 100 threads reading each newest checkpoint and TTL marker."""
    found, more, revision = yield from _counted_threads(ns, after, limit)
    threads = list(found)
    out = []
    for i in range(0, len(threads), _BATCH_THREADS):
        group = threads[i : i + _BATCH_THREADS]
        calls = []
        for t in group:
            calls += [Call("get", (found[t][1],)), Call("get", (K.ttl_key(t),))]
        res = yield BatchCall(tuple(calls), ns)
        for j, t in enumerate(group):
            kv, lease = res[2 * j], res[2 * j + 1]
            row = None
            if kv is not None and not isinstance(kv, BaseException):
                row = row_of(kv.key, kv.value, 0, serde)
            has_lease = lease is not None and not isinstance(lease, BaseException)
            out.append(
                ThreadSummary(
                    t,
                    found[t][0],
                    getattr(row, "step", None),
                    getattr(row, "source", None),
                    getattr(row, "ts", None),
                    int(lease.value) if has_lease else None,
                )
            )
    return ThreadPage(tuple(out), threads[-1] if more and threads else None, revision)


def history_plan(
    ns: str,
    serde: Any,
    thread: str,
    cns: str | None = None,
    *,
    after: str | None = None,
    limit: int | None = None,
) -> AgentPlan[HistoryPage]:
    """A page of ``thread``'s checkpoints (of checkpoint namespace ``cns``, or of every
    one), in key order, after the key ``after``; at most ``limit`` (None: all). Each
    checkpoint's pending writes are counted from their keys (one batch request of
    keys-only ranges, at the records' revision)."""
    prefix = K.ckpt_prefix(thread, cns)
    start, end = prefix if after is None else after + "\x01", K.prefix_end(prefix)
    kvs: list[Any] = []
    revision, more = None, True
    while more and (limit is None or len(kvs) < limit):
        want = _KEY_PAGE if limit is None else min(_KEY_PAGE, limit - len(kvs))
        call = _range(start, end, want, revision, keys_only=False)
        page = yield Call(call.method, call.args, {**call.kwargs, "ns": ns})
        revision = page.revision if revision is None else revision
        kvs += page.kvs
        more = bool(page.more and page.kvs)
        if more:
            start = page.kvs[-1].key + "\x01"
    ids = [K.parse_ckpt_key(kv.key)[1:] for kv in kvs]
    counts: dict[tuple[str, str], int] = {}
    for i in range(0, len(ids), _BATCH_THREADS):
        calls = []
        for c, cid in ids[i : i + _BATCH_THREADS]:
            wp = K.writes_prefix(thread, c, cid)
            calls.append(_range(wp, K.prefix_end(wp), _KEY_PAGE, revision, keys_only=True))
        res = yield BatchCall(tuple(calls), ns)
        for r in res:
            if not isinstance(r, BaseException):
                counts.update(write_counts((kv.key for kv in r.kvs), thread))
    rows = tuple(
        row_of(kv.key, kv.value, counts.get(ident, 0), serde)
        for kv, ident in zip(kvs, ids, strict=True)
    )
    nxt = kvs[-1].key if more and kvs else None
    return HistoryPage(rows, nxt, revision or 0)


def jsonable(value: Any) -> Any:
    """``value`` as JSON-ready data (objects by their fields, bytes as {"$bytes": b64})."""
    from ..agent.codec import jsonable as plain

    return plain(value)


def shown(tup: Any) -> dict[str, Any]:
    """A CheckpointTuple as JSON-ready data."""
    conf = tup.config["configurable"]
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    ckpt = tup.checkpoint
    return {
        "thread_id": conf["thread_id"],
        "checkpoint_ns": conf["checkpoint_ns"],
        "checkpoint_id": conf["checkpoint_id"],
        "parent": parent,
        "ts": ckpt.get("ts"),
        "metadata": jsonable(tup.metadata),
        "channel_values": jsonable(ckpt.get("channel_values", {})),
        "channel_versions": jsonable(ckpt.get("channel_versions", {})),
        "pending_writes": [
            {"task_id": t, "channel": ch, "value": jsonable(v)}
            for t, ch, v in tup.pending_writes or []
        ],
    }
