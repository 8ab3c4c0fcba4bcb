"""`statekeeper crdt get | incr | add | remove | set KEY ...`: shared CRDT values for people.

Like cluster/stream_cli.py: cluster/cli.py calls :func:`register`, the client is imported
only when a command runs, and the endpoints come from --endpoints,
$STATEKEEPER_ENDPOINTS, else the --config file's nodes (no default: cluster/client_cli.py).

Every update is one `crdt_merge` (docs/protocol.md, "CRDTs"), made by a replica of its own
(client/crdt/replica.py) that first pulls the key's state (a remove removes what it has
seen), applies the change and syncs. Each invocation is a new replica id ("cli-" + 12 hex
digits, or --replica): a counter's state grows by one entry per invocation, so agents that
update often keep a replica (`client.crdt.counter(key)`) instead.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable
from typing import Any

from statekeeper.cluster.client_cli import EXIT_OK, client_args, dump, guarded, open_client, table

GROUP_HELP = (
    "read and update shared CRDT values (counters, sets, registers)",
    "CRDTs: values several agents update without conflicts or CAS retries, merged by the\n"
    'cluster (docs/crdt.md). Agents keep local replicas; this is for looking and poking.',
)


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add the `crdt` commands to cluster/cli.py's registry."""
    groups["crdt"] = GROUP_HELP
    common = client_args(arg)
    key = arg("key", metavar="KEY", help="the CRDT's key")
    replica = arg("--replica", metavar="ID", help="replica id (default: a new cli-... id)")
    elems = arg("elems", nargs="+", metavar="ELEM", help="set elements (strings)")
    command("crdt", "get", help="a CRDT's type and value (--state: its full state too)",
            epilog="  statekeeper crdt get shared/visits\n  statekeeper crdt get found --json --state",
            args=[*common, key, arg("--state", action="store_true",
                                    help="also show the state replicas merge")])(cmd_get)
    command("crdt", "incr", help="add N (default 1, may be negative) to a counter",
            epilog="  statekeeper crdt incr shared/visits\n  statekeeper crdt incr shared/visits -- -3",
            args=[*common, key, replica,
                  arg("n", nargs="?", type=int, default=1, metavar="N", help="amount")])(cmd_incr)
    command("crdt", "add", help="add elements to a set (add wins over a concurrent remove)",
            epilog="  statekeeper crdt add found paris lyon",
            args=[*common, key, replica, elems])(cmd_add)
    command("crdt", "remove", help="remove elements from a set (those it has seen)",
            epilog="  statekeeper crdt remove found lyon",
            args=[*common, key, replica, elems])(cmd_remove)
    command("crdt", "set", help="set a last-writer-wins register to a string",
            epilog="  statekeeper crdt set plan/owner agent-7",
            args=[*common, key, replica, arg("value", metavar="VALUE", help="the value")])(cmd_set)


def _shown(v: Any) -> Any:
    if isinstance(v, bytes):
        try:
            return v.decode()
        except UnicodeDecodeError:
            return "b64:" + __import__("base64").b64encode(v).decode()
    if isinstance(v, list):
        return [_shown(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _shown(x) for k, x in v.items()}
    return v


@guarded
def cmd_get(args: argparse.Namespace) -> int:
    """Read KEY (linearizable): its CRDT type and value; --state adds the merged state."""
    with open_client(args) as c:
        got = c.crdt_get(args.key, state=args.state)
    out = {"key": got.key, "type": got.type, "value": _shown(got.value),
           "revision": got.revision, "mod_revision": got.mod_revision}
    if args.state:
        out["state"] = _shown(got.state)
    if args.json:
        dump(out)
    else:
        print(table(("FIELD", "VALUE"), [(k, v) for k, v in out.items()], fmt=args.write_out))
    return EXIT_OK


def _update(args: argparse.Namespace, factory: str, change: Callable[[Any], None]) -> int:
    replica_id = args.replica or f"cli-{uuid.uuid4().hex[:12]}"
    with open_client(args) as c:
        r = getattr(c.crdt, factory)(args.key, replica_id=replica_id)
        r.sync()  # pull what the store has: a remove removes what it has seen
        change(r)
        res = r.sync()
    if args.json:
        dump({"key": args.key, "value": _shown(res.value), "revision": res.revision,
              "changed": res.changed, "replica": replica_id})
    else:
        print(f"{args.key} = {_shown(res.value)} (revision {res.revision})")
    return EXIT_OK


@guarded
def cmd_incr(args: argparse.Namespace) -> int:
    """Add N to the PN-counter KEY (created at 0 if absent)."""
    return _update(args, "counter", lambda r: r.increment(args.n) if args.n >= 0 else r.decrement(-args.n))


@guarded
def cmd_add(args: argparse.Namespace) -> int:
    """Add each ELEM to the OR-set KEY (created empty if absent)."""
    return _update(args, "set", lambda r: [r.add(e) for e in args.elems])


@guarded
def cmd_remove(args: argparse.Namespace) -> int:
    """Remove each ELEM from the OR-set KEY, as far as this replica has seen it added."""
    return _update(args, "set", lambda r: [r.remove(e) for e in args.elems])


@guarded
def cmd_set(args: argparse.Namespace) -> int:
    """Set the LWW-register KEY to VALUE (by this machine's clock; ties by replica id)."""
    return _update(args, "register", lambda r: r.set(args.value))
