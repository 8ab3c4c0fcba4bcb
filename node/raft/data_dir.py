"""Whether a node's data dir holds raft state, and the three ways a raft dir is created
at a start that finds none (EmptyStart): a member of a cluster being created (votes and
stands for election at once), a new member joining online (votes at once, stands once
caught up) and a lost disk (neither until caught up). Why the difference and what
"caught up" means: node/raft/catchup.py. No pysyncobj here: the cluster tooling
(cluster/supervisor.py) creates a new cluster's raft dirs too."""

from __future__ import annotations

import enum
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from statekeeper.node.config import ClusterConfig
from statekeeper.node.snapshot_file import fsync_dir

log = logging.getLogger("statekeeper.raft")

RAFT_DIR = "raft"  # in a node's data dir: journal, term and vote, snapshot.bin
CATCHING_UP_FILE = "catching-up"  # in the raft dir: no vote, no election until caught up
JOINING_FILE = "joining"  # in the raft dir: votes, stands for no election until caught up
_STAGING_SUFFIX = ".new"  # a raft dir being created, with its marker file in it

# `--new-cluster` and `--join` of `statekeeper node` and `python -m statekeeper.node`.
NEW_CLUSTER_HELP = (
    "this node is a member of a cluster being created now: with no raft state it votes "
    "from its first start. Without it (or --join), a node with no raft state (a lost "
    "disk) follows the leader but votes only once it has caught up. Ignored once the node "
    "has raft state. `statekeeper cluster up` needs no flag: it creates a new cluster's "
    "raft dirs (docs/protocol.md, 'A lost disk')"
)
JOIN_HELP = (
    "this node is new to a running cluster (never a member, or removed and its data "
    "deleted) and is about to be added online: with no raft state it votes from its first "
    "start, as Raft's new servers do, and stands for election once caught up. `statekeeper "
    "cluster add-node` passes it. Never give it to a member that lost its disk: that one "
    "must catch up before it votes (docs/protocol.md, 'A lost disk'). Ignored once the "
    "node has raft state"
)


class EmptyStart(enum.Enum):
    """What a start that finds no raft dir is (node/raft/catchup.py)."""

    LOST_DISK = "lost-disk"  # raft/catching-up: no vote and no election until caught up
    NEW_CLUSTER = "new-cluster"  # --new-cluster, `cluster up`: votes and stands at once
    JOIN = "join"  # --join, `cluster add-node`: raft/joining: votes; stands once caught up

    @classmethod
    def from_flags(cls, new_cluster: bool, join: bool) -> EmptyStart:
        if new_cluster and join:
            raise ValueError("--new-cluster and --join exclude each other")
        return cls.NEW_CLUSTER if new_cluster else cls.JOIN if join else cls.LOST_DISK


_MARKERS = {EmptyStart.LOST_DISK: CATCHING_UP_FILE, EmptyStart.JOIN: JOINING_FILE}


def has_raft_state(data_dir: Path) -> bool:
    return (data_dir / RAFT_DIR).is_dir()


def prepare_raft_dir(raft_dir: str, empty_start: EmptyStart) -> str | None:
    """Make sure `raft_dir` exists; the marker file in it (CATCHING_UP_FILE or
    JOINING_FILE: it has not caught up yet), or None.

    An existing raft dir is raft state, its marker what it was created with. A missing
    one is created plain for a NEW_CLUSTER start, else with the start's marker, fsynced,
    in a staging dir renamed into place: no crash leaves a raft dir without it."""
    if os.path.isdir(raft_dir):
        for marker in (CATCHING_UP_FILE, JOINING_FILE):
            if os.path.exists(os.path.join(raft_dir, marker)):
                return marker
        return None
    parent = os.path.dirname(raft_dir) or "."
    os.makedirs(parent, exist_ok=True)
    if empty_start is EmptyStart.NEW_CLUSTER:
        _make_dirs([raft_dir])
        return None
    marker = _MARKERS[empty_start]
    staging = raft_dir + _STAGING_SUFFIX
    shutil.rmtree(staging, ignore_errors=True)  # a start that crashed half-way
    os.makedirs(staging)
    fd = os.open(os.path.join(staging, marker), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(
            fd, f"no raft state at start ({empty_start.value}): node/raft/catchup.py\n".encode()
        )
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(staging)
    os.rename(staging, raft_dir)
    fsync_dir(parent)
    if empty_start is EmptyStart.LOST_DISK:
        log.warning(
            "no raft state in %s: this node lost its disk (or was started without --join); "
            "it follows the leader but does not vote or stand for election until it has "
            "caught up",
            raft_dir,
        )
    else:
        log.info(
            "no raft state in %s: a new member joining (--join); it votes, and stands for "
            "election once it has caught up",
            raft_dir,
        )
    return marker


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
