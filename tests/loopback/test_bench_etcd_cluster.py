"""benchmarks/etcd.py's EtcdCluster, without starting etcd: the command lines it would run.
Choosing its ports binds each candidate on loopback, hence here and not in tests/unit."""

from __future__ import annotations

from pathlib import Path


def test_etcd_cluster_uses_defaults_and_loopback(tmp_path: Path) -> None:
    from statekeeper.benchmarks.etcd import EtcdCluster, host_port

    c = EtcdCluster("/usr/bin/etcd", tmp_path)
    argv = c.argv("m1")
    joined = " ".join(argv)
    assert "unsafe" not in joined and "fsync" not in joined  # durability stays etcd's default
    assert argv[argv.index("--initial-cluster") + 1].count("=http://127.0.0.1:") == 3
    assert all(u.startswith("http://127.0.0.1:") for u in map(c.client_url, c.members))
    assert len(set(c.client_port.values()) | set(c.peer_port.values())) == 6
    assert host_port("http://127.0.0.1:2379") == ("127.0.0.1", 2379)
