"""Named failpoints: places where a node can be made to crash or stall on purpose.

The idea is etcd's gofail: production code marks a step with `failpoints.hit("name")`;
nothing happens unless the process was started with the environment variable

    STATEKEEPER_FAILPOINTS="name=action[;name=action ...]"

so a test or the chaos suite can kill a node at exactly one instruction (after a snapshot
rename, inside a journal prefix drop, ...) instead of at a random moment. When the variable
is absent or empty, `hit()` is one dict lookup on an empty dict.

Actions
    exit            os._exit(EXIT_CODE) on the first hit: a kill -9 at that instruction
                    (no atexit handlers, no buffered writes flushed by Python)
    N*exit          exit on the N-th hit (N >= 1), e.g. "3*exit"
    P%exit          exit with probability P percent on every hit, e.g. "25%exit"
                    (randomness from STATEKEEPER_FAILPOINTS_SEED, or the OS when unset)
    N*error         raise OSError(EIO) on the N-th hit and every later one (a disk that
                    starts failing), e.g. "31*error": the first 30 hits pass
    sleep(S)        sleep S seconds on every hit (a slow disk, a long snapshot)
    on              a switch, read with `active(name)` rather than hit
    off             nothing (lets a wrapper disable one name)

Before exiting, a line "failpoint NAME: exiting" goes to stderr (the node's log), so the
chaos report can tell a failpoint crash from a real one.

Names (each is documented where it is hit):
    snapshot-after-rename        node/raft/raft_node.py: the new snapshot file is renamed
                                 into place and its directory fsynced; pysyncobj has not
                                 yet dropped the journal prefix it covers
    journal-prefix-drop          node/raft/journal.py: the rewritten journal (entries after the
                                 snapshot) is written and fsynced, not yet renamed over the
                                 old one
    journal-prefix-dropped       node/raft/journal.py: the rename is done, the directory not yet
                                 fsynced
    snapshot-install             node/raft/syncobj.py: a snapshot received from the leader
                                 is on disk; the state machine is not yet restored from it
    snapshot-restore             node/raft/raft_node.py: the state machine is about to be
                                 restored from a snapshot (N*error: the restore fails; the
                                 node must stop, not go on with a state it cannot trust)
    follower-after-fsync         node/raft/syncobj.py: a follower has fsynced the entries
                                 of an AppendEntries and not yet answered the leader
    snapshot-pack                node/raft/raft_node.py: a snapshot is about to be packed
                                 (use sleep(S) to make snapshots slow)
    journal-fsync                node/raft/journal.py: every fsync of the raft journal's files
                                 (N*error: fsync fails from the N-th on; the node must
                                 stop and lose nothing it acknowledged)
    read-barrier-skip            node/reads.py, a switch (on): linearizable reads are
                                 served from local state without ReadIndex or barrier.
                                 For the chaos suite's mutation test only: it must then
                                 report stale reads. `node --unsafe-reads` turns it on.
    raft-tick                    node/raft/syncobj.py: the start of every raft loop tick
                                 (sleep(S): a raft thread stuck in one step; the node's
                                 /v1/health/live answers 503 not_live, node/api/liveness.py)
    shutdown-stall               node/shutdown.py, a switch (on): the graceful stop's
                                 finish_requests step never ends (as if a request never
                                 finished), so a test can send the second SIGTERM
    archive-segment-written      cluster/archive_cli.py (the archiver, not a node): the
                                 segment file is durable, its manifest not yet written
    archive-manifest-written     cluster/archive_cli.py: the manifest is durable, the
                                 archive_seal not yet proposed
    archive-sealed               cluster/archive_cli.py: the archive_seal was answered
"""

from __future__ import annotations

import errno
import logging
import os
import random
import re
import sys
import time
from dataclasses import dataclass

log = logging.getLogger("statekeeper.failpoints")

ENV = "STATEKEEPER_FAILPOINTS"
SEED_ENV = "STATEKEEPER_FAILPOINTS_SEED"
EXIT_CODE = 86  # distinct from a signal death or a fatal journal error (71)

NAMES = (
    "snapshot-after-rename",
    "journal-prefix-drop",
    "journal-prefix-dropped",
    "snapshot-install",
    "snapshot-restore",
    "follower-after-fsync",
    "snapshot-pack",
    "journal-fsync",
    "read-barrier-skip",
    "raft-tick",
    "shutdown-stall",
    "archive-segment-written",
    "archive-manifest-written",
    "archive-sealed",
)

_ACTION = re.compile(
    r"^(?:(?P<nth>\d+)\*exit|(?P<pct>\d+(?:\.\d+)?)%exit|(?P<exit>exit)|"
    r"(?P<err>\d+)\*error|sleep\((?P<sleep>\d+(?:\.\d+)?)\)|(?P<on>on)|(?P<off>off))$"
)


class FailpointError(ValueError):
    """STATEKEEPER_FAILPOINTS could not be parsed (the node refuses to start)."""


@dataclass
class _Point:
    kind: str  # "exit", "nth", "pct", "sleep"
    arg: float = 0.0
    hits: int = 0


def parse(spec: str) -> dict[str, _Point]:
    """Parse a STATEKEEPER_FAILPOINTS value; raises FailpointError naming what is wrong."""
    points: dict[str, _Point] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, sep, action = part.partition("=")
        name, action = name.strip(), action.strip()
        if not sep or name not in NAMES:
            raise FailpointError(
                f"{ENV}: {part!r} is not NAME=ACTION with NAME one of {', '.join(NAMES)}"
            )
        m = _ACTION.match(action)
        if m is None:
            raise FailpointError(
                f"{ENV}: action {action!r} of {name} is not exit, N*exit, P%exit, N*error, "
                "sleep(S), on or off"
            )
        if m["off"]:
            continue
        count = m["nth"] or m["err"]
        if count is not None and int(count) < 1:
            raise FailpointError(f"{ENV}: {name}: N in {action} must be >= 1")
        if m["nth"]:
            points[name] = _Point("nth", int(m["nth"]))
        elif m["err"]:
            points[name] = _Point("error", int(m["err"]))
        elif m["on"]:
            points[name] = _Point("on")
        elif m["pct"]:
            points[name] = _Point("pct", float(m["pct"]) / 100.0)
        elif m["sleep"]:
            points[name] = _Point("sleep", float(m["sleep"]))
        else:
            points[name] = _Point("exit")
    return points


_points: dict[str, _Point] = {}
_rng = random.Random()


def configure(spec: str | None = None, seed: str | None = None) -> None:
    """(Re)read the failpoints; by default from the environment. Called once at import."""
    global _points
    spec = os.environ.get(ENV, "") if spec is None else spec
    seed = os.environ.get(SEED_ENV) if seed is None else seed
    _points = parse(spec)
    _rng.seed(seed)
    if _points:
        log.warning("failpoints enabled: %s", spec)


def enable(name: str, action: str = "on") -> None:
    """Set one failpoint's action in this process, e.g. from a command-line flag; "off"
    removes whatever it had (it used to leave an earlier action in place: found by the
    simulator, tests/unit/test_failpoint_switch.py)."""
    _points.pop(name, None)
    _points.update(parse(f"{name}={action}"))
    log.warning("failpoint %s: %s", name, action)


def active(name: str) -> bool:
    """Whether a switch failpoint (action "on") is set."""
    p = _points.get(name)
    return p is not None and p.kind == "on"


def enabled() -> dict[str, str]:
    """name -> action kind of every enabled failpoint (for the node's start-up log)."""
    return {name: p.kind for name, p in _points.items()}


def hit(name: str) -> None:
    """Mark that this step was reached; acts only if the failpoint is enabled."""
    p = _points.get(name)
    if p is None:
        return
    p.hits += 1
    if p.kind == "sleep":
        time.sleep(p.arg)
        return
    if p.kind == "error":
        if p.hits >= p.arg:
            raise OSError(errno.EIO, f"injected by failpoint {name} (hit {p.hits})")
        return
    if p.kind == "exit" or (p.kind == "nth" and p.hits == p.arg) or (
        p.kind == "pct" and _rng.random() < p.arg
    ):
        sys.stderr.write(f"failpoint {name}: exiting (hit {p.hits})\n")
        sys.stderr.flush()
        os._exit(EXIT_CODE)


configure()
