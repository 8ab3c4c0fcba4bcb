"""LocalCluster against real processes.

Two kinds of test:
- with the real node (`cluster` fixture): what the supervisor promises about a
  statekeeper cluster (order, readiness, leader, restart, kill, pause, wipe);
- with a small stand-in process: supervisor mechanics a healthy node cannot
  provoke (ignoring SIGTERM, dying at start-up, pid reuse).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from statekeeper.client import Client, KeyValue
from statekeeper.cluster.supervisor import (
    ClusterTimeout,
    LocalCluster,
    NodeStartError,
    SupervisorError,
)
from tests.integration.cluster_fixture import WrittenConfig

pytestmark = pytest.mark.integration

# A stand-in node: serves the three health/status endpoints on the config's HTTP
# port and holds its raft port. Behaviour knobs come from the environment.
STAND_IN = textwrap.dedent(
    """
    import json, os, signal, socket, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from statekeeper.node.config import load

    args = sys.argv[1:]
    cfg = load(args[args.index("--config") + 1])
    me = cfg.node(args[args.index("--id") + 1])
    if os.environ.get("STANDIN_EXIT"):
        print("stand-in: exiting at start-up as asked", flush=True)
        sys.exit(int(os.environ["STANDIN_EXIT"]))
    if os.environ.get("STANDIN_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready_at = time.monotonic() + float(os.environ.get("STANDIN_READY_AFTER", "0"))
    # Live only once every node has started (each leaves its id in this directory).
    started = os.environ.get("STANDIN_LIVE_WHEN_ALL_IN")
    if started:
        open(os.path.join(started, me.id), "w").close()
    leader = cfg.nodes[0].id
    raft = socket.socket()
    raft.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    raft.bind((me.host, me.raft_port))
    raft.listen()

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path == "/v1/health/live":
                peers = [os.path.join(started, n.id) for n in cfg.nodes] if started else []
                ok = all(os.path.exists(p) for p in peers)
                code, doc = (200, {"ok": True}) if ok else (503, {"error": {"code": "not_live"}})
            elif self.path == "/v1/health/ready":
                ok = time.monotonic() >= ready_at
                code, doc = (200, {"ok": True}) if ok else (503, {"error": {"code": "not_ready"}})
            elif self.path == "/v1/status":
                code, doc = 200, {
                    "node_id": me.id, "role": "leader" if me.id == leader else "follower",
                    "term": 3, "leader_id": leader, "commit_index": 7, "applied_index": 7,
                    "revision": 5,
                }
            else:
                code, doc = 404, {"error": {"code": "not_found"}}
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer((me.host, me.http_port), H)
    signal.signal(signal.SIGINT, lambda *a: sys.exit(0))
    if not os.environ.get("STANDIN_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    print(f"stand-in {me.id} serving on {me.http_url}", flush=True)
    srv.serve_forever()
    """
)


def _zombie_children() -> list[int]:
    """Pids of exited-but-unreaped children of this test process."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z" and int(fields[1]) == me:
            found.append(int(entry.name))
    return found


@pytest.fixture
def stand_in(cluster_config: WrittenConfig, tmp_path: Path):
    script = tmp_path / "stand_in_node.py"
    script.write_text(STAND_IN)

    def make(**env: str) -> LocalCluster:
        return LocalCluster(
            cluster_config.config,
            cluster_config.path,
            node_command=[sys.executable, str(script)],
            env=env,
        )

    made: list[LocalCluster] = []

    def factory(**env: str) -> LocalCluster:
        lc = make(**env)
        made.append(lc)
        return lc

    yield factory
    for lc in made:
        lc.kill_all()
        lc.close()


# -- mechanics, with the stand-in --------------------------------------------------------


def test_stand_in_up_status_down(stand_in) -> None:
    lc = stand_in()
    pids = lc.up(timeout=20)
    assert set(pids) == {"node-0", "node-1", "node-2"}
    assert all(lc.is_running(n) for n in lc.node_ids)
    assert lc.leader_id() == "node-0"
    st = lc.status("node-1")
    assert st is not None and st["role"] == "follower"
    # Running up() again leaves the running nodes alone.
    assert lc.up(timeout=20) == pids
    outcome = lc.down(timeout=10)
    assert set(outcome.values()) == {"stopped"}
    assert not any(lc.is_running(n) for n in lc.node_ids)
    assert not any(lc.pid_file(n).exists() for n in lc.node_ids)
    assert lc.status("node-0") is None
    assert _zombie_children() == []


def test_up_starts_every_node_before_waiting_for_one(stand_in, tmp_path: Path) -> None:
    """up() starts the stopped nodes together and then waits for them (three in a row,
    each live before the next, made most of a test cluster's start-up): stand-ins that
    are live only once all three have started come up. One at a time, node-0 never is."""
    started = tmp_path / "started"
    started.mkdir()
    lc = stand_in(STANDIN_LIVE_WHEN_ALL_IN=str(started))
    assert set(lc.up(timeout=20, live_timeout=10)) == {"node-0", "node-1", "node-2"}
    assert sorted(p.name for p in started.iterdir()) == lc.node_ids


def test_stop_escalates_to_sigkill(stand_in) -> None:
    warnings: list[str] = []
    lc = stand_in(STANDIN_IGNORE_TERM="1")
    lc._progress = warnings.append
    lc.start_node("node-0")
    lc.wait_live("node-0", timeout=20)
    assert lc.stop_node("node-0", timeout=1.0) == "killed"
    assert any("SIGKILL" in w for w in warnings)
    assert not lc.is_running("node-0")
    assert lc.exit_codes["node-0"] == -signal.SIGKILL
    assert _zombie_children() == []


def test_start_failure_reports_exit_code_and_log(stand_in) -> None:
    lc = stand_in(STANDIN_EXIT="3")
    lc.start_node("node-1")
    with pytest.raises(NodeStartError, match=r"(?s)node-1 exited with code 3.*exiting at start-up"):
        lc.wait_live("node-1", timeout=20)
    assert not lc.pid_file("node-1").exists()


def test_wait_ready_times_out_with_detail(stand_in) -> None:
    lc = stand_in(STANDIN_READY_AFTER="600")
    lc.start_node("node-2")
    lc.wait_live("node-2", timeout=20)
    with pytest.raises(ClusterTimeout, match="node-2: HTTP 503 not_ready"):
        lc.wait_ready("node-2", timeout=1.0)


def test_pause_resume_kill(stand_in) -> None:
    lc = stand_in()
    lc.start_node("node-0")
    lc.wait_live("node-0", timeout=20)
    lc.pause_node("node-0")
    assert lc.is_running("node-0")
    assert lc.status("node-0") is None  # frozen: no answers
    lc.resume_node("node-0")
    assert lc.status("node-0") is not None
    assert lc.kill_node("node-0") is True
    assert lc.kill_node("node-0") is False
    with pytest.raises(SupervisorError):
        lc.pause_node("node-0")
    assert _zombie_children() == []


def test_stale_pid_file_is_not_running(stand_in) -> None:
    lc = stand_in()
    # A pid that exists but belongs to another program (pid reuse after a reboot).
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        lc.data_dir("node-0").mkdir(parents=True, exist_ok=True)
        lc.pid_file("node-0").write_text(f"{other.pid}\n")
        assert not lc.is_running("node-0")
        lc.pid_file("node-0").write_text("not a pid\n")
        assert not lc.is_running("node-0")
    finally:
        other.kill()
        other.wait()


def test_start_refuses_a_port_in_use(stand_in, cluster_config: WrittenConfig) -> None:
    import socket

    node = cluster_config.config.node("node-0")
    with socket.socket() as s:
        s.bind((node.host, node.http_port))
        s.listen()
        with pytest.raises(NodeStartError, match="already in use"):
            stand_in().start_node("node-0")


def test_wipe_requires_stopped_and_keeps_log(stand_in) -> None:
    lc = stand_in()
    lc.start_node("node-0")
    lc.wait_live("node-0", timeout=20)
    (lc.data_dir("node-0") / "raft").mkdir(exist_ok=True)  # cluster up made it
    (lc.data_dir("node-0") / "raft" / "journal.bin").write_bytes(b"x")
    with pytest.raises(SupervisorError, match="stop it"):
        lc.wipe_node("node-0")
    lc.stop_node("node-0")
    lc.wipe_node("node-0")
    assert [p.name for p in lc.data_dir("node-0").iterdir()] == ["node.log"]


def test_unknown_node_id(stand_in) -> None:
    with pytest.raises(ValueError, match="no node with id 'node-9'"):
        stand_in().start_node("node-9")


# -- the real node -----------------------------------------------------------------------


def test_cluster_comes_up_with_one_leader(cluster: LocalCluster) -> None:
    leader = cluster.leader_id()
    assert leader in cluster.node_ids
    statuses = cluster.statuses()
    assert all(st is not None for st in statuses.values())
    assert all(cluster.is_ready(n) for n in cluster.node_ids)
    for nid in cluster.node_ids:
        assert cluster.log_file(nid).exists()


def test_kill_and_start_follower(cluster: LocalCluster) -> None:
    follower = next(n for n in cluster.node_ids if n != cluster.leader_id())
    assert cluster.kill_node(follower)
    assert cluster.status(follower) is None
    cluster.start_node(follower)
    cluster.wait_live(follower, timeout=30)
    cluster.wait_ready(follower, timeout=60)
    assert cluster.leader_id() is not None


def test_leader_crash_elects_a_new_leader(cluster: LocalCluster) -> None:
    old = cluster.leader_id()
    assert old is not None
    cluster.kill_node(old)
    deadline = time.monotonic() + 30
    new = None
    while time.monotonic() < deadline:
        new = cluster.leader_id()
        if new not in (None, old):
            break
        time.sleep(0.2)
    assert new not in (None, old)
    cluster.start_node(old)
    cluster.wait_ready(None, timeout=60)


def test_restart_keeps_the_cluster_ready(cluster: LocalCluster) -> None:
    cluster.restart_node("node-1", stop_timeout=15)
    assert cluster.exit_codes.get("node-1") == 0  # SIGTERM is a clean shutdown
    cluster.wait_ready(None, timeout=60)


def test_pause_and_resume_node(cluster: LocalCluster) -> None:
    cluster.pause_node("node-2")
    assert cluster.is_running("node-2")
    assert cluster.status("node-2") is None
    cluster.resume_node("node-2")
    cluster.wait_ready("node-2", timeout=60)


def _contents(url: str, min_revision: int = 0) -> tuple[int, list[KeyValue]]:
    """(revision, every key) of one node's local state: serializable reads, nothing
    forwarded; first waits until the node has applied `min_revision`."""
    with Client(url, timeout=30) as c:
        rev = c.range(consistency="serializable", min_revision=min_revision, limit=1).revision
        kvs = list(c.scan(consistency="serializable"))
        # Each key read on its own too: a point read may take another path than a scan.
        assert [c.get(kv.key, consistency="serializable") for kv in kvs] == kvs
    return rev, kvs


@pytest.mark.cluster_options(snapshot_min_entries=100)
def test_wipe_follower_catches_up(cluster: LocalCluster) -> None:
    """A wiped follower gets every key back, with its versions and revisions: from a
    snapshot (the leader has compacted its log by then), then the entries after it."""
    leader = cluster.leader_id()
    assert leader is not None
    follower = next(n for n in cluster.node_ids if n != leader)
    with Client(cluster.url(leader)) as c:
        for i in range(200):
            c.put(f"k/{i:03}", f"v{i}")
        for i in range(0, 200, 3):
            c.put(f"k/{i:03}", f"v{i} again")  # versions and mod_revisions differ per key
        assert c.delete("k/19", prefix=True).deleted == 10
    cluster.stop_node(follower)
    cluster.wipe_node(follower)
    with Client(cluster.url(leader)) as c:
        for i in range(20):  # and more while it is down
            c.put(f"late/{i}", str(i))
    leader_rev, leader_kvs = _contents(cluster.url(leader))
    assert len(leader_kvs) == 200 - 10 + 20
    cluster.start_node(follower)
    cluster.wait_live(follower, timeout=30)
    cluster.wait_ready(follower, timeout=60)
    assert _contents(cluster.url(follower), min_revision=leader_rev) == (leader_rev, leader_kvs)
    log = cluster.log_file(follower).read_text()
    assert "restoring state machine from snapshot" in log
    # The supervisor does not bootstrap a node of a running cluster: wiped, it came back a
    # non-voter (a lost disk, node/raft/catchup.py) and votes once caught up.
    assert "does not vote or stand for election until it has caught up" in log
    wait_for_voter = time.monotonic() + 30
    while not (cluster.status(follower) or {}).get("voter") and time.monotonic() < wait_for_voter:
        time.sleep(0.1)
    assert cluster.status(follower)["voter"], "the wiped follower never caught up to vote"
    assert "this node votes from now on" in cluster.log_file(follower).read_text()


def test_down_leaves_no_zombies(cluster: LocalCluster) -> None:
    outcome = cluster.down(timeout=15)
    assert set(outcome.values()) == {"stopped"}
    assert _zombie_children() == []
