"""Helpers shared by the node/store tests (the `node` fixture is in conftest.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgpack

from statekeeper.node.config import Retention
from statekeeper.node.store import StateMachine, keys


def entry(*ops, t=1_000):
    return msgpack.packb({"t": t, "ops": list(ops)}, use_bin_type=True)


class Node:
    """A state machine plus the next raft index, for terse tests."""

    def __init__(self, path, **kw):
        self.sm = StateMachine(path, **kw)
        self.index = 0

    def apply(self, *ops, t=1_000):
        self.index += 1
        return self.sm.apply(self.index, entry(*ops, t=t))

    def one(self, op, t=1_000):
        (result,) = self.apply(op, t=t)
        return result

    def put(self, key, value, **kw):
        return self.one({"op": "put", "key": key, "value": value, **kw})

    def delete(self, key, **kw):
        return self.one({"op": "delete", "key": key, **kw})

    def value(self, key, ns="default", revision=None):
        kv = self.sm.get(ns, key, revision)["kv"]
        return None if kv is None else kv["value"]


def put(key, value, **kw):
    return {"op": "put", "key": key, "value": value, **kw}


def raw_items(sm: StateMachine) -> list[tuple[bytes, bytes]]:
    """Every RocksDB key/value, in order, through the read view reads use."""
    with sm.read_view() as view:
        return list(view.scan(keys.FIRST_KEY, keys.PAST_LAST_KEY))


def history_records(sm):
    return [k for k, _ in raw_items(sm) if k.startswith(keys.HIST)]


def write_snapshot(sm: StateMachine, path: Path) -> None:
    """What raft does to snapshot (node/raft/raft_node.py): checkpoint(), then write_checkpoint()."""
    work = sm.checkpoint()
    try:
        assert work.parent == sm.path.parent and (work / "db").is_dir()
        with open(path, "wb") as f:
            sm.write_checkpoint(work, f)
    finally:
        shutil.rmtree(work)


def populated(path, n=50):
    node = Node(path, retention=Retention(history_revisions=20))
    for i in range(n):
        node.apply(put(f"k{i % 10}", b"v%d" % i, idempotency_key=f"id{i}"), t=1000 + i)
    node.delete("k3")
    return node
