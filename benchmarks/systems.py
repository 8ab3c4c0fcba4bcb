"""Systems under test.

A `System` is the small surface the load generator needs from a key-value store. Adding
another store (etcd is next) means writing one subclass and decorating it with
`@register`; `python -m benchmarks.load --system <name>` then finds it.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import random
import socket
import sys
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

CONSISTENCY_LEVELS = ("linearizable", "serializable")


class System(ABC):
    """One key-value store, reached through its own client library."""

    name: ClassVar[str]
    # Used when neither --endpoints nor --start-cluster is given.
    default_endpoints: ClassVar[tuple[str, ...]] = ()

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

    async def populate(self, keys: Sequence[str], value: bytes, concurrency: int = 64) -> None:
        """Write every key once (before a read workload). Override if the store has a bulk path."""
        it = iter(keys)

        async def writer() -> None:
            # All writers pull from one iterator, so each key is written exactly once.
            for key in it:
                await self.put(key, value)

        await asyncio.gather(*(writer() for _ in range(max(1, min(concurrency, len(keys))))))

    @classmethod
    def local_cluster(cls, workdir: Path, **options: Any) -> AbstractAsyncContextManager[list[str]]:
        """Start a fresh local cluster under `workdir`; the context yields its endpoints."""
        raise NotImplementedError(f"--start-cluster is not supported for {cls.name}")


SYSTEMS: dict[str, type[System]] = {}


def register(cls: type[System]) -> type[System]:
    SYSTEMS[cls.name] = cls
    return cls


def get_system_class(name: str) -> type[System]:
    try:
        return SYSTEMS[name]
    except KeyError:
        known = ", ".join(sorted(SYSTEMS))
        raise ValueError(f"unknown system {name!r} (known: {known})") from None


# ---------------------------------------------------------------------------- statekeeper


def _free_port_block(count: int, avoid: set[int], rng: random.Random) -> int:
    """A base port such that base..base+count-1 are free on loopback and not in `avoid`.

    local_cluster() numbers node ports consecutively from a base, so single ephemeral
    ports from bind(0) are not enough. The range stays below the kernel's ephemeral range
    (32768+) so outgoing connections do not grab a port between our check and the bind.
    """
    for _ in range(200):
        base = rng.randrange(20000, 32000 - count)
        ports = range(base, base + count)
        if avoid.intersection(ports):
            continue
        if all(_port_free(p) for p in ports):
            return base
    raise RuntimeError(f"no block of {count} free loopback ports found")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def _maybe_await(value: object) -> object:
    if inspect.isawaitable(value):
        return await value
    return value


@register
class StatekeeperSystem(System):
    """statekeeper through `client.AsyncClient` (see docs/protocol.md, "Client")."""

    name = "statekeeper"
    default_endpoints = ("http://127.0.0.1:7000", "http://127.0.0.1:7001", "http://127.0.0.1:7002")

    def __init__(self, endpoints: Sequence[str], *, pool: int = 1, ns: str = "bench") -> None:
        super().__init__(endpoints, pool=pool)
        self.ns = ns
        self._clients: list[Any] = []
        self._next: itertools.cycle[Any] | None = None

    async def setup(self) -> None:
        # Imported here so the harness and its tests do not need the client package.
        from client import AsyncClient

        for i in range(self.pool):
            # Rotate the endpoint list per client so a pool spreads its first choice
            # over the nodes instead of all clients preferring the same one.
            k = i % len(self.endpoints)
            self._clients.append(AsyncClient(self.endpoints[k:] + self.endpoints[:k]))
        self._next = itertools.cycle(self._clients)

    async def teardown(self) -> None:
        clients, self._clients, self._next = self._clients, [], None
        for c in clients:
            close = getattr(c, "aclose", None) or getattr(c, "close", None)
            if close is not None:
                await _maybe_await(close())

    async def put(self, key: str, value: bytes) -> None:
        await next(self._next).put(key, value, ns=self.ns)  # type: ignore[arg-type]

    async def get(self, key: str, consistency: str = "linearizable") -> object:
        return await next(self._next).get(key, ns=self.ns, consistency=consistency)  # type: ignore[arg-type]

    @classmethod
    @asynccontextmanager
    async def local_cluster(
        cls, workdir: Path, *, size: int = 3, fsync: str = "always", **_: Any
    ) -> AsyncIterator[list[str]]:
        """A fresh `size`-node cluster on free loopback ports with its data under `workdir`."""
        from cluster.supervisor import LocalCluster
        from node import config as node_config

        rng = random.Random()
        http_base = _free_port_block(size, set(), rng)
        raft_base = _free_port_block(size, set(range(http_base, http_base + size)), rng)
        cfg = node_config.local_cluster(
            size=size, http_base_port=http_base, raft_base_port=raft_base, fsync=fsync
        )
        # The nodes read the config from disk; load it back so paths resolve the same way.
        path = workdir / "cluster.toml"
        node_config.write(cfg, path)
        cfg = node_config.load(path)
        print(
            f"starting {size}-node statekeeper cluster in {workdir} "
            f"(http {http_base}-{http_base + size - 1}, raft {raft_base}-{raft_base + size - 1}, "
            f"fsync={fsync})",
            file=sys.stderr,
        )
        lc = LocalCluster(cfg, path, progress=lambda m: print(f"[cluster] {m}", file=sys.stderr))
        try:
            try:
                # Blocking on purpose: in a thread, a ^C would leave up() starting nodes
                # behind our back while we kill the others.
                lc.up(timeout=60.0)
            except BaseException:
                for nid in lc.node_ids:
                    print(f"--- {nid} log tail ---\n{lc.log_tail(nid)}", file=sys.stderr)
                raise  # the outer handler kills whatever did start
            yield cfg.http_urls()
            lc.down(timeout=15.0)
        except BaseException:
            lc.kill_all()  # interrupted or failed mid-run: do not leave nodes behind
            raise
        finally:
            lc.close()
