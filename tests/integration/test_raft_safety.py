"""Raft-layer hardening on real node processes: followers never drop entries they
acknowledged, peers must prove the cluster secret, an fsync failure stops the node."""

from __future__ import annotations

import asyncio
import os
import pickle
import socket
import time
import uuid
import zlib
from pathlib import Path

import pytest

from statekeeper.client import AsyncClient, Client
from statekeeper.cluster.supervisor import LocalCluster, NodeStartError
from statekeeper.node import config as node_config
from statekeeper.node import failpoints
from tests.integration.raft_harness import Exploit, raft_frame

pytestmark = pytest.mark.integration


async def _pipelined_puts(urls: list[str], total: int, concurrency: int) -> int:
    done = 0
    async with AsyncClient(urls, ns="pipe", timeout=20) as c:
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            nonlocal done
            async with sem:
                await c.put(f"k{i % 500}", b"x" * 100)
                done += 1

        await asyncio.gather(*(one(i) for i in range(total)))
    return done


@pytest.mark.cluster_options(max_inflight_entries=256, snapshot_min_entries=100_000)
def test_followers_never_truncate_under_pipelined_load(cluster: LocalCluster) -> None:
    """pysyncobj truncates a follower's log after prevLogIdx on every AppendEntries, so a
    resent older batch drops entries the follower already acknowledged. With a stable
    leader there is never a term conflict, so a correct follower never truncates."""
    leader = cluster.leader_id()
    urls = [cluster.url(leader)]  # one proposer: many entries in flight through one leader
    assert asyncio.run(_pipelined_puts(urls, total=6000, concurrency=256)) == 6000
    stats = {n: cluster.status(n) for n in cluster.node_ids}
    assert all(s["term"] == stats[leader]["term"] for s in stats.values()), "leader changed"
    assert stats[leader]["entries_proposed"] > 300, "the load did not pipeline entries"
    for node_id, s in stats.items():
        assert s["log_truncations"] == 0, f"{node_id} truncated its log: {s}"


def test_crafted_pickle_and_garbage_on_the_raft_port_are_rejected(cluster: LocalCluster, tmp_path: Path) -> None:
    target = cluster.node_ids[1]
    node = cluster.config.node(target)
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    payloads = [
        raft_frame(zlib.compress(pickle.dumps(Exploit(marker)))),  # a plaintext peer message
        raft_frame(pickle.dumps(Exploit(marker))),
        os.urandom(4096),
        raft_frame(b"gAAAAA" + os.urandom(200)),  # looks like a Fernet token, is not
    ]
    for payload in payloads:
        with socket.create_connection((node.host, node.raft_port), timeout=5) as s:
            s.sendall(payload)
            s.settimeout(10)  # garbage with a huge length prefix waits for the grace period
            try:
                closed = s.recv(4096) == b""
            except ConnectionResetError:
                closed = True
            assert closed, "the node kept a connection that failed authentication"
    time.sleep(0.5)
    assert not marker.exists(), "a peer message was unpickled without authentication"
    with Client([cluster.url(n) for n in cluster.node_ids]) as c:
        rev = c.put("still-serving", b"yes").revision
    with Client(cluster.url(target)) as c:
        assert c.get("still-serving", consistency="serializable", min_revision=rev).value == b"yes"
    assert cluster.status(target)["rejected_peer_messages"] >= 1
    assert "failed authentication" in cluster.log_file(target).read_text()


def test_a_node_with_the_wrong_secret_cannot_join(cluster: LocalCluster) -> None:
    victim = cluster.node_ids[2]
    cluster.stop_node(victim)
    with Client([cluster.url(n) for n in cluster.node_ids[:2]]) as c:
        rev = c.put("secret-test", b"1").revision
    cluster.start_node(victim, env={"STATEKEEPER_SECRET": "not-the-cluster-secret"})
    cluster.wait_live(victim)
    time.sleep(3)
    st = cluster.status(victim)
    assert st["leader"] is None and st["revision"] < rev, st
    logs = "".join(cluster.log_file(n).read_text() for n in cluster.node_ids)
    assert "failed authentication" in logs


def test_a_node_without_a_secret_refuses_to_start(cluster_config) -> None:
    path, cfg = cluster_config
    import dataclasses

    node_config.write(dataclasses.replace(cfg, secret=""), path)
    lc = LocalCluster(node_config.load(path), path)
    lc.start_node("node-0")
    with pytest.raises(NodeStartError):
        lc.wait_live("node-0", timeout=15)
    assert "needs a secret" in lc.log_file("node-0").read_text()
    lc.close()


@pytest.mark.cluster_options(fsync="always")
def test_fsync_failure_stops_the_node_and_loses_nothing_acknowledged(cluster: LocalCluster) -> None:
    leader = cluster.leader_id()
    cluster.stop_node(leader)
    # The restarted node's 30th journal fsync fails with EIO.
    cluster.start_node(leader, env={failpoints.ENV: "journal-fsync=31*error"})
    cluster.wait_live(leader)
    acked = {}
    with Client([cluster.url(n) for n in cluster.node_ids], timeout=5) as c:
        for i in range(300):
            acked[f"f{i}"] = c.put(f"f{i}", str(i)).revision
    deadline = time.monotonic() + 10
    while cluster.is_running(leader) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not cluster.is_running(leader), "the node kept running after fsync failed"
    log = cluster.log_file(leader).read_text()
    assert "fsync" in log.lower() and "CRITICAL" in log
    with Client([cluster.url(n) for n in cluster.node_ids if n != leader]) as c:
        found = {kv.key for kv in c.scan("f")}
    assert set(acked) <= found
