"""Whether a node's data dir holds raft state, and the two ways a raft dir is created:
for a member of a cluster being created (it votes at once), or at a start that found
none (a lost disk, a member added online: it votes once caught up). Why the difference
and what "caught up" means: node/raft/catchup.py. No pysyncobj here: the cluster tooling
(cluster/supervisor.py) creates a new cluster's raft dirs too."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from statekeeper.node.config import ClusterConfig
from statekeeper.node.snapshot_file import fsync_dir

log = logging.getLogger("statekeeper.raft")

RAFT_DIR = "raft"  # in a node's data dir: journal, term and vote, snapshot.bin
CATCHING_UP_FILE = "catching-up"  # in the raft dir: not a voter until caught up
_STAGING_SUFFIX = ".new"  # a raft dir being created, with CATCHING_UP_FILE in it

# `--new-cluster` of `statekeeper node` and `python -m statekeeper.node`.
NEW_CLUSTER_HELP = (
    "this node is a member of a cluster being created now: with no raft state it votes "
    "from its first start. Without it, a node with no raft state (a lost disk, a member "
    "added online) follows the leader but votes only once it has caught up. Ignored once "
    "the node has raft state. `statekeeper cluster up` needs no flag: it creates a new "
    "cluster's raft dirs (docs/protocol.md, 'A lost disk')"
)


def has_raft_state(data_dir: Path) -> bool:
    return (data_dir / RAFT_DIR).is_dir()


def prepare_raft_dir(raft_dir: str, new_cluster: bool) -> bool:
    """Make sure `raft_dir` exists; True if this node must catch up before it votes.

    An existing raft dir is raft state (CATCHING_UP_FILE in it says it has not caught up
    yet). A missing one is created plain with `new_cluster`, else with CATCHING_UP_FILE,
    fsynced, in a staging dir renamed into place: no crash leaves a raft dir without it."""
    if os.path.isdir(raft_dir):
        return os.path.exists(os.path.join(raft_dir, CATCHING_UP_FILE))
    parent = os.path.dirname(raft_dir) or "."
    os.makedirs(parent, exist_ok=True)
    if new_cluster:
        _make_dirs([raft_dir])
        return False
    staging = raft_dir + _STAGING_SUFFIX
    shutil.rmtree(staging, ignore_errors=True)  # a start that crashed half-way
    os.makedirs(staging)
    fd = os.open(os.path.join(staging, CATCHING_UP_FILE), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(
            fd, b"no raft state at start: not a voter until caught up (node/raft/catchup.py)\n"
        )
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(staging)
    os.rename(staging, raft_dir)
    fsync_dir(parent)
    log.warning(
        "no raft state in %s: this node lost its disk or is a new member; it follows the "
        "leader but does not vote or stand for election until it has caught up",
        raft_dir,
    )
    return True


def bootstrap_new_cluster(cluster: ClusterConfig) -> list[str]:
    """If no node of `cluster` has raft state, this is a cluster being created: give every
    node an empty raft dir (each then votes from its first start); returns their ids. If
    any node has raft state, nothing is created: a node without any is a lost disk or a
    new member and must catch up first."""
    data_dirs = {n.id: cluster.node_data_dir(n.id) for n in cluster.nodes}
    if any(has_raft_state(d) for d in data_dirs.values()):
        return []
    _make_dirs(str(d / RAFT_DIR) for d in data_dirs.values())
    return list(data_dirs)


def _make_dirs(paths: Iterable[str]) -> None:
    """mkdir -p each (every directory created 0700: the supervisor that calls this has no
    private umask), then fsync every directory an entry was created in."""
    for path in paths:
        missing, p = [], Path(path)
        while not p.exists():
            missing.append(p)
            p = p.parent
        for created in reversed(missing):  # each 0700, parents first (node/file_modes.py)
            created.mkdir(mode=0o700, exist_ok=True)
        for created in missing:
            fsync_dir(str(created.parent))
