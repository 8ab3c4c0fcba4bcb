"""Online membership change (issue 16 item 3; node/raft/members.py, cluster/members.py):
real node processes on loopback.

- 3 -> 5 -> 3 under the chaos workload and its checkers (the `membership` fault of
  chaos/faults/membership.py, run by chaos.runner like any fault): linearizable, no lost
  acknowledged write, every node agrees on the final members; the second removal removes
  the leader.
- the member set survives restarts and snapshots, and the log wins over cluster.toml: a
  node restarted from a cluster.toml that no longer lists the new member still has it.
- one change at a time: a second change while the first is not committed is refused with
  member_change_pending, and nothing of it is applied.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper.chaos.runner import RunOptions, run_scenario
from statekeeper.cluster.members import Membership, post_json
from statekeeper.cluster.supervisor import LocalCluster, http_get_json
from statekeeper.node import snapshot_file

pytestmark = pytest.mark.integration


def _members(lc: LocalCluster, node_id: str, url: str | None = None) -> list[str]:
    code, doc = http_get_json(f"{url or lc.url(node_id)}/v1/status", tls=lc.tls)
    assert code == 200 and doc, (node_id, code)
    return sorted(m["id"] for m in doc["members"])


def _put_many(m: Membership, n: int) -> None:
    from statekeeper.client import Client

    with Client(m.cfg.http_urls(), tls=m.lc.tls, token=m.token) as c:
        for i in range(n):
            c.put(f"k{i}", b"v" * 64)


@pytest.fixture
def membership(cluster: LocalCluster) -> Iterator[Membership]:
    """Membership of the `cluster` fixture's cluster; nodes it added and that are still
    configured are killed after the test (the fixture knows only the first three)."""
    m = Membership(cluster.config_path, say=print, timeout=30.0)
    yield m
    m.reload()
    for n in m.cfg.nodes:
        if n.id not in cluster.node_ids:
            m.lc.kill_node(n.id)


def test_grow_to_five_and_back_to_three_under_the_chaos_workload(tmp_path: Path) -> None:
    """The chaos runner's workload (kv, txns, streams, watchers, lockers, CRDTs) runs
    through 3 -> 5 -> 3 with TLS and auth on; every checker passes."""
    report = tmp_path / "membership"
    opts = RunOptions(
        fault="membership",
        duration=30.0,
        fault_window=8.0,
        clients=10,
        seed=7,
        report_dir=report,
        tls=True,
        auth=True,
    )
    result = run_scenario(opts)
    verdicts = {v.name: v for v in result.verdicts}
    failing = [f"{v.name}={v.status} ({v.value}; {v.detail})" for v in result.verdicts
               if v.status not in ("PASS", "INFO")]  # fmt: skip
    assert not failing, f"{failing}\n{result.checker_report}"
    assert result.status == "passed", result.reason
    assert verdicts["linearizable"].status == "PASS"
    assert verdicts["lost acknowledged writes"].value == "0"
    assert verdicts["members after the changes"].status == "PASS"
    events = " | ".join(msg for _, msg in result.events)
    assert "grew to 5 and back to 3" in events, events
    assert "remove node-4 (leader)" in events, events
    assert result.metrics is not None and result.metrics.ok > 300, "the workload barely ran"


@pytest.mark.cluster_options(snapshot_min_entries=100)
def test_members_survive_restarts_and_snapshots_and_the_log_wins_over_the_toml(
    cluster: LocalCluster, membership: Membership
) -> None:
    m = membership
    old_toml = cluster.config_path.read_text()
    new = m.new_node()
    m.add_node(new)
    four = sorted([*cluster.node_ids, new.id])
    _put_many(m, 400)  # past snapshot_min_entries: every node compacts its log
    for nid in four:
        assert _members(cluster, nid, m.cfg.url(nid)) == four
    snap = Path(m.cfg.node_data_dir("node-1")) / "raft" / "snapshot.bin"
    deadline = time.monotonic() + 30
    while not snap.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    header, _ = snapshot_file.read_header(str(snap))
    assert sorted(x["id"] for x in header["members"]) == four

    # node-1 restarts from the cluster.toml of before the add: the snapshot and the
    # journal, not the file, say who the members are.
    current_toml = cluster.config_path.read_text()
    cluster.config_path.write_text(old_toml)
    try:
        cluster.restart_node("node-1")
    finally:
        cluster.config_path.write_text(current_toml)
    assert _members(cluster, "node-1") == four
    # the new node restarts too and comes back a member, caught up
    m.lc.restart_node(new.id)
    assert _members(cluster, new.id, m.cfg.url(new.id)) == four
    _put_many(m, 5)  # a quorum of the four still commits
    m.remove_node(new.id)
    for nid in cluster.node_ids:
        assert _members(cluster, nid) == sorted(cluster.node_ids)


@pytest.mark.cluster_options(election_timeout_min=1.0, election_timeout_max=2.0)
def test_a_second_change_while_one_is_pending_is_refused(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """node-2 down, then an add: the 4-member config has no quorum, so the add stays
    uncommitted; a second add is refused (member_change_pending) and never applied. With
    node-2 back, the first commits; removing it restores the three."""
    m = Membership(cluster.config_path, say=print, timeout=10.0)
    leader = m.leader(time.monotonic() + 10)["node_id"]
    down = next(n for n in cluster.node_ids if n != leader)
    cluster.kill_node(down)
    url = m.cfg.url(leader)
    fakes = []
    for _ in range(2):  # something listening, so the leader's reachability probe passes
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        fakes.append(s)
    specs = [
        {"id": f"fake-{i}", "host": "127.0.0.1", "raft_port": s.getsockname()[1],
         "http_port": 1}
        for i, s in enumerate(fakes)
    ]  # fmt: skip
    first: dict = {}

    def add_first() -> None:
        first["answer"] = post_json(
            url + "/v1/cluster/members/add", specs[0], m.lc.tls, m.token, 30
        )

    t = threading.Thread(target=add_first)
    t.start()
    deadline = time.monotonic() + 5
    while True:  # the entry is appended (and so in effect) but cannot commit
        code, st = http_get_json(f"{url}/v1/status", tls=m.lc.tls)
        if code == 200 and st and st.get("member_change_pending"):
            break
        assert time.monotonic() < deadline, st
        time.sleep(0.01)
    code, doc = post_json(url + "/v1/cluster/members/add", specs[1], m.lc.tls, m.token, 10)
    assert (code, doc["error"]["code"]) == (409, "member_change_pending"), doc
    t.join()
    code, doc = first["answer"]
    assert code in (504, 421, 503), doc  # not committed in time: outcome unknown / no leader

    cluster.start_and_wait(down)
    deadline = time.monotonic() + 30
    while "fake-0" not in _members(cluster, down):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    for nid in cluster.node_ids:
        got = _members(cluster, nid)
        assert "fake-0" in got and "fake-1" not in got, (nid, got)
    doc = m.change("/v1/cluster/members/remove", {"id": "fake-0"}, time.monotonic() + 30)
    assert sorted(x["id"] for x in doc["members"]) == sorted(cluster.node_ids)
    for s in fakes:
        s.close()


def test_the_cli_adds_and_removes_a_node(cluster: LocalCluster, membership: Membership) -> None:
    """`statekeeper cluster add-node` / `remove-node`: progress on stdout, cluster.toml
    follows, exit 0; removing an unknown node fails with exit 1 and says why."""
    import subprocess
    import sys

    cfg = str(cluster.config_path)
    run = [sys.executable, "-m", "statekeeper.cluster.cli", "cluster"]
    root = Path(__file__).resolve().parents[2]
    add = subprocess.run([*run, "add-node", "-c", cfg, "--id", "node-7"], cwd=root,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert add.returncode == 0, add.stdout + add.stderr
    assert "node-7: caught up and voting" in add.stdout
    assert 'id = "node-7"' in cluster.config_path.read_text()
    rm = subprocess.run([*run, "remove-node", "-c", cfg, "node-7"], cwd=root,
                        capture_output=True, text=True, timeout=120)  # fmt: skip
    assert rm.returncode == 0, rm.stdout + rm.stderr
    assert "node-7: removed (committed)" in rm.stdout
    assert "node-7" not in cluster.config_path.read_text()
    bad = subprocess.run([*run, "remove-node", "-c", cfg, "node-9"], cwd=root,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 1 and "no node node-9" in bad.stderr


@pytest.mark.cluster_options(size=1)
def test_a_one_member_cluster_whose_leader_dies_before_an_add_commits_elects_again(
    cluster: LocalCluster, membership: Membership
) -> None:
    """The simulator's seed 810258. An add takes effect when appended, so a lone leader
    whose log ends in an uncommitted add of node-1 needs node-1's vote after a restart.
    add-node started node-1 without raft state as a lost disk is started: a non-voter
    until a leader caught it up, and no leader could be elected to do it, ever. add-node
    starts a new member with --join now: it votes from its first start."""
    m = membership
    node = m.new_node()
    m.start_new_member(node)  # as add-node does, before asking the leader
    assert m.lc.status(node.id)["voter"], "a node started to be added must vote"
    m.lc.pause_node(node.id)  # its acknowledgement is the new quorum's second: no commit
    body = {"id": node.id, "host": node.host, "raft_port": node.raft_port}
    url = m.cfg.url("node-0") + "/v1/cluster/members/add"
    code, doc = post_json(url, {**body, "http_port": node.http_port}, m.lc.tls, m.token, 3)
    assert code != 200, doc  # not committed: unknown
    assert node.id in _members(m.lc, "node-0")  # appended, so in effect
    cluster.kill_node("node-0")  # the fixture's supervisor: node-0 is its child to reap
    cluster.start_node("node-0")
    m.lc.resume_node(node.id)
    leader = m.leader(time.monotonic() + 30)  # before: no leader, for good
    assert sorted(x["id"] for x in leader["members"]) == ["node-0", node.id]
    _put_many(m, 3)


@pytest.mark.cluster_options(size=1)
def test_an_add_no_leader_answered_leaves_the_new_node_running_and_configured(
    cluster_config, tmp_path: Path
) -> None:
    """With no leader to ask, an add's outcome is unknown: it may sit uncommitted in a log
    whose quorum now counts the new node, and stopping the node could leave that
    configuration without a majority for good. add-node stopped it and deleted it from
    cluster.toml all the same; now it leaves both and says so."""
    said: list[str] = []
    m = Membership(cluster_config.path, say=said.append, timeout=3.0)
    node = m.new_node()  # node-0 never started: no leader
    try:
        with pytest.raises(Exception, match="no leader answered"):
            m.add_node(node)
        assert m.lc.is_running(node.id)
        assert f'id = "{node.id}"' in cluster_config.path.read_text()
        assert any("no leader to say whether it was added" in s for s in said), said
    finally:
        m.lc.kill_node(node.id)
