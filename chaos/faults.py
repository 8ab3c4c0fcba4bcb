"""The named faults of the chaos suite.

Each fault is a small class: ``start(ctx)`` injects it and returns what it did (one
line), ``stop(ctx)`` heals it (idempotent; the runner calls it in a ``finally``, also on
Ctrl-C). ``topology`` says what the cluster must be built with:

- ``plain``: nodes on loopback, nothing in between (process faults);
- ``links``: one loopback address per directed raft link, for iptables (``chaos.partition``);
- ``proxy``: every raft link and every client link through its own Toxiproxy proxy;
- ``lazyfs``: every node's data directory on one LazyFS mount (power loss).

``available()`` says whether the fault can run on this machine, and if not, why.

A fault may also shape the cluster it runs on (all applied by ``chaos.runner``):
``min_nodes`` (the run uses at least that many), ``raft_settings`` / ``retention_settings``
(overrides of the generated config, e.g. tiny snapshot thresholds so compaction runs many
times), ``failpoints`` (``node/failpoints.py`` actions armed on every node for the whole
run; a ``CrashWatcher`` restarts a node that exits at one, status 86, and counts the
crashes per failpoint), ``node_env()`` (more per-node environment: a faked clock) and
``verify()`` (checks, after the final reads, that the fault did what it is for).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from chaos.report import FAIL, INFO, PASS, UNKNOWN, Verdict
from cluster.supervisor import LocalCluster, SupervisorError

if TYPE_CHECKING:
    from chaos.lazyfs import LazyFS
    from chaos.partition import Partitioner
    from node.config import ClusterConfig

__all__ = [
    "FAILPOINT_EXIT_CODE",
    "FAULTS",
    "CrashWatcher",
    "Fault",
    "FaultContext",
    "FaultError",
    "ProxyNet",
    "SMOKE",
    "TINY_SNAPSHOTS",
    "exit_failpoints",
    "failpoint_spec",
    "fault_names",
    "get_fault",
    "last_failpoint",
]


class FaultError(RuntimeError):
    """A fault could not be injected or healed."""


# ----------------------------------------------------------------------------- proxies


class ProxyNet:
    """Toxiproxy proxies for a cluster: one per directed raft link, one per client link.

    Raft: between two nodes there is one TCP connection, dialled by one of them; node i
    dials node j through proxy ``raft-i-j``. Data travelling a -> b is therefore either
    the ``upstream`` stream of ``raft-a-b`` (a dialled) or the ``downstream`` stream of
    ``raft-b-a`` (b dialled); a toxic for "a -> b" goes on both, so it works whoever
    dials. Clients reach node i through ``client-i``.

    Works against any Toxiproxy-compatible API (the embedded one or a real one) through
    the ``toxiproxy-python`` client, which keeps its API address process-wide.
    """

    def __init__(self, url: str, prefix: str) -> None:
        from toxiproxy import Toxiproxy

        from chaos.toxiproxy import configure_client

        configure_client(url)
        self.url = url
        self.prefix = prefix
        self._api = Toxiproxy()
        self.raft: dict[tuple[int, int], Any] = {}
        self.client: dict[int, Any] = {}
        self._toxics: list[tuple[Any, str]] = []
        self._disabled: list[Any] = []

    def _create(self, name: str, upstream: str) -> Any:
        full = f"{self.prefix}-{name}"
        stale = self._api.get_proxy(full)
        if stale is not None:  # left over by an interrupted run against a real Toxiproxy
            stale.destroy()
        return self._api.create(upstream=upstream, name=full, listen="127.0.0.1:0")

    def setup(self, raft_addrs: Sequence[str], http_addrs: Sequence[str]) -> None:
        """Create the proxies (before the nodes start: the config names their ports)."""
        n = len(raft_addrs)
        for i in range(n):
            for j in range(n):
                if i != j:
                    self.raft[(i, j)] = self._create(f"raft-{i}-{j}", raft_addrs[j])
            self.client[i] = self._create(f"client-{i}", http_addrs[i])

    def raft_dial(self, i: int, peer_ids: Sequence[str]) -> tuple[tuple[str, str], ...]:
        """Node i's ``raft_dial``: every peer through its proxy."""
        return tuple(
            (peer_ids[j], self.raft[(i, j)].listen) for j in range(len(peer_ids)) if j != i
        )

    def client_urls(self) -> list[str]:
        return [f"http://{self.client[i].listen}" for i in sorted(self.client)]

    def streams(self, a: int, b: int) -> list[tuple[Any, str]]:
        """(proxy, stream) pairs that carry raft data from node a to node b."""
        return [(self.raft[(a, b)], "upstream"), (self.raft[(b, a)], "downstream")]

    def add(self, proxy: Any, stream: str, toxic_type: str, **attributes: int) -> None:
        name = f"chaos_{toxic_type}_{stream}"
        proxy.add_toxic(type=toxic_type, stream=stream, name=name, attributes=attributes)
        self._toxics.append((proxy, name))

    def degrade_link(self, a: int, b: int, toxic_type: str, **attributes: int) -> None:
        """A toxic on the raft data a -> b (one direction)."""
        for proxy, stream in self.streams(a, b):
            self.add(proxy, stream, toxic_type, **attributes)

    def degrade_client(self, i: int, toxic_type: str, **attributes: int) -> None:
        """A toxic on both directions of the client link to node i."""
        for stream in ("upstream", "downstream"):
            self.add(self.client[i], stream, toxic_type, **attributes)

    def disable(self, proxy: Any) -> None:
        proxy.disable()
        self._disabled.append(proxy)

    def heal(self) -> None:
        """Remove every toxic this object added and re-enable disabled proxies."""
        errors = []
        for proxy, name in reversed(self._toxics):
            try:
                proxy.destroy_toxic(name)
            except Exception as e:  # noqa: BLE001 - keep healing the rest
                errors.append(f"{proxy.name}/{name}: {e}")
        self._toxics.clear()
        for proxy in self._disabled:
            try:
                proxy.enable()
            except Exception as e:  # noqa: BLE001
                errors.append(f"enable {proxy.name}: {e}")
        self._disabled.clear()
        if errors:
            raise FaultError("could not heal every proxy: " + "; ".join(errors))

    def close(self) -> None:
        """Heal, then delete our proxies."""
        with contextlib.suppress(Exception):
            self.heal()
        for proxy in [*self.raft.values(), *self.client.values()]:
            with contextlib.suppress(Exception):
                proxy.destroy()
        self.raft.clear()
        self.client.clear()


# ----------------------------------------------------------------------------- context


@dataclass
class FaultContext:
    """What a fault may act on."""

    cluster: LocalCluster
    rng: random.Random
    log: Callable[[str], None] = print
    window: float = 10.0  # planned seconds between start() and stop()
    proxies: ProxyNet | None = None
    partitioner: Partitioner | None = None
    lazyfs: LazyFS | None = None
    # When the fault took effect (monotonic ns), set by start() via mark(): finding the
    # leader and adding rules takes time that must not count towards the RTO.
    injected_ns: int | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    # Set by the runner for faults with failpoints: restarts nodes that exit at one.
    watcher: CrashWatcher | None = None

    def mark(self) -> None:
        """The fault is in effect now (called once by start(), right after injecting)."""
        if self.injected_ns is None:
            self.injected_ns = time.monotonic_ns()

    @property
    def node_ids(self) -> list[str]:
        return self.cluster.node_ids

    def index(self, node_id: str) -> int:
        return self.node_ids.index(node_id)

    def leader(self, timeout: float = 15.0) -> str:
        """The current leader (waits for one; a node that says it leads)."""
        deadline = time.monotonic() + timeout
        while True:
            for nid in self.node_ids:
                st = self.cluster.status(nid)
                if st and st.get("role") == "leader":
                    return nid
            if time.monotonic() > deadline:
                raise FaultError(f"no leader within {timeout:.0f} s")
            time.sleep(0.1)

    def follower(self, leader: str | None = None) -> str:
        leader = leader or self.leader()
        return self.rng.choice([n for n in self.node_ids if n != leader])

    def restart(self, node_id: str, wait: str = "live") -> None:
        """Start a stopped node; wait until it is live (or ready)."""
        lc = self.cluster
        if not lc.is_running(node_id):
            lc.start_node(node_id)
        if wait == "ready":
            lc.start_and_wait(node_id, timeout=90.0)
        else:
            lc.wait_live(node_id, timeout=60.0)


def _kill_many(lc: LocalCluster, node_ids: Sequence[str]) -> None:
    """SIGKILL several nodes at (nearly) the same instant, then reap them."""
    pids = {nid: lc.pid(nid) for nid in node_ids}
    for pid in pids.values():
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    for nid in node_ids:
        lc.kill_node(nid)  # waits until gone, clears the pid file


def _start_all(ctx: FaultContext) -> None:
    """Start every stopped node (all at once: a lone node cannot become ready)."""
    for nid in ctx.node_ids:
        if not ctx.cluster.is_running(nid):
            ctx.cluster.start_node(nid)
    for nid in ctx.node_ids:
        ctx.cluster.wait_live(nid, timeout=60.0)


# -------------------------------------------------------------------------- failpoints

FAILPOINTS_ENV = "STATEKEEPER_FAILPOINTS"
FAILPOINT_EXIT_CODE = 86  # node/failpoints.py EXIT_CODE
_FAILPOINT_LINE = re.compile(r"failpoint (\S+): exiting")

# Snapshot thresholds that make compaction run about once a second on every node (instead
# of every 5000 entries / 5 minutes): snapshot, rename and journal prefix drop happen
# dozens of times in a 20 s run. pysyncobj needs min_entries >= 2.
TINY_SNAPSHOTS: dict[str, Any] = {"snapshot_min_entries": 40, "snapshot_min_seconds": 1}


def failpoint_spec(points: Mapping[str, str]) -> str:
    """The STATEKEEPER_FAILPOINTS value for ``points`` (name -> action), validated with the
    node's own parser so that a typo fails here and not as a node that refuses to start."""
    from node import failpoints

    spec = ";".join(f"{name}={action}" for name, action in points.items())
    failpoints.parse(spec)  # raises FailpointError naming the bad part
    return spec


def exit_failpoints(points: Mapping[str, str]) -> list[str]:
    """Names in ``points`` whose action can make the node exit (exit, N*exit, P%exit)."""
    return [name for name, action in points.items() if action.strip().endswith("exit")]


def last_failpoint(log_text: str) -> str | None:
    """The failpoint named by the last "failpoint NAME: exiting" line of a node's log."""
    names = _FAILPOINT_LINE.findall(log_text)
    return names[-1] if names else None


class CrashWatcher:
    """Restarts nodes that exited at a failpoint (status 86), counting the crashes.

    Polls every ``interval`` seconds (a crashed node is started again within about that
    long; it then catches up on its own). Only status 86 is restarted: a node killed by a
    fault (a signal) is the fault's business, and any other exit status is a real crash,
    recorded in ``unexpected`` and left for the runner to report. Each exit is handled
    once (by pid).
    """

    def __init__(
        self, cluster: LocalCluster, log: Callable[[str], None] = print, interval: float = 0.1
    ) -> None:
        self.cluster = cluster
        self.log = log
        self.interval = interval
        self.crashes: Counter[str] = Counter()  # failpoint name -> exits
        self.by_node: Counter[str] = Counter()
        self.unexpected: list[tuple[str, int]] = []  # (node, exit status)
        self.restarts = 0
        self._handled: set[int] = set()
        self._pending: set[str] = set()  # crashed at a failpoint, not yet started again
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> CrashWatcher:
        self._thread = threading.Thread(target=self._run, name="crash-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(15.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception as e:  # noqa: BLE001 - keep watching; say what went wrong
                self.log(f"crash watcher: {e!r}")

    def poll(self) -> None:
        """One round: notice exits, restart failpoint crashes."""
        lc = self.cluster
        with self._lock:
            for nid in lc.node_ids:
                if lc.pid(nid) is not None:
                    continue
                last = lc.last_exit.get(nid)
                if last is not None and last[0] not in self._handled:
                    self._handled.add(last[0])
                    pid, code = last
                    if code == FAILPOINT_EXIT_CODE:
                        name = last_failpoint(lc.log_tail(nid, 40)) or "?"
                        self.crashes[name] += 1
                        self.by_node[nid] += 1
                        self._pending.add(nid)
                        self.log(f"{nid} exited at failpoint {name} (pid {pid}); restarting it")
                    elif code > 0:
                        self.unexpected.append((nid, code))
                        self.log(f"{nid} exited with status {code} (pid {pid}): not a failpoint")
                if nid in self._pending:
                    try:
                        lc.start_node(nid)
                    except SupervisorError as e:  # e.g. its port not free yet: next round
                        self.log(f"crash watcher: restarting {nid} failed, will retry: {e}")
                        continue
                    self._pending.discard(nid)
                    self.restarts += 1

    def settle(self, timeout: float = 10.0) -> bool:
        """Wait until no failpoint crash awaits its restart; False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            with self._lock:
                if not self._pending:
                    return True
            if time.monotonic() > deadline:
                return False
            time.sleep(self.interval)

    def verdict(self, expected: Sequence[str]) -> Verdict:
        """How many crashes each expected failpoint caused. A failpoint that never fired
        tested nothing: all of them silent is a FAIL, some of them UNKNOWN."""
        counts = {name: self.crashes.get(name, 0) for name in expected}
        others = {k: v for k, v in self.crashes.items() if k not in counts}
        value = ", ".join(f"{k} {v}" for k, v in {**counts, **others}.items()) or "none armed"
        per_node = ", ".join(f"{n} {c}" for n, c in sorted(self.by_node.items()))
        detail = f"{self.restarts} restarts ({per_node or 'no node crashed'})"
        silent = [k for k, v in counts.items() if v == 0]
        if counts and len(silent) == len(counts):
            status = FAIL
            detail = "no failpoint ever fired: the scenario tested nothing; " + detail
        elif silent:
            status = UNKNOWN
            detail = f"never fired: {', '.join(silent)}; " + detail
        else:
            status = PASS if counts else INFO
        return Verdict("failpoint crashes", status, value, detail)


def _snapshot_last_index(data_dir: Path) -> int | None:
    """Last raft index covered by the node's snapshot file on disk (None: no snapshot)."""
    from node import snapshot_file

    try:
        header, _ = snapshot_file.read_header(str(data_dir / "raft" / "snapshot.bin"))
        return int(header["last"][1])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def _log_since(cluster: LocalCluster, node_id: str, offset: int) -> str:
    try:
        with open(cluster.log_file(node_id), "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _log_size(cluster: LocalCluster, node_id: str) -> int:
    try:
        return cluster.log_file(node_id).stat().st_size
    except OSError:
        return 0


_RESTORED = re.compile(r"restoring state machine from snapshot at index (\d+)")


# ------------------------------------------------------------------------------ faults


class Fault:
    """Base class: override start() / stop(); class attributes describe the fault."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "process"  # process | partition | proxy | failpoint | clock | none
    topology: ClassVar[str] = "plain"  # plain | links | proxy | lazyfs
    description: ClassVar[str] = ""
    # The cluster this fault needs (see the module docstring).
    min_nodes: ClassVar[int] = 3
    raft_settings: ClassVar[dict[str, Any]] = {}
    retention_settings: ClassVar[dict[str, Any]] = {}
    failpoints: ClassVar[dict[str, str]] = {}
    # chaos.workload.WorkloadConfig fields this fault wants (e.g. more serializable reads)
    workload_settings: ClassVar[dict[str, Any]] = {}

    def configure(self, cfg: ClusterConfig) -> ClusterConfig:
        """The cluster config with this fault's raft / retention overrides."""
        if self.raft_settings:
            cfg = dataclasses.replace(cfg, raft=dataclasses.replace(cfg.raft, **self.raft_settings))
        if self.retention_settings:
            cfg = dataclasses.replace(
                cfg, retention=dataclasses.replace(cfg.retention, **self.retention_settings)
            )
        return cfg

    def node_env(self, cfg: ClusterConfig, work: Path) -> dict[str, dict[str, str]]:
        """Environment for every start of each node (node id -> variables)."""
        if not self.failpoints:
            return {}
        spec = failpoint_spec(self.failpoints)
        return {n.id: {FAILPOINTS_ENV: spec} for n in cfg.nodes}

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        """Checks, after the final reads, that the fault did what it is meant to."""
        return []

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if cls.topology == "links":
            from chaos.partition import available

            return available()
        if cls.topology == "lazyfs":
            from chaos.lazyfs import available

            return available()
        if cls.topology == "proxy":
            try:
                import toxiproxy  # noqa: F401
            except ImportError as e:
                return False, f"toxiproxy-python is not installed ({e})"
        return True, ""

    def allows_loss(self, fsync: str) -> bool:
        """Whether losing acknowledged writes is within the contract for this fault."""
        return False

    def start(self, ctx: FaultContext) -> str:
        raise NotImplementedError

    def stop(self, ctx: FaultContext) -> None:
        pass


class NoFault(Fault):
    name = "none"
    kind = "none"
    description = "no fault: a control run of the workload and checks"

    def start(self, ctx: FaultContext) -> str:
        ctx.mark()
        return "nothing"


class _KillOne(Fault):
    target = "leader"

    def __init__(self) -> None:
        self.victim: str | None = None

    def pick(self, ctx: FaultContext) -> str:
        if self.target == "leader":
            return ctx.leader()
        if self.target == "follower":
            return ctx.follower()
        return ctx.rng.choice(ctx.node_ids)

    def start(self, ctx: FaultContext) -> str:
        was_leader = ctx.leader()
        self.victim = self.pick(ctx)
        ctx.cluster.kill_node(self.victim)
        role = "leader" if self.victim == was_leader else "follower"
        ctx.mark()
        return f"SIGKILL {self.victim} ({role}); restart at heal"

    def stop(self, ctx: FaultContext) -> None:
        if self.victim is not None:
            ctx.restart(self.victim)


class KillLeader(_KillOne):
    name = "kill-leader"
    target = "leader"
    description = "SIGKILL the leader; restart it when the fault window ends"


class KillFollower(_KillOne):
    name = "kill-follower"
    target = "follower"
    description = "SIGKILL one follower; restart it when the fault window ends"


class KillRandom(_KillOne):
    name = "kill-random"
    target = "random"
    description = "SIGKILL a random node (seeded); restart it when the fault window ends"


class PauseLeader(Fault):
    name = "pause-leader"
    description = (
        "SIGSTOP the leader for the fault window (longer than the election timeout), "
        "then SIGCONT: a frozen old leader wakes up in a new term"
    )

    def __init__(self) -> None:
        self.victim: str | None = None

    def start(self, ctx: FaultContext) -> str:
        self.victim = ctx.leader()
        ctx.cluster.pause_node(self.victim)
        ctx.mark()
        return f"SIGSTOP {self.victim} (leader) for {ctx.window:.1f} s"

    def stop(self, ctx: FaultContext) -> None:
        if self.victim is not None:
            with contextlib.suppress(SupervisorError):  # it died meanwhile: nothing to resume
                ctx.cluster.resume_node(self.victim)


class RollingRestart(Fault):
    name = "rolling-restart"
    description = (
        "restart every node in turn (SIGTERM, start, wait until ready), followers first, "
        "the leader last"
    )

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        order = [n for n in ctx.node_ids if n != leader] + [leader]
        ctx.mark()  # the first SIGTERM follows at once
        for nid in order:
            ctx.log(f"rolling restart: {nid}")
            ctx.cluster.restart_node(nid, stop_timeout=15.0, ready_timeout=90.0)
        return f"restarted {', '.join(order)} one by one"

    def stop(self, ctx: FaultContext) -> None:
        for nid in ctx.node_ids:
            ctx.restart(nid)


class KillAll(Fault):
    name = "kill-all"
    description = "SIGKILL every node at once; restart them all when the fault window ends"

    def start(self, ctx: FaultContext) -> str:
        _kill_many(ctx.cluster, ctx.node_ids)
        ctx.mark()
        return f"SIGKILL {', '.join(ctx.node_ids)}; restart at heal"

    def stop(self, ctx: FaultContext) -> None:
        _start_all(ctx)


class WipeFollower(Fault):
    name = "wipe-follower"
    description = (
        "SIGKILL a follower, delete its data directory and start it again empty: it "
        "rejoins and must be caught up by the leader"
    )

    def __init__(self) -> None:
        self.victim: str | None = None

    def start(self, ctx: FaultContext) -> str:
        self.victim = ctx.follower()
        ctx.cluster.kill_node(self.victim)
        ctx.mark()
        ctx.cluster.wipe_node(self.victim)
        ctx.restart(self.victim)
        return f"SIGKILL {self.victim} (follower), wiped its data, restarted it empty"

    def stop(self, ctx: FaultContext) -> None:
        if self.victim is not None:
            ctx.restart(self.victim)


class PowerLoss(Fault):
    name = "power-loss"
    topology = "lazyfs"
    description = (
        "every node loses power at once: SIGKILL all, then LazyFS drops every write not "
        "yet fsynced; restart all when the fault window ends"
    )

    def allows_loss(self, fsync: str) -> bool:
        return fsync == "never"  # the README: power loss may lose the last moments

    def start(self, ctx: FaultContext) -> str:
        if ctx.lazyfs is None:
            raise FaultError("power-loss needs the cluster on a LazyFS mount")
        _kill_many(ctx.cluster, ctx.node_ids)
        ctx.mark()  # power is off from here; the crash only decides what the disk kept
        before = ctx.lazyfs.status()
        ctx.lazyfs.crash()
        return (
            f"SIGKILL {', '.join(ctx.node_ids)} and power cut (dropped "
            f"{before.get('dirty_bytes', '?')} unsynced bytes in "
            f"{before.get('dirty_files', '?')} files); restart at heal"
        )

    def stop(self, ctx: FaultContext) -> None:
        _start_all(ctx)


# -- partitions (iptables) ------------------------------------------------------------


class _Partition(Fault):
    kind = "partition"
    topology = "links"

    def net(self, ctx: FaultContext) -> Partitioner:
        if ctx.partitioner is None:
            raise FaultError("partitions need the cluster built with per-link addresses")
        return ctx.partitioner

    def stop(self, ctx: FaultContext) -> None:
        if ctx.partitioner is not None:
            ctx.partitioner.heal()


class PartitionLeader(_Partition):
    name = "partition-leader"
    description = "cut every raft link of the leader (iptables DROP, both directions)"

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        self.net(ctx).isolate(leader)
        ctx.mark()
        return (
            f"isolated {leader} (leader) from {', '.join(n for n in ctx.node_ids if n != leader)}"
        )


class PartitionFollower(_Partition):
    name = "partition-follower"
    description = "cut every raft link of one follower (iptables DROP, both directions)"

    def start(self, ctx: FaultContext) -> str:
        victim = ctx.follower()
        self.net(ctx).isolate(victim)
        ctx.mark()
        return f"isolated {victim} (follower)"


class PartitionMajorityMinority(_Partition):
    name = "partition-majority-minority"
    description = (
        "split the nodes at random into a minority and a majority (with 3 nodes: one "
        "random node alone, leader or not)"
    )

    def start(self, ctx: FaultContext) -> str:
        nodes = list(ctx.node_ids)
        ctx.rng.shuffle(nodes)
        k = max(1, (len(nodes) - 1) // 2)
        minority, majority = nodes[:k], nodes[k:]
        leader = ctx.leader()
        self.net(ctx).split(minority, majority)
        ctx.mark()
        return (
            f"minority {minority} | majority {majority} "
            f"(leader was {leader}, in the {'minority' if leader in minority else 'majority'})"
        )


class PartitionBridge(_Partition):
    name = "partition-bridge"
    description = (
        "two halves that cannot talk, and one bridge node that sees both (with 3 nodes: "
        "the leader and one follower are cut apart, the other follower sees both)"
    )

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        bridge = ctx.follower(leader)
        rest = [n for n in ctx.node_ids if n not in (leader, bridge)]
        side_a = [leader] + rest[: (len(rest) - 1) // 2]
        side_b = [n for n in rest if n not in side_a]
        self.net(ctx).split(side_a, side_b)
        ctx.mark()
        return f"{side_a} x {side_b} cut; {bridge} bridges both"


class OneWayLoss(_Partition):
    name = "one-way-loss"
    description = (
        "drop every packet FROM the leader to the others (one direction only): it still "
        "hears the followers but they no longer hear it"
    )

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        for other in ctx.node_ids:
            if other != leader:
                self.net(ctx).cut(leader, other, one_way=True)
        ctx.mark()
        return f"dropping packets {leader} (leader) -> others"


class PacketLoss(_Partition):
    name = "packet-loss"
    probability = 0.3
    description = "drop 30% of the packets on every raft link at random (-m statistic)"

    def start(self, ctx: FaultContext) -> str:
        nodes = ctx.node_ids
        for i, a in enumerate(nodes):
            for b in nodes[i + 1 :]:
                self.net(ctx).cut(a, b, probability=self.probability)
        ctx.mark()
        return f"{self.probability:.0%} random packet loss on every raft link"


# -- toxiproxy ------------------------------------------------------------------------


class _Proxy(Fault):
    kind = "proxy"
    topology = "proxy"

    def net(self, ctx: FaultContext) -> ProxyNet:
        if ctx.proxies is None:
            raise FaultError("proxy faults need the cluster built behind Toxiproxy")
        return ctx.proxies

    def links_of(self, ctx: FaultContext, node: str) -> Iterator[tuple[int, int]]:
        """Both directions of every raft link of `node`, as index pairs."""
        i = ctx.index(node)
        for j in range(len(ctx.node_ids)):
            if j != i:
                yield i, j
                yield j, i

    def all_links(self, ctx: FaultContext) -> Iterator[tuple[int, int]]:
        n = len(ctx.node_ids)
        return ((i, j) for i in range(n) for j in range(n) if i != j)

    def stop(self, ctx: FaultContext) -> None:
        if ctx.proxies is not None:
            ctx.proxies.heal()


class ProxyLatency(_Proxy):
    name = "proxy-latency"
    description = (
        "latency 120 ms +- 80 ms jitter on every raft link, 50 ms +- 50 ms on every client link"
    )

    def start(self, ctx: FaultContext) -> str:
        net = self.net(ctx)
        for a, b in self.all_links(ctx):
            net.degrade_link(a, b, "latency", latency=120, jitter=80)
        for i in net.client:
            net.degrade_client(i, "latency", latency=50, jitter=50)
        ctx.mark()
        return "latency toxics on every link"


class _LeaderLinkToxic(_Proxy):
    """One toxic on every raft link of the leader; subclasses only name it."""

    toxic: str = ""
    attributes: dict[str, int] = {}
    what: str = ""

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        for a, b in self.links_of(ctx, leader):
            self.net(ctx).degrade_link(a, b, self.toxic, **self.attributes)
        ctx.mark()
        return f"{self.what} on {leader}'s (leader) raft links"


class ProxyBandwidth(_LeaderLinkToxic):
    name = "proxy-bandwidth"
    description = "the leader's raft links limited to 8 KB/s each way (replication lags)"
    toxic, attributes, what = "bandwidth", {"rate": 8}, "bandwidth 8 KB/s"


class ProxyBlackhole(_LeaderLinkToxic):
    name = "proxy-blackhole"
    description = (
        "timeout toxic (timeout 0) on the leader's raft links: data silently vanishes, "
        "connections stay open"
    )
    toxic, attributes, what = "timeout", {"timeout": 0}, "blackhole (timeout 0)"


class ProxyResetPeer(_Proxy):
    name = "proxy-reset-peer"
    description = (
        "reset_peer toxic on the leader's raft links and its client link: every "
        "connection is reset (RST) as soon as data flows"
    )

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        net = self.net(ctx)
        for a, b in self.links_of(ctx, leader):
            net.degrade_link(a, b, "reset_peer", timeout=0)
        net.degrade_client(ctx.index(leader), "reset_peer", timeout=0)
        ctx.mark()
        return f"connection resets on {leader}'s (leader) raft and client links"


class ProxySlowClose(_Proxy):
    name = "proxy-slow-close"
    description = (
        "slow_close toxic (3 s) on the leader's raft links, then SIGKILL the leader: the "
        "followers see its connections close 3 s late; restart at heal"
    )

    def __init__(self) -> None:
        self.victim: str | None = None

    def start(self, ctx: FaultContext) -> str:
        self.victim = ctx.leader()
        for a, b in self.links_of(ctx, self.victim):
            self.net(ctx).degrade_link(a, b, "slow_close", delay=3000)
        ctx.cluster.kill_node(self.victim)
        ctx.mark()
        return f"slow_close 3 s on {self.victim}'s links, then SIGKILL {self.victim} (leader)"

    def stop(self, ctx: FaultContext) -> None:
        try:
            super().stop(ctx)
        finally:
            if self.victim is not None:
                ctx.restart(self.victim)


class ProxyLimitData(_Proxy):
    name = "proxy-limit-data"
    description = (
        "limit_data toxic: every raft connection is closed after 32 KiB and every client "
        "connection after 64 KiB (constant reconnects, cut-off messages)"
    )

    def start(self, ctx: FaultContext) -> str:
        net = self.net(ctx)
        for a, b in self.all_links(ctx):
            net.degrade_link(a, b, "limit_data", bytes=32 * 1024)
        for i in net.client:
            net.degrade_client(i, "limit_data", bytes=64 * 1024)
        ctx.mark()
        return "limit_data on every link"


class ProxySlicer(_Proxy):
    name = "proxy-slicer"
    description = (
        "slicer toxic on every raft and client link: the byte stream arrives in ~64-byte "
        "pieces, 0.2 ms apart (message framing under fragmentation)"
    )

    def start(self, ctx: FaultContext) -> str:
        net = self.net(ctx)
        for a, b in self.all_links(ctx):
            net.degrade_link(a, b, "slicer", average_size=64, size_variation=32, delay=200)
        for i in net.client:
            net.degrade_client(i, "slicer", average_size=64, size_variation=32, delay=200)
        ctx.mark()
        return "slicer on every link"


class ProxyDown(_Proxy):
    name = "proxy-down"
    description = (
        "take down the proxies of the leader's raft links and of its client link "
        "(connections dropped, new ones refused)"
    )

    def start(self, ctx: FaultContext) -> str:
        leader = ctx.leader()
        net = self.net(ctx)
        i = ctx.index(leader)
        for (a, b), proxy in net.raft.items():
            if i in (a, b):
                net.disable(proxy)
        net.disable(net.client[i])
        ctx.mark()
        return f"proxies of {leader} (leader) down"


# -- failpoint crashes (node/failpoints.py) --------------------------------------------


class _FailpointFault(Fault):
    """Failpoints armed on every node for the whole run (warmup and recovery included),
    tiny snapshot thresholds so compaction runs about once a second on every node; the
    runner's CrashWatcher restarts a node within ~0.1 s of exiting at a failpoint."""

    kind = "failpoint"
    raft_settings = TINY_SNAPSHOTS

    def start(self, ctx: FaultContext) -> str:
        ctx.mark()
        w = ctx.watcher
        so_far = f"; {sum(w.crashes.values())} crashes so far" if w is not None else ""
        return f"failpoints armed on every node since start: {failpoint_spec(self.failpoints)}{so_far}"

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        restores = {
            nid: len(_RESTORED.findall(_log_since(ctx.cluster, nid, 0))) for nid in ctx.node_ids
        }
        return [
            Verdict(
                "snapshots installed from the leader",
                INFO,
                str(sum(restores.values())),
                ", ".join(f"{n} {c}" for n, c in restores.items()),
            )
        ]


class CrashSnapshot(_FailpointFault):
    name = "crash-snapshot"
    description = (
        "every node exits (status 86) with 10% probability at each of three compaction "
        "steps: snapshot renamed into place, rewritten journal fsynced but not renamed, "
        "journal renamed but its directory not fsynced; snapshots about once a second; "
        "crashed nodes restart at once"
    )
    failpoints = {
        "snapshot-after-rename": "10%exit",
        "journal-prefix-drop": "10%exit",
        "journal-prefix-dropped": "10%exit",
    }


class CrashFollowerFsync(_FailpointFault):
    name = "crash-follower-fsync"
    description = (
        "a follower exits (status 86) right after fsyncing an AppendEntries and before "
        "answering the leader (0.4% of its replies, every node); crashed nodes restart at once"
    )
    failpoints = {"follower-after-fsync": "0.4%exit"}


class CrashInstall(_FailpointFault):
    name = "crash-install"
    description = (
        "one follower is killed again and again, wiped (every other time kept down instead "
        "while the leader compacts past it), so each restart needs a snapshot; a node "
        "exits (status 86) at 60% of the snapshot installs, after the snapshot is on disk "
        "and before the state machine is restored from it"
    )
    failpoints = {"snapshot-install": "60%exit"}
    behind_s = 1.5  # down long enough for the leader to compact past it (~1 s period)
    wiped_s = 0.3  # a wiped node needs a snapshot anyway
    install_s = 3.0  # wait this long for the install (the watcher restarts crashes)

    def __init__(self) -> None:
        self.victim: str | None = None
        self.rounds = 0

    def start(self, ctx: FaultContext) -> str:
        lc = ctx.cluster
        self.victim = ctx.follower()
        ctx.notes["victim_log_offset"] = _log_size(lc, self.victim)
        deadline = time.monotonic() + ctx.window - 0.5
        ctx.mark()
        while self.rounds == 0 or time.monotonic() + 1.5 < deadline:
            self.rounds += 1
            wiped = self.rounds % 2 == 1
            lc.kill_node(self.victim)
            if wiped:
                lc.wipe_node(self.victim)
            time.sleep(self.wiped_s if wiped else self.behind_s)
            offset = _log_size(lc, self.victim)
            lc.start_node(self.victim)
            # Until it installed a snapshot (it may exit at the failpoint first: the
            # watcher starts it again and it asks for the snapshot again) or gave up.
            until = min(deadline, time.monotonic() + self.install_s)
            while time.monotonic() < until:
                if _RESTORED.search(_log_since(lc, self.victim, offset)):
                    break
                time.sleep(0.1)
            ctx.log(
                f"round {self.rounds}: {self.victim} "
                f"{'wiped' if wiped else f'kept down {self.behind_s:g} s'}, restarted; "
                f"{'installed a snapshot' if _RESTORED.search(_log_since(lc, self.victim, offset)) else 'no snapshot installed yet'}"
            )
        return f"{self.rounds} rounds of kill / wipe or keep down / restart of {self.victim} (follower)"

    def stop(self, ctx: FaultContext) -> None:
        if self.victim is None:
            return
        if ctx.watcher is not None:
            ctx.watcher.settle(5.0)
        if not ctx.cluster.is_running(self.victim):
            ctx.restart(self.victim)

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        if self.victim is None:
            return []
        text = _log_since(ctx.cluster, self.victim, ctx.notes.get("victim_log_offset", 0))
        restores = len(_RESTORED.findall(text))
        crashed = text.count("failpoint snapshot-install: exiting")
        return [
            Verdict(
                "follower caught up by snapshots",
                PASS if restores + crashed else UNKNOWN,
                f"{restores} restored, {crashed} crashed mid-install",
                f"{self.victim}, {self.rounds} rounds"
                + ("" if restores + crashed else ": it never needed a snapshot (nothing tested)"),
            )
        ]


# -- clocks (libfaketime) ---------------------------------------------------------------

LIBFAKETIME_GLOBS = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)
CLOCK_SHIM_DIR = Path(__file__).resolve().parent / "clockshim"
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def find_libfaketime() -> str | None:
    for pattern in LIBFAKETIME_GLOBS:
        for path in sorted(glob.glob(pattern)):
            if os.path.exists(path):
                return path
    return None


def faketime_env(lib: str, timestamp_file: str | os.PathLike[str]) -> dict[str, str]:
    """Environment that runs a Python process under libfaketime with its wall clock
    offset by whatever ``timestamp_file`` says (e.g. "+3h", "-1d", "+0"), re-read at most
    once a second (FAKETIME_CACHE_DURATION=1), and its monotonic clock untouched (raft
    timeouts, asyncio). chaos/clockshim makes time.sleep work under it (see its
    docstring).

    Measured on Debian's libfaketime 0.9.10 with CPython 3.11 (a node's put / get, one
    client; three Python threads sharing the GIL):

    - not FAKETIME_NO_CACHE=1 (re-read on every call): every CLOCK_REALTIME read of the
      process then opens and parses the file, RocksDB's included: a put took 40 ms
      instead of 4.7 ms, get 6.4 ms instead of 1.8. With a 1 s cache a jump takes effect
      within a second and nodes run at their normal speed;
    - FAKETIME_FORCE_MONOTONIC_FIX=0: libfaketime otherwise rewrites the CLOCK_MONOTONIC
      deadlines of pthread_cond_timedwait, which CPython's GIL hand-off uses; three
      threads took 24.6 s instead of 0.5 s, and nodes answered in 50-100 ms;
    - time.sleep still fails (EINVAL, libfaketime#426): chaos/clockshim.
    """
    pythonpath = os.pathsep.join(
        p
        for p in (str(CLOCK_SHIM_DIR), str(PROJECT_ROOT), os.environ.get("PYTHONPATH", ""))
        if p
    )
    return {
        "LD_PRELOAD": lib,
        "FAKETIME_TIMESTAMP_FILE": str(timestamp_file),
        "FAKETIME_CACHE_DURATION": "1",
        "DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_FORCE_MONOTONIC_FIX": "0",
        "PYTHONPATH": pythonpath,
    }


class ClockJump(Fault):
    name = "clock-jump"
    kind = "clock"
    description = (
        "wall clock jumps (libfaketime) of +25h then -3h on a follower, then on the "
        "leader, while idempotent writes go through every node and are re-sent later with "
        "the same key; idempotency window 1 h, so a jump that reaches the records' expiry "
        "shows up as a write applied twice"
    )
    retention_settings = {"idempotency_seconds": 3600}
    JUMPS: ClassVar[tuple[str, ...]] = ("+25h", "-3h")
    MIN_STEP_S: ClassVar[float] = 1.8  # libfaketime re-reads the offset once a second

    def __init__(self) -> None:
        self.files: dict[str, Path] = {}
        self.done: list[str] = []

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if find_libfaketime() is None:
            return False, "libfaketime is not installed (apt-get install faketime)"
        return True, ""

    def node_env(self, cfg: ClusterConfig, work: Path) -> dict[str, dict[str, str]]:
        lib = find_libfaketime()
        if lib is None:
            raise FaultError("libfaketime is not installed (apt-get install faketime)")
        clocks = work / "faketime"
        clocks.mkdir(parents=True, exist_ok=True)
        env = {}
        for n in cfg.nodes:
            path = clocks / n.id
            path.write_text("+0\n")
            self.files[n.id] = path
            env[n.id] = faketime_env(lib, path)
        return env

    def set_offset(self, node_id: str, offset: str) -> None:
        path = self.files[node_id]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(offset + "\n")
        tmp.replace(path)  # a reader never sees an empty file

    def start(self, ctx: FaultContext) -> str:
        if not self.files:
            raise FaultError("clock-jump needs its nodes started under libfaketime")
        leader = ctx.leader()
        follower = ctx.follower(leader)
        steps = [(follower, j) for j in self.JUMPS] + [(leader, j) for j in self.JUMPS]
        step_s = max(self.MIN_STEP_S, (ctx.window - 0.5) / len(steps))
        ctx.mark()
        for nid, offset in steps:
            self.set_offset(nid, offset)
            role = "follower" if nid == follower else "leader"
            self.done.append(f"{nid} ({role}) {offset}")
            ctx.log(f"clock of {nid} ({role}) now {offset}")
            time.sleep(step_s)
            self.set_offset(nid, "+0")
        return f"clock jumps, {step_s:.1f} s each: {', '.join(self.done)}"

    def stop(self, ctx: FaultContext) -> None:
        for nid in self.files:
            self.set_offset(nid, "+0")

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        preloaded = []
        for nid in ctx.node_ids:
            pid = ctx.cluster.pid(nid)
            try:
                maps = Path(f"/proc/{pid}/maps").read_text() if pid else ""
            except OSError:
                maps = ""
            if "libfaketime" in maps:
                preloaded.append(nid)
        ok = len(preloaded) == len(ctx.node_ids)
        return [
            Verdict(
                "clocks faked (libfaketime loaded)",
                PASS if ok and self.done else UNKNOWN,
                f"{len(preloaded)}/{len(ctx.node_ids)} nodes",
                f"jumps: {', '.join(self.done) or 'none'}",
            )
        ]


# -- a deposed leader with an uncommitted tail receives a snapshot ----------------------


class DeposedLeaderSnapshot(Fault):
    name = "deposed-leader-snapshot"
    kind = "partition"
    topology = "links"
    min_nodes = 5
    raft_settings = TINY_SNAPSHOTS
    # Packing a snapshot takes 1.5 s more (a large DB): while the leader packs, pysyncobj
    # answers a follower that needs a snapshot with install messages carrying no data,
    # which is when a follower that trusts them commits its own stale tail. Then the
    # restore waits 0.2 s more once the snapshot is on disk. Both widen the window in
    # which a deposed leader that applied its uncommitted tail would serve it.
    failpoints = {"snapshot-pack": "sleep(1.5)", "snapshot-install": "sleep(0.2)"}
    # Every node has a pinned reader; most of their reads are serializable, the reads a
    # cut-off node still answers from its own state.
    workload_settings = {"serializable_share": 0.6}
    description = (
        "5 nodes: cut the leader's raft links while clients (and 8 probe writes of the "
        "fault's own, each to a key of its own) keep writing to it, so its log ends in "
        "entries that can never commit; the majority elects a leader and compacts past the "
        "old leader's log; heal while the new leader packs a snapshot: the old leader must "
        "be caught up by a snapshot and never serve a write the cluster did not commit "
        "(its serializable view of the probe keys is polled every 10 ms)"
    )
    PROBES: ClassVar[int] = 8
    PROBE_PREFIX: ClassVar[str] = "deposed-probe-"

    def __init__(self) -> None:
        self.old: str | None = None
        self.heal_offset = 0
        self.precondition = ""
        self.probe_errors: dict[str, str] = {}
        # (key, value, mod_revision) -> (store revision, seconds after the heal) of each
        # probe kv the old leader served (first sighting)
        self.sightings: dict[tuple[str, str, int], tuple[int, float]] = {}
        self.polls = 0
        self.healed_while_packing: bool | None = None
        self._probe_threads: list[threading.Thread] = []
        self._stop_polling = threading.Event()
        self._poller: threading.Thread | None = None
        self._heal_ns = 0

    def _probe(self, url: str, i: int) -> None:
        from client import Client, RetryPolicy, StatekeeperError

        key = f"{self.PROBE_PREFIX}{i}"
        try:
            with Client(url, ns="chaos", timeout=4.0, retry=RetryPolicy.disabled(),
                        prefer_leader=False) as c:
                c.put(key, f"uncommitted-{i}", idempotency_key=f"deposed-probe-{i}-{os.getpid()}")
            self.probe_errors[key] = "ok"
        except StatekeeperError as e:
            self.probe_errors[key] = e.code or type(e).__name__
        except Exception as e:  # noqa: BLE001 - recorded, the fault goes on
            self.probe_errors[key] = type(e).__name__

    def start(self, ctx: FaultContext) -> str:
        if ctx.partitioner is None:
            raise FaultError("partitions need the cluster built with per-link addresses")
        lc = ctx.cluster
        self.old = ctx.leader()
        before = lc.status(self.old) or {}
        ctx.partitioner.isolate(self.old)
        ctx.mark()
        ctx.notes["deposed"] = self.old
        # Writes the old leader appends now can never commit: nobody else sees them.
        url = lc.url(self.old)
        self._probe_threads = [
            threading.Thread(target=self._probe, args=(url, i), daemon=True)
            for i in range(self.PROBES)
        ]
        for t in self._probe_threads:
            t.start()
        deadline = time.monotonic() + max(1.0, ctx.window - 1.0)
        new = None
        while new is None and time.monotonic() < deadline:
            for nid in ctx.node_ids:
                st = lc.status(nid) if nid != self.old else None
                if st and st.get("role") == "leader":
                    new = nid
            time.sleep(0.1)
        ctx.notes["new_leader"] = new
        # The old leader's log ends at most a few entries past its commit index (it steps
        # down within an election timeout); wait until every majority node has a snapshot
        # well past that, so none of them can catch it up with entries.
        old_st = lc.status(self.old) or before
        target = int(old_st.get("commit_index") or before.get("commit_index") or 0) + 200
        majority = [n for n in ctx.node_ids if n != self.old]
        snaps: dict[str, int | None] = {}
        while time.monotonic() < deadline:
            snaps = {n: _snapshot_last_index(lc.data_dir(n)) for n in majority}
            if all(v is not None and v > target for v in snaps.values()):
                break
            time.sleep(0.2)
        for t in self._probe_threads:
            t.join(5.0)
        met = bool(snaps) and all(v is not None and v > target for v in snaps.values())
        self.precondition = (
            f"majority snapshots at {min((v or 0) for v in snaps.values()) if snaps else '?'} "
            f"{'>' if met else 'NOT >'} old leader's commit index + 200 = {target}"
        )
        probes = ", ".join(f"{k[len(self.PROBE_PREFIX):]}:{v}" for k, v in self.probe_errors.items())
        return (
            f"isolated {self.old} (leader); new leader {new or 'none yet'}; {self.precondition}; "
            f"probe writes to {self.old}: {probes}"
        )

    def _poll(self, url: str) -> None:
        """The old leader's own view of the probe keys, every 10 ms from the heal on."""
        from client import Client, RetryPolicy, StatekeeperError

        with Client(url, ns="chaos", timeout=1.0, retry=RetryPolicy.disabled(),
                    prefer_leader=False) as c:
            while not self._stop_polling.is_set():
                try:
                    page = c.range(self.PROBE_PREFIX, consistency="serializable")
                    self.polls += 1
                    after = (time.monotonic_ns() - self._heal_ns) / 1e9
                    for kv in page.kvs:
                        self.sightings.setdefault(
                            (kv.key, kv.text, kv.mod_revision), (page.revision, after)
                        )
                except (StatekeeperError, OSError):
                    pass
                self._stop_polling.wait(0.01)

    def _committed_probes(self, ctx: FaultContext) -> tuple[dict[str, tuple[str, int]], str]:
        """key -> (value, mod_revision) of the probe keys the cluster committed (one
        linearizable read through a majority node), and an error message if unreadable.
        Each probe key is written once, by its probe: committed, it stays as it is."""
        from client import Client, StatekeeperError

        urls = [ctx.cluster.url(n) for n in ctx.node_ids if n != self.old]
        try:
            with Client(urls, ns="chaos", timeout=5.0) as c:
                page = c.range(self.PROBE_PREFIX)
        except StatekeeperError as e:
            return {}, f"reading the committed probe keys failed: {e}"
        return {kv.key: (kv.text, kv.mod_revision) for kv in page.kvs}, ""

    def _packing(self, ctx: FaultContext, node: str | None) -> bool:
        # A RocksDB checkpoint directory exists exactly while a snapshot is being packed.
        return node is not None and any(ctx.cluster.data_dir(node).glob("**/*.ckpt-*"))

    def stop(self, ctx: FaultContext) -> None:
        if self.old is not None and self._poller is None:
            self.heal_offset = _log_size(ctx.cluster, self.old)
            # Heal while the new leader packs a snapshot (within 4 s, else anyway): the
            # old leader then gets install messages before any snapshot data.
            new = ctx.notes.get("new_leader")
            until = time.monotonic() + 4.0
            while time.monotonic() < until and not self._packing(ctx, new):
                time.sleep(0.02)
            self.healed_while_packing = self._packing(ctx, new)
            self._heal_ns = time.monotonic_ns()
            self._poller = threading.Thread(
                target=self._poll, args=(ctx.cluster.url(self.old),), daemon=True
            )
            self._poller.start()
        if ctx.partitioner is not None:
            ctx.partitioner.heal()

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        if self.old is None:
            return []
        self._stop_polling.set()
        if self._poller is not None:
            self._poller.join(5.0)
        text = _log_since(ctx.cluster, self.old, self.heal_offset)
        restored = _RESTORED.findall(text)
        pending = [k for k, v in self.probe_errors.items() if v != "unavailable"]
        committed, why = self._committed_probes(ctx)
        dirty = [
            f"{self.old} served {k}={v!r} (mod_revision {m}, store revision {rev}) "
            f"{after:.2f} s after the heal, but the cluster committed "
            + (f"{k}={committed[k][0]!r} at mod_revision {committed[k][1]}" if k in committed
               else f"no {k} at all")
            + ": an uncommitted write was served"
            for (k, v, m), (rev, after) in sorted(self.sightings.items(), key=lambda x: x[1][1])
            if committed.get(k) != (v, m)
        ]
        late = sorted(k for k in committed)
        answers = ", ".join(sorted(set(self.probe_errors.values())))
        if why:
            status, value, detail = UNKNOWN, "committed state unreadable", why
        elif dirty:
            status, value = FAIL, f"served {len(dirty)} uncommitted write(s)"
            detail = "; ".join(dirty[:3])
        elif not pending:
            status, value = UNKNOWN, "no uncommitted tail"
            detail = "every probe write was refused (unavailable): nothing to leak"
        else:
            status = PASS
            value = f"{len(self.sightings)} probe kvs seen in {self.polls} polls, all committed"
            detail = (
                f"probe answers: {answers}; committed later (allowed for an unknown "
                f"outcome): {', '.join(late) or 'none'}"
            )
        packing = {True: "healed while the new leader packed a snapshot",
                   False: "the new leader was not packing at the heal", None: ""}
        return [
            Verdict(
                "deposed leader caught up by a snapshot",
                PASS if restored else UNKNOWN,
                f"{len(restored)} restore(s)" + (f" at index {restored[0]}" if restored else ""),
                f"{self.old}; {self.precondition}; {packing[self.healed_while_packing]}"
                + ("" if restored else "; it never needed one (nothing tested)"),
            ),
            Verdict("deposed leader served no uncommitted write", status, value, detail),
        ]


# ----------------------------------------------------------------------------- registry

FAULTS: dict[str, type[Fault]] = {
    cls.name: cls
    for cls in (
        NoFault,
        KillLeader,
        KillFollower,
        KillRandom,
        PauseLeader,
        RollingRestart,
        KillAll,
        WipeFollower,
        PowerLoss,
        PartitionLeader,
        PartitionFollower,
        PartitionMajorityMinority,
        PartitionBridge,
        OneWayLoss,
        PacketLoss,
        ProxyLatency,
        ProxyBandwidth,
        ProxyBlackhole,
        ProxyResetPeer,
        ProxySlowClose,
        ProxyLimitData,
        ProxySlicer,
        ProxyDown,
        CrashSnapshot,
        CrashInstall,
        CrashFollowerFsync,
        ClockJump,
        DeposedLeaderSnapshot,
    )
}

# The CI subset (`chaos suite --smoke`): one of each family, a few minutes in all.
SMOKE: tuple[str, ...] = ("kill-leader", "pause-leader", "partition-leader", "proxy-blackhole")


def fault_names(include_none: bool = False) -> list[str]:
    return [n for n in FAULTS if include_none or n != "none"]


def get_fault(name: str) -> Fault:
    try:
        return FAULTS[name]()
    except KeyError:
        raise KeyError(
            f"unknown fault {name!r}; known: {', '.join(fault_names(include_none=True))}"
        ) from None
