"""``python -m statekeeper.chaos.toxiproxy``: run the Toxiproxy-compatible server."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

from . import errors
from .server import start_server


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m statekeeper.chaos.toxiproxy",
        description="Toxiproxy-compatible TCP chaos proxy with its HTTP control API.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="API address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8474, help="API port (default 8474)")
    parser.add_argument(
        "--config", type=Path, help="JSON file with a list of proxies to create at start"
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return parser


async def _serve(args: argparse.Namespace) -> int:
    try:
        handle = await start_server(args.host, args.port)
    except OSError as exc:
        logging.error("cannot listen on %s:%s: %s", args.host, args.port, exc)
        return 1
    try:
        if args.config is not None:
            try:
                proxies = await handle.collection.populate(json.loads(args.config.read_text()))
            except (OSError, ValueError, errors.ApiError) as exc:
                logging.error("cannot load %s: %s", args.config, exc)
                return 1
            logging.info("populated %d proxies from %s", len(proxies), args.config)
        # Print the URL so scripts starting us with --port 0 can find us.
        print(f"toxiproxy API on {handle.url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        return 0
    finally:
        await handle.close()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
