"""Power loss of every node at once, on a filesystem that forgets whatever was not
fsynced (chaos/lazyfs, the LazyFS idea): with fsync="always" every acknowledged write
survives; with fsync="never" writes are lost, which proves the test can fail."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from statekeeper.chaos.lazyfs import LazyFS, available
from statekeeper.client import Client
from statekeeper.cluster.supervisor import LocalCluster, SupervisorError
from statekeeper.node import config as node_config
from tests.integration.cluster_fixture import print_logs, write_test_config
from tests.integration.test_replication import AckedWriter

ok, why = available()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(not ok, reason=why)]


def _power_loss_run(tmp_path: Path, fsync: str) -> tuple[dict[str, bytes], set[str] | None]:
    """Acknowledged writes, then SIGKILL all + drop unsynced data; returns (acked, found)
    where found is None when the cluster could not come back at all."""
    backing, mount = tmp_path / "disk", tmp_path / "mnt"
    backing.mkdir()
    mount.mkdir()
    written = write_test_config(tmp_path, fsync=fsync)
    # Nested and not yet created, as `cluster up` does: every level must be made durable.
    cfg = dataclasses.replace(written.config, data_dir=str(mount / "cluster" / "data"))
    node_config.write(cfg, written.path)
    cfg = node_config.load(written.path)
    with LazyFS(backing, mount, backing_sync=False) as fs:
        lc = LocalCluster(cfg, written.path)
        try:
            lc.up()
            urls = [lc.url(n) for n in lc.node_ids]
            with AckedWriter(urls, threads=8) as w:
                time.sleep(4)
            assert len(w.acked) > 50, f"too few writes acknowledged: {w.errors[:3]}"
            lc.kill_all()
            fs.crash()  # every node loses power at the same instant
            try:
                lc.up(timeout=60)
            except SupervisorError:
                if fsync == "always":
                    print_logs(lc)
                    raise
                return w.acked, None
            with Client(urls, ns="load") as c:
                found = {kv.key for kv in c.scan() if w.acked.get(kv.key) == kv.value}
            return w.acked, found
        finally:
            lc.kill_all()
            lc.close()


def test_fsync_always_keeps_every_acknowledged_write_through_power_loss(tmp_path: Path) -> None:
    acked, found = _power_loss_run(tmp_path, "always")
    lost = sorted(set(acked) - found)
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged writes lost, e.g. {lost[:5]}"


def test_fsync_never_loses_writes_through_power_loss(tmp_path: Path) -> None:
    acked, found = _power_loss_run(tmp_path, "never")
    lost = set(acked) if found is None else set(acked) - found
    assert lost, "fsync=never kept every write through a power loss: the crash drops nothing?"
