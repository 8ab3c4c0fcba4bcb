"""GET /metrics of running nodes, parsed with prometheus-client's own parser after some
writes and reads (docs/protocol.md#metrics)."""

from __future__ import annotations

import json
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from statekeeper.client import Client
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.cluster_fixture import raw_connection

pytestmark = pytest.mark.integration


def _get(lc: LocalCluster, node_id: str, path: str) -> tuple[int, str, bytes]:
    conn = raw_connection(lc, node_id)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read()
    finally:
        conn.close()


def _scrape(lc: LocalCluster, node_id: str) -> dict[str, list]:
    """family name -> its samples, as prometheus-client parses the exposition."""
    status, content_type, body = _get(lc, node_id, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    return {f.name: f.samples for f in text_string_to_metric_families(body.decode())}


def _one(samples: list, name: str, **labels) -> float:
    found = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) == 1, f"{name} {labels}: {found}"
    return found[0]


def _status(lc: LocalCluster, node_id: str) -> dict:
    status, _, body = _get(lc, node_id, "/v1/status")
    assert status == 200
    return json.loads(body)


def test_metrics_after_traffic(cluster: LocalCluster) -> None:
    deadline = time.monotonic() + 10
    while (leader := cluster.leader_id()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leader is not None
    follower = next(i for i in cluster.node_ids if i != leader)
    c = Client([cluster.url(leader)])
    for i in range(20):
        c.put(f"k{i}", f"v{i}")
    for i in range(10):
        assert c.get(f"k{i}").text == f"v{i}"  # linearizable: ReadIndex on the leader
    assert _get(cluster, leader, "/v1/kv/nonsense")[0] == 405  # POST only
    assert _get(cluster, leader, "/no/such/path/42")[0] == 404

    m = _scrape(cluster, leader)
    assert _one(m["statekeeper_raft_term"], "statekeeper_raft_term") >= 1
    roles = {s.labels["role"]: s.value for s in m["statekeeper_raft_role"]}
    assert roles == {"leader": 1, "follower": 0, "candidate": 0}
    assert _one(m["statekeeper_raft_leader_changes"], "statekeeper_raft_leader_changes_total") >= 1
    assert _one(m["statekeeper_proposals"], "statekeeper_proposals_total") >= 20
    entries = _one(
        m["statekeeper_raft_entries_proposed"], "statekeeper_raft_entries_proposed_total"
    )
    assert entries >= 1
    sizes = m["statekeeper_raft_entry_size_bytes"]
    assert _one(sizes, "statekeeper_raft_entry_size_bytes_count") == entries
    assert _one(sizes, "statekeeper_raft_entry_size_bytes_sum") > 20 * len("k0v0")
    lat = m["statekeeper_proposal_apply_duration_seconds"]
    assert 1 <= _one(lat, "statekeeper_proposal_apply_duration_seconds_count") <= entries
    assert _one(lat, "statekeeper_proposal_apply_duration_seconds_sum") > 0

    req = m["statekeeper_http_requests"]
    assert _one(req, "statekeeper_http_requests_total", route="/v1/kv/put", code="200") == 20
    assert _one(req, "statekeeper_http_requests_total", route="/v1/kv/get", code="200") == 10
    assert _one(req, "statekeeper_http_requests_total", route="/v1/kv/{op}", code="405") == 1
    assert _one(req, "statekeeper_http_requests_total", route="other", code="404") == 1
    routes = {s.labels["route"] for s in req}
    assert not any("nonsense" in r or "42" in r for r in routes), routes  # no raw paths
    dur = m["statekeeper_http_request_duration_seconds"]
    assert _one(dur, "statekeeper_http_request_duration_seconds_count", route="/v1/kv/put") == 20
    # The scrape itself is in flight while the collector runs.
    assert (
        _one(m["statekeeper_http_requests_in_flight"], "statekeeper_http_requests_in_flight") >= 1
    )

    ri = m["statekeeper_read_index_requests"]
    assert _one(ri, "statekeeper_read_index_requests_total", outcome="ok") >= 1
    assert _one(m["statekeeper_read_index_rounds"], "statekeeper_read_index_rounds_total") >= 1
    assert _one(m["statekeeper_rocksdb_memtable_bytes"], "statekeeper_rocksdb_memtable_bytes") > 0
    assert _one(m["statekeeper_journal_size_bytes"], "statekeeper_journal_size_bytes") > 0
    assert _one(m["statekeeper_revision"], "statekeeper_revision") >= 20
    # Present though empty here: fsync = "never" in tests, no snapshot this small.
    for family in (
        "statekeeper_journal_fsync_duration_seconds",
        "statekeeper_snapshot_duration_seconds",
        "statekeeper_snapshot_size_bytes",
        "statekeeper_snapshots",
        "statekeeper_rocksdb_sst_bytes",
        "statekeeper_proposals_failed",
        "statekeeper_auth_denials",
        "statekeeper_raft_has_quorum",
        "statekeeper_ready",
    ):
        assert family in m, family

    # The follower: its own registry, its own role; applied index as /v1/status says.
    for _ in range(20):
        before = _status(cluster, follower)
        fm = _scrape(cluster, follower)
        after = _status(cluster, follower)
        if before["applied_index"] == after["applied_index"]:
            break
    applied = _one(fm["statekeeper_raft_applied_index"], "statekeeper_raft_applied_index")
    assert applied == after["applied_index"] >= 20
    commit = _one(fm["statekeeper_raft_commit_index"], "statekeeper_raft_commit_index")
    assert commit >= applied
    assert {s.labels["role"]: s.value for s in fm["statekeeper_raft_role"]}["follower"] == 1
    assert _one(fm["statekeeper_raft_term"], "statekeeper_raft_term") == after["term"]
    # The follower forwarded nothing and served no KV request.
    assert not any(s.labels.get("route") == "/v1/kv/put" for s in fm["statekeeper_http_requests"])


async def test_both_clients_read_metrics(shared_cluster: LocalCluster) -> None:
    """client.metrics(): GET /metrics through the client (its TLS, any node), as the web
    console's Cluster page reads it."""
    from statekeeper.client import AsyncClient

    urls = shared_cluster.config.http_urls()
    with Client(urls) as c:
        text = c.metrics(endpoint=urls[1])
    async with AsyncClient(urls) as ac:
        atext = await ac.metrics()
    for t in (text, atext):
        names = {f.name for f in text_string_to_metric_families(t)}
        assert "statekeeper_raft_term" in names
