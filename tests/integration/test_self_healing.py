"""Self-healing (issue 16 item 2): `statekeeper cluster supervise` restarts nodes that die or
whose raft loop is stuck; a node whose RocksDB is corrupt or whose data dir is gone rebuilds
and rejoins by itself. Real node processes, real RocksDB, real sockets."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from statekeeper.client import Client
from statekeeper.client.errors import NotFound
from statekeeper.cluster.supervise import LOG_FILE, Supervisor, cluster_data_dir
from statekeeper.cluster.supervisor import LocalCluster, http_get_json
from statekeeper.cluster.watchdog import Policy

ROOT = Path(__file__).resolve().parents[2]
SMALL_JOURNAL = 1024 * 1024  # the leader snapshots (and drops its log prefix) every MiB


def wait_for(what: str, cond, timeout: float = 60.0, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def leader_of(lc: LocalCluster) -> str:
    return wait_for("a leader", lc.leader_id, 20)


def follower_of(lc: LocalCluster) -> str:
    leader = leader_of(lc)
    return next(n for n in lc.node_ids if n != leader)


def restarted(lc: LocalCluster, node_id: str, old_pid: int | None):
    """The node's new pid once it runs again under another pid and is ready."""
    pid = lc.pid(node_id)
    return pid if pid is not None and pid != old_pid and lc.is_ready(node_id) else None


def supervise_log(lc: LocalCluster) -> str:
    path = cluster_data_dir(lc) / LOG_FILE
    return path.read_text() if path.exists() else ""


@contextmanager
def supervisor_thread(lc: LocalCluster, **policy) -> Iterator[io.StringIO]:
    """A Supervisor over `lc` polling every 0.3 s in a thread, for the block."""
    out = io.StringIO()
    sup = Supervisor(lc, Policy(**policy), poll=0.3, out=out)
    stop = threading.Event()
    t = threading.Thread(target=sup.run, args=(stop,), name="supervise", daemon=True)
    t.start()
    try:
        yield out
    finally:
        stop.set()
        t.join(30)


def write_data(c: Client, tag: str, n: int, size: int = 8 * 1024) -> int:
    """n puts of `size`-byte values, some overwritten and deleted; the last revision."""
    rev = 0
    for i in range(n):
        rev = c.put(f"{tag}/{i:04d}", os.urandom(size)).revision
    for i in range(0, n, 7):
        rev = c.put(f"{tag}/{i:04d}", f"second {i}").revision
    for i in range(3, n, 11):
        rev = c.delete(f"{tag}/{i:04d}").revision
    return rev


def contents(url: str, revision: int) -> list[tuple]:
    with Client([url]) as c:
        with contextlib.suppress(NotFound):  # the read waits until `revision` is applied
            c.get("probe", consistency="serializable", min_revision=revision)
        return [
            (kv.key, kv.value, kv.version, kv.create_revision, kv.mod_revision)
            for kv in c.scan(revision=revision, consistency="serializable")
        ]


def assert_same_contents(lc: LocalCluster, node_id: str, revisions: list[int]) -> None:
    """Every key of `node_id` equals the leader's, at each of `revisions` (history too)."""
    leader = leader_of(lc)
    for rev in revisions:
        want = contents(lc.url(leader), rev)
        got = contents(lc.url(node_id), rev)
        assert len(want) > 10
        assert got == want, f"{node_id} differs from {leader} at revision {rev}"


# -- the supervisor -----------------------------------------------------------------------


def test_supervise_restarts_a_node_sigkilled_three_times_in_a_row(cluster: LocalCluster) -> None:
    out = cluster.config_path.parent / "supervise.out"
    with open(out, "wb") as f:
        sup = subprocess.Popen(
            [sys.executable, "-m", "statekeeper.cluster.cli", "cluster", "supervise"]
            + ["--config", str(cluster.config_path), "--poll-interval", "0.3"],
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    try:
        wait_for("the supervisor to start", lambda: "watching" in supervise_log(cluster), 30)
        victim = leader_of(cluster)  # the leader: the kill that hurts most
        with Client([cluster.url(n) for n in cluster.node_ids]) as c:
            for round_ in range(3):
                pid = cluster.pid(victim)
                assert cluster.kill_node(victim)
                c.put(f"during-outage-{round_}", "x")  # the others keep serving
                wait_for(
                    f"{victim} back after kill {round_ + 1}",
                    lambda pid=pid: restarted(cluster, victim, pid),
                )
                # ...and the supervisor saw it live: the next kill is a new failure.
                wait_for(
                    "the supervisor to see it live",
                    lambda n=round_ + 1: supervise_log(cluster).count("live again") == n,
                )
            rev = c.put("after", "x").revision
        with Client([cluster.url(victim)]) as c:
            assert (
                c.get("during-outage-2", consistency="serializable", min_revision=rev).text == "x"
            )
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(30) == 0
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()
    log = supervise_log(cluster)
    restarts = [line for line in log.splitlines() if f"{victim}: restarting it" in line]
    assert len(restarts) == 3, log
    # The first victim was started by the fixture (not the supervisor's child): its exit
    # code is unknown; the supervisor started the next two, so it knows they were killed.
    assert "process gone" in restarts[0]
    assert all("exited on signal SIGKILL" in line for line in restarts[1:]), log
    # Restarts in a row back off: the second waited 1 s, the third 2 s; the lines say so.
    assert "restart 2 in a row, in 1 s" in log and "restart 3 in a row, in 2 s" in log, log
    assert "died while starting" not in log, log
    assert log.count(f"{victim}: live again") == 3, log
    assert "stopped (the nodes keep running" in log
    assert out.read_text().count("restarting it") == 3  # stdout says the same


@pytest.mark.cluster_options(live_stall_seconds=2.0)
def test_a_failing_raft_loop_is_not_live_and_the_supervisor_restarts_it(
    cluster: LocalCluster,
) -> None:
    victim = follower_of(cluster)
    cluster.stop_node(victim)
    # Every raft tick fails: the loop runs and HTTP serves, but raft makes no progress.
    cluster.start_node(victim, env={"STATEKEEPER_FAILPOINTS": "raft-tick=1*error"})
    url = cluster.url(victim)

    def not_live():
        code, doc = http_get_json(url + "/v1/health/live", tls=cluster.tls)
        return doc if code == 503 else None

    doc = wait_for("/v1/health/live to answer 503", not_live, 30)
    assert doc["error"]["code"] == "not_live" and doc["ok"] is False
    assert "raft loop has made no progress" in doc["error"]["message"]
    assert doc["raft_loop_age_seconds"] > 2.0
    assert http_get_json(url + "/v1/status", tls=cluster.tls)[0] == 200  # HTTP is fine
    pid = cluster.pid(victim)
    with supervisor_thread(cluster, failures=2) as out:
        # The restart (no failpoint this time) is live and catches up.
        wait_for(f"{victim} restarted", lambda: restarted(cluster, victim, pid), 60)
    said = out.getvalue()
    assert f"{victim}: killing it (not live for 2 probes in a row: HTTP 503 not_live" in said, said
    code, doc = http_get_json(url + "/v1/health/live", tls=cluster.tls)
    assert code == 200 and doc["ok"] is True and doc["raft_loop_age_seconds"] < 2.0


def test_a_raft_step_stuck_freezes_the_node_and_the_supervisor_restarts_it(
    cluster: LocalCluster,
) -> None:
    """Raft runs on the node's only loop (node/raft/loop_driver.py): a step that never
    returns (a hung fsync) leaves nothing to answer HTTP, which the supervisor counts as a
    failed probe just the same."""
    victim = follower_of(cluster)
    cluster.stop_node(victim)
    cluster.start_node(victim, env={"STATEKEEPER_FAILPOINTS": "raft-tick=sleep(600)"})
    url = cluster.url(victim)
    wait_for(
        "the node to stop answering",
        lambda: http_get_json(url + "/v1/health/live", timeout=1.0, tls=cluster.tls)[0] == 0,
        30,
    )
    pid = cluster.pid(victim)
    with supervisor_thread(cluster, failures=2) as out:
        wait_for(f"{victim} restarted", lambda: restarted(cluster, victim, pid), 60)
    said = out.getvalue()
    assert f"{victim}: killing it (not live for 2 probes in a row: no answer" in said, said
    assert http_get_json(url + "/v1/health/live", tls=cluster.tls)[0] == 200


# -- a node heals its own disk ------------------------------------------------------------


def garble(path: Path) -> None:
    """Flip 64 bytes a quarter into the file (a short file becomes garbage)."""
    data = bytearray(path.read_bytes())
    if len(data) < 256:
        path.write_bytes(b"garbage\n")
        return
    start = len(data) // 4
    data[start : start + 64] = bytes(b ^ 0xFF for b in data[start : start + 64])
    path.write_bytes(bytes(data))


@pytest.mark.cluster_options(snapshot_max_journal_bytes=SMALL_JOURNAL)
def test_a_follower_whose_rocksdb_cannot_open_recovers_the_right_contents(
    cluster: LocalCluster,
) -> None:
    """A garbled MANIFEST and CURRENT fail RocksDB's open: the DB is moved aside at once."""
    victim = follower_of(cluster)
    with Client([cluster.url(n) for n in cluster.node_ids]) as c:
        early = write_data(c, "a", 200)  # 1.6 MiB: snapshots on every node
        middle = write_data(c, "b", 100)
    cluster.stop_node(victim)
    db = cluster.data_dir(victim) / "db"
    for path in [*db.glob("MANIFEST-*"), db / "CURRENT"]:
        garble(path)
    with Client([cluster.url(n) for n in cluster.node_ids if n != victim]) as c:
        late = write_data(c, "c", 50)  # it also has entries to fetch from the leader
    cluster.start_and_wait(victim)
    assert_same_contents(cluster, victim, [early, middle, late])
    log = cluster.log_file(victim).read_text()
    assert "is CORRUPT" in log and "Corruption" in log
    kept = list(db.parent.glob("db.corrupt-*"))
    assert len(kept) == 1 and any(kept[0].iterdir()), "the corrupt DB is kept for forensics"


@pytest.mark.cluster_options(snapshot_max_journal_bytes=SMALL_JOURNAL)
def test_garbled_sst_blocks_are_found_after_the_start_and_healed_by_one_restart(
    cluster: LocalCluster,
) -> None:
    """Garbled data blocks open fine: the node is ready first, then the background scan
    (or an apply) meets the Corruption, marks the DB and stops; the restart moves the DB
    aside and raft rebuilds it (node/recovery.py)."""
    victim = follower_of(cluster)
    with Client([cluster.url(n) for n in cluster.node_ids]) as c:
        early = write_data(c, "a", 200)  # 1.6 MiB: snapshots on every node
        middle = write_data(c, "b", 100)
    cluster.stop_node(victim)
    data = cluster.data_dir(victim)
    ssts = sorted((data / "db").glob("*.sst"))
    assert ssts, "no SST files: nothing to corrupt"
    for path in ssts:
        garble(path)
    logged = cluster.log_file(victim).stat().st_size  # the runs before this one: not ours
    cluster.start_node(victim)
    with supervisor_thread(cluster):
        wait_for(
            f"{victim} healed",
            lambda: (
                list(data.glob("db.corrupt-2*"))
                and not (data / "db.corrupt-detected").exists()
                and cluster.is_ready(victim)
            ),
            90,
        )
    with Client([cluster.url(n) for n in cluster.node_ids]) as c:
        late = write_data(c, "c", 50)
    assert_same_contents(cluster, victim, [early, middle, late])
    log = cluster.log_file(victim).read_bytes()[logged:].decode(errors="replace")
    first_run = log[: log.index("RocksDB is corrupt; the next start moves it aside")]
    assert "Corruption: block checksum mismatch" in log[len(first_run) :]  # its traceback
    assert "is CORRUPT (found by the previous run:" in log
    if "verifying RocksDB's checksums" in log:  # the scan, not an apply, found it: after ready
        assert "ready " in first_run and "after start" in first_run, first_run[-3000:]
    kept = list(data.glob("db.corrupt-2*"))
    assert len(kept) == 1 and any(kept[0].iterdir()), "the corrupt DB is kept for forensics"


@pytest.mark.cluster_options(snapshot_max_journal_bytes=SMALL_JOURNAL)
def test_a_follower_whose_data_dir_is_deleted_rejoins_from_the_leaders_snapshot(
    cluster: LocalCluster,
) -> None:
    victim = follower_of(cluster)
    with Client([cluster.url(n) for n in cluster.node_ids]) as c:
        early = write_data(c, "a", 200)
    cluster.kill_node(victim)
    shutil.rmtree(cluster.data_dir(victim))
    with Client([cluster.url(n) for n in cluster.node_ids if n != victim]) as c:
        late = write_data(c, "b", 200)  # the leader snapshots again: its log no longer starts at 1
    with supervisor_thread(cluster) as out:
        wait_for(f"{victim} back", lambda: restarted(cluster, victim, None), 90)
    assert "its data dir is missing" in out.getvalue(), out.getvalue()
    assert_same_contents(cluster, victim, [early, late])
    log = cluster.log_file(victim).read_text()
    assert "no raft state" in log and "LOST ITS DISK" in log
    assert "restoring state machine from snapshot" in log  # the leader's, not entry by entry
