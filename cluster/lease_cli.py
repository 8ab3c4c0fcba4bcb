"""`statekeeper lease list | info ID | revoke ID`: leases for people.

Like cluster/stream_cli.py: cluster/cli.py calls :func:`register`, the client is imported
only when a command runs, and the endpoints come from --endpoints, $STATEKEEPER_ENDPOINTS,
else the --config file's nodes (no default: cluster/client_cli.py). Leases are global (ids
1, 2, ...; each names its namespace), so --ns does not filter them. Times are shown local;
--json prints the raw fields (ms since the epoch)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from statekeeper.cluster.client_cli import (
    EXIT_OK,
    client_args,
    dump,
    guarded,
    open_client,
    table,
    when,
)

GROUP_HELP = (
    "list, inspect and revoke leases",
    "Leases: TTLs that delete the keys and streams attached to them when they expire or\n"
    "are revoked "
    '(docs/protocol.md, "Leases"). Clients grant and keep them alive; this is for looking.',
)


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add the `lease` commands to cluster/cli.py's registry."""
    groups["lease"] = GROUP_HELP
    common = client_args(arg)
    lease_id = arg("lease", type=int, metavar="ID", help="the lease's id")
    command("lease", "list", help="every lease: id, namespace, TTL, expiry",
            epilog="  statekeeper lease list\n  statekeeper lease list --json",
            args=common)(cmd_list)
    command("lease", "info", help="one lease: TTL, time left, its keys and streams",
            epilog="  statekeeper lease info 7", args=[*common, lease_id])(cmd_info)
    command("lease", "revoke",
            help="revoke a lease now: its keys and streams are deleted at one revision",
            epilog="  statekeeper lease revoke 7", args=[*common, lease_id])(cmd_revoke)


def _ttl(ms: int) -> str:
    return f"{ms / 1000:g} s"


@guarded
def cmd_list(args: argparse.Namespace) -> int:
    """Every lease in id order (all namespaces)."""
    rows, after = [], None
    with open_client(args) as c:
        while True:
            page = c.lease_list(after=after)
            rows += page.leases
            if not page.more or not page.leases:
                break
            after = page.leases[-1].lease
    if args.json:
        dump([{"lease": x.lease, "ns": x.ns, "ttl_ms": x.ttl_ms, "expires_ms": x.expires_ms}
              for x in rows])
    elif not rows:
        print("no leases")
    else:
        print(table(("LEASE", "NS", "TTL", "EXPIRES"),
                    [(x.lease, x.ns, _ttl(x.ttl_ms), when(x.expires_ms)) for x in rows],
                    fmt=args.write_out))
    return EXIT_OK


@guarded
def cmd_info(args: argparse.Namespace) -> int:
    """A lease's namespace, TTL, expiry, time left, attached keys and streams (first 1000
    of each)."""
    with open_client(args) as c:
        info = c.lease_info(args.lease)
    if args.json:
        dump({"lease": info.lease, "ns": info.ns, "ttl_ms": info.ttl_ms,
              "expires_ms": info.expires_ms, "remaining_ms": info.remaining_ms,
              "keys": info.keys, "more_keys": info.more_keys, "streams": info.streams,
              "more_streams": info.more_streams, "revision": info.revision})
        return EXIT_OK
    more = " (and more)" if info.more_keys else ""
    more_streams = " (and more)" if info.more_streams else ""
    print(table(("FIELD", "VALUE"), [
        ("lease", info.lease), ("ns", info.ns), ("ttl", _ttl(info.ttl_ms)),
        ("expires", when(info.expires_ms)), ("remaining", _ttl(info.remaining_ms or 0)),
        ("keys", f"{len(info.keys)}{more}"),
        ("streams", f"{len(info.streams)}{more_streams}"),
    ], fmt=args.write_out))
    for key in info.keys:
        print(f"  {key}")
    for stream in info.streams:
        print(f"  stream {stream}")
    return EXIT_OK


@guarded
def cmd_revoke(args: argparse.Namespace) -> int:
    """Revoke the lease: it, every attached key and every attached stream are deleted at
    one revision."""
    with open_client(args) as c:
        r = c.lease_revoke(args.lease)
    if args.json:
        dump({"lease": args.lease, "revision": r.revision, "deleted": r.deleted,
              "deleted_streams": r.deleted_streams})
    else:
        print(f"lease {args.lease} revoked: {r.deleted} keys and {r.deleted_streams} streams "
              f"deleted at revision {r.revision}")
    return EXIT_OK
