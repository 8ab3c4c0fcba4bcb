"""StatekeeperSaver: a LangGraph checkpointer (BaseCheckpointSaver) on statekeeper, sync
and async in one class, as LangGraph's own InMemorySaver is::

    from statekeeper.client.langgraph import StatekeeperSaver

    with StatekeeperSaver.from_endpoints(["http://10.0.0.1:7000", "http://10.0.0.2:7000"]) as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "t-1"}})   # or await ainvoke

Every operation is one sans-IO plan (saver_plan.py, saver_admin.py, saver_delta.py; the
bytes in saver_codec.py, the keys in keys.py) run by a blocking
driver over :class:`client.Client` or an asyncio driver over :class:`client.AsyncClient`.

Consistency. A put is ONE txn: the checkpoint record, the blobs of its new channel
versions (or, for large ones, the manifests of their chunks, uploaded just before and
checked by the txn's compares), its run index entries and its namespace's ``last/`` marker
share one raft entry and one revision, so no reader ever sees a checkpoint without its
values. put_writes is one
txn too (special writes overwrite; regular ones are written where their (task_id, idx) has
none, by compare). Reads are linearizable by default (the client's ``consistency``), and
every read of one get_tuple or list sees one revision (later reads are pinned to the
first's). delete_thread and prune("delete") are prefix deletes in one txn. delete_for_runs
and prune("keep_latest") sweep each (thread, checkpoint_ns) in one txn guarded by a compare
on its ``last/`` marker, so a checkpoint put concurrently never loses a blob it references.
copy_thread is one txn when it fits (see saver_admin.py). Threads sharing one saver: the
txns its sync methods issue while another of its requests is in flight go out together in
one batch request (saver_combine.py; each txn still atomic on its own).

Outcomes. ok: the method returned; the write is committed on a majority (durable as the
cluster's fsync setting makes it). failed: an exception from client/errors.py
(InvalidRequest for a bad argument or a limit, Conflict when a sweep or put_writes kept
conflicting) or TypeError for a value the serde cannot encode without pickle: nothing was
written. unknown: Timeout or Unavailable after the client's retries. Every call carries one
idempotency key across the client's retries, so a retried txn applies once; the same put or
put_writes may also be repeated by the caller (same keys, same values; regular writes that
exist are left alone).

Limits and their errors. No ceiling on a channel value or pending write short of ~990 MiB
per put: values over 256 KiB (and the largest others until the txn fits ~4 MiB) are
stored as content-addressed chunks written before the txn, which then carries only their
manifests and a compare per chunk (saver_chunks.py; a put needs one of its 1000 ops per
MiB of chunks: beyond that InvalidRequest code ``too_large``, naming the checkpoint). A
checkpoint record (the checkpoint without channel values, plus metadata) must fit in one
1 MiB value (``too_large``). Keys are at most 4 KiB (thread ids, namespaces, channels and
task ids go into keys: the server answers ``key_too_large``).

Serializer. ``self.serde`` is LangGraph's JsonPlusSerializer (msgpack) unless one is
given; a serde with ``pickle_fallback`` is refused, a stored value typed "pickle" is never
loaded, and a value only pickle could encode raises TypeError instead of being stored.

Thread TTL (``ttl=`` seconds, or ``{"default_ttl": minutes, "refresh_on_read": bool}``):
one lease per thread, every key of the thread attached to it, so the cluster deletes a
thread nobody wrote for ``ttl`` all at one revision, with no client alive (saver_ttl.py
has the choice against retention policies, the renewal rule and the costs).

Key layout (namespace ``ns``: by default the given client's, "langgraph" for
:meth:`StatekeeperSaver.from_endpoints`; read threads decoded with
``statekeeper langgraph threads|history|show``):
client/langgraph/keys.py. In short: ``ckpt/{thread}/{cns}/{inv(checkpoint_id)}`` records
(newest first), ``blob/{thread}/{cns}/{channel}/{version}`` values,
``writes/{thread}/{cns}/{checkpoint_id}/{task_id}/{idx:08d}`` pending writes,
``run/{run_id}/{thread}/{cns}/{checkpoint_id}`` and ``trun/{thread}/{run_id}`` run
indexes, ``last/{thread}/{cns}`` the id put last.

list() order: newest first within a checkpoint_ns; without a checkpoint_ns in the config,
namespaces one after the other in key order (as InMemorySaver), and threads likewise for
``config=None``. ``limit`` counts across all of them. A list reads all its pages at its
first page's revision; one consumed so slowly that the server's history retention
(100,000 revisions) passes it raises Compacted.

DeltaChannel (beta in LangGraph): get_delta_channel_history is served in a few batches
(saver_delta.py); prune("keep_latest") refuses threads that use one (NotImplementedError,
nothing pruned, as PostgresSaver does), since their latest value is rebuilt from older
checkpoints' writes; delete_for_runs does not check (see its docstring); copy_thread copies
the whole parent chain.

Durability: as the cluster's (a write is acknowledged once a majority has it in its raft
log; with ``fsync = "always"`` that survives power loss). Clients: the AsyncClient of
``from_endpoints`` is created per event loop on first use (an AsyncClient belongs to the
loop that first used it); an ``aclient`` given to the constructor is used as is. Leave the
saver (``async with``, :meth:`StatekeeperSaver.aclose`) before its loop ends: the
connections of a loop that is already closed are only released by garbage collection.
"""

from __future__ import annotations

import asyncio
import random
import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from ..plan import AgentPlan, arun, run
from .keys import namespace_of
from .saver_admin import copy_thread_plan, delete_for_runs_plan, delete_threads_plan, prune_plan
from .saver_codec import Limits, check_serde
from .saver_combine import CombinedClient, TxnCombiner
from .saver_delta import delta_history_plan
from .saver_plan import (
    Ctx,
    get_tuple_plan,
    list_cursor,
    list_page_plan,
    put_plan,
    put_writes_plan,
)
from .saver_ttl import ThreadLeases, ThreadTTL, refresh_plan, with_ttl

__all__ = ["StatekeeperSaver"]

_TTL_RENEWS = frozenset({"put", "put_writes", "copy_thread"})
"""The methods that write a thread: they grant its lease and renew it (saver_ttl.py)."""


class StatekeeperSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on statekeeper (see the module docstring).

    Args:
        client: a blocking :class:`client.Client`, for the sync methods (get_tuple, put,
            list, ...).
        aclient: an :class:`client.AsyncClient`, for the async ones (aget_tuple, aput, ...).
        ns: the statekeeper namespace of every key; by default the namespace of the
            client (or aclient) given, else ``"langgraph"``.
        serde: LangGraph serializer (default JsonPlusSerializer; never one that pickles).
        ttl: thread TTL, seconds after a thread's last write or LangGraph's TTL config
            ``{"default_ttl": minutes, "refresh_on_read": bool}`` (saver_ttl.py); None:
            threads live until deleted.

    A method whose client is missing raises RuntimeError saying which to pass. The clients
    given here are the caller's to close; those :meth:`from_endpoints` made are closed by
    :meth:`close` / :meth:`aclose` and the (async) context manager.
    """

    page_size = 100
    """Checkpoints read per list() request."""
    limits = Limits()
    """The server limits planned with (node/config.py Limits, with headroom)."""

    def __init__(
        self,
        client: Any = None,
        *,
        aclient: Any = None,
        ns: str | None = None,
        serde: Any = None,
        ttl: Any = None,
    ) -> None:
        super().__init__(serde=serde)
        check_serde(self.serde)
        self.client = client
        self.aclient = aclient
        self.ns = namespace_of(ns, (client, aclient), "langgraph", "StatekeeperSaver")
        self.ttl = ThreadTTL.of(ttl)
        self._leases = ThreadLeases()
        self._endpoints: Any = None
        self._client_kwargs: dict[str, Any] = {}
        self._owns_client = False
        self._aclients: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        # Txns of threads sharing this saver go out together (saver_combine.py).
        self._combined = CombinedClient(client, TxnCombiner(client, self.limits))

    @classmethod
    def from_endpoints(
        cls,
        endpoints: Any,
        *,
        ns: str = "langgraph",
        serde: Any = None,
        ttl: Any = None,
        **client_kwargs: Any,
    ) -> StatekeeperSaver:
        """A saver with its own clients for ``endpoints`` (one URL, a list, or a comma
        separated string): a Client now, an AsyncClient per event loop on first async use.
        ``client_kwargs`` go to both (timeout, retry, consistency, ...)."""
        from statekeeper.client import Client

        saver = cls(Client(endpoints, ns=ns, **client_kwargs), ns=ns, serde=serde, ttl=ttl)
        saver._owns_client = True
        saver._endpoints = endpoints
        saver._client_kwargs = dict(client_kwargs)
        return saver

    def __repr__(self) -> str:
        return f"{type(self).__name__}(ns={self.ns!r})"

    # -- clients ---------------------------------------------------------------------------

    def _ctx(self) -> Ctx:
        return Ctx(self.ns, self.serde, self.limits, self.page_size)

    def _sync(self, method: str) -> Any:
        if self.client is None:
            raise RuntimeError(
                f"StatekeeperSaver.{method} needs a blocking client: pass client=Client(...) "
                "or build the saver with StatekeeperSaver.from_endpoints(...)"
            )
        return self.client

    def _async(self, method: str) -> Any:
        if self.aclient is not None:
            return self.aclient
        if self._endpoints is None:
            raise RuntimeError(
                f"StatekeeperSaver.{method} needs an asyncio client: pass "
                "aclient=AsyncClient(...) or build the saver with "
                "StatekeeperSaver.from_endpoints(...)"
            )
        loop = asyncio.get_running_loop()
        with self._lock:
            ac = self._aclients.get(loop)
            if ac is None:
                from statekeeper.client import AsyncClient

                ac = AsyncClient(self._endpoints, ns=self.ns, **self._client_kwargs)
                self._aclients[loop] = ac
            return ac

    def _ttl_plan(self, method: str, plan: AgentPlan[Any], config: Any = None) -> AgentPlan[Any]:
        """``plan`` under the thread TTL (saver_ttl.py), if the saver has one."""
        if self.ttl is None:
            return plan
        name = method.removeprefix("a")  # aput -> put (no sync method starts with "a")
        if config is not None and self.ttl.refresh_on_read:
            thread = str(config["configurable"]["thread_id"])
            return refresh_plan(self.ttl, self._leases, self.ns, thread, then=plan)
        return with_ttl(plan, self.ttl, self._leases, self.ns, renew=name in _TTL_RENEWS)

    def _run(self, method: str, plan: AgentPlan[Any], config: Any = None) -> Any:
        client = self._sync(method)
        if self._combined.client is not client:  # self.client was replaced
            self._combined = CombinedClient(client, TxnCombiner(client, self.limits))
        return run(self._combined, self._ttl_plan(method, plan, config))

    async def _arun(self, method: str, plan: AgentPlan[Any], config: Any = None) -> Any:
        return await arun(self._async(method), self._ttl_plan(method, plan, config))

    def close(self) -> None:
        """Close the clients :meth:`from_endpoints` made (not those passed in)."""
        if self._owns_client and self.client is not None:
            self.client.close()
        with self._lock:
            owned = list(self._aclients.items())
            self._aclients.clear()
        for loop, ac in owned:
            _close_elsewhere(ac, loop)

    async def aclose(self) -> None:
        """:meth:`close`, awaiting the close of this event loop's AsyncClient."""
        with self._lock:
            ac = self._aclients.pop(asyncio.get_running_loop(), None)
        if ac is not None:
            await ac.close()
        self.close()

    def __enter__(self) -> StatekeeperSaver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> StatekeeperSaver:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- sync ------------------------------------------------------------------------------

    def get_tuple(self, config: Any) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its checkpoint_id, else the newest of its
        thread and checkpoint_ns) with channel values, pending writes and parent, or None."""
        return self._run("get_tuple", get_tuple_plan(self._ctx(), config), config)

    def list(
        self,
        config: Any,
        *,
        filter: dict[str, Any] | None = None,
        before: Any = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (see the module docstring for the order across
        namespaces and threads), read page by page at one revision; ``filter`` matches
        metadata keys by equality, ``before`` keeps ids below its checkpoint_id."""
        client = self._sync("list")
        ctx = self._ctx()
        if config is not None:
            self._run("list", _nothing(), config)  # refresh_on_read
        cur = list_cursor(config, filter, before, limit)
        while cur is not None:
            tuples, cur = run(client, list_page_plan(ctx, cur))
            yield from tuples

    def put(
        self,
        config: Any,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> dict[str, Any]:
        """Store the checkpoint, and the values of ``new_versions``' channels, in one txn;
        returns the config of the stored checkpoint."""
        return self._run("put", put_plan(self._ctx(), config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Store a task's pending writes for the checkpoint of ``config`` (one txn)."""
        self._run("put_writes", put_writes_plan(self._ctx(), config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write and blob of the thread (all namespaces)."""
        self._run("delete_thread", delete_threads_plan(self._ctx(), [thread_id]))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata run_id is in ``run_ids``, their writes and
        the blobs no remaining checkpoint references. (A DeltaChannel of a live thread
        whose history those checkpoints held cannot be rebuilt afterwards.)"""
        self._run("delete_for_runs", delete_for_runs_plan(self._ctx(), run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (all namespaces, the full parent chain), write and blob of
        the source thread to the target thread."""
        self._run("copy_thread", copy_thread_plan(self._ctx(), source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep the newest checkpoint of each checkpoint_ns (its writes
        and the blobs it references); NotImplementedError, nothing pruned, for threads using
        a DeltaChannel. ``"delete"``: delete the threads."""
        self._run("prune", prune_plan(self._ctx(), thread_ids, strategy))

    # -- async -----------------------------------------------------------------------------

    async def aget_tuple(self, config: Any) -> CheckpointTuple | None:
        return await self._arun("aget_tuple", get_tuple_plan(self._ctx(), config), config)

    async def alist(
        self,
        config: Any,
        *,
        filter: dict[str, Any] | None = None,
        before: Any = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        aclient = self._async("alist")
        ctx = self._ctx()
        if config is not None:
            await self._arun("alist", _nothing(), config)  # refresh_on_read
        cur = list_cursor(config, filter, before, limit)
        while cur is not None:
            tuples, cur = await arun(aclient, list_page_plan(ctx, cur))
            for t in tuples:
                yield t

    async def aput(
        self,
        config: Any,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> dict[str, Any]:
        plan = put_plan(self._ctx(), config, checkpoint, metadata, new_versions)
        return await self._arun("aput", plan)

    async def aput_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        plan = put_writes_plan(self._ctx(), config, writes, task_id, task_path)
        await self._arun("aput_writes", plan)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._arun("adelete_thread", delete_threads_plan(self._ctx(), [thread_id]))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._arun("adelete_for_runs", delete_for_runs_plan(self._ctx(), run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        plan = copy_thread_plan(self._ctx(), source_thread_id, target_thread_id)
        await self._arun("acopy_thread", plan)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._arun("aprune", prune_plan(self._ctx(), thread_ids, strategy))

    # -- DeltaChannel (beta in LangGraph) ---------------------------------------------------

    def get_delta_channel_history(self, *, config: Any, channels: Sequence[str]) -> Any:
        """The base class's result (writes back to the nearest stored value, the seed),
        read in a few batches instead of two round trips per ancestor (saver_delta.py)."""
        plan = delta_history_plan(self._ctx(), config, channels)
        return self._run("get_delta_channel_history", plan)

    async def aget_delta_channel_history(self, *, config: Any, channels: Sequence[str]) -> Any:
        plan = delta_history_plan(self._ctx(), config, channels)
        return await self._arun("aget_delta_channel_history", plan)

    # -- versions --------------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """``"{n:032}.{random:016}"`` with n one above the current version's (LangGraph's
        string versions, as InMemorySaver makes them: they sort as they increase)."""
        if current is None:
            n = 0
        elif isinstance(current, int):
            n = current
        else:
            n = int(str(current).split(".", 1)[0])
        return f"{n + 1:032}.{random.random():016}"


def _nothing() -> AgentPlan[None]:
    """A plan that calls nothing (what a list runs through _run for refresh_on_read)."""
    return
    yield  # a generator


def _close_elsewhere(ac: Any, loop: Any) -> None:
    """Close an AsyncClient of ``loop`` from outside it (its connections, not its loop)."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is running:
        task = loop.create_task(ac.close())
        _PENDING.add(task)
        task.add_done_callback(_PENDING.discard)
    elif loop.is_running():
        asyncio.run_coroutine_threadsafe(ac.close(), loop)
    elif not loop.is_closed() and running is None:
        loop.run_until_complete(ac.close())
    else:  # its loop is gone: closing the transports is all there is to do, no await needed
        coro = ac.close()
        try:
            while True:
                coro.send(None)
        except StopIteration:
            pass
        except Exception:
            coro.close()


_PENDING: set[Any] = set()
