"""`statekeeper cluster supervise` without nodes: its help, bad options, one per cluster.
(Supervising real nodes: tests/integration/test_self_healing.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.cluster.supervise import LOCK_FILE, AlreadySupervised, exclusive
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node import config as node_config
from tests.unit.test_cli import run


def test_help_says_how_to_stop_it_and_where_it_logs(capsys) -> None:
    code, out, _ = run(["cluster", "supervise", "--help"], capsys)
    assert code == 0
    assert "Ctrl-C" in out and "supervise.log" in out and "examples:" in out
    code, out, _ = run(["cluster", "up", "--help"], capsys)
    assert code == 0 and "--supervise" in out and "--backoff-max" in out


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--failures", "0"], "failures must be >= 1"),
        (["--max-restarts", "-1"], "max_restarts >= 0"),
        (["--poll-interval", "0"], "--poll-interval must be > 0"),
        (["--start-grace", "0"], "start_grace and stable_seconds must be > 0"),
    ],
)
def test_bad_options_are_usage_errors_before_any_node_is_touched(
    flags, message, tmp_path: Path, capsys
) -> None:
    path = tmp_path / "cluster.toml"
    node_config.write(node_config.local_cluster(secret="s"), path)
    code, _, err = run(["cluster", "supervise", "--config", str(path), *flags], capsys)
    assert code == 2 and message in err
    assert not (tmp_path / "data" / "node-0").exists()  # nothing was started


def test_a_second_supervisor_of_the_same_cluster_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    node_config.write(node_config.local_cluster(secret="s"), path)
    lc = LocalCluster(node_config.load(path), path)
    with exclusive(lc):
        with pytest.raises(AlreadySupervised, match="already watches this cluster"):
            with exclusive(LocalCluster(node_config.load(path), path)):
                pass
    assert (tmp_path / "data" / LOCK_FILE).exists()
    with exclusive(lc):  # released when the first one ended
        pass
