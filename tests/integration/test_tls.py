"""TLS on the client port (issue 15 item 1): real nodes serving HTTPS with certificates from
cluster/certs.py's local CA; both clients verify the server; mTLS when the config asks."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from statekeeper.client import AsyncClient, Client, PermissionDenied, TlsError, Unauthenticated
from statekeeper.client.retry import RetryPolicy
from statekeeper.cluster.certs import init_cluster_tls
from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration


def _tls_dir(cluster: LocalCluster) -> Path:
    return Path(cluster.config.base_dir) / "tls"


def _ca(cluster: LocalCluster) -> str:
    return str(_tls_dir(cluster) / "ca.pem")


def test_both_clients_speak_https_and_verify_the_node(shared_cluster: LocalCluster):
    urls = shared_cluster.config.http_urls()
    assert all(u.startswith("https://") for u in urls)
    with Client(urls, ns="tls", ca=_ca(shared_cluster)) as c:
        rev = c.put("k", "over tls").revision
        assert c.get("k").text == "over tls"

    async def run() -> list[str]:
        async with AsyncClient(urls, ns="tls", ca=_ca(shared_cluster)) as ac:
            assert (await ac.get("k")).text == "over tls"
            seen = []
            async for ev in ac.watch("k", start_revision=rev):
                seen.append(ev.kv.text)
                break
            return seen

    assert asyncio.run(run()) == ["over tls"]


def test_a_client_that_does_not_trust_the_ca_fails_fast_and_clearly(
    shared_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("STATEKEEPER_CA_FILE", raising=False)
    urls = shared_cluster.config.http_urls()
    with Client(urls, ns="tls", retry=RetryPolicy(deadline=5.0)) as c:
        with pytest.raises(TlsError) as e:
            c.put("k", "v")
    assert e.value.code == "tls_failed" and "certificate verify failed" in str(e.value)
    assert e.value.attempts == 1  # a configuration problem: not retried

    async def run() -> None:
        async with AsyncClient(urls, ns="tls") as ac:
            await ac.put("k", "v")

    with pytest.raises(TlsError):
        asyncio.run(run())
    # Another CA's certificate does not pass either.
    other = _tls_dir(shared_cluster).parent / "other-ca"
    init_cluster_tls(other, [])
    with Client(urls, ns="tls", ca=other / "ca.pem") as c, pytest.raises(TlsError):
        c.get("k")


def test_plain_http_to_the_tls_port_gets_no_answer(shared_cluster: LocalCluster):
    node = shared_cluster.config.nodes[0]
    conn = http.client.HTTPConnection(node.host, node.http_port, timeout=10)
    body = json.dumps({"key": "k", "value": "v"})
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        conn.request("POST", "/v1/kv/put", body, {"Content-Type": "application/json"})
        conn.getresponse().read()
    conn.close()
    # ... and nothing was written.
    with Client(shared_cluster.config.http_urls(), ns="default", ca=_ca(shared_cluster)) as c:
        assert c.get("k", default=None) is None


@pytest.mark.cluster_options(tls=True, client_auth="required")
def test_mtls_required_refuses_clients_without_a_certificate(cluster: LocalCluster):
    urls = cluster.config.http_urls()
    tls_dir = _tls_dir(cluster)
    with Client(urls, ns="mtls", ca=_ca(cluster), retry=RetryPolicy(deadline=5.0)) as c:
        with pytest.raises(TlsError):
            c.put("k", "v")
    cert, key = tls_dir / "client-test.pem", tls_dir / "client-test-key.pem"
    with Client(urls, ns="mtls", ca=_ca(cluster), cert=cert, key=key) as c:
        c.put("k", "with a certificate")
        assert c.get("k").text == "with a certificate"

    async def run() -> str:
        async with AsyncClient(urls, ns="mtls", ca=_ca(cluster), cert=cert, key=key) as ac:
            return (await ac.get("k")).text

    assert asyncio.run(run()) == "with a certificate"
    # The supervisor's probes (status, readiness) present a node certificate.
    assert cluster.leader_id() is not None


def test_the_env_variables_configure_the_clients(shared_cluster: LocalCluster, monkeypatch):
    monkeypatch.setenv("STATEKEEPER_CA_FILE", _ca(shared_cluster))
    with Client(shared_cluster.config.http_urls(), ns="env") as c:
        c.put("k", "v")
        assert c.get("k").text == "v"


def test_cli_tls_init_writes_private_keys_0600(tmp_path: Path):
    cfg = tmp_path / "cluster.toml"
    out = subprocess.run(
        [sys.executable, "-m", "statekeeper.cluster.cli", "tls", "init", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert out.returncode == 0, out.stderr
    tls_dir = tmp_path / "tls"
    keys = sorted(p.name for p in tls_dir.glob("*-key.pem"))
    assert keys == ["ca-key.pem", "node-0-key.pem", "node-1-key.pem", "node-2-key.pem"]
    for k in keys:
        assert (tls_dir / k).stat().st_mode & 0o777 == 0o600
    text = cfg.read_text()
    assert "[tls]" in text and "enabled = true" in text
    # The node certificate names the node id, localhost and the loopback address.
    ctx = ssl.create_default_context(cafile=tls_dir / "ca.pem")
    ctx.load_cert_chain(tls_dir / "node-0.pem", tls_dir / "node-0-key.pem")
    assert "tls init" in out.stdout or "wrote" in out.stdout


def _free_base_port() -> int:
    """A base port P with P..P+2 and P+100..P+102 free (cluster up's fixed layout)."""
    import random
    import socket

    for _ in range(200):
        base = random.randrange(20000, 40000)
        try:
            socks = []
            for p in (*range(base, base + 3), *range(base + 100, base + 103)):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port block")


@pytest.mark.timeout(300)
def test_the_readme_secure_cluster_in_two_commands(tmp_path: Path, monkeypatch) -> None:
    """README "Security": `cluster up --tls --auth`, then `auth token create`; the token
    works over HTTPS in its namespace and nowhere else, and nothing works without it."""
    for var in ("STATEKEEPER_TOKEN", "STATEKEEPER_TOKEN_FILE", "STATEKEEPER_CA_FILE"):
        monkeypatch.delenv(var, raising=False)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "statekeeper.cluster.cli", *argv],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=tmp_path,
            env=env,
        )

    base = _free_base_port()
    up = cli("cluster", "up", "--tls", "--auth", "--base-port", str(base), "--fsync", "never")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "--cacert" in up.stdout and "Authorization: Bearer" in up.stdout
        made = cli(
            "auth", "token", "create", "--ns", "agent-42", "--role", "writer", "--ttl", "30d"
        )
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip()
        assert token.startswith("sk_") and token not in made.stderr
        urls = [f"https://127.0.0.1:{base + i}" for i in range(3)]
        ca = tmp_path / "tls" / "ca.pem"
        with Client(urls, ns="agent-42", ca=ca, token=token) as c:
            c.put("chat/0001", "user: hello")
            assert c.get("chat/0001").text == "user: hello"
            with pytest.raises(PermissionDenied):
                c.get("chat/0001", ns="agent-43")
        with Client(urls, ns="agent-42", ca=ca) as c, pytest.raises(Unauthenticated):
            c.get("chat/0001")
    finally:
        cli("cluster", "down")
