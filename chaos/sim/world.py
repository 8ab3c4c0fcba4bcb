"""A simulated world: a cluster of real nodes, clients and faults on one loop, from a seed."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import random
from pathlib import Path

from statekeeper.chaos.sim.disk import SimDisks
from statekeeper.chaos.sim.loop import (
    Process,
    SimLoop,
    SimThread,
    VirtualClock,
    bury,
    close_buried,
)
from statekeeper.chaos.sim.network import SimNetwork, SimSocketModule
from statekeeper.chaos.sim.node import SimNode
from statekeeper.chaos.sim.patches import Seams
from statekeeper.chaos.sim.spin_watch import SpinWatch
from statekeeper.node.config import ClusterConfig, NodeConfig, RaftSettings
from statekeeper.node.raft.data_dir import EmptyStart, bootstrap_new_cluster

log = logging.getLogger("statekeeper.sim")


class World:
    def __init__(
        self,
        seed: int,
        root: Path,
        size: int = 3,
        raft: dict | None = None,
        disk_mode: str = "plain",
    ):
        # Every earlier world's objects are finalized before this one opens a descriptor:
        # one finalized later by the GC closed a number this world had reused (an
        # explorer's seed 1000008, after eight others, failed "pread ... .sst: Bad file
        # descriptor"; it passes alone, and the same sequence passes with this).
        gc.collect()
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = VirtualClock()
        self.trace: list[str] = []
        self.nodes: dict[str, SimNode] = {}
        self.graveyard: list[SimNode] = []  # dead incarnations, kept so nothing closes their fds
        self.dead: list[Process] = []  # dead incarnations' processes: their tasks (loop.bury)
        self.incarnations: dict[str, int] = {}
        self.loop = SimLoop(self.clock, lambda fd: self.net.socket_of(fd), self._crashed)
        self.net = SimNetwork(self.loop, random.Random(self.rng.random()), self._node_of)
        self.seams = Seams(self.clock, SimSocketModule(self.net), seed)
        settings = dict(snapshot_min_entries=200, snapshot_min_seconds=5)
        settings.update(raft or {})
        ids = [f"n{i}" for i in range(size)]
        self.disks = SimDisks(root, ids, disk_mode)
        self.disks.__enter__()  # mounted now: the data dirs' paths depend on the mode it resolved
        self.on_crash = lambda node_id: None  # the run restarts crashed nodes
        nodes = tuple(
            NodeConfig(
                id=node_id,
                host="127.0.0.1",
                raft_port=7100 + i,
                http_port=7200 + i,
                data_dir=str(self.disks.data_dir(node_id)),
            )
            for i, node_id in enumerate(ids)
        )
        self.cfg = ClusterConfig(
            nodes=nodes,
            data_dir=str(root),
            fsync="always",
            secret="sim-secret",
            raft=dataclasses.replace(RaftSettings(), **settings),
        )
        self.loop.set_exception_handler(self._loop_error)
        thread_rng = random.Random(self.rng.random())
        SimThread.delay = staticmethod(lambda: thread_rng.uniform(0.0, 0.05))

    def _loop_error(self, loop, context: dict) -> None:
        """An exception out of a callback: into the trace (a node's own logging has its
        own handlers; this is what nobody caught)."""
        exc = context.get("exception")
        what = f"{type(exc).__name__}: {exc}" if exc is not None else context.get("message", "")
        if "was destroyed but it is pending" in context.get("message", ""):
            return  # a dead process's task, collected
        self.note(f"uncaught {what[:300]}")

    def _node_of(self, process: Process | None) -> str:
        return process.node_id if process is not None else "client"

    def note(self, what: str) -> None:
        self.trace.append(f"{self.clock.elapsed():12.6f} {what}")

    # -- node lifecycle ---------------------------------------------------------------
    def start(self, node_id: str, empty_start: EmptyStart = EmptyStart.LOST_DISK) -> SimNode:
        n = self.incarnations.get(node_id, 0) + 1
        self.incarnations[node_id] = n
        process = Process(node_id, n)
        self.note(f"start {process.name}")
        try:
            node = SimNode(self.cfg, node_id, process, self.seams, self.loop, empty_start)
        except BaseException:
            bury(process)
            self.dead.append(process)
            self.net.process_died(process, power_off=False)
            raise
        self.nodes[node_id] = node
        return node

    def discard_failed_start(self, node_id: str) -> None:
        """Nothing to do: a SimNode that failed to start closed its files itself."""

    def kill(self, node_id: str, power_off: bool = False) -> None:
        node = self.nodes.pop(node_id)
        bury(node.process)
        self.dead.append(node.process)
        self.net.process_died(node.process, power_off)
        if power_off:  # the disk first, under the open files: RocksDB's close then saves nothing
            self.note(f"power cut {node_id}: {self.disks.power_cut(node_id, open_files=True)}")
        node.close_files()
        self.graveyard.append(node)
        self.note(f"{'power-off' if power_off else 'kill'} {node.process.name}")

    def _crashed(self, process: Process) -> None:
        node = self.nodes.get(process.node_id)
        self.note(f"crash {process.name} exit={process.exit_code}")
        if node is not None and node.process is process:
            self.kill(process.node_id)
            self.on_crash(process.node_id)

    # -- running ----------------------------------------------------------------------
    def run(self, main) -> object:
        """Run `main(world)` to its end; a callback that never returns (spin_watch.py)
        ends it with CallbackSpin. Descriptors the world's processes left open are closed
        at the end (_close_leftover_fds)."""
        before = _open_fds()
        try:
            return self._run(main)
        finally:
            # The dead incarnations' objects go now, closing their own descriptors (no
            # process of this world runs any more), before the rest is closed raw.
            self.graveyard.clear()
            self.dead.clear()
            _close_leftover_fds(before)

    def _run(self, main) -> object:
        watch = SpinWatch(
            lambda: self.loop.sim_selector.passes,
            self.clock.elapsed,
            self.loop.stop,
        )
        with contextlib.closing(self.disks), self.seams.installed(), watch:
            bootstrap_new_cluster(self.cfg)
            try:
                return self.loop.run_until_complete(main(self))
            except BaseException:
                if watch.spun is not None:
                    raise watch.spun from None
                raise
            finally:
                for node_id in list(self.nodes):
                    self.kill(node_id)
                for process in self.dead:
                    close_buried(process)
                self.loop.close()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def any_members(self) -> list:
        for node in self.nodes.values():
            return node.raft.members()
        return []

    async def change_member(self, kind: str, member) -> bool:
        """One membership change through the current leader; True once committed."""
        for _ in range(50):
            leader = next((n for n in self.nodes.values() if n.raft.is_leader()), None)
            if leader is None:
                await asyncio.sleep(0.2)
                continue
            fut = self.loop.create_future()

            def done(err, fut=fut):
                if not fut.done():
                    self.loop.call_soon(fut.set_result, err)

            leader.context.run(leader.raft.change_member, kind, member, done)
            try:
                err = await asyncio.wait_for(fut, 5.0)
            except TimeoutError:
                err = "timeout"
            self.note(f"member {kind} {member.id} via {leader.node_id}: {err or 'committed'}")
            if err is None:
                return True
            await asyncio.sleep(0.3)
            if self._member_change_done(kind, member):  # an attempt that timed out took effect
                self.note(f"member {kind} {member.id}: committed meanwhile")
                return True
        return False

    def _member_change_done(self, kind: str, member) -> bool:
        leader = next((n for n in self.nodes.values() if n.raft.is_leader()), None)
        if leader is None or leader.raft.member_change_pending():
            return False
        present = any(m.id == member.id for m in leader.raft.members())
        return present == (kind == "add")

    def leaders(self) -> list[str]:
        return [i for i, n in self.nodes.items() if n.raft.is_leader()]


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def _close_leftover_fds(before: set[int]) -> None:
    """A killed process's raw descriptors (the journal's os.open files, its loop driver's
    wake-up pipe) are never closed by it, as its kernel would: ~45 per world stayed open
    in an exploration's process (3,000 after 60 seeds; a limit of 1,024 is reached after
    ~22). Once the world is over and its objects are collected, nothing owns them: a file
    object still alive would close its own descriptor, so gc runs first."""
    gc.collect()
    for fd in sorted(_open_fds() - before):
        with contextlib.suppress(OSError):
            os.close(fd)
