"""Local clusters a benchmark starts, breaks and mends, whatever the store.

`ClusterControl` is what `System.managed_cluster()` yields (benchmarks/systems.py): kill
the leader, stop and start a member, wait for readiness, read a member's RSS and log.
`running()` starts one and guarantees no process outlives a failure; the loopback port
and /proc helpers here are shared by every benchmark that runs its own nodes (etcd,
backup, tls_cost, reclaim, langgraph_postgres).
"""

from __future__ import annotations

import asyncio
import inspect
import random
import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path


class ClusterControl(ABC):
    """A local cluster the comparison may break and mend: failover and cold-start rows.

    Members are named by the system's own ids (statekeeper `node-0`, etcd `m0`). Blocking
    process work runs in a thread so a put load in the same event loop keeps going.
    """

    def __init__(self, endpoints: Sequence[str], members: Sequence[str]) -> None:
        self.endpoints = list(endpoints)
        self.members = list(members)

    @abstractmethod
    async def leader(self) -> str | None:
        """The member that leads now (None while there is no leader)."""

    @abstractmethod
    async def kill(self, member: str) -> None:
        """SIGKILL the member's process and reap it (a crash)."""

    @abstractmethod
    async def stop(self, member: str) -> None:
        """Stop the member gracefully (SIGTERM, then SIGKILL after a timeout)."""

    @abstractmethod
    async def start(self, member: str) -> None:
        """Start the stopped member's process; do not wait for it."""

    @abstractmethod
    def is_ready(self, member: str) -> bool:
        """Blocking probe: the member's own health endpoint says it is ready to serve."""

    def log_tail(self, member: str, lines: int = 20) -> str:
        """The last `lines` lines of the member's log ("" when there is none)."""
        return ""

    @abstractmethod
    def pid(self, member: str) -> int | None:
        """The member's process id, or None when it is not running."""

    async def wait_ready(
        self, members: Sequence[str] | None = None, timeout: float = 120.0
    ) -> float:
        """Poll until every given member (default: all) is ready; return the seconds waited.

        Both systems are polled the same way (every 50 ms) so the cold-start figures are
        comparable to within that step.
        """
        pending = list(self.members if members is None else members)
        start = time.monotonic()
        while pending:
            ready = await asyncio.gather(*(asyncio.to_thread(self.is_ready, m) for m in pending))
            pending = [m for m, ok in zip(pending, ready, strict=True) if not ok]
            if not pending:
                break
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"not ready after {timeout:.0f}s: {', '.join(pending)}")
            await asyncio.sleep(0.05)
        return time.monotonic() - start

    def data_dir(self, member: str) -> Path | None:
        """The member's data directory, or None when the system does not say."""
        return None

    def rss_bytes(self, member: str) -> int | None:
        """Resident memory of the member's process (VmRSS), or None if it is not running."""
        pid = self.pid(member)
        return None if pid is None else rss_of_pid(pid)


@asynccontextmanager
async def running(
    control: ClusterControl,
    start: Callable[[], object],
    stop: Callable[[], object],
    kill_all: Callable[[], object],
    label: str = "",
) -> AsyncIterator[ClusterControl]:
    """Start a local cluster (`start`, awaited if it returns an awaitable), yield its
    `control`, then `stop` it. If it does not start, every member's log tail is printed
    first; on any failure, an interrupt included, `kill_all` leaves no process behind."""
    try:
        try:
            await maybe_await(start())
        except BaseException:
            for m in control.members:
                print(f"--- {label}{m} log tail ---\n{control.log_tail(m, 40)}", file=sys.stderr)
            raise
        yield control
        await maybe_await(stop())
    except BaseException:
        kill_all()
        raise


def stop_process(proc: subprocess.Popen[bytes] | None, what: str, timeout: float = 30.0) -> None:
    """SIGTERM a server we started, wait, SIGKILL after `timeout`; nothing if it is gone."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"warning: {what} ignored SIGTERM; SIGKILL", file=sys.stderr)
        proc.kill()
        proc.wait(timeout=10)


def rss_of_pid(pid: int) -> int | None:
    """VmRSS of `pid` in bytes, from /proc/<pid>/status; None if unknown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return parse_vmrss(f.read())
    except OSError:
        return None


def parse_vmrss(status: str) -> int | None:
    """The VmRSS line of a /proc/<pid>/status text, in bytes (the kernel reports kB)."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            try:
                return int(line.split()[1]) * 1024
            except (ValueError, IndexError):
                return None
    return None


def free_port_block(count: int, avoid: set[int], rng: random.Random) -> int:
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


async def maybe_await(value: object) -> object:
    if inspect.isawaitable(value):
        return await value
    return value


def stderr_say(quiet: bool) -> Callable[[str], None]:
    def say(msg: str) -> None:
        if not quiet:
            print(msg, file=sys.stderr)

    return say
