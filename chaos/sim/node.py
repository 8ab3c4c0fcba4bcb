"""One simulated node: the real parts of a node process, without HTTP.

What runs is the node's own code, built as node/main.py builds it: the store
(node/store/, a real RocksDB in the node's data dir), RaftNode (node/raft/, pysyncobj on
the world's loop through loop_driver.py), the Proposer (group commit) and the ReadPolicy
(ReadIndex, barriers). Requests enter where node/api/routes.py hands them on: validate_op,
then proposer.write_many for a write, ReadPolicy.wait then store.read for a read. Left out:
HTTP, auth, the quota gate, the leader's lease-expiry and retention tasks.

A node runs as one loop.Process; a restart is a new Process over the same data dir.
Killing it drops its handles (loop.py), closes its sockets (network.py), closes RocksDB
(which must be closed to be opened again in this process) and points every other file
descriptor it had under its data dir at /dev/null: its kernel would have closed them,
and the numbers stay taken, so a dead object's file cannot close someone else's later.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from statekeeper.chaos.sim.loop import Process, context_of
from statekeeper.node import entry
from statekeeper.node.config import ClusterConfig
from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import is_write, validate_op
from statekeeper.node.proposer import Proposer
from statekeeper.node.raft import RaftNode
from statekeeper.node.raft.cluster_clock import ClusterClock
from statekeeper.node.raft.data_dir import EmptyStart
from statekeeper.node.reads import ReadPolicy
from statekeeper.node.store import StateMachine


class SimNode:
    def __init__(
        self,
        cfg: ClusterConfig,
        node_id: str,
        process: Process,
        seams,
        loop,
        empty_start: EmptyStart,
    ):
        self.node_id = node_id
        self.process = process
        self.context = context_of(process)
        self.cfg = cfg
        self.data_dir = Path(cfg.node_data_dir(node_id))
        self._seams = seams
        self._loop = loop
        self.applied_log: list[tuple[int, bytes]] = []  # (index, entry) in apply order
        try:
            self.context.run(self._build, empty_start)
        except BaseException:
            process.alive = False  # a start that failed is a process that died starting
            self.close_files()
            raise

    def _build(self, empty_start: EmptyStart) -> None:
        cfg, node_id = self.cfg, self.node_id
        self.sm = sm = StateMachine(
            self.data_dir / "db", limits=cfg.limits, retention=cfg.retention
        )
        self.clock = ClusterClock(
            lambda: sm.clock_ms, wall=self._seams.wall, monotonic=self._seams.monotonic
        )
        self.raft = RaftNode(
            cfg,
            node_id,
            self._apply,
            sm,
            clock=self.clock,
            loop=self._loop,
            empty_start=empty_start,
        )
        self.proposer = Proposer(
            self.raft.submit,
            max_entry_bytes=cfg.raft.max_entry_bytes,
            max_inflight=cfg.raft.max_inflight_entries,
            inflight_timeout=cfg.raft.request_timeout,
            clock=self._seams.wall,
        )
        self.raft.on_leadership_lost(self.proposer.leadership_lost)
        self.reads = ReadPolicy(
            self.raft,
            self.proposer,
            lambda: sm.revision,
            self._check_serving,
            cfg.raft.request_timeout,
        )

    def _apply(self, index: int, payload: bytes):
        result = self.sm.apply(index, payload)
        if result is not None:
            self.applied_log.append((index, payload))
        self.reads.revisions.applied()
        return result

    def _check_serving(self) -> None:
        if not self.raft.leader_known():
            raise OpError("unavailable", f"{self.node_id} knows no raft leader; retry")

    # -- requests, as node/api/routes.py hands them on ----------------------------------
    async def handle(self, body: dict, consistency: str = "linearizable") -> dict:
        if is_write(body):
            op = validate_op(dict(body), self.cfg.limits)
            self._check_serving()
            fut = self.proposer.write_many([entry.mark_validated(op)])[0]
            return await fut
        op = validate_op(dict(body), self.cfg.limits)
        await self.reads.wait(consistency, None)
        return self.sm.read(op)

    def start_request(self, body: dict, consistency: str = "linearizable") -> asyncio.Task:
        """The request as a task of this node's process (dropped if the node dies)."""
        return self._loop.create_task(self.handle(body, consistency), context=self.context)

    # -- death ------------------------------------------------------------------------
    def close_files(self) -> None:
        """After the process is marked dead: RocksDB closed, other files of the data dir
        pointed at /dev/null (the module docstring says why)."""
        with contextlib.suppress(Exception):
            if hasattr(self, "sm"):
                self.sm.close()
        root = str(self.data_dir.resolve())
        null = os.open(os.devnull, os.O_RDWR)
        try:
            for name in os.listdir("/proc/self/fd"):
                fd = int(name)
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/self/fd/{fd}")
                    if target.startswith(root + "/") and fd != null:
                        os.dup2(null, fd)
        finally:
            os.close(null)
