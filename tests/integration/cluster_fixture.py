"""Pytest fixtures that run a real statekeeper cluster on loopback.

- `cluster_config`: writes a cluster config with free ports under tmp_path and
  returns a WrittenConfig(path, config); starts nothing (for tests that start
  nodes themselves). Any node still running from that config is killed at teardown.
- `cluster`: the same config, started with LocalCluster.up(); yields the
  LocalCluster; kills it after the test, and after a failing one prints the tail of
  every node.log first.
- `shared_cluster` (TLS and auth on) and `plain_shared_cluster` (neither): one cluster
  per module, for tests that do not fault it (no kill, pause, partition, restart or
  config change); such tests keep to their own keys or namespaces.

Options per test: @pytest.mark.cluster_options(size=5, fsync="always",
election_timeout_min=0.2, election_timeout_max=0.5, gc_interval_seconds=0.5, auth=True,
node_command=[...], env={...}, ready_timeout=90). `auth=True` sets [auth] enabled = true
(clients then need a token: client.auth.tokens.root_token(config.secret) is the root one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from statekeeper.chaos.partition import with_link_addresses
from statekeeper.client.tls import CA_ENV, CERT_ENV, KEY_ENV
from statekeeper.cluster.certs import init_cluster_tls
from statekeeper.cluster.ports import free_ports
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node import config as node_config
from statekeeper.node.config import ClusterConfig, NodeConfig

HOST = "127.0.0.1"

_CONFIG_OPTIONS = {
    "size",
    "fsync",
    "link_addresses",
    "gc_interval_seconds",
    "tls",
    "client_auth",
    "auth",
    "storage",
    "ui",
} | {f.name for f in dataclasses.fields(node_config.RaftSettings)}
_CLUSTER_OPTIONS = {"node_command", "env", "ready_timeout"}


class WrittenConfig(NamedTuple):
    path: Path
    config: ClusterConfig


def write_test_config(
    directory: Path,
    size: int = 3,
    fsync: str = "never",
    link_addresses: bool = False,
    gc_interval_seconds: float | None = None,
    tls: bool = False,
    client_auth: str = "none",
    auth: bool = False,
    storage: dict[str, Any] | None = None,
    ui: bool = False,
    **raft: Any,
) -> WrittenConfig:
    """Write `<directory>/cluster.toml` for `size` nodes on free loopback ports.

    fsync defaults to "never": tests kill processes, not machines, and it is faster.
    tls: a CA and certificates in `<directory>/tls` (cluster.certs, with a client
    certificate `client-test`), [tls] on with `client_auth`; clients then need
    `ca=` (tls_env() gives the variables).
    storage: [storage] settings (StorageSettings fields), e.g. {"reserve_bytes": 8 << 20}.
    ui: [ui] enabled = true (every node serves the web console at /ui).
    Extra keyword arguments override RaftSettings fields.
    """
    ports = free_ports(2 * size)
    nodes = tuple(
        NodeConfig(id=f"node-{i}", host=HOST, http_port=ports[2 * i], raft_port=ports[2 * i + 1])
        for i in range(size)
    )
    base = node_config.local_cluster(size=size, fsync=fsync, secret="test-secret")
    cfg = dataclasses.replace(
        base,
        nodes=nodes,
        raft=dataclasses.replace(base.raft, **raft),
    )
    if gc_interval_seconds is not None:  # the leader's retention GC period
        retention = dataclasses.replace(cfg.retention, gc_interval_seconds=gc_interval_seconds)
        cfg = dataclasses.replace(cfg, retention=retention)
    if storage:  # [storage]: the quota and its NOSPACE alarm
        cfg = dataclasses.replace(cfg, storage=node_config.StorageSettings(**storage))
    if auth:  # [auth] enabled = true
        cfg = dataclasses.replace(cfg, auth=node_config.AuthSettings(enabled=True))
    if ui:  # [ui] enabled = true: the web console at /ui
        cfg = dataclasses.replace(cfg, ui=node_config.UiSettings(enabled=True))
    if link_addresses:  # one loopback address per raft link, for iptables partitions
        cfg = with_link_addresses(cfg)
    if tls:
        init_cluster_tls(directory / "tls", [(n.id, n.host) for n in nodes], clients=["test"])
        settings = node_config.TlsSettings(
            enabled=True,
            ca_file="tls/ca.pem",
            cert_file="tls/{id}.pem",
            key_file="tls/{id}-key.pem",
            client_auth=client_auth,
        )
        cfg = dataclasses.replace(cfg, tls=settings)
    node_config.validate(cfg)
    path = directory / "cluster.toml"
    node_config.write(cfg, path)
    # Load it back: that is what the nodes will see (base_dir resolved, env applied).
    return WrittenConfig(path, node_config.load(path))


def tls_env(cfg: ClusterConfig, client_cert: bool = False) -> dict[str, str]:
    """The variables that make Client/AsyncClient (client/tls.py) trust the test CA and,
    with `client_cert`, present the test client certificate."""
    if not cfg.tls.enabled:
        return {}
    tls_dir = Path(cfg.base_dir) / "tls"
    env = {CA_ENV: str(tls_dir / "ca.pem")}
    if client_cert:
        env |= {
            CERT_ENV: str(tls_dir / "client-test.pem"),
            KEY_ENV: str(tls_dir / "client-test-key.pem"),
        }
    return env


def raw_connection(
    lc: LocalCluster, node_id: str, timeout: float = 15.0
) -> http.client.HTTPConnection:
    """A bare http.client connection to a node's client port (HTTPS, trusting the
    cluster CA, when [tls] is on): for tests that send what the clients would not."""
    n = lc.config.node(node_id)
    if lc.config.tls.enabled:
        return http.client.HTTPSConnection(n.host, n.http_port, timeout=timeout, context=lc.tls)
    return http.client.HTTPConnection(n.host, n.http_port, timeout=timeout)


def raw_headers(content_type: str) -> dict[str, str]:
    """Headers of a raw request: the content type, and the bearer token the clients would
    send ($STATEKEEPER_TOKEN, set for the shared cluster)."""
    headers = {"Content-Type": content_type}
    token = os.environ.get("STATEKEEPER_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _options(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker("cluster_options")
    opts = dict(marker.kwargs) if marker else {}
    unknown = set(opts) - _CONFIG_OPTIONS - _CLUSTER_OPTIONS
    if unknown:
        raise pytest.UsageError(f"unknown cluster_options: {', '.join(sorted(unknown))}")
    return opts


def _test_failed(request: pytest.FixtureRequest) -> bool:
    # rep_setup / rep_call are set by the makereport hook in tests/conftest.py.
    return any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
        for when in ("setup", "call")
    )


def print_logs(lc: LocalCluster, lines: int = 60) -> None:
    for nid in lc.node_ids:
        tail = lc.log_tail(nid, lines)
        print(f"\n===== {nid}: last {lines} lines of {lc.log_file(nid)} =====", file=sys.stderr)
        print(tail or "(empty)", file=sys.stderr)


def _progress(msg: str) -> None:
    # stderr is captured by pytest and shown only for failing tests.
    print(f"[cluster] {msg}", file=sys.stderr, flush=True)


@pytest.fixture
def cluster_config(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[WrittenConfig]:
    opts = _options(request)
    written = write_test_config(tmp_path, **{k: v for k, v in opts.items() if k in _CONFIG_OPTIONS})
    yield written
    # Safety net for tests that started nodes themselves and did not stop them.
    sweeper = LocalCluster(written.config, written.path, progress=None)
    for nid in sweeper.node_ids:
        if sweeper.is_running(nid):
            print(f"[cluster] {nid} was left running; killing it", file=sys.stderr)
            sweeper.kill_node(nid)


@pytest.fixture
def cluster(
    cluster_config: WrittenConfig, request: pytest.FixtureRequest
) -> Iterator[LocalCluster]:
    opts = _options(request)
    lc = LocalCluster(
        cluster_config.config,
        cluster_config.path,
        node_command=opts.get("node_command"),
        env=opts.get("env"),
        progress=_progress,
    )
    try:
        lc.up(timeout=opts.get("ready_timeout", 60.0))
    except BaseException:
        print_logs(lc)
        lc.kill_all()
        lc.close()
        raise
    try:
        yield lc
    finally:
        if _test_failed(request):
            print_logs(lc)
        # Killed, not stopped: a graceful stop took a median 1.52 s per test (the leader
        # hands over first), 126 s of the default run, and asserted nothing. The graceful
        # stop has its own tests (test_graceful.py, test_supervisor.py).
        lc.kill_all()
        lc.close()


# The shared cluster runs TLS and auth (see shared_cluster); False: plain, for debugging.
SHARED_SECURE = True


def mint_token(lc: LocalCluster, **grant: Any) -> str:
    """A token minted with the root token (derived from the cluster secret), e.g.
    mint_token(lc, ns="*", role="admin"), through a client that trusts the cluster CA."""
    from statekeeper.client import Client
    from statekeeper.client.auth.tokens import root_token

    urls = lc.config.http_urls()
    with Client(urls, token=root_token(lc.config.secret), tls=lc.tls) as c:
        return c.auth_token_create(name="tests", **grant).token


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One cluster for a whole module, for tests that do not fault it (bad input, API).

    It runs the way production should: HTTPS on both ports and [auth] on. The clients of
    these tests trust the cluster CA through $STATEKEEPER_CA_FILE (client/tls.py) and send
    a token minted for the module (admin of every namespace) through $STATEKEEPER_TOKEN,
    both set for the module: every client, CLI subprocess and child process goes through
    TLS and the token check. Grants and refusals are tests/integration/test_auth.py's."""
    directory = tmp_path_factory.mktemp("shared")
    with pytest.MonkeyPatch.context() as env:
        env.delenv("STATEKEEPER_TOKEN", raising=False)
        env.delenv("STATEKEEPER_TOKEN_FILE", raising=False)
        with running_cluster(directory, tls=SHARED_SECURE, auth=SHARED_SECURE) as lc:
            for name, value in tls_env(lc.config).items():
                env.setenv(name, value)
            if SHARED_SECURE:
                env.setenv("STATEKEEPER_TOKEN", mint_token(lc, ns="*", role="admin"))
            yield lc


@pytest.fixture(scope="module")
def plain_shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One plain cluster (no TLS, no auth, default options) for a whole module, for tests
    that do not fault it but must see the wire as it is (raw HTTP, exact entry sizes)."""
    with running_cluster(tmp_path_factory.mktemp("plain")) as lc:
        yield lc


@contextlib.contextmanager
def running_cluster(directory: Path, **options: Any) -> Iterator[LocalCluster]:
    """A cluster configured by write_test_config(directory, **options), up for the block;
    its nodes' logs are printed if the block fails, and it is killed after."""
    written = write_test_config(directory, **options)
    with running(LocalCluster(written.config, written.path, progress=_progress)) as lc:
        yield lc


@contextlib.contextmanager
def running(lc: LocalCluster) -> Iterator[LocalCluster]:
    """`lc` started for the block; its nodes' logs are printed if the block fails, and it
    is killed after (for a cluster whose config a test prepared itself)."""
    with killed_after(lc):
        lc.up()
        yield lc


@contextlib.contextmanager
def killed_after(lc: LocalCluster) -> Iterator[LocalCluster]:
    """`lc` for the block (a test that starts its nodes itself); their logs are printed if
    the block fails, and every node is killed after."""
    try:
        yield lc
    except BaseException:
        print_logs(lc)
        raise
    finally:
        lc.kill_all()
        lc.close()
