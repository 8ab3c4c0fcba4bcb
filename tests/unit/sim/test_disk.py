"""The simulator's disks in plain mode (chaos/sim/disk.py): no FUSE, so a power cut loses
nothing beyond a kill and says so. LazyFS mode: tests/loopback/test_sim_disk.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper.chaos.sim import disk
from statekeeper.chaos.sim.disk import SimDiskError, SimDisks


def test_plain_power_cut_changes_nothing_and_reports_degraded(tmp_path: Path) -> None:
    with SimDisks(tmp_path, ["n1", "n2"], "plain") as disks:
        assert disks.mode == "plain"
        assert disks.degraded_reason
        f = disks.data_dir("n1") / "f"
        f.write_bytes(b"never fsynced")
        assert disks.power_cut("n1") == {"degraded": disks.degraded_reason}
        assert f.read_bytes() == b"never fsynced"
        assert disks.status("n1") is None


def test_plain_wipe_and_reset_empty_the_dirs(tmp_path: Path) -> None:
    with SimDisks(tmp_path, ["n1", "n2"], "plain") as disks:
        for node_id in ("n1", "n2"):
            (disks.data_dir(node_id) / "raft").mkdir()
            (disks.data_dir(node_id) / "raft" / "journal").write_bytes(b"x")
            (disks.data_dir(node_id) / "f").write_bytes(b"y")
        disks.wipe("n1")
        assert os.listdir(disks.data_dir("n1")) == []
        assert sorted(os.listdir(disks.data_dir("n2"))) == ["f", "raft"]
        disks.reset()
        assert [os.listdir(disks.data_dir(n)) for n in ("n1", "n2")] == [[], []]


def test_auto_falls_back_to_plain_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(disk, "available", lambda: (False, "no /dev/fuse"))
    with SimDisks(tmp_path, ["n1"], "auto") as disks:
        assert disks.mode == "plain"
        assert "no /dev/fuse" in str(disks.degraded_reason)
        assert disks.data_dir("n1").is_dir()


def test_lazyfs_mode_without_lazyfs_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(disk, "available", lambda: (False, "no /dev/fuse"))
    with pytest.raises(SimDiskError, match="no /dev/fuse"), SimDisks(tmp_path, ["n1"], "lazyfs"):
        pass


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode"):
        SimDisks(tmp_path, ["n1"], "tmpfs")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unique"):
        SimDisks(tmp_path, ["n1", "n1"], "plain")
    with SimDisks(tmp_path, ["n1"], "plain") as disks, pytest.raises(KeyError):
        disks.data_dir("n9")
