"""Raft nodes in this process, on loopback, each with its own RocksDB state machine:
for tests of node/raft/ that must reach into one node (inject a message on its raft
thread, read its match index) while the others stay real peers. No HTTP."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from statekeeper.cluster.ports import free_ports
from statekeeper.node import entry
from statekeeper.node.config import ClusterConfig, NodeConfig, RaftSettings
from statekeeper.node.raft import RaftNode, SubmitError
from statekeeper.node.raft.data_dir import EmptyStart, bootstrap_new_cluster
from statekeeper.node.store import StateMachine


def config(base: Path, size: int, fsync: str = "always", **raft) -> ClusterConfig:
    """A new cluster of `size` nodes under `base`: their raft dirs are created, as
    `statekeeper cluster up` does (node/raft/data_dir.py), so each votes from its first start."""
    ports = free_ports(2 * size)
    nodes = tuple(
        NodeConfig(id=f"n{i}", host="127.0.0.1", raft_port=ports[2 * i], http_port=ports[2 * i + 1])
        for i in range(size)
    )
    cfg = ClusterConfig(
        nodes=nodes, data_dir=str(base), fsync=fsync, secret="test-secret",
        raft=dataclasses.replace(RaftSettings(), **raft),
    )
    bootstrap_new_cluster(cfg)
    return cfg


class Member:
    def __init__(
        self, cfg: ClusterConfig, node_id: str, empty_start: EmptyStart = EmptyStart.LOST_DISK
    ):
        self.node_id = node_id
        self.sm = StateMachine(cfg.node_data_dir(node_id) / "db")
        self.raft = RaftNode(cfg, node_id, self.sm.apply, self.sm, empty_start=empty_start)

    @property
    def obj(self):
        return self.raft._obj

    def submit(self, payload: bytes, timeout: float = 10.0) -> tuple[object, SubmitError | None]:
        done = threading.Event()
        out: list = []

        def cb(result, err):
            out.append((result, err))
            done.set()

        self.raft.submit(payload, cb)
        if not done.wait(timeout):
            raise TimeoutError(f"{self.node_id}: no callback within {timeout} s")
        return out[0]

    def put(self, key: str, value: bytes = b"v", ns: str = "a", **extra) -> dict:
        op = {"op": "put", "ns": ns, "key": key, "value": value, **extra}
        result, err = self.submit(entry.encode(int(time.time() * 1000), [op]))
        assert err is None, err
        return result[0]

    def on_raft_thread(self, fn: Callable[[], None], timeout: float = 5.0) -> None:
        """Run fn once on this node's raft thread (between two ticks) and wait for it."""
        done = threading.Event()

        def once():
            if not done.is_set():
                try:
                    fn()
                finally:
                    done.set()

        self.obj.addOnTickCallback(once)
        try:
            assert done.wait(timeout), "the raft thread did not tick"
        finally:
            self.obj.removeOnTickCallback(once)

    def close(self) -> None:
        self.raft.destroy()
        self.sm.close()


def wait_for(pred: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def leader_of(members: list[Member], timeout: float = 10.0) -> Member:
    return wait_for(
        lambda: next((m for m in members if m.raft.is_leader()), None), timeout, "a leader"
    )


class Exploit:
    """Unpickling this runs a shell command: proof of code execution if it ever happens."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def write_journal(raft_dir: Path, commands: list[tuple[bytes, int, int]], term: int, commit: int) -> None:
    """A raft journal of (command, index, term) entries, as a node left it (fsynced)."""
    from statekeeper.node.raft.log import RaftLog

    raft_dir.mkdir(parents=True, exist_ok=True)
    j = RaftLog(str(raft_dir / "journal.log"))
    for command, idx, t in commands:
        j.add(command, idx, t)
    j.sync()
    j.setCurrentTerm(term, None)
    j.setRaftCommitIndex(commit)
    j.close()


def raft_frame(payload: bytes) -> bytes:
    return struct.pack("i", len(payload)) + payload  # pysyncobj's framing


@pytest.fixture(name="nodes")
def member_set() -> Iterator[dict[str, Member]]:
    """In-process members by name, for a test to start, stop and restart; whatever is left
    is closed at teardown (tests/conftest.py registers it)."""
    made: dict[str, Member] = {}
    yield made
    for m in made.values():
        with contextlib.suppress(Exception):
            m.close()
