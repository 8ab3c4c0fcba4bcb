"""A client made without endpoints reads them where the CLI does (issue 30 item 15):
$STATEKEEPER_ENDPOINTS, else ./cluster.toml (what `make up` writes in a checkout), else it
refuses with ``no_endpoints`` instead of guessing http://127.0.0.1:7000. Both clients and
the CLI go through one function (client/locate.py), so the three cannot drift apart."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from statekeeper.client import AsyncClient, Client
from statekeeper.client.errors import NoEndpoints
from statekeeper.cluster import cli, client_cli
from statekeeper.cluster.config_file import create_config_if_missing


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory and no $STATEKEEPER_ENDPOINTS."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STATEKEEPER_ENDPOINTS", raising=False)
    return tmp_path


def _endpoints_of(make) -> tuple[str, ...]:
    if make is AsyncClient:

        async def build() -> tuple[str, ...]:
            async with AsyncClient() as c:
                return c.endpoints

        return asyncio.run(build())
    with Client() as c:
        return c.endpoints


@pytest.mark.parametrize("make", [Client, AsyncClient])
def test_the_environment_names_the_nodes(make, elsewhere, monkeypatch) -> None:
    monkeypatch.setenv("STATEKEEPER_ENDPOINTS", "http://10.1.0.1:7000, 10.1.0.2:7000")
    assert _endpoints_of(make) == ("http://10.1.0.1:7000", "http://10.1.0.2:7000")


@pytest.mark.parametrize("make", [Client, AsyncClient])
def test_without_endpoints_anywhere_the_client_refuses_to_guess(make, elsewhere) -> None:
    with pytest.raises(NoEndpoints) as ei:
        _endpoints_of(make)
    assert ei.value.code == "no_endpoints" and isinstance(ei.value, ValueError)
    message = str(ei.value)
    assert "STATEKEEPER_ENDPOINTS" in message and "cluster.toml" in message
    assert "7000" not in message.replace("HOST:PORT", "")


@pytest.mark.parametrize("make", [Client, AsyncClient])
def test_a_checkout_with_make_ups_cluster_toml_uses_its_nodes(make, elsewhere) -> None:
    create_config_if_missing(elsewhere / "cluster.toml", base_port=8400)
    assert _endpoints_of(make) == tuple(f"http://127.0.0.1:{p}" for p in (8400, 8401, 8402))


def test_tls_and_hosts_of_cluster_toml(elsewhere) -> None:
    (elsewhere / "cluster.toml").write_text(
        '[tls]\nenabled = true\n[[nodes]]\nid = "a"\nhost = "10.2.0.1"\nhttp_port = 7000\n'
        'raft_port = 7100\n[[nodes]]\nid = "b"\nhttp_port = 7001\nraft_port = 7101\n'
    )
    with Client(tls=ssl.create_default_context()) as c:
        assert c.endpoints == ("https://10.2.0.1:7000", "https://127.0.0.1:7001")


def test_reading_cluster_toml_needs_no_server_dependency(elsewhere) -> None:
    """A client-only install has no msgspec or tomli-w (node/config.py's parser needs them)."""
    create_config_if_missing(elsewhere / "cluster.toml", base_port=8400)
    code = (
        "import sys\n"
        "sys.modules['msgspec'] = sys.modules['tomli_w'] = None  # as if not installed\n"
        "from statekeeper import Client\n"
        "print(','.join(Client().endpoints))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=elsewhere, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "http://127.0.0.1:8400,http://127.0.0.1:8401,http://127.0.0.1:8402"


def test_the_environment_wins_over_cluster_toml(elsewhere, monkeypatch) -> None:
    create_config_if_missing(elsewhere / "cluster.toml", base_port=8400)
    monkeypatch.setenv("STATEKEEPER_ENDPOINTS", "http://10.1.0.9:7000")
    with Client() as c:
        assert c.endpoints == ("http://10.1.0.9:7000",)


def test_an_unreadable_cluster_toml_is_named(elsewhere) -> None:
    (elsewhere / "cluster.toml").write_text("nodes = 3\n")
    with pytest.raises(NoEndpoints, match="cluster.toml"):
        Client()


def test_the_cli_reads_the_same_places(elsewhere, monkeypatch) -> None:
    args = cli.build_parser().parse_args(["agent", "list", "--config", "none.toml"])
    with pytest.raises(NoEndpoints, match="no cluster.toml found"):
        client_cli.endpoints(args)
    monkeypatch.setenv("STATEKEEPER_ENDPOINTS", "http://a:1,http://b:2")
    assert client_cli.endpoints(args) == ["http://a:1", "http://b:2"]
    args.endpoints = "http://c:3"
    assert client_cli.endpoints(args) == ["http://c:3"]


@pytest.mark.parametrize(
    "argv", [["get", "k"], ["agent", "list"], ["stream", "list"], ["lease", "list"]]
)
def test_a_command_outside_a_config_directory_says_so(argv, elsewhere, capsys) -> None:
    code = cli.main(argv)
    _, err = capsys.readouterr()
    assert code == 2, err
    assert "no cluster.toml found" in err and "STATEKEEPER_ENDPOINTS" in err
    assert "Traceback" not in err and "cannot connect" not in err
