"""A simulated world: a cluster of real nodes, clients and faults on one loop, from a seed."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from pathlib import Path

from statekeeper.chaos.sim.loop import Process, SimLoop, SimThread, VirtualClock
from statekeeper.chaos.sim.network import SimNetwork, SimSocketModule
from statekeeper.chaos.sim.node import SimNode
from statekeeper.chaos.sim.patches import Seams
from statekeeper.node.config import ClusterConfig, NodeConfig, RaftSettings
from statekeeper.node.raft.data_dir import bootstrap_new_cluster

log = logging.getLogger("statekeeper.sim")


class World:
    def __init__(self, seed: int, root: Path, size: int = 3, raft: dict | None = None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = VirtualClock()
        self.trace: list[str] = []
        self.nodes: dict[str, SimNode] = {}
        self.graveyard: list[SimNode] = []  # dead incarnations, kept so nothing closes their fds
        self.incarnations: dict[str, int] = {}
        self.loop = SimLoop(self.clock, lambda fd: self.net.socket_of(fd), self._crashed)
        self.net = SimNetwork(self.loop, random.Random(self.rng.random()), self._node_of)
        self.seams = Seams(self.clock, SimSocketModule(self.net), seed)
        settings = dict(snapshot_min_entries=200, snapshot_min_seconds=5)
        settings.update(raft or {})
        nodes = tuple(
            NodeConfig(id=f"n{i}", host="127.0.0.1", raft_port=7100 + i, http_port=7200 + i)
            for i in range(size)
        )
        self.cfg = ClusterConfig(
            nodes=nodes,
            data_dir=str(root),
            fsync="always",
            secret="sim-secret",
            raft=dataclasses.replace(RaftSettings(), **settings),
        )
        thread_rng = random.Random(self.rng.random())
        SimThread.delay = staticmethod(lambda: thread_rng.uniform(0.0, 0.05))

    def _node_of(self, process: Process | None) -> str:
        return process.node_id if process is not None else "client"

    def note(self, what: str) -> None:
        self.trace.append(f"{self.clock.now - 1_000_000.0:12.6f} {what}")

    # -- node lifecycle ---------------------------------------------------------------
    def start(self, node_id: str, new_cluster: bool = False) -> SimNode:
        n = self.incarnations.get(node_id, 0) + 1
        self.incarnations[node_id] = n
        process = Process(node_id, n)
        node = SimNode(self.cfg, node_id, process, self.seams, self.loop, new_cluster)
        self.nodes[node_id] = node
        self.note(f"start {process.name}")
        return node

    def kill(self, node_id: str, power_off: bool = False) -> None:
        node = self.nodes.pop(node_id)
        node.process.alive = False
        self.net.process_died(node.process, power_off)
        node.close_files()
        self.graveyard.append(node)
        self.note(f"{'power-off' if power_off else 'kill'} {node.process.name}")

    def _crashed(self, process: Process) -> None:
        node = self.nodes.get(process.node_id)
        self.note(f"crash {process.name} exit={process.exit_code}")
        if node is not None and node.process is process:
            self.kill(process.node_id)

    # -- running ----------------------------------------------------------------------
    def run(self, main) -> object:
        with self.seams.installed():
            bootstrap_new_cluster(self.cfg)
            try:
                return self.loop.run_until_complete(main(self))
            finally:
                for node_id in list(self.nodes):
                    self.kill(node_id)
                self.loop.close()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def leaders(self) -> list[str]:
        return [i for i, n in self.nodes.items() if n.raft.is_leader()]
