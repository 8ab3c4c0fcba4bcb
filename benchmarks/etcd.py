"""etcd as a benchmark system: a local 3-member cluster and an asyncio gRPC client.

The cluster runs the `etcd` binary of Debian's `etcd-server` package (installed with
apt-get when it is missing and we are root) with its default settings, fsync included:
only ports, names and data directories are passed. The client is `aetcd` (asyncio, over
grpc.aio, etcd's own gRPC API), one of the `bench` extra's packages, imported only when an
EtcdSystem is set up, so the registry and the unit tests do not need it.

aetcd talks to one endpoint; like etcd's Go client (and statekeeper's own client) we keep
one connection per member and move to the next member when a call fails with
UNAVAILABLE or a deadline, using statekeeper's RetryPolicy so both clients back off the
same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
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

APT_PACKAGE = "etcd-server"
# etcd's --max-txn-ops default: the most ops one Txn may carry.
ETCD_MAX_TXN_OPS = 128

# No proxies: an http_proxy in the environment must not catch loopback probes.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class EtcdUnavailable(RuntimeError):
    """The etcd binary is missing and could not be installed."""


# ------------------------------------------------------------------------ the binary


def find_etcd(install: bool = True, say: Callable[[str], None] = print) -> str:
    """Path of the `etcd` binary; apt-get installs `etcd-server` first if it is missing."""
    found = shutil.which("etcd") or (os.path.exists("/usr/bin/etcd") and "/usr/bin/etcd")
    if found:
        return found
    if not install:
        raise EtcdUnavailable("etcd is not installed (apt-get install etcd-server)")
    if not shutil.which("apt-get") or os.geteuid() != 0:
        raise EtcdUnavailable(
            "etcd is not installed and this is not a root Debian/Ubuntu shell: "
            f"install the {APT_PACKAGE} package (or put an etcd 3.4+ binary on PATH)"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", APT_PACKAGE]
    say(f"etcd not found: running {' '.join(cmd)}")
    if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
        # A fresh machine has no package lists yet.
        subprocess.run(["apt-get", "update"], env=env, stdout=subprocess.DEVNULL, check=False)
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=False)
    found = shutil.which("etcd")
    if not found:
        raise EtcdUnavailable(f"apt-get install {APT_PACKAGE} did not provide an etcd binary")
    return found


def etcd_version(binary: str) -> str:
    """'3.4.23' (or 'unknown'), from `etcd --version`."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    m = re.search(r"etcd Version:\s*(\S+)", out)
    return m.group(1) if m else "unknown"


def _http_json(url: str, body: bytes | None = None, timeout: float = 1.0) -> dict[str, Any] | None:
    """GET (or POST `body`) `url`; the decoded JSON object of a 200 answer, else None."""
    req = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"} if body else {}
    )
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            if resp.status != 200:
                return None
            doc = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


# ----------------------------------------------------------------------- the cluster


class EtcdCluster:
    """`size` etcd members as local processes, on loopback ports, data under `workdir`.

    Only what a local cluster needs is set; everything else (fsync, snapshot count,
    heartbeat/election timeouts, quotas) stays at etcd's defaults.
    """

    def __init__(self, binary: str, workdir: Path, size: int = 3) -> None:
        self.binary = binary
        self.workdir = workdir
        rng = random.Random()
        client_base = free_port_block(size, set(), rng)
        peer_base = free_port_block(size, set(range(client_base, client_base + size)), rng)
        self.members = [f"m{i}" for i in range(size)]
        self.client_port = {m: client_base + i for i, m in enumerate(self.members)}
        self.peer_port = {m: peer_base + i for i, m in enumerate(self.members)}
        self.token = "bench-" + secrets.token_hex(4)  # a fresh cluster id every time
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def client_url(self, member: str) -> str:
        return f"http://127.0.0.1:{self.client_port[member]}"

    def peer_url(self, member: str) -> str:
        return f"http://127.0.0.1:{self.peer_port[member]}"

    def log_file(self, member: str) -> Path:
        return self.workdir / f"{member}.log"

    def argv(self, member: str) -> list[str]:
        initial = ",".join(f"{m}={self.peer_url(m)}" for m in self.members)
        return [
            self.binary,
            "--name", member,
            "--data-dir", str(self.workdir / member),
            "--listen-client-urls", self.client_url(member),
            "--advertise-client-urls", self.client_url(member),
            "--listen-peer-urls", self.peer_url(member),
            "--initial-advertise-peer-urls", self.peer_url(member),
            "--initial-cluster", initial,
            # Ignored once the data dir exists, so restarts reuse the same argv.
            "--initial-cluster-state", "new",
            "--initial-cluster-token", self.token,
            "--logger", "zap",
            "--log-outputs", "stderr",
        ]  # fmt: skip

    def start(self, member: str) -> int:
        if self.pid(member) is not None:
            raise RuntimeError(f"etcd {member} is already running")
        with open(self.log_file(member), "ab") as log:
            proc = subprocess.Popen(
                self.argv(member),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a ^C to the benchmark must not hit the members
                close_fds=True,
            )
        self.procs[member] = proc
        return proc.pid

    def pid(self, member: str) -> int | None:
        proc = self.procs.get(member)
        if proc is None or proc.poll() is not None:
            return None
        return proc.pid

    def kill(self, member: str) -> None:
        proc = self.procs.get(member)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self, member: str, timeout: float = 30.0) -> None:
        stop_process(self.procs.get(member), f"etcd {member}", timeout)

    def stop_all(self, timeout: float = 30.0) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for m in self.members:
            self.stop(m, timeout)

    def kill_all(self) -> None:
        for m in self.members:
            with contextlib.suppress(Exception):
                self.kill(m)

    def is_healthy(self, member: str) -> bool:
        """GET /health says {"health": "true"} (etcd's own readiness check)."""
        doc = _http_json(self.client_url(member) + "/health")
        return doc is not None and str(doc.get("health")).lower() == "true"

    def status(self, member: str) -> dict[str, Any] | None:
        """Maintenance.Status through etcd's JSON gateway: member_id, leader, raftIndex..."""
        return _http_json(self.client_url(member) + "/v3/maintenance/status", body=b"{}")

    def leader(self) -> str | None:
        """The member the reachable members agree leads (by member id), or None."""
        ids: dict[str, str] = {}
        leader_ids: set[str] = set()
        for m in self.members:
            if self.pid(m) is None:
                continue
            st = self.status(m)
            if not st:
                continue
            ids[str(st.get("header", {}).get("member_id"))] = m
            if st.get("leader") not in (None, "0", 0):
                leader_ids.add(str(st["leader"]))
        for lid in leader_ids:
            if lid in ids:
                return ids[lid]
        return None

    def log_tail(self, member: str, lines: int = 20) -> str:
        try:
            text = self.log_file(member).read_bytes()[-32768:].decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class EtcdControl(ClusterControl):
    def __init__(self, cluster: EtcdCluster) -> None:
        super().__init__([cluster.client_url(m) for m in cluster.members], cluster.members)
        self.cluster = cluster

    async def leader(self) -> str | None:
        return await asyncio.to_thread(self.cluster.leader)

    async def kill(self, member: str) -> None:
        await asyncio.to_thread(self.cluster.kill, member)

    async def stop(self, member: str) -> None:
        await asyncio.to_thread(self.cluster.stop, member)

    async def start(self, member: str) -> None:
        self.cluster.start(member)  # a fork+exec: quick, and the timing starts right here

    def is_ready(self, member: str) -> bool:
        return self.cluster.is_healthy(member)

    def pid(self, member: str) -> int | None:
        return self.cluster.pid(member)

    def log_tail(self, member: str, lines: int = 20) -> str:
        return self.cluster.log_tail(member, lines)


# ------------------------------------------------------------------------ the client


def host_port(endpoint: str) -> tuple[str, int]:
    rest = endpoint.split("://", 1)[-1].rstrip("/")
    host, _, port = rest.rpartition(":")
    return host or "127.0.0.1", int(port or 2379)


class _Failover:
    """One aetcd.Client per member; calls go to the current one and move on when it fails."""

    def __init__(self, clients: list[Any], retryable: tuple[type[BaseException], ...]) -> None:
        from statekeeper.client.retry import DEFAULT_RETRY

        self.clients = clients
        self.i = 0
        self.retryable = retryable
        self.policy = DEFAULT_RETRY  # the same backoff/deadline statekeeper's client uses

    async def retry(
        self, call: Callable[[Any], Awaitable[Any]], first: BaseException, failed: int
    ) -> Any:
        """`call(clients[failed])` raised `first`: retry on the next members, with backoff."""
        started = time.monotonic()
        attempt, exc = 1, first
        while True:
            if self.i == failed:
                # Only the failing member moves the pointer: many calls failing on the same
                # member together move it once, not once each.
                self.i = (failed + 1) % len(self.clients)
            deadline = self.policy.deadline
            if attempt >= self.policy.max_attempts or (
                deadline is not None and time.monotonic() - started >= deadline
            ):
                raise exc
            await asyncio.sleep(self.policy.backoff(attempt))
            failed = self.i
            try:
                return await call(self.clients[failed])
            except self.retryable as e:
                attempt, exc = attempt + 1, e

    async def close(self) -> None:
        for c in self.clients:
            with contextlib.suppress(Exception):
                await c.close()


@register
class EtcdSystem(System):
    """etcd through its gRPC API with the asyncio client `aetcd` (bench extra)."""

    name = "etcd"
    default_endpoints = ("http://127.0.0.1:2379",)
    max_batch = ETCD_MAX_TXN_OPS
    bulk_concurrency = 64  # fastest of 16/64/256 on 2 cores

    def __init__(
        self, endpoints: Sequence[str], *, pool: int = 1, timeout: float = 10.0, **_: Any
    ) -> None:
        super().__init__(endpoints, pool=pool)
        # Per-call timeout, the same as statekeeper's AsyncClient default.
        self.timeout = timeout
        self._conns: list[_Failover] = []
        self._next: itertools.cycle[_Failover] | None = None
        self._appended = 0  # events appended: numbers each event's key

    async def setup(self) -> None:
        try:
            import aetcd
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise RuntimeError(
                "the etcd client is missing: pip install -e '.[bench]' (aetcd)"
            ) from e
        retryable = (aetcd.ConnectionFailedError, aetcd.ConnectionTimeoutError)
        hosts = [host_port(e) for e in self.endpoints]
        for i in range(self.pool):
            k = i % len(hosts)  # rotate, like StatekeeperSystem, to spread a pool's first choice
            clients = [
                aetcd.Client(host=h, port=p, timeout=self.timeout) for h, p in hosts[k:] + hosts[:k]
            ]
            self._conns.append(_Failover(clients, retryable))
        self._next = itertools.cycle(self._conns)

    async def teardown(self) -> None:
        conns, self._conns, self._next = self._conns, [], None
        for c in conns:
            await c.close()

    async def put(self, key: str, value: bytes) -> None:
        f = next(self._next)  # type: ignore[arg-type]
        k = key.encode()
        i = f.i
        try:
            await f.clients[i].put(k, value)
        except f.retryable as exc:
            await f.retry(lambda c: c.put(k, value), exc, i)

    async def get(self, key: str, consistency: str = "linearizable") -> object:
        f = next(self._next)  # type: ignore[arg-type]
        k = key.encode()
        ser = consistency == "serializable"
        i = f.i
        try:
            return await f.clients[i].get(k, serializable=ser)
        except f.retryable as exc:
            return await f.retry(lambda c: c.get(k, serializable=ser), exc, i)

    async def cas(self, key: str, value: bytes, expect_version: int) -> tuple[bool, int]:
        f = next(self._next)  # type: ignore[arg-type]
        k = key.encode()

        async def call(c: Any) -> tuple[bool, int]:
            tx = c.transactions
            # The failure branch reads the key, so a lost race costs no extra round trip
            # (statekeeper's 409 answer carries the current kv the same way).
            ok, responses = await c.transaction(
                compare=[tx.version(k) == expect_version],
                success=[tx.put(k, value)],
                failure=[tx.get(k)],
            )
            if ok:
                return True, expect_version + 1
            found = responses[0] if responses else []
            return False, found[0][1].version if found else 0

        i = f.i
        try:
            return await call(f.clients[i])
        except f.retryable as exc:
            return await f.retry(call, exc, i)

    async def _txn(self, items: Sequence[tuple[str, bytes]]) -> None:
        f = next(self._next)  # type: ignore[arg-type]
        enc = [(k.encode(), v) for k, v in items]

        async def call(c: Any) -> None:
            tx = c.transactions
            await c.transaction(compare=[], success=[tx.put(k, v) for k, v in enc], failure=[])

        i = f.i
        try:
            await call(f.clients[i])
        except f.retryable as exc:
            await f.retry(call, exc, i)

    async def txn_put(self, items: Sequence[tuple[str, bytes]]) -> None:
        await self._txn(items)

    async def batch_put(self, items: Sequence[tuple[str, bytes]]) -> None:
        # etcd has no non-atomic multi-op request: its way to send many writes in one
        # round trip is a Txn without compares (at most --max-txn-ops, 128, ops).
        await self._txn(items)

    async def append(self, stream: str, events: Sequence[bytes]) -> None:
        # etcd has no append: a put per event under a new key, several in one Txn (the
        # same bytes per event and the same number of round trips as an append).
        first = self._appended
        self._appended += len(events)
        items = [(f"{stream}/{first + i:012d}", e) for i, e in enumerate(events)]
        if len(items) == 1:
            await self.put(*items[0])
        else:
            await self._txn(items)

    async def populate(
        self,
        keys: Sequence[str],
        value: bytes,
        concurrency: int = 64,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        await self.bulk_populate(
            keys,
            value,
            batch=self.max_batch,
            concurrency=min(concurrency, self.bulk_concurrency),
            progress=progress,
        )

    @classmethod
    @asynccontextmanager
    async def managed_cluster(
        cls, workdir: Path, *, size: int = 3, fsync: str = "always", quiet: bool = False, **_: Any
    ) -> AsyncIterator[ClusterControl]:
        """A fresh `size`-member etcd cluster with default settings (fsync on)."""
        if fsync != "always":
            # etcd 3.4 has no supported way to turn fsync off; never pretend it has.
            raise ValueError("etcd runs with fsync on only (fsync='always')")
        say = stderr_say(quiet)
        binary = find_etcd(say=say)
        cluster = EtcdCluster(binary, workdir, size)
        say(
            f"starting {size}-member etcd {etcd_version(binary)} cluster in {workdir} "
            f"(client {', '.join(str(cluster.client_port[m]) for m in cluster.members)}, "
            f"peer {', '.join(str(cluster.peer_port[m]) for m in cluster.members)})"
        )
        control = EtcdControl(cluster)

        async def start() -> None:
            for m in cluster.members:
                cluster.start(m)
            await control.wait_ready(timeout=60.0)

        async def stop() -> None:
            await asyncio.to_thread(cluster.stop_all)

        async with running(control, start, stop, cluster.kill_all, label="etcd "):
            yield control
