"""`statekeeper cluster supervise` and the --supervise flag of `cluster up`: the command
line of cluster/supervise.py (the loop) and cluster/watchdog.py (the decisions)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statekeeper.cluster.supervise import LOG_FILE, Supervisor, run_until_signalled
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.cluster.watchdog import Policy
from statekeeper.node import config as node_config

HELP = "keep the local nodes running: restart dead or stuck ones, with backoff"

HOW_IT_WORKS = f"""\
Runs in the foreground until Ctrl-C (or SIGTERM); the nodes keep running after it
stops ('statekeeper cluster down' stops them). Every second it checks each node:
is its process there, does GET /v1/health/live answer 200 (503 not_live: the raft
loop is stuck). A node whose process is gone is restarted at once; one that is
running but not live for --failures checks in a row is killed and restarted.
Restarts in a row back off: at once, then 1, 2, 4, ... up to --backoff-max
seconds; a node live for --stable seconds starts afresh. Each decision and its
reason go to stdout and to <cluster data dir>/{LOG_FILE}. Only one supervisor
runs per cluster (a second one exits with an error).

A restarted node heals its own disk: a corrupt RocksDB is moved aside
(db.corrupt-<time>) and rebuilt from raft; a missing data dir starts empty and
catches up from the leader's snapshot (see the node's node.log)."""

_D = Policy()


def _opt(flag: str, kind: type, default: float, help: str) -> tuple[tuple[str, ...], dict]:
    metavar = "N" if kind is int else "SECONDS"
    return (
        (flag,),
        dict(type=kind, default=default, metavar=metavar, help=f"{help} (default: {default:g})"),
    )


# Plain (flags, kwargs) pairs, what cluster/cli.py's arg() builds, so `cluster up` can
# take them too without this module importing cli.py.
POLICY_ARGS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    _opt("--poll-interval", float, 1.0, "seconds between checks"),
    _opt(
        "--failures",
        int,
        _D.failures,
        "failed live checks in a row before a running node is restarted",
    ),
    _opt("--start-grace", float, _D.start_grace, "how long a restarted node may take to be live"),
    _opt("--backoff-max", float, _D.backoff_max, "longest wait between restarts in a row"),
    _opt(
        "--stable",
        float,
        _D.stable_seconds,
        "a node live this long after a restart ends its streak",
    ),
    _opt("--max-restarts", int, 0, "give up on a node after N restarts in a row (0: never)"),
]


def policy_from(args: argparse.Namespace) -> Policy:
    try:
        return Policy(
            failures=args.failures,
            start_grace=args.start_grace,
            backoff_max=max(args.backoff_max, _D.backoff_initial),
            stable_seconds=args.stable,
            max_restarts=args.max_restarts,
        )
    except ValueError as e:
        raise node_config.ConfigError(f"supervise: {e}") from None


def supervise(lc: LocalCluster, args: argparse.Namespace) -> int:
    """Run the supervisor over `lc` in the foreground until Ctrl-C / SIGTERM."""
    if args.poll_interval <= 0:
        raise node_config.ConfigError("supervise: --poll-interval must be > 0")
    run_until_signalled(Supervisor(lc, policy_from(args), poll=args.poll_interval))
    return 0


def cmd_supervise(args: argparse.Namespace) -> int:
    cfg = node_config.load(args.config)
    return supervise(LocalCluster(cfg, Path(args.config)), args)


def register(command: Callable[..., Any], config_arg: tuple) -> None:
    """Add `cluster supervise` to cluster/cli.py's registry."""
    cmd_supervise.__doc__ = (
        "Keep the nodes of a local cluster running (nodes not running when it starts are\n"
        "started; stop the supervisor before 'cluster down', or it starts them again).\n\n"
        + HOW_IT_WORKS
    )
    command(
        "cluster",
        "supervise",
        help=HELP,
        epilog="  statekeeper cluster supervise\n"
        "  statekeeper cluster up --supervise          # start, then supervise\n"
        "  statekeeper cluster supervise --failures 5 --backoff-max 30\n"
        "  nohup statekeeper cluster supervise >/dev/null 2>&1 &   # in the background\n"
        "  tail -f data/supervise.log                  # what it did and why",
        args=[config_arg, *POLICY_ARGS],
    )(cmd_supervise)
