"""`statekeeper idempotency status KEY`: was the write sent with this idempotency key applied?

Like cluster/lock_cli.py: cluster/cli.py calls :func:`register`, the client is imported only
when the command runs, the endpoints come from --endpoints, $STATEKEEPER_ENDPOINTS, the
--config file's nodes (no default: cluster/client_cli.py). Keys are scoped to the write's namespace
(--ns); --json prints the answer as the node gives it (docs/protocol.md, "Idempotency
status"). Exit 0 whatever the answer: the printed line says which.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from statekeeper.cluster.client_cli import EXIT_OK, client_args, dump, guarded, open_client, when

GROUP_HELP = (
    "status KEY: was the write sent with this idempotency key applied?",
    "Idempotency: every client write carries an idempotency key; after a timeout, `status`\n"
    "says whether the write applied, without sending it again (docs/protocol.md,\n"
    '"Idempotency status").',
)


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add the `idempotency` commands to cluster/cli.py's registry."""
    groups["idempotency"] = GROUP_HELP
    key = arg("key", metavar="KEY", help="the idempotency_key the write was sent with")
    command(
        "idempotency",
        "status",
        help="was the write sent with KEY applied (and at which revision)?",
        epilog="  statekeeper idempotency status 4f1c2b7e... --ns agents",
        args=[key, *client_args(arg)],
    )(cmd_status)


@guarded
def cmd_status(args: argparse.Namespace) -> int:
    """One line: applied at a revision, or not applied (and since when it would be known)."""
    with open_client(args) as c:
        s = c.idempotency_status(args.key, ns=args.ns)
    if args.json:
        dump({k: v for k, v in dataclasses.asdict(s).items() if v is not None})
    elif s.applied:
        print(f"applied at revision {s.revision} (record kept until {when(s.expires_ms)})")
    else:
        print(
            f"not applied as of revision {s.revision}, unless applied at or before "
            f"{when(s.remembered_after_ms)} (records older than that are forgotten)"
        )
    return EXIT_OK
