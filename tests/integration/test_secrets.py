"""No secret in logs, status or errors: a real 3-node cluster (TLS and auth on) with its
secret in a file is taken through writes, failed peer authentication (a crafted connection
and a node with the wrong secret), config errors, and a bearer token's whole life (minted
by the CLI, used, refused for another namespace, a forged variant refused, revoked, refused);
then every node log, every /v1/status answer and all CLI output are searched for the
secret (and its hex and base64 forms, and the peer key derived from it), the root token
derived from it, and the token (whole, its secret part, and the hash the store keeps). No
node's command line may hold the secret either."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

from statekeeper.client import Client, PermissionDenied, Unauthenticated
from statekeeper.client.auth.tokens import parse_token, root_token, secret_hash
from statekeeper.cluster import cli
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node import config as node_config
from statekeeper.node.raft.peers import KDF_SALT
from tests.integration.cluster_fixture import tls_env

pytestmark = pytest.mark.integration


def _forms(secret: str) -> list[str]:
    """The secret as it could leak: raw, hex, base64, and the AES key peers derive from it."""
    raw = secret.encode()
    kdf = PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=KDF_SALT, iterations=200_000)
    key = kdf.derive(raw)
    out = [secret, raw.hex(), key.hex()]
    for b in (raw, key):
        out += [base64.b64encode(b).decode(), base64.urlsafe_b64encode(b).decode()]
    out += [f.rstrip("=") for f in out]
    return sorted(set(out))


def _leaks(text: str, secret: str) -> list[str]:
    return [f for f in _forms(secret) if f in text or f.lower() in text.lower()]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out + out.err


def _token_forms(token: str) -> list[str]:
    """A bearer token as it could leak: whole, its secret part, the stored hash of it."""
    parsed = parse_token(token)
    assert parsed is not None
    return [token, parsed[1], secret_hash(parsed[1])]


@pytest.mark.cluster_options(tls=True, auth=True)
def test_no_secret_in_logs_status_errors_or_command_lines(
    cluster_config, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.delenv("STATEKEEPER_SECRET", raising=False)
    monkeypatch.delenv("STATEKEEPER_SECRET_FILE", raising=False)
    path, cfg = cluster_config
    secret, wrong = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    node_config.write_secret_file(tmp_path / "secret", secret)
    node_config.write(dataclasses.replace(cfg, secret="", secret_file="secret"), path)
    assert secret not in path.read_text()
    lc = LocalCluster(node_config.load(path), path, progress=None)
    captured: list[str] = []
    try:
        rc, out = _cli(capsys, "cluster", "up", "--config", str(path))
        captured.append(out)
        assert rc == 0, out
        # No node's command line holds the secret (anyone can read it in ps).
        for nid in lc.node_ids:
            cmdline = Path(f"/proc/{lc.pid(nid)}/cmdline").read_bytes().replace(b"\0", b" ")
            assert b"--config" in cmdline
            assert not _leaks(cmdline.decode(), secret), cmdline

        for name, value in tls_env(lc.config).items():
            monkeypatch.setenv(name, value)
        urls = [lc.url(n) for n in lc.node_ids]
        root = root_token(secret)
        with Client(urls, token=root) as c:
            for i in range(20):
                c.put(f"k{i}", f"v{i}".encode())

        # A token's life: minted by the CLI (printed once, on stdout, and nowhere else)...
        rc = cli.main(
            [
                "auth",
                "token",
                "create",
                "--config",
                str(path),
                "--ns",
                "agent-1",
                "--role",
                "writer",
                "--ttl",
                "1h",
            ]
        )
        out = capsys.readouterr()
        assert rc == 0, out.err
        token = out.out.strip()
        captured.append(out.err)
        token_id = parse_token(token)[0]
        assert token_id in out.err
        # ...used, refused outside its grant, forged, revoked.
        with Client(urls, ns="agent-1", token=token) as c:
            c.put("history/1", "hello")
            with pytest.raises(PermissionDenied) as denied:
                c.put("x", "y", ns="agent-2")
            captured.append(str(denied.value))
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        with Client(urls, ns="agent-1", token=forged) as c, pytest.raises(Unauthenticated) as e:
            c.get("history/1")
        captured.append(str(e.value))
        rc, out = _cli(capsys, "auth", "token", "revoke", token_id, "--config", str(path))
        assert rc == 0, out
        captured.append(out)
        rc, out = _cli(capsys, "auth", "token", "list", "--config", str(path))
        captured.append(out)
        time.sleep(0.5)  # every node applies the revoke within a raft round
        with Client(urls, ns="agent-1", token=token) as c, pytest.raises(Unauthenticated) as e:
            c.get("history/1")
        captured.append(str(e.value))

        # A crafted connection on a raft port fails authentication...
        target = lc.config.node(lc.node_ids[1])
        with socket.create_connection((target.host, target.raft_port), timeout=5) as s:
            s.sendall(os.urandom(64))
            s.settimeout(10)
            try:
                s.recv(4096)
            except OSError:
                pass
        # ...and so does a node holding the wrong secret.
        victim = lc.node_ids[2]
        lc.stop_node(victim)
        lc.start_node(victim, env={"STATEKEEPER_SECRET": wrong})
        lc.wait_live(victim)
        with Client(urls[:2], token=root) as c:
            c.put("while-wrong", b"1")
        time.sleep(2)
        statuses = {nid: lc.status(nid) for nid in lc.node_ids}
        assert statuses[target.id]["rejected_peer_messages"] >= 1
        captured.append(json.dumps(statuses))
        rc, out = _cli(capsys, "cluster", "status", "--config", str(path), "--json")
        captured.append(out)
        rc, out = _cli(capsys, "cluster", "status", "--config", str(path))
        captured.append(out)

        # Config errors: from the node itself and from the CLI.
        bad = tmp_path / "bad"
        bad.mkdir()
        good = path.read_text()
        variants = {
            "list.toml": good.replace('secret_file = "secret"', f'secret = ["{secret}"]'),
            "both.toml": good.replace(
                'secret_file = "secret"', f'secret_file = "secret"\nsecret = "{secret}"'
            ),
            "missing.toml": good.replace('secret_file = "secret"', 'secret_file = "nope"'),
        }
        for name, text in variants.items():
            assert text != good
            (bad / name).write_text(text)
            res = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "statekeeper.node",
                    "--config",
                    str(bad / name),
                    "--id",
                    "node-0",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert res.returncode == 2, res.stderr
            captured.append(res.stdout + res.stderr)
            rc, out = _cli(capsys, "cluster", "status", "--config", str(bad / name))
            assert rc == 2 and "error" in out
            captured.append(out)
        rc, out = _cli(capsys, "node", "--config", str(path), "--id", "node-0", "--secret", secret)
        assert rc == 2
        captured.append(out)
    finally:
        rc, out = _cli(capsys, "cluster", "down", "--config", str(path))
        captured.append(out)
        lc.close()

    logs = {nid: lc.log_file(nid).read_text() for nid in lc.node_ids}
    # The run really happened: the nodes said where the secret came from, and rejected peers.
    assert all(f"cluster secret from file {tmp_path / 'secret'}" in t for t in logs.values())
    assert "cluster secret from $STATEKEEPER_SECRET" in logs[victim]
    assert "failed authentication" in "".join(logs.values())
    # ...and refused the token outside its grant, the forged one and the revoked one, by id.
    everything = "".join(logs.values())
    assert f"permission_denied: token {token_id}" in everything
    assert everything.count(f"unauthenticated: token {token_id}") >= 2
    for where, text in [*logs.items(), *enumerate(captured)]:
        for s in (secret, wrong):
            assert not _leaks(text, s), f"the secret appears in {where}"
        for form in [root, *_token_forms(token), *_token_forms(forged)]:
            assert form not in text, f"a token (or its hash) appears in {where}"
