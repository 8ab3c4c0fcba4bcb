"""`statekeeper tls init`: a local CA and node certificates for a dev cluster, and [tls]
turned on in cluster.toml (cluster/certs.py writes the files, node/tls.py reads them).

For production, bring your own CA: set [tls] ca_file / cert_file / key_file by hand.
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statekeeper.cluster.config_file import create_config_if_missing, say
from statekeeper.node import config as node_config

TLS_DIR = "tls"
GROUP_HELP = (
    "TLS for the client and raft ports: a local CA and certificates for a dev cluster",
    "TLS: `tls init` writes a CA and node certificates next to cluster.toml and turns\n"
    '[tls] on (docs/protocol.md, "Security"). For production, point [tls] at your own.',
)


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add the `tls` commands to cluster/cli.py's registry."""
    groups["tls"] = GROUP_HELP
    command(
        "tls",
        "init",
        help="create a CA and node certificates next to cluster.toml and turn [tls] on",
        epilog="  statekeeper tls init\n"
        "  statekeeper tls init --san sk.example.internal --client agent-42 --client-auth optional",
        args=[
            arg(
                "--config",
                "-c",
                default="cluster.toml",
                metavar="PATH",
                help="the cluster config (created with the defaults if missing)",
            ),
            arg(
                "--san",
                action="append",
                default=[],
                metavar="NAME",
                help="an extra DNS name or IP every node certificate carries (repeatable)",
            ),
            arg(
                "--client",
                action="append",
                default=[],
                metavar="NAME",
                help="also write a client certificate tls/client-NAME.pem (repeatable)",
            ),
            arg(
                "--client-auth",
                choices=node_config.CLIENT_AUTH_MODES,
                help="ask clients for a certificate on the client port (default: keep; none)",
            ),
            arg("--no-raft", action="store_true", help="leave the raft port without TLS"),
        ],
    )(cmd_init)


def enable_tls(
    config_path: Path,
    extra_sans: list[str] | None = None,
    clients: list[str] | None = None,
    client_auth: str | None = None,
    raft: bool = True,
) -> tuple[node_config.ClusterConfig, list[Path]]:
    """Write the CA and certificates missing under <config dir>/tls and set [tls] in the
    config (which must exist). Returns the new config and the files written."""
    from statekeeper.cluster.certs import init_cluster_tls

    cfg = node_config.load(config_path)
    tls_dir = config_path.parent / TLS_DIR
    written = init_cluster_tls(
        tls_dir, [(n.id, n.host) for n in cfg.nodes], cfg.name, extra_sans, clients
    )
    tls = dataclasses.replace(
        cfg.tls,
        enabled=True,
        ca_file=f"{TLS_DIR}/ca.pem",
        cert_file=f"{TLS_DIR}/{{id}}.pem",
        key_file=f"{TLS_DIR}/{{id}}-key.pem",
        client_auth=client_auth or cfg.tls.client_auth,
        raft=raft,
    )
    if tls == cfg.tls:  # already so: keep the file as written (its comments)
        return cfg, written
    # Write back what the file holds (the secret stays where it was: file or environment).
    on_disk = node_config.parse(tomllib.loads(config_path.read_text()), cfg.base_dir)
    node_config.write(dataclasses.replace(on_disk, tls=tls), config_path)
    return node_config.load(config_path), written


def cmd_init(args: argparse.Namespace) -> int:
    """Create tls/ca.pem (the CA), tls/<node id>.pem and -key.pem per node (keys 0600),
    and set [tls] enabled = true in the config. Existing files are kept, so running it
    again only adds what is missing (a new node, a new client). Restart the nodes after."""
    path = Path(args.config)
    _, created = create_config_if_missing(path)
    if created:
        say(f"wrote {path} (the default 3-node cluster)")
    cfg, written = enable_tls(path, args.san, args.client, args.client_auth, not args.no_raft)
    for p in written:
        say(f"wrote {p}")
    ca = Path(cfg.base_dir) / cfg.tls.ca_file
    say(
        f"[tls] is on in {path} (client_auth={cfg.tls.client_auth}, raft={cfg.tls.raft}); "
        "restart the nodes to use it"
    )
    say(f"clients: Client([...https URLs...], ca={str(ca)!r}) or STATEKEEPER_CA_FILE={ca}")
    say(f"curl: curl --cacert {ca} {cfg.http_urls()[0]}/v1/status")
    return 0
