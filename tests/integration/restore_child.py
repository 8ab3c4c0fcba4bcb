"""Child process of test_raft_defects.py's failed-restore test: one member of the cluster
in the config file argv[1], run until the parent kills it (or it stops on its own).
Usage: python restore_child.py CONFIG NODE_ID"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from statekeeper.node.config import load  # noqa: E402
from tests.integration.raft_harness import Member  # noqa: E402


def main() -> None:
    m = Member(load(sys.argv[1]), sys.argv[2])
    print("STARTED", flush=True)
    while True:
        print("APPLIED", m.sm.applied_index, flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
