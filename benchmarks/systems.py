"""Systems under test.

A `System` is the small surface the load generator needs from a key-value store. Adding
another store means writing one subclass and decorating it with `@register`;
`python -m statekeeper.benchmarks.load --system <name>` then finds it. A system defined in another
module that imports this one (etcd, in `benchmarks/etcd.py`) is listed in `ELSEWHERE`
instead and imported on its first lookup, so neither module imports the other at load.

`benchmarks.compare` needs more than put/get: cas, txn, client-side batches, and a
`ClusterControl` (from `managed_cluster()`, benchmarks/cluster_control.py) to kill the
leader or restart a node. Those are optional here: a system without them raises
NotImplementedError and its rows say so.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import random
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

from statekeeper.benchmarks.cluster_control import (
    ClusterControl,
    free_port_block,
    maybe_await,
    running,
    stderr_say,
)

CONSISTENCY_LEVELS = ("linearizable", "serializable")


class System(ABC):
    """One key-value store, reached through its own client library."""

    name: ClassVar[str]
    # Used when neither --endpoints nor --start-cluster is given.
    default_endpoints: ClassVar[tuple[str, ...]] = ()
    # The benchmarks.compare groups this system takes part in; None: every group. (Redis
    # Streams stand beside the others in the append rows only.)
    compare_groups: ClassVar[tuple[str, ...] | None] = None

    def __init__(self, endpoints: Sequence[str], *, pool: int = 1) -> None:
        if not endpoints:
            raise ValueError(f"{self.name}: no endpoints")
        if pool < 1:
            raise ValueError("pool must be >= 1")
        self.endpoints = list(endpoints)
        # Number of independent client objects the workers share (round-robin per op).
        self.pool = pool

    @abstractmethod
    async def setup(self) -> None:
        """Open clients/connections. Called once before any load."""

    @abstractmethod
    async def teardown(self) -> None:
        """Close everything setup() opened. Must be safe after a failed setup()."""

    @abstractmethod
    async def put(self, key: str, value: bytes) -> None:
        """Write `value` under `key`; return once the store acknowledged it."""

    @abstractmethod
    async def get(self, key: str, consistency: str = "linearizable") -> object:
        """Read `key` with the given consistency ("linearizable" or "serializable")."""

    async def populate(
        self,
        keys: Sequence[str],
        value: bytes,
        concurrency: int = 64,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Write every key once (before a read workload). Override if the store has a bulk path.

        `progress(n)` is called after every n keys written (for a progress bar).
        """
        it = iter(keys)

        async def writer() -> None:
            # All writers pull from one iterator, so each key is written exactly once.
            for key in it:
                await self.put(key, value)
                if progress is not None:
                    progress(1)

        await asyncio.gather(*(writer() for _ in range(max(1, min(concurrency, len(keys))))))

    # -- optional operations used by benchmarks.compare ---------------------------------

    # Most ops one batch_put() request may carry (the server's own limit).
    max_batch: ClassVar[int] = 1
    # Concurrent batch_put() requests that load fastest (bulk loads only, not a measured row).
    bulk_concurrency: ClassVar[int] = 16

    async def cas(self, key: str, value: bytes, expect_version: int) -> tuple[bool, int]:
        """Write `value` only if `key`'s version is `expect_version` (0 = missing).

        Returns (succeeded, the key's version now), so a caller can retry without a read.
        """
        raise NotImplementedError(f"{self.name}: cas")

    async def txn_put(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Write every (key, value) in one atomic transaction (keys distinct)."""
        raise NotImplementedError(f"{self.name}: txn")

    async def batch_put(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Write every (key, value) in one request (client-side batching; raise on any failure)."""
        raise NotImplementedError(f"{self.name}: batch")

    async def append(self, stream: str, events: Sequence[bytes]) -> None:
        """Append `events` to `stream` in one request (an event log), durably, with the
        system's closest operation (benchmarks/compare/workloads.py APPEND_ACTIONS)."""
        raise NotImplementedError(f"{self.name}: append")

    async def bulk_populate(
        self,
        keys: Sequence[str],
        value: bytes,
        *,
        batch: int,
        concurrency: int,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Write every key with `concurrency` batch_put() requests of up to `batch` keys."""
        batch = self.bulk_batch(batch, value)
        chunks = iter(range(0, len(keys), batch))

        async def writer() -> None:
            for start in chunks:
                part = keys[start : start + batch]
                await self.batch_put([(k, value) for k in part])
                if progress is not None:
                    progress(len(part))

        n = max(1, min(concurrency, -(-len(keys) // batch)))
        await asyncio.gather(*(writer() for _ in range(n)))

    def bulk_batch(self, batch: int, value: bytes) -> int:
        """Keys per batch_put() request of bulk_populate(): `batch`, within the store's limits."""
        return max(1, min(batch, self.max_batch))

    @classmethod
    @asynccontextmanager
    async def local_cluster(
        cls, workdir: Path, *, size: int = 3, fsync: str = "always", **_: Any
    ) -> AsyncIterator[list[str]]:
        """A fresh `size`-member local cluster under `workdir`; yields its endpoints."""
        async with cls.managed_cluster(workdir, size=size, fsync=fsync) as control:
            yield control.endpoints

    @classmethod
    def managed_cluster(
        cls, workdir: Path, **options: Any
    ) -> AbstractAsyncContextManager[ClusterControl]:
        """Like local_cluster(), but yields a ClusterControl (kill, restart, RSS...)."""
        raise NotImplementedError(f"{cls.name}: no managed local cluster")


SYSTEMS: dict[str, type[System]] = {}
# Systems registered by modules that import this one: name -> module, imported on lookup.
ELSEWHERE: dict[str, str] = {
    "etcd": "statekeeper.benchmarks.etcd",
    "redis": "statekeeper.benchmarks.redis_streams",
}


def register(cls: type[System]) -> type[System]:
    SYSTEMS[cls.name] = cls
    return cls


def system_names() -> list[str]:
    """Every system `get_system_class` can return, without importing any of them."""
    return sorted(SYSTEMS.keys() | ELSEWHERE.keys())


def get_system_class(name: str) -> type[System]:
    if name not in SYSTEMS and name in ELSEWHERE:
        importlib.import_module(ELSEWHERE[name])  # registers it
    try:
        return SYSTEMS[name]
    except KeyError:
        known = ", ".join(system_names())
        raise ValueError(f"unknown system {name!r} (known: {known})") from None


# ---------------------------------------------------------------------------- statekeeper


@register
class StatekeeperSystem(System):
    """statekeeper through `client.AsyncClient` (see docs/protocol.md, "Client")."""

    name = "statekeeper"
    default_endpoints = ("http://127.0.0.1:7000", "http://127.0.0.1:7001", "http://127.0.0.1:7002")
    # The server's max_ops_per_request (node/config.py); bulk loads also stay far below
    # max_request_bytes, see bulk_populate().
    max_batch = 1024
    # Measured on 2 cores: more requests in flight only slow the bulk load down.
    bulk_concurrency = 4

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        pool: int = 1,
        ns: str = "bench",
        max_connections: int | None = None,
    ) -> None:
        super().__init__(endpoints, pool=pool)
        self.ns = ns
        # None: the client's default. The comparison raises it to the highest concurrency
        # it runs, so the client's connection pool is not what caps the offered load.
        self.max_connections = max_connections
        self._clients: list[Any] = []
        self._next: itertools.cycle[Any] | None = None

    async def setup(self) -> None:
        # Imported here so the harness and its tests do not need the client package.
        from statekeeper.client import AsyncClient

        extra = {} if self.max_connections is None else {"max_connections": self.max_connections}
        for i in range(self.pool):
            # Rotate the endpoint list per client so a pool spreads its first choice
            # over the nodes instead of all clients preferring the same one.
            k = i % len(self.endpoints)
            self._clients.append(
                AsyncClient(self.endpoints[k:] + self.endpoints[:k], ns=self.ns, **extra)
            )
        self._next = itertools.cycle(self._clients)

    async def teardown(self) -> None:
        clients, self._clients, self._next = self._clients, [], None
        for c in clients:
            close = getattr(c, "aclose", None) or getattr(c, "close", None)
            if close is not None:
                await maybe_await(close())

    async def put(self, key: str, value: bytes) -> None:
        await next(self._next).put(key, value, ns=self.ns)  # type: ignore[arg-type]

    async def get(self, key: str, consistency: str = "linearizable") -> object:
        return await next(self._next).get(key, ns=self.ns, consistency=consistency)  # type: ignore[arg-type]

    async def get_at(self, key: str, revision: int) -> object:
        """`key` as it was right after store `revision` (a read of the MVCC history)."""
        return await next(self._next).get(key, ns=self.ns, revision=revision)  # type: ignore[arg-type]

    async def range_page(self, start: str | None, limit: int, revision: int | None = None) -> Any:
        """One page of up to `limit` keys from `start` (linearizable; at `revision` if given)."""
        c = next(self._next)  # type: ignore[arg-type]
        return await c.range(start=start, limit=limit, revision=revision, ns=self.ns)

    async def compact(self, revision: int) -> None:
        """Drop the history older than `revision` (the whole store's, not only this ns)."""
        await next(self._next).compact(revision)  # type: ignore[arg-type]

    async def cas(self, key: str, value: bytes, expect_version: int) -> tuple[bool, int]:
        from statekeeper.client import Conflict

        try:
            await next(self._next).cas(key, value, expect_version=expect_version, ns=self.ns)  # type: ignore[arg-type]
        except Conflict as exc:
            # The 409 answer carries the current kv: the next attempt needs no extra read.
            current = exc.current
            return False, current.version if current is not None else 0
        return True, expect_version + 1

    async def txn_put(self, items: Sequence[tuple[str, bytes]]) -> None:
        c = next(self._next)  # type: ignore[arg-type]
        await c.txn([], [c.ops.put(k, v) for k, v in items], ns=self.ns)

    async def batch_put(self, items: Sequence[tuple[str, bytes]]) -> None:
        b = next(self._next).batch(ns=self.ns)  # type: ignore[arg-type]
        for k, v in items:
            b.put(k, v)
        results = await b.execute()
        for r in results:
            # A batch is not atomic: each op reports its own failure instead of raising.
            if isinstance(r, BaseException):
                raise r

    async def append(self, stream: str, events: Sequence[bytes]) -> None:
        # One append op of every event: atomic, one revision (client/streams/commands.py).
        await next(self._next).append(stream, events, ns=self.ns)  # type: ignore[arg-type]

    def bulk_batch(self, batch: int, value: bytes) -> int:
        # Keep one request near 1 MiB whatever the value size (limit: max_request_bytes).
        return super().bulk_batch(min(batch, (1 << 20) // (len(value) + 64)), value)

    @classmethod
    @asynccontextmanager
    async def managed_cluster(
        cls,
        workdir: Path,
        *,
        size: int = 3,
        fsync: str = "always",
        quiet: bool = False,
        configure: Callable[[Any], Any] | None = None,
        **_: Any,
    ) -> AsyncIterator[ClusterControl]:
        """A fresh `size`-node cluster on free loopback ports, as a ClusterControl.

        `configure(cfg)` returns the ClusterConfig to run instead of the default one (e.g.
        a larger storage quota); ports and paths are set before it is called."""
        from statekeeper.cluster.supervisor import LocalCluster
        from statekeeper.node import config as node_config

        say = stderr_say(quiet)
        rng = random.Random()
        http_base = free_port_block(size, set(), rng)
        raft_base = free_port_block(size, set(range(http_base, http_base + size)), rng)
        cfg = node_config.local_cluster(
            size=size, http_base_port=http_base, raft_base_port=raft_base, fsync=fsync
        )
        if configure is not None:
            cfg = configure(cfg)
        # The nodes read the config from disk; load it back so paths resolve the same way.
        path = workdir / "cluster.toml"
        node_config.write(cfg, path)
        cfg = node_config.load(path)
        say(
            f"starting {size}-node statekeeper cluster in {workdir} "
            f"(http {http_base}-{http_base + size - 1}, raft {raft_base}-{raft_base + size - 1}, "
            f"fsync={fsync})"
        )
        lc = LocalCluster(cfg, path, progress=None if quiet else lambda m: say(f"[cluster] {m}"))
        control = StatekeeperControl(lc, cfg.http_urls())
        try:
            # up() blocks on purpose: in a thread, a ^C would leave it starting nodes
            # behind our back while we kill the others.
            up, down = lambda: lc.up(timeout=60.0), lambda: lc.down(timeout=15.0)
            async with running(control, up, down, lc.kill_all):
                yield control
        finally:
            lc.close()


class StatekeeperControl(ClusterControl):
    """A statekeeper cluster run by cluster.supervisor.LocalCluster."""

    def __init__(self, lc: Any, endpoints: Sequence[str]) -> None:
        super().__init__(endpoints, lc.node_ids)
        self.lc = lc

    async def leader(self) -> str | None:
        return await asyncio.to_thread(self.lc.leader_id)

    async def kill(self, member: str) -> None:
        await asyncio.to_thread(self.lc.kill_node, member)

    async def stop(self, member: str) -> None:
        await asyncio.to_thread(self.lc.stop_node, member, 30.0)

    async def start(self, member: str) -> None:
        await asyncio.to_thread(self.lc.start_node, member)

    def is_ready(self, member: str) -> bool:
        return bool(self.lc.is_ready(member))

    def pid(self, member: str) -> int | None:
        return self.lc.pid(member)

    def log_tail(self, member: str, lines: int = 20) -> str:
        return str(self.lc.log_tail(member, lines))

    def data_dir(self, member: str) -> Path | None:
        return Path(self.lc.data_dir(member))
