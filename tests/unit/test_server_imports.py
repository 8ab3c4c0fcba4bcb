"""The node loads no client transport (issue 29, item 4): runs .ci/server_imports.py, the
same check CI runs, in a fresh interpreter (this test process has long loaded the client).
It fails on 059e2d4, where client/__init__.py imported the whole client eagerly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_node_store_and_node_main_load_no_client_transport() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "server_imports.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
