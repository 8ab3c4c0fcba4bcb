"""pysyncobj 0.3.17 behaviour node/raft/ depends on or works around, on a real cluster."""

from __future__ import annotations

import http.client
import time

import msgpack
import pytest

from statekeeper.client import Client
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.node import failpoints
from statekeeper.node.config import Limits
from statekeeper.node.ops.core import validate_op
from statekeeper.node.raft.syncobj import replicated_command_size

pytestmark = pytest.mark.integration

# pysyncobj's default appendEntriesBatchSizeBytes; entries of at least this size are chunked.
PYSYNCOBJ_CHUNK = 65536


def _put_raw(url: str, body: dict) -> tuple[int, dict]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    try:
        conn.request("POST", "/v1/kv/put", body=msgpack.packb(body), headers={"Content-Type": "application/msgpack"})
        r = conn.getresponse()
        return r.status, msgpack.unpackb(r.read(), raw=False)
    finally:
        conn.close()


def _command_size(key: str, value_len: int, idem: str) -> int:
    # The entry exactly as the proposer builds it: one validated op, a 9-byte msgpack time.
    request = {"op": "put", "key": key, "value": b"x" * value_len, "idempotency_key": idem}
    op = validate_op(request, Limits())
    payload = msgpack.packb({"t": int(time.time() * 1000), "ops": [op]}, use_bin_type=True)
    return replicated_command_size(payload)


@pytest.mark.parametrize("short_of_boundary", [3, 7, 11, 15])
def test_large_entry_at_a_chunk_boundary_replicates(
    plain_shared_cluster: LocalCluster, short_of_boundary: int
) -> None:
    """pysyncobj marks the last chunk of a large entry by the entry's unpickled size, so an
    entry a few bytes short of a chunk boundary gets two "finish" chunks. It still arrives
    (the follower keeps the partial buffer when the first unpickle fails); this pins that
    down for entries right at pysyncobj's default chunk boundary. The cases share one
    cluster: each has its own key and idempotency key (of one length: the sizes hold)."""
    cluster = plain_shared_cluster
    key = f"boundary-{short_of_boundary}"
    idem = f"{short_of_boundary:032d}"
    target = 2 * PYSYNCOBJ_CHUNK - short_of_boundary
    guess = target - (_command_size(key, target, idem) - target)
    # Sizes step unevenly (pickle framing): take the largest entry at or below the target.
    sizes = {v: _command_size(key, v, idem) for v in range(guess - 32, guess + 32)}
    value_len = max(v for v, size in sizes.items() if size <= target)
    assert abs(sizes[value_len] - target) <= 16  # sizes step unevenly
    leader = cluster.leader_id()
    body = {"key": key, "value": b"x" * value_len, "idempotency_key": idem}
    status, answer = _put_raw(cluster.url(leader), body)
    assert status == 200, answer
    for node_id in cluster.node_ids:
        with Client(cluster.url(node_id), timeout=10) as c:
            kv = c.get(key, consistency="serializable", min_revision=answer["revision"])
            assert len(kv.value) == value_len


@pytest.mark.cluster_options(snapshot_min_entries=100)
def test_restart_after_log_compaction_keeps_data_and_accepts_writes(cluster: LocalCluster) -> None:
    """journalFile without fullDumpFile comes back empty after the first compaction, and the
    replayed journal must not be applied twice: revision and versions survive unchanged."""
    with Client([cluster.url(i) for i in cluster.node_ids]) as c:
        for i in range(300):  # more entries than snapshot_min_entries: every node compacts
            c.put("counter", str(i))
            c.put(f"k{i}", str(i))
        before = c.get("counter")
    cluster.kill_all()
    cluster.up()
    with Client([cluster.url(i) for i in cluster.node_ids]) as c:
        after = c.get("counter")
        assert (after.text, after.version, after.mod_revision) == ("299", 300, before.mod_revision)
        assert after.revision == before.revision, "a replayed entry was applied again"
        assert len(list(c.scan("k"))) == 300
        r = c.put("counter", "300")
        assert r.revision == before.revision + 1
    for node_id in cluster.node_ids:
        assert list(cluster.data_dir(node_id).glob("raft/snapshot.bin")), f"{node_id} never compacted"


def _term(cluster: LocalCluster) -> int:
    with Client(cluster.url(cluster.leader_id()), timeout=5) as c:
        return c.status()["term"]


@pytest.mark.cluster_options(
    snapshot_min_entries=50,
    election_timeout_min=0.4,
    election_timeout_max=1.0,
    env={failpoints.ENV: "snapshot-pack=sleep(3)"},
)
def test_a_slow_snapshot_does_not_stall_raft(cluster: LocalCluster) -> None:
    """pysyncobj runs a custom serializer on its raft thread; packing a large DB there stops
    heartbeats for longer than an election timeout and the followers depose the leader.
    Snapshots here take 3 s (3x the election timeout): the leader and term must survive,
    and writes keep being acknowledged while the snapshots are written."""
    leader, term = cluster.leader_id(), _term(cluster)
    with Client([cluster.url(i) for i in cluster.node_ids], timeout=5) as c:
        start = time.monotonic()
        i = 0
        while time.monotonic() - start < 6:  # past snapshot_min_entries, then through the 3 s
            t0 = time.monotonic()
            c.put(f"k{i}", str(i))
            assert time.monotonic() - t0 < 2.5, f"put {i} stalled (snapshot on the raft thread?)"
            i += 1
    assert (cluster.leader_id(), _term(cluster)) == (leader, term), "leadership changed during a snapshot"
    for node_id in cluster.node_ids:
        assert list(cluster.data_dir(node_id).glob("raft/snapshot.bin")), f"{node_id} never finished a snapshot"


@pytest.mark.cluster_options(snapshot_min_entries=1_000_000, snapshot_max_journal_bytes=1024 * 1024)
def test_journal_size_bounds_the_journal(cluster: LocalCluster) -> None:
    """A restart reads the whole journal back into memory: a snapshot is taken once it
    holds snapshot_max_journal_bytes, whatever the entry count, and the journal shrinks."""
    value = b"v" * (100 * 1024)
    with Client([cluster.url(i) for i in cluster.node_ids], timeout=10) as c:
        for i in range(40):  # ~4 MiB of entries, far fewer than snapshot_min_entries
            c.put(f"big{i}", value)
    deadline = time.monotonic() + 20
    for node_id in cluster.node_ids:
        journal = cluster.data_dir(node_id) / "raft" / "journal.log"
        while journal.stat().st_size > 2 * 1024 * 1024 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert journal.stat().st_size <= 2 * 1024 * 1024, f"{node_id}: journal never compacted"
        assert list(cluster.data_dir(node_id).glob("raft/snapshot.bin"))
    cluster.kill_all()
    cluster.up()
    with Client([cluster.url(i) for i in cluster.node_ids], timeout=10) as c:
        assert len(c.get("big39").value) == len(value)
        assert len(list(c.scan("big"))) == 40
