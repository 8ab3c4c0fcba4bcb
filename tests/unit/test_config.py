"""node/config.py: cluster.toml is read through a typed loader (wrong types and unknown keys
are a ConfigError naming the key) and written with tomli-w."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from statekeeper.cluster import cli
from statekeeper.node import config as node_config
from statekeeper.node.config import ConfigError, Limits, RaftSettings

NODE = '[[nodes]]\nid = "node-0"\nraft_port = 7100\nhttp_port = 7000\n'


def _parse(text: str) -> node_config.ClusterConfig:
    return node_config.parse(tomllib.loads(text + NODE))


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            '[raft]\nelection_timeout_min = "0.4"\n',
            "raft.election_timeout_min: expected a number, got str '0.4'",
        ),
        (
            '[limits]\nmax_value_bytes = "1MiB"\n',
            "limits.max_value_bytes: expected an integer, got str '1MiB'",
        ),
        (
            "[limits]\nmax_key_bytes = true\n",
            "limits.max_key_bytes: expected an integer, got bool True",
        ),
        (
            "[retention]\nhistory_revisions = 1.5\n",
            "retention.history_revisions: expected an integer, got float 1.5",
        ),
        ("[cluster]\nsecret = 5\n", "cluster.secret: expected a string, got int"),
        ("limits = 5\n", "limits: expected a table, got int 5"),
    ],
)
def test_wrong_types_name_the_key(toml: str, message: str) -> None:
    with pytest.raises(ConfigError) as ei:
        _parse(toml)
    assert str(ei.value) == message


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("[limits]\nmax_vaule_bytes = 5\n", "limits.max_vaule_bytes"),
        ('[cluster]\nnmae = "x"\n', "cluster.nmae"),
        ("[raft]\nelection_timeout = 1.0\n", "raft.election_timeout"),
        ("[retention]\ndays = 1\n", "retention.days"),
        ('[clster]\nname = "x"\n', "clster"),
    ],
)
def test_unknown_keys_are_rejected_by_name(toml: str, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}: unknown setting \(known: "):
        _parse(toml)


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        (
            "[[nodes]]\nid = 1\nraft_port = 1\nhttp_port = 2\n",
            "nodes[0].id: expected a string, got int 1",
        ),
        (
            '[[nodes]]\nid = "a"\nraft_port = "7100"\nhttp_port = 2\n',
            "nodes[0].raft_port: expected an integer, got str '7100'",
        ),
        ('[[nodes]]\nid = "a"\nhttp_port = 2\n', "nodes[0]: missing required setting 'raft_port'"),
        (
            '[[nodes]]\nid = "a"\nraft_port = 1\nhttp_port = 2\n[nodes.raft_dial]\nb = 5\n',
            "nodes[0].raft_dial.b: expected a string, got int 5",
        ),
    ],
)
def test_node_entries_are_typed(nodes: str, message: str) -> None:
    with pytest.raises(ConfigError) as ei:
        node_config.parse(tomllib.loads(nodes))
    assert str(ei.value) == message
    with pytest.raises(ConfigError, match=r"^nodes\[0\]\.port: unknown setting"):
        node_config.parse(tomllib.loads(NODE + "port = 3\n"))


def test_numbers_and_defaults() -> None:
    cfg = _parse("[raft]\nelection_timeout_min = 1\nelection_timeout_max = 2\n")
    assert cfg.raft == dataclasses.replace(
        RaftSettings(), election_timeout_min=1.0, election_timeout_max=2.0
    )
    assert cfg.limits == Limits() and cfg.nodes[0].host == "127.0.0.1"
    assert (cfg.name, cfg.data_dir, cfg.fsync, cfg.secret) == ("statekeeper", "data", "always", "")
    assert Limits().max_events_per_append == 1000
    assert _parse("[limits]\nmax_events_per_append = 10\n").limits.max_events_per_append == 10
    with pytest.raises(ConfigError, match="limits.max_events_per_append: expected an integer"):
        _parse('[limits]\nmax_events_per_append = "10"\n')


def test_load_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text('[raft]\nelection_timeout_min = "0.4"\n' + NODE)
    with pytest.raises(ConfigError) as ei:
        node_config.load(path)
    assert str(ei.value) == f"{path}: raft.election_timeout_min: expected a number, got str '0.4'"


def test_cli_reports_a_bad_config_in_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text('[limits]\nmax_value_bytes = "1MiB"\n' + NODE)
    code = cli.main(["cluster", "status", "--config", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        f"statekeeper: error: {path}: limits.max_value_bytes: expected an integer, got str '1MiB'"
    )


def test_written_toml_round_trips(tmp_path: Path) -> None:
    cfg = node_config.local_cluster(secret='quote " backslash \\ tab \t end')
    first = dataclasses.replace(
        cfg.nodes[0],
        data_dir="elsewhere/n0",
        raft_bind="0.0.0.0:7100",
        raft_dial=(("node-1", "127.0.0.2:7101"), ("node-2", "127.0.0.3:7102")),
    )
    cfg = dataclasses.replace(
        cfg,
        nodes=(first, *cfg.nodes[1:]),
        limits=Limits(max_value_bytes=1000),
        raft=dataclasses.replace(cfg.raft, request_timeout=2.5),
    )
    text = node_config.dumps(cfg)
    assert text.startswith("# statekeeper cluster configuration\n")
    assert node_config.parse(tomllib.loads(text)) == cfg
    path = tmp_path / "c.toml"
    node_config.write(cfg, path)
    assert node_config.load(path) == dataclasses.replace(cfg, base_dir=str(tmp_path))


def test_live_stall_seconds_is_read_and_checked() -> None:
    assert _parse("").raft.live_stall_seconds == 10.0
    assert _parse("[raft]\nlive_stall_seconds = 30\n").raft.live_stall_seconds == 30.0
    with pytest.raises(ConfigError, match="live_stall_seconds must be at least 1"):
        node_config.validate(_parse("[raft]\nlive_stall_seconds = 0.5\n"))


@pytest.mark.parametrize("table", ["[limits]\nmax_request_bytes", "[raft]\nmax_entry_bytes"])
def test_request_and_batch_sizes_stay_under_half_the_raft_entry_bound(table: str) -> None:
    """One raft entry may hold RAFT_ENTRY_LIMIT_BYTES (below pysyncobj's 64 MiB chunking,
    node/raft/pickle_guard.py); a batch holds up to max_entry_bytes plus one request."""
    half = node_config.RAFT_ENTRY_LIMIT_BYTES // 2
    assert node_config.RAFT_ENTRY_LIMIT_BYTES < 64 * 1024 * 1024
    assert _parse(f"{table} = {half}\n")
    with pytest.raises(ConfigError, match=r"must be within 1\.\.16777216 \(16 MiB"):
        _parse(f"{table} = {half + 1}\n")
