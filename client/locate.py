"""Where the nodes are when the caller names none: one answer for Client, AsyncClient
and the CLI (cluster/client_cli.py), so that ``Client()`` and ``statekeeper get`` run in
the same shell reach the same cluster.

The order: $STATEKEEPER_ENDPOINTS (comma-separated URLs), else the nodes of a cluster config
file when one exists (``cluster.toml`` in the working directory for the clients: the file
``make up`` / ``statekeeper cluster up`` writes in a checkout; the CLI's ``--config``),
else :class:`~client.errors.NoEndpoints`. There is no built-in default: a client that
guessed http://127.0.0.1:7000 talked to whatever listened there, or failed after its
retries with "cannot connect", when the user had only forgotten to say where the cluster
is (issue 30 item 15).

Only the endpoints come from the config file: TLS files and the token still come from the
client's arguments or their environment variables ($STATEKEEPER_CA_FILE,
$STATEKEEPER_TOKEN, ...), as for any endpoint.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from .errors import NoEndpoints

__all__ = ["CHECKOUT_CONFIG", "ENDPOINTS_ENV", "configured_endpoints"]

ENDPOINTS_ENV = "STATEKEEPER_ENDPOINTS"
CHECKOUT_CONFIG = "cluster.toml"  # what `make up` writes in the checkout (Makefile's CONFIG)


def configured_endpoints(config: str | os.PathLike[str] = CHECKOUT_CONFIG) -> list[str]:
    """The node URLs of $STATEKEEPER_ENDPOINTS, else those of the cluster config file
    ``config`` (relative to the working directory) when it exists; raises
    :class:`NoEndpoints` (code ``no_endpoints``), saying what to set, when neither is there."""
    urls = [u.strip() for u in os.environ.get(ENDPOINTS_ENV, "").split(",") if u.strip()]
    if urls:
        return urls
    path = Path(config)
    if path.is_file():
        return _config_urls(path)
    raise NoEndpoints(
        f"no endpoints: no cluster.toml found at {path.resolve()} and ${ENDPOINTS_ENV} is not "
        f"set. Set {ENDPOINTS_ENV}=http://HOST:PORT,... (or pass the endpoints), or run "
        "where `statekeeper cluster up` wrote its cluster.toml",
        code="no_endpoints",
    )


def _config_urls(path: Path) -> list[str]:
    """The client URLs of a cluster config's [[nodes]]: ``http(s)://host:http_port``, https
    when [tls] is enabled, host 127.0.0.1 when left out (node/config.py's
    ClusterConfig.url). Read here with tomllib rather than by node/config.py's parser:
    that one needs msgspec and tomli-w, which a client-only install (`pip install .`,
    .ci/client_only.sh) does not have; the CLI still loads the whole file for its TLS
    and token, so a bad config is reported there in full."""
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise _unreadable(path, str(e)) from None
    nodes, tls = doc.get("nodes"), doc.get("tls", {})
    if not isinstance(nodes, list) or not nodes:
        raise _unreadable(path, "it has no [[nodes]]")
    scheme = "https" if isinstance(tls, dict) and tls.get("enabled") is True else "http"
    urls = []
    for i, node in enumerate(nodes):
        host = node.get("host", "127.0.0.1") if isinstance(node, dict) else None
        port = node.get("http_port") if isinstance(node, dict) else None
        if not isinstance(host, str) or type(port) is not int:
            raise _unreadable(path, f"nodes[{i}] needs a host (str) and an http_port (int)")
        urls.append(f"{scheme}://{host}:{port}")
    return urls


def _unreadable(path: Path, why: str) -> NoEndpoints:
    return NoEndpoints(f"no endpoints: cannot read the nodes of {path}: {why}", code="no_endpoints")
