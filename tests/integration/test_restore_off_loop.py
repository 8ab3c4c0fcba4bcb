"""A node replacing its state machine from a snapshot keeps serving (issue 17): raft runs
on the node's asyncio loop, and a restore done inside a raft step froze the whole node.

During the 10M-key scaling sweep a follower restored a leader's snapshot for over ten
minutes with its HTTP port silent: `statekeeper cluster supervise` (live check) and a
Kubernetes liveness probe would have killed it mid-restore, again on every restart. The
failpoint `snapshot-restore=sleep(S)` stands in for a large restore here. Real node
processes, real RocksDB, real sockets."""

from __future__ import annotations

import shutil
import time

import pytest

from statekeeper.client import Client
from statekeeper.client.errors import NotFound, Timeout, Unavailable
from statekeeper.cluster.supervisor import LocalCluster, http_get_json
from statekeeper.node import failpoints
from tests.integration.test_self_healing import (
    SMALL_JOURNAL,
    assert_same_contents,
    follower_of,
    wait_for,
    write_data,
)

pytestmark = pytest.mark.integration

RESTORE_SECONDS = 15  # the injected restore: long enough to probe the node during it
ANSWER_WITHIN = 5.0  # an HTTP answer, not a latency bound: a frozen loop gives none


def _restoring(cluster: LocalCluster, node_id: str) -> bool:
    log = cluster.log_file(node_id).read_text()
    return "restoring state machine from snapshot" in log and "state machine restored" not in log


@pytest.mark.cluster_options(snapshot_max_journal_bytes=SMALL_JOURNAL)
def test_a_node_restoring_a_snapshot_answers_and_serves_nothing_stale(
    cluster: LocalCluster,
) -> None:
    victim = follower_of(cluster)
    others = [n for n in cluster.node_ids if n != victim]
    with Client([cluster.url(n) for n in cluster.node_ids]) as c:
        early = write_data(c, "a", 200)
        want = c.get("a/0001").value
    cluster.kill_node(victim)
    shutil.rmtree(cluster.data_dir(victim))
    with Client([cluster.url(n) for n in others]) as c:
        late = write_data(c, "b", 200)  # the leader's log no longer starts at 1: a snapshot
    cluster.start_node(victim, env={failpoints.ENV: f"snapshot-restore=sleep({RESTORE_SECONDS})"})
    wait_for("the restore to start", lambda: _restoring(cluster, victim), 60)

    url = cluster.url(victim)
    status, live = http_get_json(f"{url}/v1/health/live", timeout=ANSWER_WITHIN)
    assert status == 200 and live is not None and live["restoring_snapshot"] is True, (status, live)
    status, ready = http_get_json(f"{url}/v1/health/ready", timeout=ANSWER_WITHIN)
    assert status == 503 and ready is not None, (status, ready)
    assert "restoring a snapshot" in ready["error"]["message"], ready
    status, st = http_get_json(f"{url}/v1/status", timeout=ANSWER_WITHIN)
    assert status == 200 and st is not None, (status, st)
    # Raft moved to the snapshot's position; the state machine has not: applied_index
    # says what reads here would see.
    assert st["applied_index"] == st["sm_applied_index"] == 0, st
    assert _restoring(cluster, victim), "the probes must have run during the restore"

    # A linearizable read sent to the restoring node waits for the restore or fails
    # (unavailable, timeout): it must never answer from the empty state machine it has.
    with Client([url], timeout=ANSWER_WITHIN * 3) as c:
        deadline = time.monotonic() + RESTORE_SECONDS * 4
        while True:
            try:
                got = c.get("a/0001").value
                break
            except NotFound:
                pytest.fail("a linearizable read was served from the state machine being replaced")
            except (Unavailable, Timeout):
                assert time.monotonic() < deadline, "the read never succeeded"
    assert got == want
    wait_for("the restore to end", lambda: not _restoring(cluster, victim), 60)
    wait_for(f"{victim} ready", lambda: cluster.is_ready(victim), 60)
    assert_same_contents(cluster, victim, [early, late])
