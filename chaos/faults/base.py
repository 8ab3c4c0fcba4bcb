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

import dataclasses
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from statekeeper.chaos.faults.failpoints import FAILPOINTS_ENV, failpoint_spec
from statekeeper.chaos.report import Verdict
from statekeeper.cluster.supervisor import LocalCluster

if TYPE_CHECKING:
    from statekeeper.chaos.faults.failpoints import CrashWatcher
    from statekeeper.chaos.faults.proxy import ProxyNet
    from statekeeper.chaos.lazyfs import LazyFS
    from statekeeper.chaos.partition import Partitioner
    from statekeeper.node.config import ClusterConfig

__all__ = [
    "RESTORED",
    "Fault",
    "FaultContext",
    "FaultError",
    "NoFault",
    "log_since",
    "log_size",
    "snapshot_last_index",
]


class FaultError(RuntimeError):
    """A fault could not be injected or healed."""


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
    # Victims chosen ahead by plan(): "follower" / "random" -> node id.
    planned: dict[str, str] = field(default_factory=dict)

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
        """A follower (seeded); the one :meth:`plan` chose, if it still is one."""
        leader = leader or self.leader()
        planned = self.planned.get("follower")
        if planned in self.node_ids and planned != leader:
            return planned
        return self.rng.choice([n for n in self.node_ids if n != leader])

    def any_node(self) -> str:
        """A node at random (seeded); the one :meth:`plan` chose, if any."""
        planned = self.planned.get("random")
        return planned if planned in self.node_ids else self.rng.choice(self.node_ids)

    def plan(self, target: str | None) -> str | None:
        """The node a fault whose ``watch_target`` is ``target`` will hit, chosen before
        the run starts so that a watcher can sit on it: "leader" (the leader now: nothing
        else faults the cluster before the fault starts), "follower" / "random" (drawn now
        and kept: :meth:`follower` and :meth:`any_node` return it later); None for a fault
        without one victim (every node, every link)."""
        if target == "leader":
            return self.leader()
        if target == "follower":
            leader = self.leader()
            self.planned["follower"] = self.rng.choice([n for n in self.node_ids if n != leader])
            return self.planned["follower"]
        if target == "random":
            self.planned["random"] = self.rng.choice(self.node_ids)
            return self.planned["random"]
        if target is not None:
            raise ValueError(f"unknown watch_target {target!r}")
        return None

    def restart(self, node_id: str, wait: str = "live") -> None:
        """Start a stopped node; wait until it is live (or ready)."""
        lc = self.cluster
        if not lc.is_running(node_id):
            lc.start_node(node_id)
        if wait == "ready":
            lc.start_and_wait(node_id, timeout=90.0)
        else:
            lc.wait_live(node_id, timeout=60.0)


class Fault:
    """Base class: override start() / stop(); class attributes describe the fault."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "process"  # process | partition | proxy | failpoint | clock | disk | none
    topology: ClassVar[str] = "plain"  # plain | links | proxy | lazyfs | smallfs
    # lazyfs: "strict" (a rename is durable once its directory is fsynced) or "journal"
    # (any fsync commits every earlier rename, as ext4 / XFS do): chaos/lazyfs/core.py
    lazyfs_namespace: ClassVar[str] = "strict"
    description: ClassVar[str] = ""
    # The cluster this fault needs (see the module docstring).
    min_nodes: ClassVar[int] = 3
    raft_settings: ClassVar[dict[str, Any]] = {}
    retention_settings: ClassVar[dict[str, Any]] = {}
    failpoints: ClassVar[dict[str, str]] = {}
    # chaos.workload_config.WorkloadConfig fields this fault wants (e.g. more serializable reads)
    workload_settings: ClassVar[dict[str, Any]] = {}
    # The node the fault hits, for the watchers (chaos.watch_workload.watcher_nodes: one
    # starts on it, so the fault makes it resume): "leader", "follower" (ctx.follower()),
    # "random" (ctx.any_node()), or None when there is no single victim.
    watch_target: ClassVar[str | None] = None

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
            from statekeeper.chaos.partition import available

            return available()
        if cls.topology == "lazyfs":
            from statekeeper.chaos.lazyfs import available

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


def snapshot_last_index(data_dir: Path) -> int | None:
    """Last raft index covered by the node's snapshot file on disk (None: no snapshot)."""
    from statekeeper.node import snapshot_file

    try:
        header, _ = snapshot_file.read_header(str(data_dir / "raft" / "snapshot.bin"))
        return int(header["last"][1])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def log_since(cluster: LocalCluster, node_id: str, offset: int) -> str:
    try:
        with open(cluster.log_file(node_id), "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def log_size(cluster: LocalCluster, node_id: str) -> int:
    try:
        return cluster.log_file(node_id).stat().st_size
    except OSError:
        return 0


RESTORED = re.compile(r"restoring state machine from snapshot at index (\d+)")
