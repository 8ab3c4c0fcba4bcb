"""Redis 7 Streams as a benchmark system: the event log a user would otherwise pick.

benchmarks.compare's append rows (issue 28) put statekeeper's stream append beside etcd
puts and Redis `XADD`. The server is Debian's `redis-server` (apt package `redis-server`,
/usr/bin/redis-server) with the durable settings only: `appendonly yes` and `appendfsync
always` (Redis fsyncs its AOF before it answers the clients of each event-loop pass), no
RDB snapshots. It is ONE node, no replica: statekeeper and etcd replicate every write to 3
members with an fsync on each before answering, Redis here does one local fsync. The
table notes say so (REDIS_SETUP).

The client is redis-py's asyncio API (`redis.asyncio`, the bench extra), imported only
when a RedisSystem is set up, so the registry and the unit tests do not need it.
`RedisServer` starts and stops the process; `RedisControl` is its ClusterControl (one
member, which is its own leader), so the comparison reads its pid for the CPU columns.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from statekeeper.benchmarks.cluster_control import (
    ClusterControl,
    free_port_block,
    running,
    stderr_say,
    stop_process,
)
from statekeeper.benchmarks.systems import System, register

REDIS_BINARY = "/usr/bin/redis-server"
MEMBER = "r0"
REDIS_SETUP = (
    "Redis: one node, no replica (statekeeper and etcd: 3 members, fsync on each), "
    "appendonly yes, appendfsync always, no RDB snapshots"
)


def find_redis() -> str:
    """The redis-server binary: Debian's, else the first on PATH."""
    found = REDIS_BINARY if Path(REDIS_BINARY).exists() else shutil.which("redis-server")
    if not found:
        raise RuntimeError("redis-server is missing: apt-get install redis-server")
    return found


def redis_version(binary: str) -> str:
    """'7.0.15' from `redis-server --version` ('unknown' when it does not say)."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    for word in out.stdout.split():
        if word.startswith("v="):
            return word[2:]
    return "unknown"


class RedisServer:
    """One redis-server process on a loopback port, its files under `workdir`."""

    def __init__(self, binary: str, workdir: Path, port: int, fsync: str = "always") -> None:
        if fsync not in ("always", "never"):
            raise ValueError(f"fsync must be 'always' or 'never', not {fsync!r}")
        self.binary, self.workdir, self.port, self.fsync = binary, workdir, port, fsync
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.workdir / "redis.log"

    def argv(self) -> list[str]:
        return [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.workdir),
            "--appendonly", "yes",
            # always: the AOF is fsynced before the answers of each event-loop pass go out.
            "--appendfsync", "always" if self.fsync == "always" else "no",
            "--save", "",  # no RDB snapshots: the AOF is the durability
            "--daemonize", "no",
            "--protected-mode", "no",
            "--logfile", str(self.log_file),
        ]  # fmt: skip

    def start(self) -> int:
        if self.pid() is not None:
            raise RuntimeError("redis-server is already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.argv(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a ^C to the benchmark must not hit the server
            close_fds=True,
        )
        return self.proc.pid

    def pid(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None
        return self.proc.pid

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Redis flushes its AOF and exits), SIGKILL after `timeout`."""
        stop_process(self.proc, "redis-server", timeout)

    def kill(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def ping(self, timeout: float = 1.0) -> bool:
        """The server answers PING with +PONG (it has loaded its AOF and serves)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_file.read_bytes()[-32768:].decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class RedisControl(ClusterControl):
    """A one-member 'cluster': the server is its own leader."""

    def __init__(self, server: RedisServer) -> None:
        super().__init__([f"redis://127.0.0.1:{server.port}"], [MEMBER])
        self.server = server

    async def leader(self) -> str | None:
        return MEMBER if self.server.pid() is not None else None

    async def kill(self, member: str) -> None:
        await asyncio.to_thread(self.server.kill)

    async def stop(self, member: str) -> None:
        await asyncio.to_thread(self.server.stop)

    async def start(self, member: str) -> None:
        await asyncio.to_thread(self.server.start)

    def is_ready(self, member: str) -> bool:
        return self.server.pid() is not None and self.server.ping()

    def pid(self, member: str) -> int | None:
        return self.server.pid()

    def log_tail(self, member: str, lines: int = 20) -> str:
        return self.server.log_tail(lines)

    def data_dir(self, member: str) -> Path | None:
        return self.server.workdir


@register
class RedisSystem(System):
    """Redis Streams through redis-py's asyncio client; compare's append rows only."""

    name = "redis"
    default_endpoints = ("redis://127.0.0.1:6379",)
    compare_groups = ("append",)

    def __init__(self, endpoints: Sequence[str], *, pool: int = 1, **_: Any) -> None:
        super().__init__(endpoints, pool=pool)
        self._client: Any = None

    async def setup(self) -> None:
        try:
            from redis.asyncio import Redis
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise RuntimeError("the Redis client is missing: pip install -e '.[bench]'") from e
        # One client, its connection pool opens a connection per concurrent worker.
        self._client = Redis.from_url(self.endpoints[0])

    async def teardown(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def put(self, key: str, value: bytes) -> None:
        await self._client.set(key, value)

    async def get(self, key: str, consistency: str = "linearizable") -> object:
        return await self._client.get(key)

    async def append(self, stream: str, events: Sequence[bytes]) -> None:
        if len(events) == 1:
            await self._client.xadd(stream, {"d": events[0]})
            return
        # XADD adds one entry: the closest to one atomic append of many is MULTI/EXEC, sent
        # in one round trip (one AOF fsync for all of them).
        async with self._client.pipeline(transaction=True) as pipe:
            for e in events:
                pipe.xadd(stream, {"d": e})
            await pipe.execute()

    @classmethod
    @asynccontextmanager
    async def managed_cluster(
        cls, workdir: Path, *, fsync: str = "always", quiet: bool = False, **_: Any
    ) -> AsyncIterator[ClusterControl]:
        """One redis-server (appendonly, appendfsync always) on a free loopback port."""
        say = stderr_say(quiet)
        binary = find_redis()
        server = RedisServer(binary, workdir / MEMBER, free_port_block(1, set(), random.Random()),
                             fsync)  # fmt: skip
        say(f"starting redis-server {redis_version(binary)} on port {server.port} (one node, "
            f"appendfsync {'always' if fsync == 'always' else 'no'})")  # fmt: skip
        control = RedisControl(server)

        async def start() -> None:
            server.start()
            await control.wait_ready(timeout=30.0)

        async def stop() -> None:
            await asyncio.to_thread(server.stop)

        async with running(control, start, stop, server.kill, label="redis "):
            yield control
