"""The CLI says things one way (issue 30 item 17): one output flag in every command that
prints data (-w table|json|simple as etcdctl, --json its alias), declared once
(client_cli.output_args); `stream read` decodes agent envelopes as `agent history` does;
`restore` takes --base-port as `cluster up` does; `cluster up`'s hint names the --config
it was given. (Not found exits 3: test_agent_cli.py; no cluster.toml:
test_client_endpoints_config.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statekeeper.client.agent import Agent
from statekeeper.cluster import agent_cli, cli, client_cli, stream_cli
from statekeeper.cluster.client_cli import OUTPUT_FORMATS
from statekeeper.node import config as node_config
from tests.unit.test_agent_cli import run
from tests.unit.test_agent_fake import MemoryClient

# Commands that print no data of their own (they run or stop things, or hand the line on).
NO_OUTPUT = {
    ("node",), ("bench", "compare"), ("chaos",), ("cluster", "up"), ("cluster", "down"),
    ("cluster", "start"), ("cluster", "restart"), ("cluster", "kill"), ("cluster", "pause"),
    ("cluster", "resume"), ("cluster", "supervise"), ("cluster", "add-node"),
    ("cluster", "remove-node"), ("tls", "init"), ("console",), ("sim",),
}  # fmt: skip


def _flags(cmd: cli.Command) -> dict[str, dict]:
    return {flag: kwargs for flags, kwargs in cmd.args for flag in flags}


def test_every_command_that_prints_data_takes_the_one_output_flag() -> None:
    for cmd in cli.COMMANDS:
        flags = _flags(cmd)
        if cmd.path in NO_OUTPUT or cmd.passthrough:
            continue
        assert "-w" in flags and "--write-out" in flags, cmd.path
        assert flags["-w"]["choices"] == OUTPUT_FORMATS, cmd.path
        assert flags["--json"]["const"] == "json", cmd.path  # the alias, same action
        assert flags["-w"]["action"] is flags["--json"]["action"] is client_cli.WriteOut


@pytest.mark.parametrize(
    "argv",
    [["agent", "list"], ["stream", "list"], ["cluster", "status"], ["backup"], ["restore", "F"]],
)
def test_json_is_an_alias_of_w_json(argv: list[str]) -> None:
    parser = cli.build_parser()
    for extra, fmt in (
        (["--json"], "json"),
        (["-w", "json"], "json"),
        (["-w", "simple"], "simple"),
    ):
        args = parser.parse_args([*argv, *extra])
        assert (args.write_out, args.json) == (fmt, fmt == "json"), (argv, extra)


@pytest.fixture
def agent_store(monkeypatch: pytest.MonkeyPatch) -> MemoryClient:
    c = MemoryClient()
    monkeypatch.setattr(agent_cli, "open_client", lambda args: c)
    monkeypatch.setattr(stream_cli, "open_client", lambda args: c)
    a = Agent(c, "agent-7", reducer=lambda s, e: s, initial={})
    a.log("tool.ok", {"tool": "search", "hits": 3}, step=1)
    a.log("raw", b"plain bytes", step=1)
    return c


def test_simple_is_the_table_without_its_header_tab_separated(agent_store, capsys) -> None:
    _, table, _ = run(["agent", "list"], capsys)
    code, simple, _ = run(["agent", "list", "-w", "simple"], capsys)
    assert code == 0 and table.splitlines()[0].startswith("AGENT")
    assert simple.splitlines()[0].split("\t")[:1] == ["agent-7"]
    _, as_json, _ = run(["agent", "list", "-w", "json"], capsys)
    assert as_json == run(["agent", "list", "--json"], capsys)[1]


def test_stream_read_decodes_envelopes_as_agent_history_does(agent_store, capsys) -> None:
    code, out, _ = run(["stream", "read", "agent/agent-7"], capsys)
    assert code == 0 and '{"hits": 3, "tool": "search"}' in out, out
    assert "plain bytes" in out and "SKE" not in out and "b64:" not in out
    code, out, _ = run(["stream", "read", "agent/agent-7", "--json"], capsys)
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["data"] == {"tool": "search", "hits": 3}
    assert first["envelope"]["schema"] is None and first["envelope"]["format"] == "msgpack"
    assert second["data"] == "plain bytes" and "envelope" not in second


def test_restore_takes_base_port(tmp_path: Path, monkeypatch, capsys) -> None:
    seeded: list = []

    def seed(path, cfg, node_ids, force=False, say=print):
        seeded.append(cfg)
        return {"revision": 1, "sha256": "0" * 64, "raft_index": 1}

    monkeypatch.setattr("statekeeper.node.backup.seed.seed", seed)
    backup = tmp_path / "b.skb"
    backup.write_bytes(b"x")
    config = tmp_path / "new" / "cluster.toml"
    config.parent.mkdir()
    code, out, err = run(
        ["restore", str(backup), "--config", str(config), "--base-port", "8600"], capsys
    )
    assert code == 0, err
    urls = node_config.load(config).http_urls()
    assert urls == [f"http://127.0.0.1:{p}" for p in (8600, 8601, 8602)]
    assert seeded[0].http_urls() == urls
    assert f"statekeeper cluster up --config {config}" in out


def test_cluster_up_hint_names_the_config_used() -> None:
    cfg = node_config.local_cluster(secret="s")
    assert "statekeeper cluster down --config other.toml" in cli.how_to_connect(cfg, "other.toml")
    assert cli.how_to_connect(cfg).endswith("statekeeper cluster down")
    auth = node_config.local_cluster(secret="s")
    auth = auth.__class__(**{**auth.__dict__, "auth": auth.auth.__class__(enabled=True)})
    assert "auth token create --config 'my cfg.toml'" in cli.how_to_connect(auth, "my cfg.toml")
