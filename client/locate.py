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
    # The node's own parser (with its checks and defaults), without reading the secret
    # file load() needs: a client only wants the URLs.
    from statekeeper.node import config as node_config

    try:
        raw = tomllib.loads(path.read_text())
        return node_config.parse(raw, base_dir=str(path.resolve().parent)).http_urls()
    except (OSError, tomllib.TOMLDecodeError, node_config.ConfigError) as e:
        raise NoEndpoints(
            f"no endpoints: cannot read the nodes of {path}: {e}", code="no_endpoints"
        ) from None
