"""The raft snapshot a node of a restored cluster starts from (node/backup/seed.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from statekeeper.node import snapshot_file
from statekeeper.node.config import ClusterConfig
from statekeeper.node.raft.syncobj import NO_OP_COMMAND, SNAPSHOT_FILE


def write_seed_snapshot(
    cluster: ClusterConfig, node_id: str, index: int, write_body: Callable[[BinaryIO], None]
) -> Path:
    """Write `raft/snapshot.bin` of `node_id`: `write_body(f)` writes the store snapshot
    (node/store/snapshot.py), whose applied_index must be `index`.

    It covers entries up to `index` as two no-ops of term 0 (index - 1, index), as if this
    new cluster had applied `index` entries; its members are the config's nodes. At start
    pysyncobj loads it (the log continues at index + 1) and RaftNode keeps RocksDB as it is
    (not ahead of it, raft_node._deserialize); a node that later loses its DB restores
    from it, and one that loses its data dir gets it from the leader (whose log starts at
    index - 1) until the leader takes a snapshot of its own."""
    raft_dir = cluster.node_data_dir(node_id) / "raft"
    raft_dir.mkdir(parents=True, exist_ok=True)
    header = {
        "last": [NO_OP_COMMAND, index, 0],
        "prev": [NO_OP_COMMAND, index - 1, 0],
        "cluster": sorted(n.raft_address for n in cluster.nodes),
    }
    path = raft_dir / SNAPSHOT_FILE
    tmp = path.with_name(SNAPSHOT_FILE + ".seeding")
    snapshot_file.write(str(tmp), header, write_body, durable=True)
    os.replace(tmp, path)
    snapshot_file.fsync_dir(str(raft_dir))
    return path
