"""`statekeeper lock list`: locks for people (who holds what, who waits).

Like cluster/lease_cli.py: cluster/cli.py calls :func:`register`, the client is imported
only when a command runs, and the endpoints come from --endpoints, $STATEKEEPER_ENDPOINTS,
else the --config file's nodes (no default: cluster/client_cli.py). Locks live in a
namespace (--ns); --json prints every lock with its queue (docs/protocol.md, "Locks and
fencing")."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from statekeeper.cluster.client_cli import EXIT_OK, client_args, dump, guarded, open_client, table

GROUP_HELP = (
    "list locks: holder, fence and waiters",
    "Locks: fair queues of waiter keys on leases; the first waiter holds the lock and its\n"
    'fence guards fenced writes (docs/protocol.md, "Locks and fencing"). Clients take and\n'
    "release them; this is for looking.",
)


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add the `lock` commands to cluster/cli.py's registry."""
    groups["lock"] = GROUP_HELP
    common = client_args(arg)
    prefix = arg("--prefix", default=None, metavar="P", help="only locks whose name starts with P")
    command("lock", "list", help="every lock of a namespace: holder fence, lease, owner, waiters",
            epilog="  statekeeper lock list --ns agents\n  statekeeper lock list --prefix jobs/ --json",
            args=[*common, prefix])(cmd_list)


def _all_locks(c: Any, prefix: str | None, ns: str) -> list[Any]:
    rows, after = [], None
    while True:
        page = c.lock_list(prefix, after=after, ns=ns)
        rows += page.locks
        if not page.more or not page.locks:
            return rows
        after = page.locks[-1].name


@guarded
def cmd_list(args: argparse.Namespace) -> int:
    """Every lock of --ns (with --prefix: those whose name starts with it), by name."""
    with open_client(args) as c:
        rows = _all_locks(c, args.prefix, args.ns)
    if args.json:
        dump([{"name": x.name, "holder_fence": x.holder_fence, "holder_lease": x.holder_lease,
               "count": x.count,
               "waiters": [{"key": w.key, "fence": w.fence, "lease": w.lease, "owner": w.owner}
                           for w in x.waiters]}
              for x in rows])
    elif not rows:
        print("no locks")
    else:
        print(table(("LOCK", "FENCE", "LEASE", "OWNER", "WAITING"),
                    [(x.name, x.holder_fence, x.holder_lease,
                      x.waiters[0].owner if x.waiters else None, x.count - 1) for x in rows],
                      fmt=args.write_out))
    return EXIT_OK
