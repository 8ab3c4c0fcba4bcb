"""The local cluster's config file as the CLI commands create it (`cluster up`, `tls init`,
`restore` of a cluster that has no config yet), and the one-line output and usage error
they share.

Below cluster/cli.py and the command modules it registers (cluster/tls_cli.py,
cluster/backup_cli.py), which all import it: the helpers used to live in cluster/cli.py,
and the commands imported them back from inside their functions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statekeeper.node import config as node_config
from statekeeper.node.config import ClusterConfig

SECRET_FILE_NAME = "secret"  # `cluster up` writes the cluster secret here, next to the config
DEFAULT_DATA_DIR = "data"
DEFAULT_BASE_PORT = 7000
RAFT_PORT_OFFSET = 100  # raft ports sit 100 above the HTTP ports (7100-7102)


def base_port_arg(arg: Callable[..., Any]) -> Any:
    """--base-port, for the commands that may write a new config (`cluster up`, `restore`)."""
    return arg(
        "--base-port",
        type=int,
        metavar="PORT",
        help=f"first HTTP port; raft ports are {RAFT_PORT_OFFSET} higher "
        f"(default: {DEFAULT_BASE_PORT}); only used when the config is created",
    )


class UserError(Exception):
    """A mistake in what was asked: shown as one line, exit code 2, no traceback."""


def say(msg: str) -> None:
    print(msg, flush=True)


def create_config_if_missing(
    path: str | Path,
    data_dir: str = DEFAULT_DATA_DIR,
    base_port: int = DEFAULT_BASE_PORT,
    fsync: str = "always",
) -> tuple[ClusterConfig, bool]:
    """Load the config at `path`, first writing the default 3-node one if it is absent.

    Returns (config, created).
    """
    p = Path(path)
    if p.exists():
        return node_config.load(p), False
    if not 1 <= base_port <= 65535 - RAFT_PORT_OFFSET - 2:
        raise UserError(f"--base-port {base_port} leaves no room for 3 HTTP and 3 raft ports")
    if p.parent and not p.parent.is_dir():
        raise UserError(f"cannot create {p}: directory {p.parent} does not exist")
    cfg = node_config.local_cluster(
        http_base_port=base_port,
        raft_base_port=base_port + RAFT_PORT_OFFSET,
        data_dir=data_dir,
        fsync=fsync,
    )
    # The secret goes to its own file, `secret` next to the config (0600 from the start);
    # the config only names it, so it can be shared or shown without the secret.
    secret_path = p.parent / SECRET_FILE_NAME
    if not secret_path.exists():
        node_config.write_secret_file(secret_path, cfg.secret)
    # The web console at /ui on every node (docs/console.md): a local dev cluster is where
    # one looks first; a hand-written config keeps the default (off).
    cfg = dataclasses.replace(
        cfg, secret="", secret_file=SECRET_FILE_NAME, ui=node_config.UiSettings(enabled=True)
    )
    node_config.write(cfg, p)
    return node_config.load(p), True
