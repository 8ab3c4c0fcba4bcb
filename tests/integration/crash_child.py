"""Child process of test_raft_defects.py's crash tests: one node that puts keys one at a
time, printing "ACK <key>" once each is applied, until a failpoint (set by the parent in
STATEKEEPER_FAILPOINTS) kills it. Usage: python crash_child.py BASE RAFT_PORT HTTP_PORT"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from statekeeper.node.config import ClusterConfig, NodeConfig, RaftSettings  # noqa: E402
from statekeeper.node.raft.data_dir import bootstrap_new_cluster  # noqa: E402
from tests.integration.raft_harness import Member, leader_of  # noqa: E402


def main() -> None:
    base, raft_port, http_port = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    cfg = ClusterConfig(
        nodes=(NodeConfig(id="n0", host="127.0.0.1", raft_port=raft_port, http_port=http_port),),
        data_dir=str(base), fsync="always", secret="test-secret",
        raft=RaftSettings(snapshot_min_entries=30),
    )
    bootstrap_new_cluster(cfg)  # a no-op once the first run created its raft dir
    m = Member(cfg, "n0")
    leader_of([m])
    for i in range(2000):
        key = f"k{i:05d}"
        m.put(key)
        print("ACK", key, flush=True)
    print("NO CRASH", flush=True)


if __name__ == "__main__":
    main()
