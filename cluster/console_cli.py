"""`statekeeper console`: the web console (console/app.py) on a port of its own, for a
cluster whose nodes do not serve it at /ui ([ui] is off). cluster/cli.py calls
:func:`register`.

It is a client of the cluster like any other: each user's session talks to the nodes of
--config through the public API with the token the user logged in with, trusting the
config's CA under [tls]. It serves plain HTTP: keep it on loopback (the default host) or
behind a TLS proxy, since the login form carries a token.

Its log (stderr; level from STATEKEEPER_LOG, default INFO, as a node's) has the console's
audit lines: one per login, logout and action (console/audit.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

EXIT_OK = 0
DEFAULT_PORT = 7080

EPILOG = """\
  statekeeper console                                  # http://127.0.0.1:7080/ui
  statekeeper console --config /etc/statekeeper/cluster.toml --port 8080
  statekeeper console --host 0.0.0.0   # other machines too: put TLS in front of it

Log in with a token ('statekeeper auth token create --ns ... --role reader'); with [auth]
off, an empty token."""


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add `statekeeper console` to cluster/cli.py's registry."""
    command(
        "console",
        help="serve the web console for a cluster (docs/console.md)",
        epilog=EPILOG,
        args=[
            arg(
                "--config",
                "-c",
                default="cluster.toml",
                metavar="PATH",
                help="cluster config file: the nodes and the TLS CA (default: cluster.toml)",
            ),
            arg("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)"),
            arg(
                "--port",
                type=int,
                default=DEFAULT_PORT,
                help=f"port to listen on (default: {DEFAULT_PORT}; 0: any free one)",
            ),
        ],
    )(cmd_console)


def cmd_console(args: argparse.Namespace) -> int:
    """Serve the console until SIGINT or SIGTERM; prints its URL when it listens."""
    from statekeeper.node import config as node_config

    cfg = node_config.load(args.config)
    logging.basicConfig(
        level=os.environ.get("STATEKEEPER_LOG", "INFO"),
        format="%(asctime)s console %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    asyncio.run(serve(cfg, args.host, args.port))
    return EXIT_OK


async def serve(cfg: Any, host: str, port: int) -> None:
    from statekeeper.console.app import PREFIX, ConsoleApp, redirect
    from statekeeper.node.api.server import HttpServer, Response, ServerLimits

    app = ConsoleApp(cfg, secure_cookies=False)

    async def handle(request: Any) -> Any:
        if request.path == "/":
            return redirect(PREFIX + "/")
        return await app.handle(request)

    def error(status: int, code: str, message: str) -> Any:
        return Response(status, f"{code}: {message}".encode(), "text/plain; charset=utf-8")

    server = HttpServer(handle, error, ServerLimits(max_body_bytes=64 * 1024))
    await server.start(host, port)
    print(f"the console: http://{host}:{server.port}{PREFIX}  (Ctrl-C stops it)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.close()
    await app.close()
