"""The auth pieces of the CLI, config and clients without a cluster: [auth] in cluster.toml, TTL
parsing, the refusal of a token flag, how the CLI picks its credential, the token format,
and how both clients send the token."""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
from pathlib import Path

import pytest

from statekeeper.client.auth.tokens import new_token, parse_token, root_token
from statekeeper.cluster import auth_cli, client_cli
from statekeeper.node import config as node_config
from statekeeper.node.config import AuthSettings, ConfigError


def test_auth_table_round_trips_and_rejects_unknown_keys() -> None:
    cfg = node_config.local_cluster(size=1, secret="s")
    assert cfg.auth == AuthSettings(enabled=False)
    on = dataclasses.replace(cfg, auth=AuthSettings(enabled=True))
    text = node_config.dumps(on)
    assert "[auth]\nenabled = true" in text
    assert node_config.parse(tomllib.loads(text)).auth.enabled is True
    raw = tomllib.loads(text)
    raw["auth"]["enable"] = True
    with pytest.raises(ConfigError, match=r"^auth\.enable: unknown setting"):
        node_config.parse(raw)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86400), ("12h", 43200), ("15m", 900), ("3600s", 3600), ("90", 90), ("0", 0)],
)
def test_ttl_parsing(text: str, seconds: int) -> None:
    assert auth_cli.parse_ttl(text) == seconds


@pytest.mark.parametrize("text", ["", "1w", "-1d", "d", "1.5h"])
def test_bad_ttl(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        auth_cli.parse_ttl(text)


def test_token_flags_are_refused_token_file_is_not() -> None:
    assert auth_cli.token_flag_error(["--token", "x"])
    assert auth_cli.token_flag_error(["--token=x"])
    assert auth_cli.token_flag_error(["--bearer-token", "x"])
    assert auth_cli.token_flag_error(["--token-file", "p"]) is None


def test_token_format() -> None:
    token, tid, digest = new_token()
    assert parse_token(token) == (tid, token.split("_", 2)[2])
    assert len(tid) == 16 and len(digest) == 64 and digest not in token
    assert root_token("a") == root_token("a") != root_token("b")
    assert root_token("a").startswith("sk_root_") and parse_token(root_token("a")) is None


def test_cli_credential_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATEKEEPER_TOKEN", raising=False)
    monkeypatch.delenv("STATEKEEPER_TOKEN_FILE", raising=False)
    monkeypatch.delenv("STATEKEEPER_SECRET", raising=False)
    monkeypatch.delenv("STATEKEEPER_SECRET_FILE", raising=False)
    path = tmp_path / "cluster.toml"
    node_config.write(node_config.local_cluster(size=1, secret="the-secret"), path)
    args = argparse.Namespace(config=str(path), token_file=None)
    assert client_cli.token(args) == root_token("the-secret")  # from the config's secret
    monkeypatch.setenv("STATEKEEPER_TOKEN", "sk_from_env")
    assert client_cli.token(args) is None  # the client reads the environment itself
    token_file = tmp_path / "t"
    token_file.write_text("sk_from_file\n")
    args.token_file = str(token_file)
    assert client_cli.token(args) == "sk_from_file"
    args = argparse.Namespace(config=str(tmp_path / "none.toml"), token_file=None)
    monkeypatch.delenv("STATEKEEPER_TOKEN")
    assert client_cli.token(args) is None


def test_client_token_argument_env_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statekeeper.client import AsyncClient, Client
    from statekeeper.client.aio_connection import Endpoint
    from statekeeper.client.base import bearer
    from statekeeper.client.wire import POST_HEADERS, Request

    monkeypatch.delenv("STATEKEEPER_TOKEN", raising=False)
    monkeypatch.delenv("STATEKEEPER_TOKEN_FILE", raising=False)
    assert bearer(None) == ""
    path = tmp_path / "token"
    path.write_text("sk_file\n")
    monkeypatch.setenv("STATEKEEPER_TOKEN_FILE", str(path))
    assert bearer(None) == "Bearer sk_file"
    monkeypatch.setenv("STATEKEEPER_TOKEN", "sk_env")
    assert bearer(None) == "Bearer sk_env"
    assert bearer("sk_arg") == "Bearer sk_arg"
    with pytest.raises(ValueError):
        bearer("sk_a\r\nX-Evil: 1")
    c = Client("http://127.0.0.1:1", token="sk_secret_value")
    assert "sk_secret_value" not in repr(c)
    headers = c._headers(POST_HEADERS)
    assert headers["Authorization"] == "Bearer sk_secret_value"
    assert c._headers(POST_HEADERS) is headers  # merged once per headers mapping
    assert "Authorization" not in POST_HEADERS
    c.close()
    a = AsyncClient("http://127.0.0.1:1", token="sk_secret_value")
    assert "sk_secret_value" not in repr(a)
    req = Request("POST", "/v1/kv/get", b"{}", POST_HEADERS, lambda *x: None)
    assert b"\r\nAuthorization: Bearer sk_secret_value\r\n" in a._eps["http://127.0.0.1:1"].head(
        req
    )
    assert b"Authorization" not in Endpoint("http://127.0.0.1:1").head(req)
