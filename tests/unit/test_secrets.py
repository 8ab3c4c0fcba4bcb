"""The cluster secret: where it may come from (a file or the environment, never a command
line), the modes of the files holding it, and that errors and reprs never show it."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

import pytest

from statekeeper.cluster import cli
from statekeeper.cluster.supervisor import LocalCluster, NodeStartError
from statekeeper.node import __main__ as node_main
from statekeeper.node import config as node_config
from statekeeper.node.config import ConfigError

SECRET = "s3cr3t-Value-that-must-never-show-9f8e7d"
NODES = '[[nodes]]\nid = "node-0"\nraft_port = 7100\nhttp_port = 7000\n'


@pytest.fixture(autouse=True)
def _no_secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATEKEEPER_SECRET", raising=False)
    monkeypatch.delenv("STATEKEEPER_SECRET_FILE", raising=False)


def _config(tmp_path: Path, cluster: str, mode: int = 0o600) -> Path:
    p = tmp_path / "cluster.toml"
    p.write_text(f"[cluster]\n{cluster}\n{NODES}")
    p.chmod(mode)
    return p


def _secret_file(path: Path, content: str = SECRET + "\n", mode: int = 0o600) -> Path:
    path.write_text(content)
    path.chmod(mode)
    return path


# -- where the secret comes from ---------------------------------------------------------


def test_secret_file_relative_to_the_config(tmp_path: Path) -> None:
    _secret_file(tmp_path / "secret")
    cfg = node_config.load(_config(tmp_path, 'secret_file = "secret"'))
    assert cfg.secret == SECRET  # the trailing newline is not part of it
    assert cfg.secret_source == f"file {tmp_path / 'secret'}"
    assert cfg.secret_warnings == ()


def test_secret_file_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = _secret_file(tmp_path / "elsewhere")
    monkeypatch.setenv("STATEKEEPER_SECRET_FILE", str(f))
    cfg = node_config.load(_config(tmp_path, 'secret = "inline-one"'))
    assert cfg.secret == SECRET and cfg.secret_source == f"file {f}"


def test_secret_from_the_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _secret_file(tmp_path / "secret")
    monkeypatch.setenv("STATEKEEPER_SECRET", "from-env")
    monkeypatch.setenv("STATEKEEPER_SECRET_FILE", str(tmp_path / "secret"))
    cfg = node_config.load(_config(tmp_path, 'secret_file = "secret"'))
    assert cfg.secret == "from-env" and cfg.secret_source == "$STATEKEEPER_SECRET"


def test_inline_secret_still_works(tmp_path: Path) -> None:
    cfg = node_config.load(_config(tmp_path, f'secret = "{SECRET}"'))
    assert cfg.secret == SECRET and cfg.secret_warnings == ()


def test_inline_secret_in_a_readable_config_warns(tmp_path: Path) -> None:
    cfg = node_config.load(_config(tmp_path, f'secret = "{SECRET}"', mode=0o644))
    assert cfg.secret == SECRET
    [warning] = cfg.secret_warnings
    assert "group/others" in warning and "644" in warning and SECRET not in warning


def test_readable_secret_file_warns(tmp_path: Path) -> None:
    _secret_file(tmp_path / "secret", mode=0o640)
    cfg = node_config.load(_config(tmp_path, 'secret_file = "secret"', mode=0o644))
    [warning] = cfg.secret_warnings
    assert "secret file" in warning and SECRET not in warning


def test_secret_file_only_in_a_readable_config_does_not_warn(tmp_path: Path) -> None:
    _secret_file(tmp_path / "secret")
    assert (
        node_config.load(_config(tmp_path, 'secret_file = "secret"', 0o644)).secret_warnings == ()
    )


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        (f'secret = "{SECRET}"\nsecret_file = "secret"', "either secret or secret_file"),
        ('secret_file = "missing"', "cannot read secret file"),
        ('secret_file = "empty"', "is empty"),
        (f'secret = ["{SECRET}"]', "cluster.secret: expected a string, got list"),
        (f"secret = {{ value = '{SECRET}' }}", "cluster.secret: expected a string, got dict"),
    ],
)
def test_config_errors_never_show_the_secret(tmp_path: Path, cluster: str, message: str) -> None:
    _secret_file(tmp_path / "empty", "\n")
    _secret_file(tmp_path / "secret")
    with pytest.raises(ConfigError) as ei:
        node_config.load(_config(tmp_path, cluster))
    assert message in str(ei.value)
    assert SECRET not in str(ei.value) and SECRET not in repr(ei.value)


def test_repr_of_a_config_hides_the_secret() -> None:
    cfg = node_config.local_cluster(secret=SECRET)
    assert SECRET not in repr(cfg) and SECRET not in str(cfg)


# -- files holding the secret: 0600 from the start ---------------------------------------


def test_write_creates_the_config_0600_without_chmod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text("old")
    path.chmod(0o644)  # an existing readable file is replaced, not reused
    seen: list[int] = []
    real_replace = os.replace

    def checking_replace(src, dst):  # the file as it was before it got its name
        seen.append(stat.S_IMODE(os.stat(src).st_mode))
        real_replace(src, dst)

    def no_chmod(*a, **k):
        raise AssertionError("created with a mode, not chmod-ed afterwards")

    monkeypatch.setattr(os, "replace", checking_replace)
    monkeypatch.setattr(os, "chmod", no_chmod)
    old_umask = os.umask(0)  # even with no umask at all
    try:
        node_config.write(node_config.local_cluster(secret=SECRET), path)
    finally:
        os.umask(old_umask)
    assert seen == [0o600]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.toml"]  # no temp file left


def test_write_secret_file_is_0600_and_never_overwrites(tmp_path: Path) -> None:
    old_umask = os.umask(0)
    try:
        node_config.write_secret_file(tmp_path / "secret", SECRET)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600
    assert (tmp_path / "secret").read_text() == SECRET + "\n"
    with pytest.raises(FileExistsError):
        node_config.write_secret_file(tmp_path / "secret", "other")


def test_cluster_up_writes_the_secret_to_its_own_0600_file(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    cfg, created = cli.create_config_if_missing(path)
    secret_path = tmp_path / "secret"
    assert created
    assert stat.S_IMODE(secret_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(cfg.secret) >= 32 and secret_path.read_text().strip() == cfg.secret
    text = path.read_text()
    assert cfg.secret not in text and 'secret_file = "secret"' in text
    assert cfg.secret_source == f"file {secret_path}"
    # Written back (as the chaos tooling does), the config still only names the file.
    node_config.write(node_config.load(path), path)
    assert cfg.secret not in path.read_text()
    assert node_config.load(path).secret == cfg.secret
    node_config.validate(node_config.load(path))  # loaded, it holds both: still valid


def test_an_old_config_with_an_inline_secret_keeps_working(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    node_config.write(node_config.local_cluster(secret=SECRET), path)
    cfg, created = cli.create_config_if_missing(path)
    assert not created and cfg.secret == SECRET and not (tmp_path / "secret").exists()


# -- never on a command line -------------------------------------------------------------


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every option that takes a value (switches such as --auth carry none)."""
    found = []
    for action in parser._actions:
        if action.nargs != 0:
            found += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _flags(sub)
    return found


# Flags whose names look like secrets but whose values are not (checked by name here).
NOT_SECRETS = {"--client-auth": "a mode: none, optional or required"}


def test_no_command_line_flag_takes_a_secret() -> None:
    flags = _flags(cli.build_parser()) + _flags(node_main.parser())
    assert "--config" in flags and "--id" in flags
    suspicious = [
        f
        for f in flags
        if any(w in f for w in ("secret", "password", "token", "auth", "api-key"))
        and f not in NOT_SECRETS
    ]
    # A flag naming a FILE that holds a credential is fine (--token-file): its value is a path.
    assert [f for f in suspicious if not f.endswith("-file")] == []


@pytest.mark.parametrize(
    "flag", [["--secret", SECRET], [f"--secret={SECRET}"], ["--cluster-secret", SECRET]]
)
def test_a_secret_flag_is_refused_without_echoing_it(
    flag: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["node", "--config", "c.toml", "--id", "node-0", *flag]) == 2
    assert node_main.main(["--config", "c.toml", "--id", "node-0", *flag]) == 2
    out = capsys.readouterr()
    assert "STATEKEEPER_SECRET_FILE" in out.err and "secret_file" in out.err
    assert SECRET not in out.out + out.err


def test_the_supervisor_refuses_a_secret_on_a_command_line(tmp_path: Path) -> None:
    # Ports nothing listens on (tests/unit binds no socket): the start gets past its check.
    cfg = node_config.local_cluster(size=1, http_base_port=1, raft_base_port=2, secret=SECRET)
    path = tmp_path / "cluster.toml"
    node_config.write(cfg, path)
    lc = LocalCluster(node_config.load(path), path, node_command=["sleep", "60", SECRET])
    try:
        with pytest.raises(NodeStartError, match="command line") as ei:
            lc.start_node("node-0")
        assert SECRET not in str(ei.value)
        assert not lc.is_running("node-0")
    finally:
        lc.close()


@pytest.mark.parametrize("flag", [["--token", "sk_root_abc"], ["--token=sk_root_abc"]])
def test_a_token_flag_is_refused_without_echoing_it(
    flag: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["auth", "whoami", *flag]) == 2
    assert cli.main(["kv", "get", "k", *flag]) == 2
    out = capsys.readouterr()
    assert "STATEKEEPER_TOKEN" in out.err and "--token-file" in out.err
    assert "sk_root_abc" not in out.out + out.err
