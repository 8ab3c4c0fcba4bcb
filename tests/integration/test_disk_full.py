"""A full disk (issue 16 item 8), on a real small filesystem (a tmpfs of a few dozen MiB,
chaos/smallfs.py; needs root, as CI runs).

Before the storage quota: three nodes on one 48 MiB filesystem, 1 MiB values, and after
9 acknowledged puts two nodes exited on ENOSPC and the cluster stopped serving reads too.
Now the NOSPACE alarm refuses such writes with 507 before any node dies, reads keep
working, deletes + compaction clear it; and a node whose disk fills anyway (another
process filled it) says why in its log and status and rejoins once space is back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from statekeeper.chaos.smallfs import SmallFs, available, fill_to
from statekeeper.client import Client, InsufficientStorage
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node.fatal import REPORT_NAME
from tests.integration.cluster_fixture import (
    killed_after,
    running,
    running_cluster,
    write_test_config,
)

ok, why = available()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(not ok, reason=why)]

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


def _wait(what: str, cond, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.2)


def _alarms(lc: LocalCluster) -> dict[str, str | None]:
    return {n: ((lc.status(n) or {}).get("storage") or {}).get("alarm") for n in lc.node_ids}


def _all_clear(lc: LocalCluster) -> bool:
    """No node has its alarm raised, nor knows of a peer's (writes that add data pass)."""
    storage = [((lc.status(n) or {}).get("storage") or {}) for n in lc.node_ids]
    return all(s and not s.get("alarm") and not s.get("peer_alarms") for s in storage)


def _cli(*argv: str) -> str:
    p = subprocess.run(
        [sys.executable, "-m", "statekeeper.cluster.cli", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert p.returncode == 0, (p.stdout, p.stderr)
    return p.stdout


def _fill(c: Client, limit: int = 40) -> tuple[dict[str, bytes], InsufficientStorage | None]:
    """1 MiB puts until the first 507; returns the acknowledged values and the refusal."""
    acked: dict[str, bytes] = {}
    for i in range(limit):
        value = os.urandom(MIB)  # incompressible: RocksDB and the journal store all of it
        try:
            c.put(f"v{i:02d}", value)
        except InsufficientStorage as e:
            return acked, e
        acked[f"v{i:02d}"] = value
    return acked, None


def test_quota_refuses_writes_before_any_node_dies(tmp_path: Path) -> None:
    # Default [storage] settings: the reserve is a quarter of this small filesystem.
    with SmallFs(tmp_path / "fs", 48 * MIB) as fs, running_cluster(fs) as lc:
        urls = [lc.url(n) for n in lc.node_ids]
        with Client(urls) as c:
            acked, refused = _fill(c)
            assert refused is not None, "40 MiB of 1 MiB puts on a 48 MiB disk: never refused"
            assert refused.status == 507 and refused.code == "insufficient_storage"
            assert "this attempt was not proposed" in refused.message
            assert len(acked) >= 3, f"refused too early: after {len(acked)} puts"
            assert all(lc.is_running(n) for n in lc.node_ids), "a node died on the full disk"
            # The refusing node shows the alarm: status, metrics, both CLI tables.
            refuser = refused.endpoint or lc.url(lc.leader_id())
            nid = next(n for n in lc.node_ids if lc.url(n) == refuser)
            assert _alarms(lc)[nid] == "nospace"
            with urllib.request.urlopen(refuser + "/metrics", timeout=5) as resp:
                metrics = resp.read().decode()
            assert "statekeeper_storage_alarm 1.0" in metrics, metrics[-2000:]
            assert "nospace" in _cli("cluster", "status", "--config", str(lc.config_path))
            assert "nospace" in _cli("endpoint", "status", "--endpoints", ",".join(urls))
            # Reads keep working, linearizable ones too (they need no disk).
            for key, value in acked.items():
                assert c.get(key).value == value
            # Deletes and compaction pass under the alarm, and free enough to clear it.
            gone = sorted(acked)[: len(acked) // 2 + 1]
            for key in gone:
                c.delete(key)
            c.compact(c.status()["revision"])
            _wait("the alarm clears on every node", lambda: _all_clear(lc))
            c.put("after", b"x" * MIB)  # writes work again
            for key in gone:
                assert c.get(key, default=None) is None
            for key in sorted(set(acked) - set(gone)):
                assert c.get(key).value == acked[key], f"acknowledged {key} lost"
            assert all(lc.is_running(n) for n in lc.node_ids)
        logs = [lc.log_tail(n, 400) for n in lc.node_ids]
        assert not any("exiting with status" in log for log in logs)
        # Space came back because a node under the alarm saw the compaction and had
        # RocksDB rewrite its files and raft snapshot its journal (node/quota/disk_watch.py).
        assert any("NOSPACE alarm raised" in log for log in logs)
        assert any("RocksDB flushed and compacted its files" in log for log in logs)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_a_followers_full_disk_refuses_writes_on_every_node(tmp_path: Path, tls: bool) -> None:
    """node-2 alone on a small filesystem, filled by another process to under its reserve:
    its alarm is raised, and the leader (whose disk has room) refuses writes that add data
    too, so the follower is not filled to death; reads and deletes go on; with the space
    back the alarm clears everywhere and writes work. With TLS (mTLS required) the nodes
    poll each other over HTTPS with their own certificates."""
    written = write_test_config(tmp_path, tls=tls, client_auth="required" if tls else "none")
    victim = "node-2"
    small = written.config.node_data_dir(victim)
    with SmallFs(small, 32 * MIB), running(LocalCluster(written.config, written.path)) as lc:
        urls = [lc.url(n) for n in lc.node_ids if n != victim]
        with Client(urls, tls=lc.tls) as c:
            c.put("before", b"b")
            ballast = fill_to(small, 4 * MIB)  # under the 8 MiB reserve of 32 MiB
            _wait(f"{victim}'s alarm", lambda: _alarms(lc)[victim] == "nospace", timeout=30)

            def refused() -> bool:
                try:
                    c.put("after", b"x" * 1024)
                except InsufficientStorage as e:
                    assert victim in e.message, e.message
                    return True
                return False

            _wait("the other nodes refuse writes that add data", refused, timeout=30)
            assert c.get("before").value == b"b"  # reads go on
            c.delete("before")  # so do deletes
            assert lc.is_running(victim)
            ballast.unlink()
            _wait("the alarm clears", lambda: _all_clear(lc), timeout=30)
            assert not refused()  # writes work again


def test_a_node_whose_disk_fills_anyway_says_why_and_rejoins(tmp_path: Path) -> None:
    """node-2 alone on a small filesystem that another process fills: it cannot journal
    the next 1 MiB entry, so it stops, saying so; the other two go on. Given space back
    and restarted, it catches up and reports why it stopped. The disk fills faster than
    any node measures (an hour between measurements and peer polls): the alarm cannot
    help, so this is the last line of defence."""
    written = write_test_config(tmp_path, storage={"check_interval_seconds": 3600.0})
    victim = "node-2"
    small = written.config.node_data_dir(victim)
    # Killed before the filesystem under node-2 is unmounted.
    with SmallFs(small, 32 * MIB), killed_after(LocalCluster(written.config, written.path)) as lc:
        for n in ("node-0", "node-1"):  # a leader among these two first
            lc.start_node(n)
        _wait("a leader", lambda: lc.leader_id() in ("node-0", "node-1"))
        lc.start_and_wait(victim)
        urls = [lc.url(n) for n in ("node-0", "node-1")]
        with Client(urls) as c:
            c.put("before", b"b")
            ballast = fill_to(small, 512 * 1024)  # "another process" fills the disk
            acked = {}
            for i in range(4):
                acked[f"big{i}"] = os.urandom(MIB)
                c.put(f"big{i}", acked[f"big{i}"])  # the two others are a quorum
            _wait(f"{victim} stops", lambda: not lc.is_running(victim), timeout=30)
            log = lc.log_tail(victim, 60)
            assert "No space left on device" in log and "Free space there" in log, log
            report = json.loads((small / REPORT_NAME).read_text())
            assert report["disk_full"] is True, report
            ballast.unlink()  # space is back
            lc.start_and_wait(victim, timeout=60)
            st = lc.status(victim)
            assert st["storage"]["last_stop"]["disk_full"] is True, st["storage"]
            with Client([lc.url(victim)]) as mine:
                _wait(
                    f"{victim} caught up",
                    lambda: mine.status(lc.url(victim))["revision"] >= c.status()["revision"],
                )
                for key, value in acked.items():
                    assert mine.get(key, consistency="serializable").value == value
                assert mine.get("before", consistency="serializable").value == b"b"
