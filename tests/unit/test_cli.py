"""The `statekeeper` command line, without starting any node."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from statekeeper.cluster import cli
from statekeeper.node import config as node_config


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse exits for --help and usage errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


# -- parsing and help ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["node", "--help"],
        ["cluster", "--help"],
        ["cluster", "up", "--help"],
        ["cluster", "status", "--help"],
        ["cluster", "down", "--help"],
        ["cluster", "start", "--help"],
        ["cluster", "restart", "--help"],
        ["cluster", "kill", "--help"],
        ["cluster", "pause", "--help"],
        ["cluster", "resume", "--help"],
        ["bench", "--help"],
        ["bench", "compare", "--help"],
    ],
)
def test_help_works(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert out.startswith("usage: statekeeper")


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    _, top, _ = run(["--help"], capsys)
    assert "statekeeper cluster up" in top and "examples:" in top
    _, up, _ = run(["cluster", "up", "--help"], capsys)
    assert "  statekeeper cluster up --base-port 8000" in up
    assert "--fsync {always,never}" in up


def test_parse_cluster_up_defaults() -> None:
    args = cli.build_parser().parse_args(["cluster", "up"])
    assert args.func is cli.cmd_up
    assert args.config == "cluster.toml"
    assert args.data_dir is None and args.base_port is None and args.fsync is None
    assert args.timeout == 60.0


def test_parse_cluster_up_options() -> None:
    args = cli.build_parser().parse_args(
        ["cluster", "up", "-c", "x.toml", "--data-dir", "d", "--base-port", "8000",
         "--fsync", "never", "--timeout", "5"]
    )  # fmt: skip
    assert (args.config, args.data_dir, args.base_port, args.fsync, args.timeout) == (
        "x.toml", "d", 8000, "never", 5.0,
    )  # fmt: skip


def test_parse_node_command() -> None:
    args = cli.build_parser().parse_args(["node", "--config", "c.toml", "--id", "node-1"])
    assert args.func is cli.cmd_node
    assert (args.config, args.node_id) == ("c.toml", "node-1")


@pytest.mark.parametrize("sub", ["start", "restart", "kill", "pause", "resume"])
def test_node_commands_take_a_node_id(sub: str) -> None:
    args = cli.build_parser().parse_args(["cluster", sub, "node-2"])
    assert args.node_id == "node-2"
    assert args.func is getattr(cli, f"cmd_{sub}")


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["cluster"],
        ["cluster", "frobnicate"],
        ["cluster", "kill"],
        ["cluster", "up", "--fsync", "sometimes"],
        ["cluster", "up", "--base-port", "seven"],
        ["node", "--config", "c.toml"],
    ],
)
def test_usage_errors_are_one_line_exit_2(argv: list[str], capsys) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2
    assert out == ""
    assert "error:" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2  # the message and a pointer to --help


def test_adding_a_command_is_one_function(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(cli, "COMMANDS", list(cli.COMMANDS))

    @cli.command("cluster", "chaos", help="break things", args=[cli.arg("--seed", type=int)])
    def cmd_chaos(args) -> int:
        """Inject faults."""
        print(f"seed={args.seed}")
        return 0

    code, out, _ = run(["cluster", "chaos", "--seed", "4"], capsys)
    assert (code, out) == (0, "seed=4\n")


def test_bench_compare_hands_its_arguments_to_benchmarks_compare(
    monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from statekeeper.benchmarks import compare

    seen: list[tuple[list[str], str]] = []
    monkeypatch.setattr(compare, "main", lambda argv, prog: seen.append((argv, prog)) or 3)
    argv = ["--quick", "--only", "put,get", "--note", "a b", "--duration=2"]
    assert run(["bench", "compare", *argv], capsys)[0] == 3
    assert run(["bench", "compare"], capsys)[0] == 3
    assert seen == [(argv, "statekeeper bench compare"), ([], "statekeeper bench compare")]


def test_bench_compare_help_lists_the_benchmark_options(capsys) -> None:
    code, out, _ = run(["bench", "compare", "--help"], capsys)
    assert code == 0
    assert out.startswith("usage: statekeeper bench compare")
    assert "--quick" in out and "--failover-trials" in out and "--no-results" in out
    assert "examples:\n  statekeeper bench compare --quick" in out
    code, _, err = run(["bench", "compare", "--frobnicate"], capsys)
    assert code == 2 and "unrecognized arguments: --frobnicate" in err


def test_the_cli_imports_no_benchmark_code() -> None:
    """Every `statekeeper` command imports cluster.cli: benchmarks/ only when one runs."""
    probe = (
        "import sys; from statekeeper.cluster import cli; cli.build_parser(); "
        "assert not [m for m in sys.modules if m.split('.')[0] == 'benchmarks'], sys.modules"
    )
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


# -- config creation ----------------------------------------------------------------------


def test_first_up_creates_default_config(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    cfg, created = cli.create_config_if_missing(path)
    assert created and path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds the secret
    assert [n.id for n in cfg.nodes] == ["node-0", "node-1", "node-2"]
    assert [n.http_port for n in cfg.nodes] == [7000, 7001, 7002]
    assert [n.raft_port for n in cfg.nodes] == [7100, 7101, 7102]
    assert cfg.fsync == "always"
    assert len(cfg.secret) >= 32
    assert cfg.node_data_dir("node-1") == (tmp_path / "data" / "node-1").resolve()
    assert node_config.load(path) == cfg


def test_up_turns_the_console_on_and_prints_its_url(tmp_path: Path) -> None:
    cfg, _ = cli.create_config_if_missing(tmp_path / "cluster.toml")
    assert cfg.ui.enabled  # a hand-written config keeps the default: off
    assert not node_config.local_cluster(secret="s").ui.enabled
    assert "The web console: http://127.0.0.1:7000/ui" in cli.how_to_connect(cfg)


def test_second_up_keeps_existing_config(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    first, _ = cli.create_config_if_missing(path)
    again, created = cli.create_config_if_missing(path, base_port=9000, fsync="never")
    assert not created
    assert again.secret == first.secret
    assert again.nodes[0].http_port == 7000


def test_config_options_at_creation(tmp_path: Path) -> None:
    cfg, _ = cli.create_config_if_missing(
        tmp_path / "c.toml", data_dir="state", base_port=8000, fsync="never"
    )
    assert [n.http_port for n in cfg.nodes] == [8000, 8001, 8002]
    assert [n.raft_port for n in cfg.nodes] == [8100, 8101, 8102]
    assert cfg.fsync == "never"
    assert cfg.node_data_dir("node-0") == (tmp_path / "state" / "node-0").resolve()


def test_config_creation_rejects_bad_port(tmp_path: Path) -> None:
    with pytest.raises(cli.UserError, match="base-port"):
        cli.create_config_if_missing(tmp_path / "c.toml", base_port=65500)
    assert not (tmp_path / "c.toml").exists()


def test_config_in_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(cli.UserError, match="does not exist"):
        cli.create_config_if_missing(tmp_path / "nope" / "c.toml")


# -- errors for commands that need a config -----------------------------------------------


def test_missing_config_is_a_clear_error(tmp_path: Path, capsys) -> None:
    code, _, err = run(["cluster", "status", "--config", str(tmp_path / "none.toml")], capsys)
    assert code == 2
    assert err.strip() == (
        f"statekeeper: error: no cluster config at {tmp_path / 'none.toml'} "
        "(run 'statekeeper cluster up' to create one, or pass --config)"
    )


def test_malformed_config_is_a_clear_error(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[cluster\n")
    code, _, err = run(["cluster", "down", "--config", str(bad)], capsys)
    assert code == 2
    assert "not valid TOML" in err and "Traceback" not in err


@pytest.mark.parametrize("sub", ["start", "restart", "kill", "pause", "resume"])
def test_unknown_node_id(tmp_path: Path, capsys, sub: str) -> None:
    path = tmp_path / "cluster.toml"
    cli.create_config_if_missing(path)
    code, out, err = run(["cluster", sub, "node-7", "--config", str(path)], capsys)
    assert code == 2
    assert err.strip() == (
        "statekeeper: error: no node with id 'node-7' in the config (known: node-0, node-1, node-2)"
    )


def test_node_command_unknown_id(tmp_path: Path, capsys) -> None:
    path = tmp_path / "cluster.toml"
    cli.create_config_if_missing(path)
    code, _, err = run(["node", "--config", str(path), "--id", "node-3"], capsys)
    assert code == 2
    assert "no node with id 'node-3'" in err


def test_kill_of_stopped_node_is_harmless(tmp_path: Path, capsys) -> None:
    path = tmp_path / "cluster.toml"
    cli.create_config_if_missing(path)
    code, out, _ = run(["cluster", "kill", "node-1", "--config", str(path)], capsys)
    assert (code, out) == (0, "node-1 was not running\n")


def test_down_with_nothing_running(tmp_path: Path, capsys) -> None:
    path = tmp_path / "cluster.toml"
    cli.create_config_if_missing(path)
    code, out, _ = run(["cluster", "down", "--config", str(path)], capsys)
    assert (code, out) == (0, "no node was running\n")


def test_status_of_a_stopped_cluster(tmp_path: Path, capsys) -> None:
    path = tmp_path / "cluster.toml"
    # Ports nothing listens on: the nodes show as down (base 1 -> 1,2,3 / 101,102,103).
    cli.create_config_if_missing(path, base_port=1)
    code, out, _ = run(["cluster", "status", "--config", str(path)], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == list(cli.STATUS_COLUMNS)
    assert [ln.split()[:3] for ln in lines[1:]] == [
        ["node-0", "-", "down"], ["node-1", "-", "down"], ["node-2", "-", "down"],
    ]  # fmt: skip
    code, out, _ = run(["cluster", "status", "--json", "--config", str(path)], capsys)
    rows = json.loads(out)
    assert [r["id"] for r in rows] == ["node-0", "node-1", "node-2"]
    assert all(r["status"] is None and r["running"] is False for r in rows)


# -- status table ---------------------------------------------------------------------


SAMPLE_ROWS = [
    {
        "id": "node-0",
        "url": "http://127.0.0.1:7000",
        "pid": 4242,
        "running": True,
        "status": {
            "node_id": "node-0",
            "role": "leader",
            "term": 3,
            "leader_id": "node-0",
            "leader_url": "http://127.0.0.1:7000",
            "commit_index": 1200,
            "applied_index": 1200,
            "revision": 987,
            "compact_revision": 0,
        },
    },
    {
        "id": "node-1",
        "url": "http://127.0.0.1:7001",
        "pid": 4243,
        "running": True,
        "status": {
            "node_id": "node-1",
            "role": "follower",
            "term": 3,
            "leader_id": "node-0",
            "commit_index": 1200,
            "applied_index": 1198,
            "revision": 986,
            "storage": {"alarm": "nospace"},  # writes that add data get 507
        },
    },
    {"id": "node-2", "url": "http://127.0.0.1:7002", "pid": None, "running": False, "status": None},
    {"id": "node-3", "url": "http://127.0.0.1:7003", "pid": 99, "running": True, "status": None},
]


def test_status_table_formatting() -> None:
    table = cli.format_status_table(SAMPLE_ROWS)
    assert table == (
        "NODE    PID   ROLE       TERM  LEADER  COMMIT  APPLIED  REVISION  ALARM    URL\n"
        "node-0  4242  leader     3     node-0  1200    1200     987       -        http://127.0.0.1:7000\n"
        "node-1  4243  follower   3     node-0  1200    1198     986       nospace  http://127.0.0.1:7001\n"
        "node-2  -     down       -     -       -       -        -         -        http://127.0.0.1:7002\n"
        "node-3  99    no answer  -     -       -       -        -         -        http://127.0.0.1:7003"
    )


def test_status_table_names_a_node_that_does_not_vote_yet() -> None:
    """A node that lost its disk follows but does not vote until caught up (issue 26)."""
    row = {**SAMPLE_ROWS[1], "status": {**SAMPLE_ROWS[1]["status"], "voter": False}}
    voting = {**SAMPLE_ROWS[1], "status": {**SAMPLE_ROWS[1]["status"], "voter": True}}
    lines = cli.format_status_table([row, voting]).splitlines()
    assert lines[1].split()[2:4] == ["follower,", "non-voter"]
    assert lines[2].split()[2:4] == ["follower", "3"]


def test_status_table_tolerates_other_field_names() -> None:
    row = {
        "id": "node-0",
        "url": "u",
        "pid": 1,
        "running": True,
        "status": {"is_leader": True, "term": 2, "leader": "node-0"},
    }
    line = cli.format_status_table([row]).splitlines()[1].split()
    assert line[:5] == ["node-0", "1", "leader", "2", "node-0"]


def test_how_to_connect_uses_the_config_urls() -> None:
    cfg = node_config.local_cluster(secret="s")
    text = cli.how_to_connect(cfg)
    assert "curl -s -X POST http://127.0.0.1:7000/v1/kv/put" in text
    assert '{"key":"greeting","value":"hello"}' in text
    assert (
        'from statekeeper import Client; c = Client(["http://127.0.0.1:7000",'
        '"http://127.0.0.1:7001","http://127.0.0.1:7002"])'
    ) in text


# -- the installed entry point --------------------------------------------------------------


def test_module_entry_point_runs(tmp_path: Path) -> None:
    # `python -m statekeeper.cluster.cli` is how `cluster up` starts nodes: it must work.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "statekeeper.cluster.cli",
            "cluster",
            "kill",
            "node-9",
            "-c",
            "x.toml",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert "no cluster config at x.toml" in res.stderr


def test_python_m_node_explains_itself() -> None:
    """`python -m statekeeper.node` is how nodes are started (the supervisor's default command)."""
    out = subprocess.run(
        [sys.executable, "-m", "statekeeper.node", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0
    assert "--config" in out.stdout and "--id" in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "statekeeper.node"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "--config" in bad.stderr


def test_output_piped_into_head_ends_quietly() -> None:
    """Issue 30 item 17: `statekeeper range "" | head -1` printed a BrokenPipeError traceback.
    The reader closes the pipe after a few bytes: the CLI stops without one, with the
    status a process killed by SIGPIPE has (141), as `seq 1000000 | head -1` does."""
    child = (
        "import argparse, sys\n"
        "from statekeeper.cluster import cli\n"
        "def flood(args):\n"
        "    for i in range(200_000):\n"
        "        print('line', i)\n"
        "class Parser:\n"
        "    def parse_args(self, argv):\n"
        "        return argparse.Namespace(func=flood)\n"
        "cli.build_parser = Parser\n"
        "sys.exit(cli.main(['flood']))\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(10)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
