"""`python -m statekeeper.node --config cluster.toml --id node-0`: one statekeeper node process.

The same as `statekeeper node`, without the cluster tooling: a node needs only node/ and
the server dependencies (`pip install 'statekeeper[server]'`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from statekeeper.node.raft.data_dir import JOIN_HELP, NEW_CLUSTER_HELP, EmptyStart


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.node",
        description="Run one statekeeper node until SIGTERM or SIGINT. The node reads its "
        "ports, data directory and peers from the cluster config.",
    )
    p.add_argument("--config", required=True, metavar="PATH", help="the cluster's TOML config")
    p.add_argument("--id", required=True, dest="node_id", metavar="NODE_ID", help="this node's id")
    p.add_argument(
        "--unsafe-reads",
        action="store_true",
        help="DEBUG ONLY (chaos mutation test): serve linearizable reads from local state "
        "without ReadIndex or a barrier, i.e. break linearizability on purpose",
    )
    start = p.add_mutually_exclusive_group()
    start.add_argument("--new-cluster", action="store_true", help=NEW_CLUSTER_HELP)
    start.add_argument("--join", action="store_true", help=JOIN_HELP)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from statekeeper.node.config import secret_flag_error

    if err := secret_flag_error(argv):
        print(f"python -m statekeeper.node: error: {err}", file=sys.stderr)
        return 2
    args = parser().parse_args(argv)
    from statekeeper.node.main import run_node

    return run_node(
        args.config,
        args.node_id,
        unsafe_reads=args.unsafe_reads,
        empty_start=EmptyStart.from_flags(args.new_cluster, args.join),
    )


if __name__ == "__main__":
    sys.exit(main())
