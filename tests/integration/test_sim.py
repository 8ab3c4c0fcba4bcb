"""The simulator from its command line: a seed replays exactly, and a short exploration
of the fixed code finds nothing (docs/simulation.md). In-process worlds, no node process;
here rather than in tests/unit because a world with a power cut mounts LazyFS."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SIM = [sys.executable, "-m", "statekeeper.chaos.sim"]


def sim(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*SIM, *args], capture_output=True, text=True, timeout=timeout)


def test_a_seed_replays_exactly(tmp_path: Path):
    # seed 3's schedule holds kills, lost disks, power cuts, partitions, a snapshot and
    # crash points: the trace is long and every kind of nondeterminism would show in it.
    traces = []
    for i in range(2):
        out = tmp_path / f"trace{i}.txt"
        r = sim("run", "--seed", "3", "--steps", "2500", "--trace", str(out))
        assert r.returncode == 0, r.stdout + r.stderr
        traces.append(out.read_text())
    assert traces[0] == traces[1]
    text = traces[0]
    assert "fault @" in text and "power cut" in text and "verdict PASS" in text
    assert text.count("\n") > 40


def test_another_seed_is_another_run(tmp_path: Path):
    a = sim("run", "--seed", "3", "--steps", "800", "--json")
    b = sim("run", "--seed", "4", "--steps", "800", "--json")
    assert json.loads(a.stdout)["faults"] != json.loads(b.stdout)["faults"]


def test_a_shrunk_schedule_replays_from_its_command_line():
    r = sim("run", "--seed", "9", "--steps", "600", "--fault", "@200 kill n1 hold=1.50s", "--json")
    v = json.loads(r.stdout)
    assert v["faults"] == ["@200 kill n1 hold=1.50s"] and v["ok"], v


def test_a_short_exploration_of_the_fixed_code_finds_nothing(tmp_path: Path):
    figures = tmp_path / "explore.json"
    # seeds 100000 on, 3000 steps: the first seeds of the long exploration in RESULTS.md
    r = sim(
        "explore",
        "--minutes",
        "1",
        "--first-seed",
        "100000",
        "--steps",
        "3000",
        "--json",
        str(figures),
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    f = json.loads(figures.read_text())
    # At least one seed: a loaded machine (four explorations and the suite on two cores)
    # ran one seed in the minute, and the test asked for two.
    assert f["seeds"] >= 1 and f["failing_seeds"] == [], f


# Seed 810258 (issue 32): two replaces at once shrink the cluster to n0 alone, and n0 dies
# right after it started to add n1 back. The harness added a member before starting it,
# which in a one-member cluster can never commit (the add counts the new member in its
# own quorum), and a new member started like a lost disk withheld the vote the restarted
# n0 needed: no leader, for good. Now n1 runs first, with --join (cluster add-node's order).
ONE_MEMBER_ADD = ["@100 replace n1 hold=1s", "@100 replace n2 hold=1s", "@151 kill n0 hold=1s"]


def test_a_one_member_cluster_whose_leader_died_during_an_add_elects_and_adds():
    r = sim("run", "--seed", "1", "--steps", "600", *(f"--fault={f}" for f in ONE_MEMBER_ADD))
    assert r.returncode == 0 and "seed 1: PASS" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    for line in ("member rem n2 via n0: committed", "member rem n1 via n0: committed",
                 "kill n0#1", "member add n1"):  # fmt: skip
        assert line in r.stdout, line
