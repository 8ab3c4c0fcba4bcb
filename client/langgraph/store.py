"""StatekeeperStore: LangGraph's long-term memory store (``BaseStore``: get, put, delete,
search, list_namespaces, their async forms, TTLs, semantic search) on statekeeper.

    from statekeeper.client.langgraph import StatekeeperStore

    with StatekeeperStore.from_endpoints("http://127.0.0.1:7000", ttl={"default_ttl": 60},
                                         index={"dims": 1536, "embed": embed_fn,
                                                "fields": ["text"]}) as store:
        store.put(("users", "42"), "prefs", {"text": "likes dark mode"})
        store.search(("users",), query="display settings", limit=3)
        graph = builder.compile(checkpointer=saver, store=store)

One implementation (a sans-IO plan per batch, client/langgraph/store_core.py) run by a
blocking driver over a :class:`client.Client` (``batch``) or an asyncio one over a
:class:`client.AsyncClient` (``abatch``; without an AsyncClient, ``abatch`` runs the
blocking driver in a worker thread).

1. Consistency. Every read is linearizable (the client's default consistency); a scan of
   several pages is one snapshot (later pages at the first page's revision). One batch
   is at most two round trips in the common case: ONE ``batch`` request with all its reads
   (a get per GetOp, the first page of a range scan per search / list_namespaces prefix),
   then ONE ``txn`` with all its puts and deletes, applied atomically at one revision
   through raft. Reads see the store as it was before the batch's own puts (like
   InMemoryStore); the last PutOp per (namespace, key) in a batch wins (LangGraph's rule).
   Only batches over the request limits (below) are split into several txns, which are
   then not atomic together.
2. ok / failed / unknown. ok: the batch returned; its writes are committed on a majority.
   failed: an exception before or from the server (InvalidRequest for a limit, TypeError
   for a value that is not JSON, ValueError for a bad op or a dims mismatch,
   InvalidNamespaceError): the batch's records are all built and checked before the
   first request, so a failed batch wrote nothing (except when split, see 1). unknown:
   Timeout/Unavailable after the client's retries (each request keeps its idempotency key
   across retries, so it applied at most once): the puts may or may not be committed;
   sending the same batch again is safe (a put or delete repeated ends in the same state,
   with new timestamps).
3. Limits and their errors: an item key (``item/`` + escaped labels + escaped key) of at
   most 4 KiB (InvalidRequest ``key_too_large``); an item's stored record (value as JSON,
   timestamps, vectors) over 1 MiB is stored as chunks then a manifest, in a txn of its
   own (client/langgraph/store_chunks.py), up to ~990 MiB (``value_too_large`` above,
   before anything is sent); one txn carries at most 1000 puts and ~3.5 MiB (more are split into
   several txns, see 1). Values must be JSON-serializable (TypeError naming the item).
   Scans read ``page_size`` (500) rows per page.
4. Key layout (client/langgraph/store_keys.py, record: client/langgraph/store_records.py),
   in the store's statekeeper namespace (by default the given client's;
   ``langgraph-store`` for :meth:`StatekeeperStore.from_endpoints`), readable with
   ``statekeeper range item/``: ``item/{label_1}/.../{label_n}/{key}`` -> the item's
   JSON record, every component escaped ("%" -> %25, "/" -> %2F, NUL -> %00).
5. Durability: a committed put is on a majority of the nodes (fsync per the cluster's
   config); nothing is cached on the client.

Costs, and what is computed on the client:

- search: a namespace prefix is one forward range scan. Without filter or query it stops
  after offset + limit items; with a ``filter`` or a semantic ``query`` it reads EVERY item
  under the prefix (values, and vectors when ranking) and filters / ranks on the client.
- semantic search: with ``index={"dims", "embed", "fields"}`` the indexed fields of each
  put are embedded on the client at put time (the batch's distinct texts in one
  ``embed_documents`` call) and stored IN the item record (base64 float64, with the
  dims). A search with a ``query`` embeds the query, reads all candidates of the prefix
  that pass the filter, and ranks them by cosine similarity ON THE CLIENT: the cost is
  one full scan of the prefix per query (bytes ~ items x fields x dims x 8 x 4/3) and a
  Python dot product per vector, so keep semantic prefixes to thousands of items, not
  millions. Items with vectors of another dims fail the search with a ValueError naming
  the item (re-put them).
- list_namespaces: reads every item under the longest literal start of its ``prefix``
  condition (all items without one) and computes the namespaces on the client.

TTL (``put(..., ttl=minutes)``, ``TTLConfig(default_ttl, refresh_on_read)``): the record
holds its expiry time, and every read hides an item whose expiry has passed, whether or
not the server has deleted it yet (by the reading client's wall clock: keep clocks in
sync). The key also gets a server lease of its own (``put(..., ttl=seconds)``) of
max(ttl, ``Limits.min_lease_ttl``: 2 s, the server's default min_lease_ttl_ms) that deletes
it, so a TTL under 2 s is hidden on time but deleted up to 2 s later; a TTL over one day (the
longest lease) has no lease: such items are deleted by a read that meets them expired
and by :meth:`StatekeeperStore.sweep_ttl`. Refresh on read (get, or search with
``refresh_ttl``) REWRITES each returned TTL item with a new expiry and a new lease, in one
txn per item guarded by the mod_revision just read (a concurrent put wins; the old lease
expires with no keys): one extra write request per read batch that returns TTL items.
Keepalive of the old lease was not used because the record's expiry must move too.

On purpose unlike InMemoryStore (LangGraph leaves these open; PostgresStore differs too):

- search results without a query come in key order (the layout above; stable under
  updates, so offset paging is consistent), not insertion order; with a query, items
  without vectors follow the ranked ones and offset/limit apply to the whole list.
- list_namespaces lists namespaces that hold at least one (unexpired) item; InMemoryStore
  also lists namespaces whose items were all deleted, or that a get only looked at.
- ``created_at`` is reset by every put (as InMemoryStore does; PostgresStore keeps it).
- a comparison filter (``$gt`` ...) on a missing or non-numeric field does not match
  (InMemoryStore raises); a re-put replaces the item's vectors (InMemoryStore keeps stale
  ones of fields no longer indexed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import BaseStore, IndexConfig, Op, Result, TTLConfig, ensure_embeddings

from .. import AsyncClient, Client
from ..plan import arun, run
from .keys import namespace_of
from .store_core import Limits, Prepared, StoreCore

__all__ = ["StatekeeperStore"]

DEFAULT_NS = "langgraph-store"


class StatekeeperStore(BaseStore):
    """A LangGraph BaseStore on statekeeper (see the module docstring for the guarantees).

    Args:
        client: a :class:`client.Client` for the blocking methods (``batch``, get, put...).
        aclient: a :class:`client.AsyncClient` for the async ones (``abatch``, aget...);
            without it they run the blocking client in a worker thread.
        ns: the statekeeper namespace holding every item; by default the namespace of the
            client (or aclient) given.
        index: LangGraph's IndexConfig (``dims``, ``embed``, ``fields``) for semantic search.
        ttl: LangGraph's TTLConfig (``default_ttl`` minutes, ``refresh_on_read``).
        page_size: rows per range page of a scan.
        limits: the server limits (client/langgraph/store_core.py Limits) if not default.
        clock: wall-clock seconds (timestamps and expiry), ``time.time``.
    """

    supports_ttl = True

    def __init__(
        self,
        client: Client | None = None,
        *,
        aclient: AsyncClient | None = None,
        ns: str | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        page_size: int = 500,
        limits: Limits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if client is None and aclient is None:
            raise ValueError("StatekeeperStore needs a Client (client=) or an AsyncClient (aclient=)")
        self.client = client
        self.aclient = aclient
        self.ns = ns = namespace_of(ns, (client, aclient), DEFAULT_NS, "StatekeeperStore")
        self.ttl_config = ttl
        self.index_config = dict(index) if index else None
        self.embeddings = None
        dims = None
        if index:
            if "dims" not in index:
                raise ValueError("index needs dims (the embedding's dimension)")
            self.embeddings = ensure_embeddings(index.get("embed"))
            dims = index["dims"]
        fields = index.get("fields") if index else None
        self.core = StoreCore(ns, dims=dims, fields=fields, page_size=page_size, limits=limits)
        self._clock = clock
        self._owns_clients = False

    @classmethod
    def from_endpoints(
        cls,
        endpoints: str | Sequence[str],
        *,
        ns: str = DEFAULT_NS,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        page_size: int = 500,
        limits: Limits | None = None,
        **client_options: Any,
    ) -> StatekeeperStore:
        """A store with a Client and an AsyncClient of its own on ``endpoints`` (extra
        keyword arguments go to both: timeout, retry, consistency...); close it (``with``,
        ``async with``, :meth:`close`, :meth:`aclose`) to close them."""
        client = Client(endpoints, ns=ns, **client_options)
        aclient = AsyncClient(endpoints, ns=ns, **client_options)
        store = cls(client, aclient=aclient, ns=ns, index=index, ttl=ttl,
                    page_size=page_size, limits=limits)
        store._owns_clients = True
        return store

    # -- BaseStore ------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` (see the module docstring: one read request, one write txn)."""
        if self.client is None:
            raise RuntimeError(
                "this StatekeeperStore has only an AsyncClient: use the async methods "
                "(aget, aput, asearch, ...) or pass client="
            )
        prep = self.core.prepare(ops)
        vectors, queries = self._embed(prep)
        return run(self.client, self.core.plan(prep, vectors, queries, self._now()))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` on the AsyncClient (or, without one, the blocking client in a
        worker thread)."""
        prep = self.core.prepare(ops)
        vectors, queries = await self._aembed(prep)
        if self.aclient is None:
            plan = self.core.plan(prep, vectors, queries, self._now())
            return await asyncio.to_thread(run, self.client, plan)
        return await arun(self.aclient, self.core.plan(prep, vectors, queries, self._now()))

    # -- TTL sweep ------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete every expired item now (a full scan of the store); returns how many.
        Only needed for TTLs over one day: shorter ones have server leases."""
        if self.client is None:
            raise RuntimeError("this StatekeeperStore has only an AsyncClient: use asweep_ttl")
        return run(self.client, self.core.sweep_plan(self._now()))

    async def asweep_ttl(self) -> int:
        """:meth:`sweep_ttl` on the AsyncClient."""
        if self.aclient is None:
            return await asyncio.to_thread(self.sweep_ttl)
        return await arun(self.aclient, self.core.sweep_plan(self._now()))

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the blocking client if this store created it (:meth:`from_endpoints`);
        use :meth:`aclose` if the async methods were used."""
        if self._owns_clients and self.client is not None:
            self.client.close()

    async def aclose(self) -> None:
        """Close both clients if this store created them."""
        if self._owns_clients:
            if self.aclient is not None:
                await self.aclient.close()
            if self.client is not None:
                self.client.close()

    def __enter__(self) -> StatekeeperStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> StatekeeperStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- helpers --------------------------------------------------------------------------

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def _embed(self, prep: Prepared) -> tuple[list[list[float]], dict[str, list[float]]]:
        if self.embeddings is None:
            return [], {}
        vectors = self.embeddings.embed_documents(prep.texts) if prep.texts else []
        return vectors, {q: self.embeddings.embed_query(q) for q in prep.queries}

    async def _aembed(self, prep: Prepared) -> tuple[list[list[float]], dict[str, list[float]]]:
        if self.embeddings is None:
            return [], {}
        vectors = await self.embeddings.aembed_documents(prep.texts) if prep.texts else []
        found = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in prep.queries))
        return vectors, dict(zip(prep.queries, found, strict=True))
