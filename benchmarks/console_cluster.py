"""The cluster and the browser-like session the console benchmarks share
(console_agents, console_coordination, console_keys, console_langgraph).

`console_cluster()` starts a 3-node loopback cluster with TLS, auth and [ui] in a
temporary directory and yields a ConsoleCluster: the LocalCluster, the root token, the CA
file, `mint(...)` for a token of narrower grants, and `session(token, node)`: a logged-in
ConsoleSession, one keep-alive HTTPS connection carrying the session cookie as a browser
does. A benchmark imports nothing from tests/ (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import re
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from statekeeper.client import Client
from statekeeper.client.auth.tokens import root_token
from statekeeper.cluster.certs import init_cluster_tls
from statekeeper.cluster.ports import free_ports
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node import config as node_config

HOST = "127.0.0.1"
FORM = "application/x-www-form-urlencoded"


def write_config(directory: Path, fsync: str = "never") -> Path:
    """A 3-node loopback cluster's config with TLS (its CA and certificates written under
    directory/tls), auth and [ui] enabled; returns the config file's path."""
    ports = free_ports(6)
    nodes = tuple(
        node_config.NodeConfig(
            id=f"node-{i}", host=HOST, http_port=ports[2 * i], raft_port=ports[2 * i + 1]
        )
        for i in range(3)
    )
    init_cluster_tls(directory / "tls", [(n.id, n.host) for n in nodes])
    tls = node_config.TlsSettings(
        enabled=True, ca_file="tls/ca.pem", cert_file="tls/{id}.pem", key_file="tls/{id}-key.pem"
    )
    cfg = dataclasses.replace(
        node_config.local_cluster(size=3, fsync=fsync, secret=uuid.uuid4().hex),
        nodes=nodes,
        tls=tls,
        auth=node_config.AuthSettings(enabled=True),
        ui=node_config.UiSettings(enabled=True),
    )
    path = directory / "cluster.toml"
    node_config.write(cfg, path)
    return path


class ConsoleSession:
    """One keep-alive HTTPS connection to a node's console, logged in as a browser is (the
    login form, its CSRF cookie, then the session cookie on every request)."""

    def __init__(self, url: str, tls: Any, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPSConnection(
            parts.hostname, parts.port, context=tls, timeout=timeout
        )
        self.cookie = ""

    def request(
        self, method: str, path: str, body: str = "", cookie: str = ""
    ) -> tuple[http.client.HTTPResponse, bytes]:
        headers = {"Cookie": cookie or self.cookie}
        if method == "POST":
            headers["Content-Type"] = FORM
        self.conn.request(method, path, body=body or None, headers=headers)
        resp = self.conn.getresponse()
        return resp, resp.read()

    def get(self, path: str) -> tuple[int, bytes]:
        resp, body = self.request("GET", path)
        return resp.status, body

    def login(self, token: str) -> str:
        """Logs in with `token`; returns the session cookie ("sk_console=...")."""
        _, page = self.request("GET", "/ui/login")
        nonce = re.search(r'name="csrf" value="([^"]+)"', page.decode()).group(1)
        form = urlencode({"csrf": nonce, "token": token})
        resp, _ = self.request("POST", "/ui/login", form, cookie=f"sk_console_login={nonce}")
        cookie = next(
            v for k, v in resp.getheaders() if k.lower() == "set-cookie" and "sk_console=" in v
        )
        self.cookie = cookie.split(";", 1)[0]
        return self.cookie

    def close(self) -> None:
        self.conn.close()


@dataclasses.dataclass
class ConsoleCluster:
    lc: LocalCluster
    token: str  # the root token (derived from the cluster secret)
    ca: str  # the CA file, for clients in other processes

    @property
    def urls(self) -> list[str]:
        return self.lc.config.http_urls()

    def mint(self, **grant: Any) -> str:
        """A token of `grant` (e.g. ns="bench", role="writer"), minted with the root token."""
        with Client(self.urls, token=self.token, tls=self.lc.tls) as c:
            return c.auth_token_create(name="bench", **grant).token

    def session(self, token: str | None = None, node: str = "node-0") -> ConsoleSession:
        """A ConsoleSession on `node`'s console, logged in with `token` (default: root)."""
        session = ConsoleSession(self.lc.config.url(node), self.lc.tls)
        session.login(token or self.token)
        return session


@contextlib.contextmanager
def console_cluster(fsync: str = "never", parent: Path | None = None) -> Iterator[ConsoleCluster]:
    """A running 3-node TLS+auth+[ui] cluster in a temporary directory (under `parent` if
    given), killed and removed after the block."""
    with tempfile.TemporaryDirectory(prefix="sk-console-bench-", dir=parent) as tmp:
        path = write_config(Path(tmp), fsync)
        cfg = node_config.load(path)
        lc = LocalCluster(cfg, path)
        try:
            lc.up(timeout=60.0)
            yield ConsoleCluster(lc, root_token(cfg.secret), str(Path(tmp) / "tls" / "ca.pem"))
        finally:
            lc.kill_all()
            lc.close()
