"""An exploration stopped by ^C or SIGTERM (chaos/sim/explore.py, cli.py) says what it
explored and keeps its figures: a long run's hours are not lost to a stop."""

from __future__ import annotations

import json

import pytest

from statekeeper.chaos.sim import cli, explore
from statekeeper.chaos.sim.scenario import Verdict


def _runs_then(stop: BaseException):
    def run(seed: int, steps: int) -> Verdict:
        if seed == 3:
            raise stop
        return Verdict(seed, steps, [], sim_seconds=2.0, cpu_seconds=0.5)

    return run


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), SystemExit(143)])
def test_a_stopped_exploration_keeps_the_seeds_it_finished(stop: BaseException) -> None:
    e = explore.explore(10, 1, 100, run=_runs_then(stop))
    assert (e.seeds, e.sim_seconds, e.stopped) == (2, 4.0, True)
    assert e.failing is None


def test_the_command_prints_the_totals_and_writes_the_figures(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setattr(explore.scenario, "run", _runs_then(KeyboardInterrupt()))
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    out = tmp_path / "figures.json"
    code = cli.main(["explore", "--minutes", "10", "--first-seed", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 130
    assert "stopped after 2 seeds (4 s simulated, 0 faults): no failure among them" in printed
    figures = json.loads(out.read_text())
    assert (figures["seeds"], figures["stopped"]) == (2, True)
