"""Partitions at the packet level (iptables DROP on per-link loopback addresses): a
leader cut off from the majority steps down fast (check-quorum), and a node returning from
a partition does not depose a healthy leader (pre-vote)."""

from __future__ import annotations

import time

import pytest

from statekeeper.chaos.partition import Partitioner, available
from statekeeper.client import Client, RetryPolicy, StatekeeperError
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.raft_harness import wait_for

ok, why = available()
# iptables rules match loopback link addresses, which every link-address cluster shares:
# `make test`'s two workers run these modules on one worker (xdist group "links").
pytestmark = [
    pytest.mark.xdist_group("links"),
    pytest.mark.integration,
    pytest.mark.skipif(not ok, reason=why),
    pytest.mark.cluster_options(
        link_addresses=True, election_timeout_min=0.4, election_timeout_max=1.0
    ),
]
ELECTION_TIMEOUT = 1.0


def _status(lc: LocalCluster, node_id: str) -> dict:
    st = lc.status(node_id)
    assert st is not None, f"{node_id} does not answer /v1/status"
    return st


def test_partitioned_leader_steps_down_and_the_majority_keeps_serving(
    cluster: LocalCluster,
) -> None:
    leader = wait_for(cluster.leader_id, 10, "a leader")
    others = [n for n in cluster.node_ids if n != leader]
    no_retry = RetryPolicy.disabled()
    with (
        Client(cluster.url(leader), retry=no_retry, timeout=10) as at_old,
        Client([cluster.url(n) for n in others], timeout=10) as at_majority,
    ):
        at_old.put("before", b"1")
        with Partitioner(cluster.config) as net:
            net.isolate(leader)
            t0 = time.monotonic()
            # Reads keep arriving at the old leader; each must fail, never succeed, and
            # the failures must come fast once it has stepped down.
            answered_at = None
            while time.monotonic() - t0 < 4 * ELECTION_TIMEOUT:
                sent = time.monotonic()
                try:
                    at_old.get("before")
                except StatekeeperError as e:
                    assert e.code in ("unavailable", "timeout"), e
                    if answered_at is None and time.monotonic() - sent < 0.5:
                        answered_at = time.monotonic() - t0
                else:
                    pytest.fail("a partitioned old leader served a linearizable read")
            assert answered_at is not None and answered_at < 2 * ELECTION_TIMEOUT + 0.5, (
                f"the old leader kept accepting reads for {answered_at} s"
            )
            assert _status(cluster, leader)["role"] != "leader"
            new_leader = wait_for(
                lambda: next((n for n in others if _status(cluster, n)["role"] == "leader"), None),
                10,
                "a new leader on the majority side",
            )
            assert new_leader != leader
            rev = at_majority.put("during", b"2").revision
            assert at_majority.get("during").value == b"2"
        # Healed: the old leader catches up as a follower.
        with Client(cluster.url(leader), timeout=10) as c:
            assert c.get("during", consistency="serializable", min_revision=rev).value == b"2"


def test_node_returning_from_a_partition_does_not_depose_the_leader(cluster: LocalCluster) -> None:
    leader = wait_for(cluster.leader_id, 10, "a leader")
    term = _status(cluster, leader)["term"]
    follower = next(n for n in cluster.node_ids if n != leader)
    with Partitioner(cluster.config) as net:
        net.isolate(follower)
        time.sleep(6 * ELECTION_TIMEOUT)  # long enough for many election attempts
    # Healed. Give the returning node time to reconnect and try its luck.
    time.sleep(4 * ELECTION_TIMEOUT)
    st = _status(cluster, leader)
    assert (st["role"], st["term"]) == ("leader", term), f"leader deposed: {st}"
    back = _status(cluster, follower)
    assert back["leader"] == leader and back["term"] == term, back
    with Client([cluster.url(n) for n in cluster.node_ids]) as c:
        rev = c.put("after-heal", b"ok").revision
    with Client(cluster.url(follower)) as c:
        assert c.get("after-heal", consistency="serializable", min_revision=rev).value == b"ok"


def test_a_partitioned_follower_ends_its_watches_and_refuses_writes(cluster: LocalCluster) -> None:
    """An isolated follower keeps its old leader in pysyncobj (pre-vote: it never starts an
    election), so it must judge the leader by recent contact: its watches end (the client
    resumes elsewhere) and writes sent to it fail fast instead of waiting for a timeout."""
    leader = wait_for(cluster.leader_id, 10, "a leader")
    follower = next(n for n in cluster.node_ids if n != leader)
    no_retry = RetryPolicy.disabled()
    with Client(cluster.url(follower), retry=no_retry, timeout=15) as at_follower:
        rev = at_follower.put("w/before", b"1").revision
        watch = at_follower.watch("w/", start_revision=rev + 1, progress=0.2)
        with Partitioner(cluster.config) as net:
            net.isolate(follower)
            t0 = time.monotonic()
            with pytest.raises(StatekeeperError) as ended:
                for _ in watch:
                    assert time.monotonic() - t0 < 15, "the watch on the isolated node never ended"
            assert time.monotonic() - t0 < 10, (
                f"the watch ended only after {time.monotonic() - t0:.1f} s"
            )
            assert ended.value.code == "unavailable", ended.value
            sent = time.monotonic()
            with pytest.raises(StatekeeperError) as refused:
                at_follower.put("w/during", b"2")
            assert refused.value.code == "unavailable", refused.value
            assert time.monotonic() - sent < 2, "a write to the isolated node was not refused fast"
