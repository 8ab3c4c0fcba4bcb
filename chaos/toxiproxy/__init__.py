"""A Toxiproxy-compatible chaos proxy written in asyncio.

The real Toxiproxy (Go) is not installable here, so this package serves the
same HTTP API and toxics; ``toxiproxy-python`` drives it unchanged, and the
chaos suite can use a real Toxiproxy instead by setting ``TOXIPROXY_URL``.

    python -m statekeeper.chaos.toxiproxy --host 127.0.0.1 --port 8474

    handle = await start_server("127.0.0.1", 0)      # inside an event loop
    with ToxiproxyServer() as server: server.url      # from synchronous code
"""

from .embedded import ToxiproxyServer, configure_client, split_url, toxiproxy_endpoint
from .server import VERSION, ServerHandle, make_app, start_server
from .toxics import TOXIC_ATTRIBUTES, Toxic

__all__ = [
    "TOXIC_ATTRIBUTES",
    "VERSION",
    "ServerHandle",
    "Toxic",
    "ToxiproxyServer",
    "configure_client",
    "make_app",
    "split_url",
    "start_server",
    "toxiproxy_endpoint",
]
