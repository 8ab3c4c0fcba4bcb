"""What the CLI's client commands share (`statekeeper agent ...`, `statekeeper stream ...`):
where the nodes are, the common flags, one-line errors, tables and JSON.

Endpoints: --endpoints, else $STATEKEEPER_ENDPOINTS, else the HTTP URLs of --config
(cluster.toml) when it exists, else an error saying that neither is there (exit 2): the
same function as ``Client()`` without endpoints (client/locate.py). TLS: $STATEKEEPER_CA_FILE (and
_CERT_FILE / _KEY_FILE, client/tls.py), else, with a cluster.toml that turns [tls] on, its
CA (and a node certificate when the port asks for client certificates). The credential (a bearer token;
docs/protocol.md, "Authentication and authorization"): the file named by --token-file, else
$STATEKEEPER_TOKEN, else the file named by $STATEKEEPER_TOKEN_FILE, else the root token
derived from --config's cluster secret when the config exists; never a flag value
(`--token X` is refused before parsing, see cluster/auth_cli.py). The client is imported
only when a command runs (the CLI also serves `statekeeper cluster ...` without it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_NOT_FOUND = 3  # what was asked for does not exist (every command; see exit_code)


OUTPUT_FORMATS = ("table", "json", "simple")


class WriteOut(argparse.Action):
    """-w/--write-out FORMAT, and --json (its alias, ``const`` "json"): sets ``write_out``
    to the format and ``json`` to whether it is JSON (what most commands ask)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        fmt = self.const or values
        namespace.write_out, namespace.json = fmt, fmt == "json"


def output_args(arg: Callable[..., Any], default: str = "table") -> list[Any]:
    """The output flag, the same in every command that prints data (etcdctl's -w):
    ``table`` aligned columns under a header, ``json`` one document, ``simple`` the rows
    without a header, tab-separated (the key commands: etcdctl's key line, value line)."""
    return [
        arg(
            "-w",
            "--write-out",
            action=WriteOut,
            choices=OUTPUT_FORMATS,
            default=default,
            help=f"output format: {', '.join(OUTPUT_FORMATS)} (default: {default})",
        ),
        arg(
            "--json",
            action=WriteOut,
            nargs=0,
            const="json",
            default=default == "json",
            help="the same as -w json",
        ),
    ]


def client_args(
    arg: Callable[..., Any], ns_default: str | None = "default", output: str | None = "table"
) -> list[Any]:
    """The flags every client command takes: --ns, --endpoints, --config, -w/--json
    (output_args; `output` its default, None: none), --token-file. `ns_default` None: a
    command whose --ns is optional (every namespace)."""
    ns_help = (
        f"namespace (default: {ns_default})" if ns_default else "namespace (default: every one)"
    )
    return [
        arg("--ns", default=ns_default, metavar="NS", help=ns_help),
        arg("--endpoints", metavar="URLS", help="comma-separated node URLs"),
        arg(
            "--config",
            "-c",
            default="cluster.toml",
            metavar="PATH",
            help="cluster config to take the endpoints from (default: cluster.toml)",
        ),
        *(output_args(arg, output) if output else ()),
        arg(
            "--token-file",
            metavar="PATH",
            help="file holding the bearer token (default: $STATEKEEPER_TOKEN, "
            "$STATEKEEPER_TOKEN_FILE, else the root token derived from --config's secret)",
        ),
    ]


def endpoints(args: argparse.Namespace) -> list[str]:
    """--endpoints, else what a Client() would use (client/locate.py) with --config as the
    config file: $STATEKEEPER_ENDPOINTS, else its nodes, else NoEndpoints (exit 2)."""
    if args.endpoints:
        return [u for u in args.endpoints.split(",") if u]
    from statekeeper.client.locate import CHECKOUT_CONFIG, configured_endpoints

    return configured_endpoints(getattr(args, "config", None) or CHECKOUT_CONFIG)


def cluster_config(args: argparse.Namespace) -> Any:
    """The parsed --config file (node/config.py's ClusterConfig), or None without one."""
    config = getattr(args, "config", None)
    if config and Path(config).exists():
        from statekeeper.node import config as node_config

        return node_config.load(Path(config))
    return None


def connection_options(args: argparse.Namespace) -> dict[str, Any]:
    """Client keyword arguments that come from cluster.toml rather than the environment."""
    cfg = cluster_config(args)
    if cfg is None or not cfg.tls.enabled or os.environ.get("STATEKEEPER_CA_FILE"):
        return {}
    from statekeeper.node.tls import operator_tls_context

    return {"tls": operator_tls_context(cfg)}


def guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Client errors as one line on stderr, with the exit code of their kind (exit_code)."""

    def run(args: argparse.Namespace) -> int:
        from statekeeper.client.errors import StatekeeperError

        try:
            return fn(args)
        except StatekeeperError as e:
            print(f"statekeeper: error: {e.message or e}", file=sys.stderr)
            return exit_code(e)

    run.__name__, run.__doc__ = fn.__name__, fn.__doc__
    return run


def exit_code(err: Exception) -> int:
    """The exit code of a client error, the same in every command: 3 for something that
    does not exist (a key, a stream, an agent, a lease: `get`'s documented code), 2 for
    what was asked wrong (an invalid request, no endpoints configured), 1 otherwise."""
    from statekeeper.client.errors import InvalidRequest, NoEndpoints, NotFound

    if isinstance(err, NotFound):
        return EXIT_NOT_FOUND
    return EXIT_USAGE if isinstance(err, InvalidRequest | NoEndpoints) else EXIT_FAILURE


def when(time_ms: int | None) -> str:
    if not time_ms:
        return "-"
    return dt.datetime.fromtimestamp(time_ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def size(n: int) -> str:
    return (
        f"{n} B"
        if n < 1024
        else f"{n / 1024:.1f} KiB"
        if n < 1 << 20
        else f"{n / (1 << 20):.1f} MiB"
    )


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str = "table") -> str:
    """Rows under a header in aligned columns; ``fmt`` "simple": the rows alone, cells
    separated by a tab (for cut and awk)."""
    if fmt == "simple":
        return "\n".join("\t".join("-" if c is None else str(c) for c in r) for r in rows)
    cells = [list(columns)] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def dump(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False))


def token(args: argparse.Namespace) -> str | None:
    """The bearer token the CLI sends (see the module docstring); None: none."""
    path = getattr(args, "token_file", None)
    if path:
        from statekeeper.node import config as node_config

        return node_config.read_secret_file(Path(path), "--token-file")
    if os.environ.get("STATEKEEPER_TOKEN") or os.environ.get("STATEKEEPER_TOKEN_FILE"):
        return None  # the client reads them
    config = getattr(args, "config", None)
    if config and Path(config).exists():
        from statekeeper.client.auth.tokens import root_token
        from statekeeper.node import config as node_config

        secret = node_config.load(Path(config)).secret
        return root_token(secret) if secret else None
    return None


def tls_context(args: argparse.Namespace) -> Any:
    """The SSLContext the client commands use for https endpoints (module docstring); an
    unreadable CA or certificate file is a TlsError (one line, exit 1), not a traceback."""
    from statekeeper.client.tls import client_tls_context

    return _tls_setup(lambda: client_tls_context(tls=connection_options(args).get("tls")))


def _tls_setup(make: Callable[[], Any]) -> Any:
    from statekeeper.client.errors import TlsError

    try:
        return make()
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        raise TlsError(f"TLS setup failed: {e}", code="tls_failed") from None


def open_client(args: argparse.Namespace) -> Any:
    from statekeeper.client import Client

    urls = endpoints(args)  # NoEndpoints is no TLS failure (both are ValueErrors)
    return _tls_setup(
        lambda: Client(
            urls,
            ns=getattr(args, "ns", "default"),
            token=token(args),
            **connection_options(args),
        )
    )
