"""StatekeeperStore's sans-IO core: one LangGraph batch (GetOp, PutOp, SearchOp,
ListNamespacesOp) as a plan (client/plan.py) that yields the client requests it needs
and returns the batch's results; the blocking and asyncio drivers (client/langgraph/store.py)
run it over a Client or an AsyncClient, and the unit tests over an in-memory fake.

A batch takes, in this order:

1. :meth:`StoreCore.prepare` (pure): checks the ops, keeps the last PutOp per
   (namespace, key) (LangGraph's rule for one batch), and lists the texts to embed
   (put values' indexed fields, search queries). The driver embeds them (sync or async).
2. :meth:`StoreCore.plan`: builds every put's record first (so a value that is not JSON,
   too large or with vectors of the wrong dims fails before anything is sent), then
   - ONE ``batch`` request with every read: a ``get`` per distinct GetOp key and the first
     page of a ``range`` per distinct search / list_namespaces prefix. Scans that need more
     rows (a filter or a query needs all of them; a plain search only offset + limit
     visible ones) continue in one more ``batch`` per round, at the revision of their
     first page. The reads see the store as before the batch's puts (as InMemoryStore).
   - the answers, computed on the client (filters, ranking: client/langgraph/store_match.py);
   - the writes: every put/delete in ONE txn when they fit one request (<= 1000 ops and
     ~3.5 MiB), else in several (then not atomic together); plus one guarded txn (compare
     on the mod_revision just read) per item whose TTL a read refreshes and per expired
     un-leased item a read met (deleted). A lone txn is sent as ``txn``, several as one
     ``batch`` per request's worth.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from langgraph.store.base import (
    GetOp,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from ..errors import InvalidRequest
from ..ops import compare, ops
from ..plan import AgentPlan, BatchCall, Call, batch, call, raise_errors
from .store_chunks import BigPut, big_put, drop_chunks, fill_rows_plan, put_big_plan
from .store_keys import after, item_key, literal_labels, namespace_prefix, prefix_end
from .store_match import cosine, list_namespaces, value_matches
from .store_records import Record, encode_vector

__all__ = ["Limits", "Prepared", "Row", "StoreCore"]

MAX_LEASE_SECONDS = 86_400.0  # the server's longest lease (one day)


@dataclass(frozen=True)
class Limits:
    """The server limits the core plans within (node/config.py Limits)."""

    max_key_bytes: int = 4 * 1024
    max_value_bytes: int = 1024 * 1024
    request_bytes: int = 3 * 1024 * 1024 + 512 * 1024  # of the 4 MiB, room for framing
    request_ops: int = 1000  # of the 1024
    min_lease_ttl: float = 2.0  # seconds (min_lease_ttl_ms)


class Row(NamedTuple):
    """An item as read: its key, the revision of its last write, its record."""

    key: str
    mod_revision: int
    record: Record


@dataclass
class Prepared:
    """A batch after :meth:`StoreCore.prepare`: what the driver must embed."""

    ops: list[Op]
    puts: dict[str, PutOp]  # item key -> the batch's last PutOp for it
    texts: list[str] = field(default_factory=list)  # distinct texts to embed_documents
    slots: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # key -> (path, text)
    queries: list[str] = field(default_factory=list)  # distinct queries to embed_query


@dataclass
class _Scan:
    """A forward range scan of one prefix, page by page, at one revision."""

    prefix: str
    need: int | None  # visible rows wanted (None: all)
    rows: list[Row] = field(default_factory=list)
    visible: int = 0
    revision: int | None = None
    next_start: str | None = None
    done: bool = False

    def call(self, page_size: int) -> Call:
        limit = page_size if self.need is None else min(page_size, self.need - self.visible + 2)
        start = self.next_start if self.next_start is not None else self.prefix
        return call("range", start=start, end=prefix_end(self.prefix), limit=max(1, limit),
                    revision=self.revision)

    def absorb(self, page: Any, now: datetime) -> None:
        if self.revision is None:
            self.revision = page.revision
        for kv in page.kvs:
            rec = Record.decode(kv.value, kv.key)
            self.rows.append(Row(kv.key, kv.mod_revision, rec))
            self.visible += not rec.expired(now)
        wanted = self.need is None or self.visible < self.need
        if page.more and page.kvs and wanted:
            self.next_start = after(page.kvs[-1].key)
        else:
            self.done = True


class _Reads:
    """Every read of a batch: distinct get keys and distinct scans."""

    def __init__(self, prep: Prepared, semantic: bool) -> None:
        self.gets: dict[str, Row | None] = {}
        self.scans: dict[str, _Scan] = {}
        self._asked: list[Any] = []
        self._first = True
        for op in prep.ops:
            if isinstance(op, GetOp):
                self.gets[item_key(op.namespace, op.key)] = None
            elif isinstance(op, SearchOp) and op.limit != 0:
                full = op.filter or (op.query and semantic) or min(op.offset, op.limit) < 0
                self._scan(namespace_prefix(op.namespace_prefix),
                           None if full else op.offset + op.limit)
            elif isinstance(op, ListNamespacesOp):
                self._scan(_list_prefix(op), None)

    def _scan(self, prefix: str, need: int | None) -> None:
        scan = self.scans.get(prefix)
        if scan is None:
            self.scans[prefix] = _Scan(prefix, need)
        elif scan.need is not None:
            scan.need = None if need is None else max(scan.need, need)

    def next_calls(self, page_size: int) -> list[Call]:
        """The reads of the next request ([] when everything is read)."""
        asked: list[Any] = []
        calls: list[Call] = []
        if self._first:
            self._first = False
            for key in self.gets:
                asked.append(key)
                calls.append(call("get", key))
        for scan in self.scans.values():
            if not scan.done:
                asked.append(scan)
                calls.append(scan.call(page_size))
        self._asked = asked
        return calls

    def absorb(self, results: list[Any], now: datetime) -> None:
        for what, result in zip(self._asked, results, strict=True):
            if isinstance(what, _Scan):
                what.absorb(result, now)
            elif result is not None:
                self.gets[what] = Row(what, result.mod_revision, Record.decode(result.value, what))

    def rows(self) -> Iterator[Row]:
        yield from (row for row in self.gets.values() if row is not None)
        for scan in self.scans.values():
            yield from scan.rows


def _list_prefix(op: ListNamespacesOp) -> str:
    """The narrowest scan covering a list_namespaces op: the longest literal start of its
    prefix conditions (suffix conditions cannot narrow a forward scan)."""
    best: tuple[str, ...] = ()
    for cond in op.match_conditions or ():
        if cond.match_type == "prefix":
            labels = literal_labels(cond.path)
            if len(labels) > len(best):
                best = labels
    return namespace_prefix(best)


class _Txn(NamedTuple):
    compare: list[dict[str, Any]]
    success: list[dict[str, Any]]
    size: int


class StoreCore:
    """Configuration and the plans of StatekeeperStore (see the module docstring).

    Args:
        ns: the statekeeper namespace of every key.
        dims: the index's dimension (None: no semantic search).
        fields: the index's field paths (default ["$"], the whole value).
        page_size: rows per range page of a scan.
        limits: the server limits to plan within.
    """

    def __init__(
        self,
        ns: str,
        *,
        dims: int | None = None,
        fields: Iterable[str] | None = None,
        page_size: int = 500,
        limits: Limits | None = None,
    ) -> None:
        if dims is not None and (type(dims) is not int or dims < 1):
            raise ValueError(f"index dims must be a positive int, not {dims!r}")
        if not 1 <= page_size <= 10_000:
            raise ValueError("page_size must be within 1..10000 (max_range_limit)")
        self.ns = ns
        self.dims = dims
        self.fields = [_path(p) for p in (fields or ["$"])] if dims is not None else []
        self.page_size = page_size
        self.limits = limits or Limits()

    # -- step 1: pure preparation -------------------------------------------------------

    def prepare(self, ops: Iterable[Op]) -> Prepared:
        """Check ``ops`` and list what to embed.

        Raises:
            InvalidNamespaceError: a namespace label is empty, not a str or holds ".".
            ValueError: an op that is not a GetOp/PutOp/SearchOp/ListNamespacesOp, or a
                PutOp TTL that is not > 0.
            TypeError: a PutOp whose value is not a dict (or None).
        """
        op_list = list(ops)
        puts: dict[str, PutOp] = {}
        for op in op_list:
            if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
                raise ValueError(f"unknown store operation {op!r}")
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                if op.value is not None and not isinstance(op.value, Mapping):
                    raise TypeError(
                        f"the value of item {tuple(op.namespace)}/{op.key!r} must be a dict "
                        f"(None deletes the item), not {type(op.value).__name__}"
                    )
                if op.ttl is not None and not op.ttl > 0:
                    raise ValueError(f"ttl must be a positive number of minutes, not {op.ttl!r}")
                puts[item_key(op.namespace, op.key)] = op
        prep = Prepared(op_list, puts)
        if self.dims is not None:
            self._texts(prep)
            queries = {op.query for op in op_list if isinstance(op, SearchOp) and op.query}
            prep.queries = sorted(queries)
        return prep

    def _texts(self, prep: Prepared) -> None:
        index: dict[str, int] = {}
        for key, op in prep.puts.items():
            if op.value is None or op.index is False:
                continue
            paths = self.fields if op.index is None else [_path(p) for p in op.index]
            slots: list[tuple[str, int]] = []
            for label, tokens in paths:
                texts = get_text_at_path(op.value, tokens)
                for i, text in enumerate(texts):
                    at = index.setdefault(text, len(index))
                    slots.append((f"{label}.{i}" if len(texts) > 1 else label, at))
            if slots:
                prep.slots[key] = slots
        prep.texts = list(index)

    # -- step 2: the plan ---------------------------------------------------------------

    def plan(
        self,
        prep: Prepared,
        vectors: list[list[float]],
        queries: dict[str, list[float]],
        now: datetime,
    ) -> AgentPlan[list[Result]]:
        """The batch's requests; returns one result per op (see the module docstring).
        ``vectors``: one per ``prep.texts``; ``queries``: query -> vector."""
        writes, bigs = self._put_txns(prep, vectors, now)
        for q, vec in queries.items():
            self._check_dims(len(vec), f"the embedding of query {q!r}")
        reads = _Reads(prep, self.dims is not None)
        while calls := reads.next_calls(self.page_size):
            reads.absorb(raise_errors((yield batch(*calls, ns=self.ns))), now)
        yield from self._fill_chunked(prep, reads, now)
        results, touched = self._answers(prep, reads, queries, now)
        writes += self._upkeep_txns(prep, reads, touched, now)
        for row in touched.values():  # a chunked item refreshed keeps its chunks' lease
            lease = (row.record.chunks or {}).get("lease")
            if lease is not None and row.key not in prep.puts:
                yield call("lease_keepalive", lease)
        for big in bigs:  # each in a txn of its own, after its chunks (store_chunks.py)
            yield from put_big_plan(self.ns, self.limits.max_value_bytes, big)
        for step in self._requests(writes):
            done = yield step
            if isinstance(step, BatchCall):
                raise_errors(done)
        return results

    def _fill_chunked(self, prep: Prepared, reads: _Reads, now: datetime) -> AgentPlan[None]:
        """The chunks of every visible chunked item a get or search read (list_namespaces
        needs only manifests)."""
        searched = {namespace_prefix(o.namespace_prefix) for o in prep.ops
                    if isinstance(o, SearchOp)}
        tables = [reads.gets, *(s.rows for p, s in reads.scans.items() if p in searched)]
        yield from fill_rows_plan(self.ns, tables, now)

    def _answers(
        self, prep: Prepared, reads: _Reads, queries: dict[str, list[float]], now: datetime
    ) -> tuple[list[Result], dict[str, Row]]:
        """Each op's result, and the rows returned by reads that refresh TTLs."""
        results: list[Result] = []
        touched: dict[str, Row] = {}
        for op in prep.ops:
            if isinstance(op, GetOp):
                row = reads.gets[item_key(op.namespace, op.key)]
                visible = row is not None and not row.record.expired(now)
                results.append(row.record.item() if visible else None)  # type: ignore[union-attr]
                if visible and op.refresh_ttl:
                    touched[row.key] = row  # type: ignore[union-attr]
            elif isinstance(op, SearchOp):
                scan = reads.scans.get(namespace_prefix(op.namespace_prefix))
                found = self._search(op, scan.rows if scan else [], queries, now)
                results.append([row.record.search_item(score) for row, score in found])
                if op.refresh_ttl:
                    touched.update((row.key, row) for row, _ in found)
            elif isinstance(op, ListNamespacesOp):
                rows = reads.scans[_list_prefix(op)].rows
                names = {r.record.namespace for r in rows if not r.record.expired(now)}
                results.append(list_namespaces(names, op))
            else:
                results.append(None)
        return results, touched

    def _search(
        self, op: SearchOp, rows: list[Row], queries: dict[str, list[float]], now: datetime
    ) -> list[tuple[Row, float | None]]:
        """The rows a search returns, in order, with their scores. Without a query: in key
        order. With one (and an index): by best cosine over the item's vectors, highest
        first (ties in key order), then the items without vectors in key order; offset and
        limit apply to that whole list."""
        if op.limit == 0:
            return []
        hits = [
            r for r in rows if not r.record.expired(now) and value_matches(r.record.value, op.filter)
        ]
        qvec = queries.get(op.query) if op.query and self.dims is not None else None
        if qvec is None:
            return [(r, None) for r in hits[op.offset : op.offset + op.limit]]
        scored: list[tuple[Row, float | None]] = []
        unscored: list[tuple[Row, float | None]] = []
        for r in hits:
            if not r.record.vectors:
                unscored.append((r, None))
                continue
            self._check_dims(r.record.dims, f"item {r.record.key!r} of {r.record.namespace!r}")
            scored.append((r, max(cosine(qvec, v) for v in r.record.vector_list())))
        scored.sort(key=lambda pair: -pair[1])  # type: ignore[operator]
        return (scored + unscored)[op.offset : op.offset + op.limit]

    def _check_dims(self, dims: Any, what: str) -> None:
        if dims != self.dims:
            raise ValueError(
                f"{what} has {dims} dimensions but this store's index has {self.dims}: "
                "use the same embedding model and dims, or re-put the item"
            )

    # -- writes -------------------------------------------------------------------------

    def _put_txns(
        self, prep: Prepared, vectors: list[list[float]], now: datetime
    ) -> tuple[list[_Txn], list[BigPut]]:
        """The batch's puts and deletes, in as few txns as the limits allow (each with a
        delete of the item's chunks, store_chunks.py), and the items to store as chunks."""
        if len(vectors) != len(prep.texts):
            raise ValueError(f"the embedder returned {len(vectors)} vectors for "
                             f"{len(prep.texts)} texts")
        for i, vec in enumerate(vectors):
            self._check_dims(len(vec), f"the embedding of {prep.texts[i][:40]!r}")
        encoded = [encode_vector(v) for v in vectors]
        lim = self.limits
        txns: list[_Txn] = []
        bigs: list[BigPut] = []
        chunk: list[dict[str, Any]] = []
        size = 0
        for key, op in prep.puts.items():
            if len(key.encode("utf-8")) > lim.max_key_bytes:
                raise InvalidRequest(
                    f"item key of {op.namespace!r}/{op.key!r} is longer than "
                    f"{lim.max_key_bytes} bytes", code="key_too_large")
            if op.value is None:
                one, n = ops.delete(key), len(key) + 64
            else:
                slots = prep.slots.get(key, [])
                vecs = {path: encoded[at] for path, at in slots} or None
                put = self._put_op(key, op, vecs, now)
                if isinstance(put, BigPut):
                    bigs.append(put)
                    continue
                one, n = put
            if chunk and (len(chunk) + 2 > lim.request_ops or size + n > lim.request_bytes):
                txns.append(_Txn([], chunk, size))
                chunk, size = [], 0
            chunk += [one, drop_chunks(key)]
            size += n + len(key) + 64
        if chunk:
            txns.append(_Txn([], chunk, size))
        return txns, bigs

    def _put_op(
        self, key: str, op: PutOp, vecs: dict[str, str] | None, now: datetime
    ) -> tuple[dict[str, Any], int] | BigPut:
        ttl = op.ttl
        try:
            expires = None if ttl is None else now + timedelta(minutes=ttl)
        except OverflowError:
            raise ValueError(f"ttl of {ttl!r} minutes is too far in the future") from None
        rec = Record(
            namespace=tuple(op.namespace), key=op.key, value=dict(op.value or {}),
            created_at=now, updated_at=now, ttl=ttl, expires_at=expires,
            leased=ttl is not None and ttl * 60 <= MAX_LEASE_SECONDS,
            dims=self.dims if vecs else None, vectors=vecs,
        )
        raw = rec.encode()
        if len(raw) > self.limits.max_value_bytes:
            lease = self._lease_seconds(rec)
            return big_put(key, rec, raw, lease, self.limits.max_value_bytes,
                           self.limits.request_ops)
        return self._write_record(key, rec)

    def _lease_seconds(self, rec: Record) -> float | None:
        if rec.leased and rec.ttl is not None:
            return max(rec.ttl * 60, self.limits.min_lease_ttl)
        return None

    def _write_record(self, key: str, rec: Record) -> tuple[dict[str, Any], int]:
        raw = rec.encode()
        if rec.chunks is not None:  # a chunked item's manifest, on its chunks' lease
            return ops.put(key, raw, lease=rec.chunks.get("lease")), len(key) + len(raw) + 64
        if len(raw) > self.limits.max_value_bytes:
            raise InvalidRequest(
                f"item {rec.key!r} of {rec.namespace!r} is {len(raw)} bytes as stored "
                f"(value, timestamps and vectors), over the {self.limits.max_value_bytes}-byte "
                "value limit", code="value_too_large")
        return ops.put(key, raw, ttl=self._lease_seconds(rec)), len(key) + len(raw) + 64

    def _upkeep_txns(
        self, prep: Prepared, reads: _Reads, touched: dict[str, Row], now: datetime
    ) -> list[_Txn]:
        """A guarded rewrite per TTL item a read refreshed, a guarded delete per expired
        un-leased item a read met (keys this batch puts are left to the put)."""
        out: list[_Txn] = []
        for key, row in touched.items():
            if row.record.ttl is not None and key not in prep.puts:
                op, n = self._write_record(key, row.record.refreshed(now))
                out.append(_Txn([compare.mod_revision(key) == row.mod_revision], [op], n))
        stale = {r.key: r for r in reads.rows() if r.record.expired(now) and not r.record.leased}
        for key, row in stale.items():
            if key not in prep.puts:
                guard = compare.mod_revision(key) == row.mod_revision
                out.append(_Txn([guard], [ops.delete(key), drop_chunks(key)], 2 * len(key) + 64))
        return out

    def _requests(self, txns: list[_Txn]) -> Iterator[Call | BatchCall]:
        """The txns as few requests as the limits allow: one ``txn``, or a ``batch``."""
        group: list[_Txn] = []
        n_ops = size = 0
        for t in txns:
            k = len(t.compare) + len(t.success) + 1
            if group and (n_ops + k > self.limits.request_ops or
                          size + t.size > self.limits.request_bytes):
                yield self._request(group)
                group, n_ops, size = [], 0, 0
            group.append(t)
            n_ops += k
            size += t.size
        if group:
            yield self._request(group)

    def _request(self, group: list[_Txn]) -> Call | BatchCall:
        if len(group) == 1:
            return call("txn", group[0].compare, group[0].success, ns=self.ns)
        return batch(*(call("txn", t.compare, t.success) for t in group), ns=self.ns)

    # -- sweep ---------------------------------------------------------------------------

    def sweep_plan(self, now: datetime) -> AgentPlan[int]:
        """Delete every item expired by ``now``, page by page (each delete guarded by the
        item's mod_revision, so an item re-put meanwhile stays); returns how many."""
        scan = _Scan(namespace_prefix(()), None)
        deleted = 0
        while not scan.done:
            page = raise_errors((yield batch(scan.call(self.page_size), ns=self.ns)))[0]
            scan.absorb(page, now)
            txns = [
                _Txn([compare.mod_revision(r.key) == r.mod_revision],
                     [ops.delete(r.key), drop_chunks(r.key)], 2 * len(r.key) + 64)
                for r in scan.rows if r.record.expired(now)
            ]
            scan.rows.clear()
            for step in self._requests(txns):
                done = yield step
                for res in raise_errors(done) if isinstance(step, BatchCall) else [done]:
                    deleted += bool(res.succeeded)
        return deleted


def _path(path: str) -> tuple[str, Any]:
    """An index field path and what get_text_at_path takes for it ("$" as is)."""
    return (path, path) if path == "$" else (path, tokenize_path(path))
