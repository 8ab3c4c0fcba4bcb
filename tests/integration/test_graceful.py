"""Graceful termination (node/shutdown.py) on a real 3-node cluster: SIGTERM of the
leader hands leadership over, clients on open connections get a retryable 503, a second
SIGTERM stops at once, and a rolling restart under a 16-writer load fails no call."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from statekeeper.benchmarks.rolling_restart import Load
from statekeeper.client import Client
from statekeeper.client.auth.tokens import root_token
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.cluster_fixture import raw_connection, tls_env
from tests.integration.test_replication import _wait_leader

pytestmark = pytest.mark.integration


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(n) for n in lc.node_ids]


def _ready_until_503(lc: LocalCluster, node_id: str, seen: dict, timeout: float = 30.0) -> None:
    """Ask /v1/health/ready over ONE keep-alive connection until the node says 503."""
    conn = raw_connection(lc, node_id)
    conn.request("GET", "/v1/health/ready")
    resp = conn.getresponse()
    resp.read()
    seen["before"] = resp.status
    seen["started"] = True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        conn.request("GET", "/v1/health/ready")
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            seen.update(status=resp.status, body=json.loads(body), headers=dict(resp.getheaders()))
            conn.close()
            return
        time.sleep(0.005)
    conn.close()


def test_sigterm_of_the_leader_hands_over_and_answers_open_connections_503(
    cluster: LocalCluster,
) -> None:
    leader = _wait_leader(cluster, timeout=30)
    with Client(_urls(cluster), ns="graceful") as c:
        for i in range(50):
            c.put(f"k{i}", b"v%d" % i)
    seen: dict = {}
    prober = threading.Thread(target=_ready_until_503, args=(cluster, leader, seen))
    prober.start()
    while "started" not in seen and prober.is_alive():
        time.sleep(0.01)
    assert seen.get("before") == 200
    assert cluster.stop_node(leader) == "stopped"
    prober.join(30)

    # A request on a connection opened before the signal got a clean, retryable answer.
    assert seen.get("status") == 503, seen
    assert seen["body"]["error"]["code"] == "unavailable"
    assert {k.lower(): v for k, v in seen["headers"].items()}["connection"] == "close"
    assert cluster.exit_codes[leader] == 0
    assert _wait_leader(cluster, not_this=leader, timeout=30) != leader
    log = cluster.log_file(leader).read_text()
    assert "handed leadership over to node-" in log, cluster.log_tail(leader)
    assert "stopped (graceful)" in log

    cluster.start_and_wait(leader)
    with Client(cluster.url(leader), ns="graceful") as c:
        assert {kv.key: kv.value for kv in c.scan()} == {f"k{i}": b"v%d" % i for i in range(50)}


def test_a_second_sigterm_stops_at_once_and_the_node_restarts_with_every_ack(
    cluster: LocalCluster,
) -> None:
    node = "node-1"
    # The switch makes the graceful stop wait as if a request never finished (until the
    # 10 s grace is over).
    cluster.node_env[node] = {"STATEKEEPER_FAILPOINTS": "shutdown-stall=on"}
    cluster.restart_node(node)
    with Client(_urls(cluster), ns="graceful") as c:
        for i in range(20):
            c.put(f"k{i}", b"v")
    pid = cluster.pid(node)
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    time.sleep(1.0)
    assert cluster.is_running(node)  # stalled in its graceful stop
    t = time.monotonic()
    outcome = cluster.stop_node(node, timeout=30)  # the second SIGTERM
    took = time.monotonic() - t
    assert outcome == "stopped"
    assert cluster.exit_codes[node] == 0
    assert took < 8.0, f"took {took:.1f} s after the second SIGTERM; the grace is 10 s"
    log = cluster.log_file(node).read_text()
    assert "second stop signal" in log and "stopped (second signal)" in log

    del cluster.node_env[node]
    cluster.start_and_wait(node)
    with Client(cluster.url(node), ns="graceful") as c:
        found = {kv.key for kv in c.scan()}
    assert found == {f"k{i}" for i in range(20)}


def test_rolling_restart_under_16_writers_fails_no_call(cluster: LocalCluster) -> None:
    _rolling_restart_fails_no_call(cluster)


@pytest.mark.cluster_options(tls=True, auth=True)
def test_rolling_restart_with_tls_and_auth_fails_no_call(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the shared cluster runs: HTTPS (the drain's 503 + close over TLS) and tokens."""
    for k, v in tls_env(cluster.config).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("STATEKEEPER_TOKEN", root_token(cluster.config.secret))
    _rolling_restart_fails_no_call(cluster)


def _rolling_restart_fails_no_call(cluster: LocalCluster) -> None:
    urls = _urls(cluster)
    restarted_leader = False
    # The benchmark's load (benchmarks/rolling_restart.py): writers of unique keys
    # through the client library with its default retries, for the whole test.
    with Load(urls, 16) as load:
        time.sleep(1.0)
        for node in cluster.node_ids:  # every node in turn, the leader among them
            restarted_leader |= cluster.leader_id() == node
            cluster.restart_node(node)
            assert cluster.exit_codes[node] == 0
        time.sleep(1.0)
    assert restarted_leader, "the leader was never restarted"
    assert load.failures == [], load.failures[:5]
    acked = [k for keys in load.acked for _, k in keys]
    assert len(acked) > 100, "the load hardly ran"
    with Client(urls, ns="rolling") as c:
        found = {kv.key: kv.value for kv in c.scan()}
    missing = [k for k in acked if found.get(k) != k.encode()]
    assert missing == [], missing[:5]
