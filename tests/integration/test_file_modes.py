"""A node's data is readable by its own user only (issue 27, item 8): the data dir 0700,
the raft journal, snapshots, RocksDB's SST files and node.log 0600, with a warning at start
when an existing data dir was open to group or others (the node then tightens it)."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from statekeeper.client import Client
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.cluster_fixture import WrittenConfig, running

pytestmark = pytest.mark.integration


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


@pytest.mark.cluster_options(size=1, snapshot_min_entries=50)
def test_a_node_keeps_its_files_private(cluster_config: WrittenConfig) -> None:
    lc = LocalCluster(cluster_config.config, cluster_config.path, progress=None)
    node_id = lc.node_ids[0]
    data_dir = lc.data_dir(node_id)
    data_dir.mkdir(parents=True, mode=0o755)  # as an older version left it
    data_dir.chmod(0o755)
    with running(lc):
        with Client(lc.url(node_id), timeout=10) as c:
            for i in range(120):  # past snapshot_min_entries: raft and the store snapshot
                c.put(f"k{i}", "secret value")
        snapshot = data_dir / "raft" / "snapshot.bin"
        deadline = time.monotonic() + 30
        while not snapshot.exists() and time.monotonic() < deadline:  # written off the loop
            time.sleep(0.1)
    log = (data_dir / "node.log").read_text()
    assert f"{data_dir}" in log and "0755" in log, "no warning about the open data dir"
    files = [p for p in data_dir.rglob("*") if p.is_file() and not p.is_symlink()]
    names = {p.name for p in files}
    assert "node.log" in names and "snapshot.bin" in names, sorted(names)
    assert any(n.endswith(".sst") for n in names), sorted(names)
    assert any("journal" in n for n in names), sorted(names)
    dirs = [data_dir, *(p for p in data_dir.rglob("*") if p.is_dir())]
    open_dirs = {
        str(p.relative_to(data_dir.parent)): oct(_mode(p)) for p in dirs if _mode(p) & 0o077
    }
    open_files = {str(p.relative_to(data_dir)): oct(_mode(p)) for p in files if _mode(p) & 0o077}
    assert not open_dirs, f"directories open to group/others: {open_dirs}"
    assert not open_files, f"files open to group/others: {open_files}"
