"""Structural checks of docker-compose.yml, Dockerfile and docker/cluster.toml.

There is no Docker engine here, so the files are parsed (PyYAML) and cross-checked;
tests/unit/test_deploy_tools.py runs `docker-compose config` and hadolint on them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from statekeeper.node import config as node_config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
NODE_IDS = ["node-0", "node-1", "node-2"]
CONFIG_IN_CONTAINER = "/etc/statekeeper/cluster.toml"
DATA_IN_CONTAINER = "/var/lib/statekeeper"


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


def _host_port(mapping: str) -> tuple[int, int]:
    host, _, container = str(mapping).rpartition(":")
    return int(host), int(container.split("/")[0])


def test_three_nodes_and_toxiproxy(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert sorted(s for s in services if s.startswith("node-")) == NODE_IDS
    assert "toxiproxy" in services
    assert "shopify/toxiproxy" in services["toxiproxy"]["image"]


@pytest.mark.parametrize("node_id", NODE_IDS)
def test_node_service_runs_statekeeper_node(compose: dict[str, Any], node_id: str) -> None:
    svc = compose["services"][node_id]
    assert "build" in svc or "image" in svc
    cmd = svc["command"]
    assert cmd[0] == "node"
    assert cmd[cmd.index("--config") + 1] == CONFIG_IN_CONTAINER
    assert cmd[cmd.index("--id") + 1] == node_id
    # The secret comes from a compose secret file, never an environment value.
    assert "STATEKEEPER_SECRET" not in svc["environment"]
    assert svc["environment"]["STATEKEEPER_SECRET_FILE"] == "/run/secrets/statekeeper_secret"
    assert svc["secrets"] == ["statekeeper_secret"]
    assert compose["secrets"]["statekeeper_secret"] == {"file": "./docker/secret"}


def test_ports_are_distinct_and_match_the_config(compose: dict[str, Any]) -> None:
    cfg = node_config.load(ROOT / "docker" / "cluster.toml")
    host_ports = []
    for nid in NODE_IDS:
        ports = [_host_port(p) for p in compose["services"][nid]["ports"]]
        assert len(ports) == 1
        host, container = ports[0]
        # Same number outside and inside, so reported leader URLs work from the host too.
        assert host == container == cfg.node(nid).http_port
        host_ports.append(host)
    assert sorted(host_ports) == [7000, 7001, 7002]
    all_ports = [_host_port(p)[0] for s in compose["services"].values() for p in s.get("ports", [])]
    assert len(all_ports) == len(set(all_ports))


def test_one_volume_per_node_and_a_shared_config(compose: dict[str, Any]) -> None:
    declared = compose["volumes"]
    data_volumes, config_sources = [], set()
    for nid in NODE_IDS:
        mounts = [str(v).split(":") for v in compose["services"][nid]["volumes"]]
        data = [m[0] for m in mounts if m[1] == DATA_IN_CONTAINER]
        assert len(data) == 1 and data[0] in declared
        data_volumes.append(data[0])
        conf = [m for m in mounts if m[1] == CONFIG_IN_CONTAINER]
        assert len(conf) == 1 and conf[0][2:] == ["ro"]
        config_sources.add(conf[0][0])
    assert len(set(data_volumes)) == 3
    assert len(config_sources) == 1
    source = ROOT / config_sources.pop()
    assert source.is_file()


def test_docker_cluster_config_matches_services() -> None:
    cfg = node_config.load(ROOT / "docker" / "cluster.toml")
    assert [n.id for n in cfg.nodes] == NODE_IDS
    assert [n.host for n in cfg.nodes] == NODE_IDS  # compose service names resolve in-network
    for nid in NODE_IDS:
        assert cfg.node_data_dir(nid).is_relative_to(DATA_IN_CONTAINER)
    raw = tomllib.loads((ROOT / "docker" / "cluster.toml").read_text())
    # Never committed: it comes from the compose secret (STATEKEEPER_SECRET_FILE).
    assert "secret" not in raw["cluster"] and "secret_file" not in raw["cluster"]


def test_dockerfile() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.1[1-9]", text, re.M)
    assert "pip install" in text
    assert re.search(r'^ENTRYPOINT \["statekeeper"\]', text, re.M)


def test_compose_runs_with_tls_and_auth_on(compose: dict[str, Any]) -> None:
    """Issue 15: the compose cluster is not open to whoever reaches its ports."""
    cfg = node_config.load(ROOT / "docker" / "cluster.toml")
    assert cfg.tls.enabled and cfg.tls.raft and cfg.auth.enabled
    assert cfg.tls.ca_file == "tls/ca.pem" and "{id}" in cfg.tls.cert_file
    for nid in NODE_IDS:
        svc = compose["services"][nid]
        mounts = [str(v).split(":") for v in svc["volumes"]]
        assert ["./docker/tls", "/etc/statekeeper/tls", "ro"] in mounts
        probe = " ".join(svc["healthcheck"]["test"])
        assert "https://" in probe and "/etc/statekeeper/tls/ca.pem" in probe
