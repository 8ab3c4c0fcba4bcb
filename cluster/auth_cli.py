"""`statekeeper auth token create | list | revoke ID` and `statekeeper auth whoami`: bearer
tokens for people (docs/protocol.md, "Authentication and authorization").

Like cluster/lease_cli.py: cluster/cli.py calls :func:`register`; endpoints and the
credential come from cluster/client_cli.py (--endpoints / --config; --token-file,
$STATEKEEPER_TOKEN, $STATEKEEPER_TOKEN_FILE, else the root token derived from the config's
cluster secret). A token is never taken as a flag value (it would show in `ps` and shell
history): cluster/cli.py refuses `--token X` with :func:`token_flag_error` before parsing.
`create` prints the new token once, alone on stdout (so `> file` captures just it), and its
id and expiry on stderr.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from statekeeper.cluster.client_cli import (
    EXIT_OK,
    EXIT_USAGE,
    client_args,
    dump,
    guarded,
    open_client,
    table,
    when,
)

GROUP_HELP = (
    "bearer tokens: create, list, revoke; whoami",
    "Tokens for clients of a cluster with [auth] enabled = true (docs/protocol.md,\n"
    '"Authentication and authorization"). Without --token-file or $STATEKEEPER_TOKEN(_FILE)\n'
    "the CLI uses the root token derived from cluster.toml's secret.",
)
TOKEN_ON_COMMAND_LINE = (
    "a token is never taken on the command line (it would show in ps and shell history): "
    "use --token-file PATH, $STATEKEEPER_TOKEN or $STATEKEEPER_TOKEN_FILE"
)
_TTL = re.compile(r"^(\d+)([dhms]?)$")
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1, "": 1}


def token_flag_error(argv: Sequence[str]) -> str | None:
    """The error for an argv that passes a token as a flag (`--token X`, `--token=X`)."""
    for a in argv:
        if a.startswith("--") and a[2:].split("=", 1)[0].lower().replace("_", "-") in (
            "token",
            "bearer-token",
        ):
            return TOKEN_ON_COMMAND_LINE
    return None


def parse_ttl(text: str) -> int:
    """30d, 12h, 15m, 3600s (or 3600) -> seconds; 0: never expires."""
    m = _TTL.match(text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"bad TTL {text!r}: use e.g. 30d, 12h, 15m, 3600s, 0")
    return int(m.group(1)) * _UNIT_S[m.group(2)]


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add the `auth` commands to cluster/cli.py's registry."""
    groups["auth"] = GROUP_HELP
    common = [a for a in client_args(arg) if a[0][0] != "--ns"]
    command(
        "auth",
        "token",
        help="create, list or revoke tokens",
        epilog="  statekeeper auth token create --ns agent-42 --role writer --ttl 30d > token\n"
        "  statekeeper auth token create --ns 'agent-*' --role admin --name ops\n"
        "  statekeeper auth token create --ns agent-42 --role reader --prefix chat/\n"
        "  statekeeper auth token list\n"
        "  statekeeper auth token revoke 3f9c2a7b1d0e4c55",
        args=[
            *common,
            arg("action", choices=("create", "list", "revoke"), help="what to do"),
            arg("id", nargs="?", metavar="ID", help="the token id (revoke)"),
            arg(
                "--ns",
                action="append",
                metavar="NS",
                help="create: a namespace, 'prefix*' or '*' (repeat for more)",
            ),
            arg("--role", choices=("reader", "writer", "admin"), help="create: the role"),
            arg("--prefix", default="", metavar="KEYS", help="create: only keys with this prefix"),
            arg(
                "--ttl",
                type=parse_ttl,
                default=30 * 86400,
                metavar="TTL",
                help="create: 30d, 12h, 15m, 3600s; 0 = never (default: 30d)",
            ),
            arg("--name", default="", help="create: a label shown in lists and logs"),
        ],
    )(cmd_token)
    command(
        "auth",
        "whoami",
        help="the token this CLI sends: id, grants, expiry",
        epilog="  statekeeper auth whoami",
        args=common,
    )(cmd_whoami)


def _grants(grants: Sequence[dict[str, str]]) -> str:
    return ", ".join(
        f"{g['ns']}{':' + g['prefix'] if g.get('prefix') else ''}={g['role']}" for g in grants
    )


@guarded
def cmd_token(args: argparse.Namespace) -> int:
    """Create, list or revoke bearer tokens. `create` prints the token once on stdout."""
    if args.action == "create":
        if not args.ns or not args.role:
            print("statekeeper: error: auth token create needs --ns and --role", file=sys.stderr)
            return EXIT_USAGE
        with open_client(args) as c:
            made = c.auth_token_create(
                ns=args.ns, role=args.role, prefix=args.prefix, ttl=args.ttl, name=args.name
            )
        print(made.token, flush=True)
        print(
            f"token id {made.id}, expires {when(made.expires_ms) if made.expires_ms else 'never'}"
            " (the token is shown only once)",
            file=sys.stderr,
        )
        return EXIT_OK
    if args.action == "revoke":
        if not args.id:
            print("statekeeper: error: auth token revoke needs the token ID", file=sys.stderr)
            return EXIT_USAGE
        with open_client(args) as c:
            c.auth_token_revoke(args.id)
        print(f"revoked {args.id}", file=sys.stderr)
        return EXIT_OK
    with open_client(args) as c:
        tokens = c.auth_token_list()
    if args.json:
        dump(
            [
                {
                    "id": t.id,
                    "name": t.name,
                    "grants": list(t.grants),
                    "created_ms": t.created_ms,
                    "expires_ms": t.expires_ms,
                }
                for t in tokens
            ]
        )
    elif not tokens:
        print("no tokens")
    else:
        print(
            table(
                ("ID", "NAME", "GRANTS", "EXPIRES"),
                [
                    (
                        t.id,
                        t.name or "-",
                        _grants(t.grants),
                        when(t.expires_ms) if t.expires_ms else "never",
                    )
                    for t in tokens
                ],
                fmt=args.write_out,
            )
        )
    return EXIT_OK


@guarded
def cmd_whoami(args: argparse.Namespace) -> int:
    """The token this CLI sends: its id ("root" for the root token), name, grants, expiry."""
    with open_client(args) as c:
        me = c.auth_whoami()
    if args.json:
        dump({"id": me.id, "name": me.name, "grants": list(me.grants), "expires_ms": me.expires_ms})
    elif me.id is None:
        print("auth is disabled on this cluster: every request is allowed")
    else:
        print(
            f"{me.id} ({me.name or 'no name'}): {_grants(me.grants)}; expires "
            f"{when(me.expires_ms) if me.expires_ms else 'never'}"
        )
    return EXIT_OK
