"""`statekeeper cluster add-node` and `statekeeper cluster remove-node`: change the member
set while the cluster serves (cluster/members.py does the work, node/raft/members.py has
the rules). cluster/cli.py calls :func:`register`.

Exit codes: 0 done; 1 the cluster refused or did not finish (the message says why and
what state it is in); 2 bad arguments or config.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2

ADD_EPILOG = """\
  statekeeper cluster add-node                       # next free node-N, free ports
  statekeeper cluster add-node --id node-3 --http-port 7003 --raft-port 7103
  statekeeper cluster add-node --id node-5 -c /etc/statekeeper/cluster.toml

It writes the node to cluster.toml, starts it (its partners: the current members), asks
the leader to add it (one raft entry), then waits until it has caught up. With TLS on, a
certificate for it is issued by the cluster CA when ca-key.pem is next to ca.pem."""

REMOVE_EPILOG = """\
  statekeeper cluster remove-node node-4
  statekeeper cluster remove-node node-0 --timeout 120   # the leader: leadership moves first

It asks the leader to remove the node (one raft entry), waits until that is committed,
stops the node and deletes it from cluster.toml. Its data directory is left in place."""


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add `cluster add-node` and `cluster remove-node` to cluster/cli.py's registry."""
    config = arg(
        "--config",
        "-c",
        default="cluster.toml",
        metavar="PATH",
        help="cluster config file (default: cluster.toml)",
    )
    timeout = arg(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the change and the catch-up (default: 60)",
    )
    command(
        "cluster",
        "add-node",
        help="add a member while the cluster serves (start it, add it, wait until caught up)",
        epilog=ADD_EPILOG,
        args=[
            config,
            arg("--id", dest="node_id", metavar="ID", help="its node id (default: next node-N)"),
            arg("--host", default="127.0.0.1", help="its host (default: 127.0.0.1)"),
            arg("--http-port", type=int, metavar="PORT", help="client port (default: a free one)"),
            arg("--raft-port", type=int, metavar="PORT", help="raft port (default: a free one)"),
            timeout,
        ],
    )(cmd_add_node)
    command(
        "cluster",
        "remove-node",
        help="remove a member while the cluster serves (then stop it)",
        epilog=REMOVE_EPILOG,
        args=[config, arg("node_id", metavar="NODE_ID", help="the member to remove"), timeout],
    )(cmd_remove_node)


def _say(msg: str) -> None:
    print(msg, flush=True)


def _membership(args: argparse.Namespace):
    from statekeeper.cluster.members import Membership

    return Membership(args.config, say=_say, timeout=args.timeout)


def cmd_add_node(args: argparse.Namespace) -> int:
    """Add a node to the running cluster: written to cluster.toml, started with the current
    members as its partners, added by the leader through the raft log (one change at a
    time), and waited for until it has applied up to the leader's commit index.

    The new member counts towards the quorum from the moment its entry is appended
    (pysyncobj has no non-voting stage): it is started first so it catches up at once."""
    from statekeeper.cluster.members import MemberChangeError

    m = _membership(args)
    try:
        node = m.new_node(args.node_id, args.host, args.http_port, args.raft_port)
        doc = m.add_node(node)
    except MemberChangeError as e:
        print(f"statekeeper: add-node failed: {e}", file=sys.stderr)
        return EXIT_FAILURE
    _say("members: " + ", ".join(x["id"] for x in doc.get("members", ())))
    return EXIT_OK


def cmd_remove_node(args: argparse.Namespace) -> int:
    """Remove a member from the running cluster through the raft log, then stop its
    process and delete it from cluster.toml. Removing the leader: it hands leadership to
    the most caught-up follower first, and the removal is sent to the new leader."""
    from statekeeper.cluster.members import MemberChangeError

    m = _membership(args)
    try:
        m.remove_node(args.node_id)
    except MemberChangeError as e:
        print(f"statekeeper: remove-node failed: {e}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK
