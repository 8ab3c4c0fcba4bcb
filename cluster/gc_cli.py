"""`statekeeper gc status | policy set|list|delete`: retention policies for people.

Like cluster/lease_cli.py: cluster/cli.py calls :func:`register`, the client is imported
only when a command runs, and the endpoints come from --endpoints, $STATEKEEPER_ENDPOINTS,
else the --config file's nodes (no default: cluster/client_cli.py). Policies are enforced by
the cluster (the leader's GC task, docs/protocol.md "Retention"); these commands set and
show them. --json prints the node's answer as it is."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from statekeeper.cluster.client_cli import (
    EXIT_OK,
    EXIT_USAGE,
    client_args,
    dump,
    guarded,
    open_client,
    size,
    table,
    when,
)

GROUP_HELP = (
    "retention policies the cluster enforces, and what they hold and free",
    "Retention: per namespace and key/stream prefix, keep the last N checkpoints, every Kth\n"
    'older one, drop what is older than D (docs/protocol.md, "Retention"). The leader\n'
    "enforces them itself every [retention] gc_interval_seconds.",
)


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add the `gc` commands to cluster/cli.py's registry."""
    groups["gc"] = GROUP_HELP
    common = client_args(arg)
    command("gc", "status", help="what each policy holds and frees; history and idempotency",
            epilog="  statekeeper gc status\n  statekeeper gc status --ns agents --json",
            args=[*common, arg("--all", action="store_true", help="every namespace")])(cmd_status)
    command("gc", "policy", help="set, list or delete retention policies",
            epilog="  statekeeper gc policy set --ns agents --prefix agent/ --within ckpt "
            "--keep-last 10 --keep-every 100 --max-age 30d\n"
            "  statekeeper gc policy set --prefix sessions/s1/ --max-age 7d\n"
            "  statekeeper gc policy set --prefix log/ --target streams --keep-last 1000\n"
            "  statekeeper gc policy list --all\n"
            "  statekeeper gc policy delete --prefix agent/",
            args=[
                arg("action", choices=("set", "list", "delete"), help="what to do"),
                *common,
                arg("--prefix", default=None, metavar="P", help="key or stream prefix"),
                arg("--target", choices=("keys", "streams"), default="keys",
                    help="keys (default) or streams"),
                arg("--keep-last", type=int, metavar="N", help="keep the newest N per group"),
                arg("--keep-every", type=int, metavar="K",
                    help="also keep every Kth older key (with --keep-last)"),
                arg("--max-age", metavar="AGE", help="drop what is older: 30d, 12h, 90m, 45s"),
                arg("--within", metavar="DIR",
                    help="keys: only groups whose directory's last segment is DIR "
                    "(agents: ckpt)"),
                arg("--all", action="store_true", help="list: every namespace"),
            ])(cmd_policy)


def rules_text(p: dict) -> str:
    parts = []
    if p.get("keep_last") is not None:
        parts.append(f"keep_last={p['keep_last']}")
    if p.get("keep_every") is not None:
        parts.append(f"keep_every={p['keep_every']}")
    if p.get("max_age_s") is not None:
        parts.append(f"max_age={_age(p['max_age_s'])}")
    if p.get("within") is not None:
        parts.append(f"within={p['within']}")
    return " ".join(parts)


def _age(seconds: int) -> str:
    for unit, n in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds % n == 0:
            return f"{seconds // n}{unit}"
    return f"{seconds}s"


@guarded
def cmd_status(args: argparse.Namespace) -> int:
    """Per policy: what it holds (groups, keys or events, bytes) and what a gc would free
    now; the last gc per namespace; the MVCC history and idempotency retention."""
    with open_client(args) as c:
        st = c.retention_status(ns=args.ns, all_namespaces=args.all)
    if args.json:
        dump(st)
        return EXIT_OK
    rows = []
    for p in st["policies"]:
        unit = "keys" if p["target"] == "keys" else "events"
        h, f = p["holds"], p["frees"]
        rows.append((p["ns"], p["target"], p["prefix"] or "(all)", rules_text(p), h["groups"],
                     h[unit], size(h["bytes"]), f[unit], size(f["bytes"])))
    if rows:
        print(table(("NS", "TARGET", "PREFIX", "RULES", "GROUPS", "HOLDS", "BYTES", "FREES",
                     "FREES_BYTES"), rows, fmt=args.write_out))
    else:
        print("no retention policies")
    for ns, gc in sorted(st["last_gc"].items()):
        if gc is None:
            print(f"last gc in {ns}: none yet")
        else:
            print(f"last gc in {ns}: revision {gc['revision']} at {when(gc['time'])} "
                  f"({gc['deleted']} keys, {gc['removed']} events)")
    hist, idem = st["history"], st["idempotency"]
    print(f"mvcc history: compact_revision {hist['compact_revision']}, keeps "
          f"{hist['history_revisions']} revisions (revision {st['revision']})")
    print(f"idempotency keys: kept {idem['idempotency_seconds']} s")
    return EXIT_OK


@guarded
def cmd_policy(args: argparse.Namespace) -> int:
    """set: create or replace the policy of (ns, target, prefix); list: the policies;
    delete: remove one. Keys are grouped by their last "/" and the newest N of each group
    kept (--within DIR: only the groups in directories named DIR, e.g. agents' ckpt); a
    finished session's state: --max-age alone on its prefix."""
    if args.action != "list" and args.prefix is None:
        print(
            "statekeeper: error: --prefix is required (use '' for the whole namespace)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    with open_client(args) as c:
        if args.action == "set":
            r = c.retention_set(args.prefix, target=args.target, keep_last=args.keep_last,
                                keep_every=args.keep_every, max_age=args.max_age,
                                within=args.within)
            if not args.json:
                what = "created" if r["created"] else "replaced"
                print(f"policy {what} at revision {r['revision']}: {rules_text(r['policy'])}")
        elif args.action == "delete":
            r = c.retention_delete(args.prefix, target=args.target)
            if not args.json:
                print(f"{r['deleted']} policy deleted (revision {r['revision']})")
        else:
            r = _all_policies(c, args)
            if not args.json:
                rows = [(p["ns"], p["target"], p["prefix"] or "(all)", rules_text(p),
                         p["mod_revision"]) for p in r["policies"]]
                cols = ("NS", "TARGET", "PREFIX", "RULES", "REVISION")
                print(table(cols, rows, fmt=args.write_out) if rows else "no retention policies")
    if args.json:
        dump(r)
    return EXIT_OK


def _all_policies(c: Any, args: argparse.Namespace) -> dict:
    policies, token = [], None
    while True:
        page = c.retention_list(ns=args.ns, all_namespaces=args.all, continuation=token)
        policies += page["policies"]
        token = page.get("continuation")
        if not page["more"] or token is None:
            return {"revision": page["revision"], "policies": policies}
