"""chaos/sim/defects/*.patch put one fixed defect back each, for the simulator's
acceptance test (issue 32): each must still apply to today's code. lost-disk-vote stopped
applying when raft_node.py's empty-start argument changed, and nothing said so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PATCHES = sorted((ROOT / "chaos" / "sim" / "defects").glob("*.patch"))


def test_there_are_defect_patches():
    assert len(PATCHES) >= 3  # issue 32 asks the simulator to find three of them


@pytest.mark.parametrize("patch", PATCHES, ids=[p.stem for p in PATCHES])
def test_a_defect_patch_applies_to_todays_code(patch: Path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to apply the patch to")
    r = subprocess.run(
        ["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, f"{patch.name} no longer applies: {r.stderr}"
