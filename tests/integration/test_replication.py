"""A real 3-node cluster on loopback: replication, linearizable reads, failover,
restarts and snapshot transfer. Every node is a separate process with its own RocksDB."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from statekeeper.client import Client, InvalidRequest, NotFound, RetryPolicy, StatekeeperError
from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration


def _client(lc: LocalCluster, *ids: str, **kw) -> Client:
    urls = [lc.url(i) for i in (ids or lc.node_ids)]
    return Client(urls, **kw)


def _followers(lc: LocalCluster) -> list[str]:
    leader = _wait_leader(lc)
    return [i for i in lc.node_ids if i != leader]


def _wait_leader(lc: LocalCluster, not_this: str | None = None, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leader = lc.leader_id()
        if leader is not None and leader != not_this:
            return leader
        time.sleep(0.05)
    raise AssertionError(f"no leader (other than {not_this}) within {timeout} s")


class AckedWriter:
    """Background writers of unique keys; remembers exactly which writes were acknowledged."""

    def __init__(self, endpoints: list[str], threads: int = 4, ns: str = "load"):
        self.endpoints = endpoints
        self.ns = ns
        self.acked: dict[str, bytes] = {}
        self.errors: list[str] = []
        self.ack_times: list[float] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(threads)
        ]

    def _run(self, t: int) -> None:
        # Short per-call deadline so a stuck call reports quickly; the retry
        # inside one call reuses its idempotency key.
        c = Client(self.endpoints, ns=self.ns, timeout=2.0, retry=RetryPolicy(deadline=6.0))
        i = 0
        while not self._stop.is_set():
            key, value = f"w{t}-{i}", uuid.uuid4().bytes
            try:
                c.put(key, value)
            except StatekeeperError as e:
                with self._lock:
                    self.errors.append(f"{key}: {e!r}")
            else:
                with self._lock:
                    self.acked[key] = value
                    self.ack_times.append(time.monotonic())
            i += 1
        c.close()

    def __enter__(self) -> AckedWriter:
        for th in self._threads:
            th.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for th in self._threads:
            th.join(30)


def _assert_all_present(lc: LocalCluster, acked: dict[str, bytes], ns: str = "load") -> None:
    with _client(lc, ns=ns) as c:
        found = {kv.key: kv.value for kv in c.scan()}
    missing = [k for k in acked if k not in found]
    wrong = [k for k in acked if k in found and found[k] != acked[k]]
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"
    assert not wrong, f"{len(wrong)} acknowledged writes changed, e.g. {wrong[:5]}"


def test_writes_replicate_to_every_node(shared_cluster: LocalCluster) -> None:
    with _client(shared_cluster) as c:
        rev = c.put("greeting", b"hello").revision
    for node_id in shared_cluster.node_ids:
        with _client(shared_cluster, node_id) as c:
            kv = c.get("greeting", consistency="serializable", min_revision=rev)
            assert kv.value == b"hello"
            assert kv.mod_revision == rev


def test_linearizable_reads_from_every_node_see_the_latest_write(
    shared_cluster: LocalCluster,
) -> None:
    clients = {i: _client(shared_cluster, i) for i in shared_cluster.node_ids}
    try:
        for n in range(30):
            writer = shared_cluster.node_ids[n % 3]
            clients[writer].put("counter", str(n))
            # Default consistency is linearizable: every node must see write n at once.
            for reader, c in clients.items():
                assert c.get("counter").text == str(n), f"node {reader} served a stale read"
    finally:
        for c in clients.values():
            c.close()


def test_follower_forwards_writes_and_answers_with_its_result(shared_cluster: LocalCluster) -> None:
    follower = _followers(shared_cluster)[0]
    with _client(shared_cluster, follower) as c:
        r1 = c.put("fwd", b"1")
        r2 = c.put("fwd", b"2", prev_kv=True)
        assert r2.revision > r1.revision
        assert r2.prev_kv is not None and r2.prev_kv.value == b"1"
        assert c.status()["node_id"] == follower


def test_same_idempotency_key_applies_once(shared_cluster: LocalCluster) -> None:
    with _client(shared_cluster) as c:
        a = c.put("idem", b"first", idempotency_key="op-123")
        b = c.put("idem", b"first", idempotency_key="op-123")
        assert a.revision == b.revision
        # The same key with another request is refused, not "replayed" (issue 9, defect 3).
        with pytest.raises(InvalidRequest) as e:
            c.put("idem", b"second", idempotency_key="op-123")
        assert e.value.code == "idempotency_key_reused" and e.value.status == 422
        assert c.get("idem").value == b"first"


def test_leader_sigkill_under_load_loses_no_acknowledged_write(cluster: LocalCluster) -> None:
    old_leader = _wait_leader(cluster)
    urls = [cluster.url(i) for i in cluster.node_ids]
    with AckedWriter(urls) as w:
        time.sleep(1.5)
        before = len(w.acked)
        assert before > 0, f"no write acknowledged before the fault: {w.errors[:3]}"
        t_kill = time.monotonic()
        cluster.kill_node(old_leader)
        new_leader = _wait_leader(cluster, not_this=old_leader, timeout=10)
        elected_after = time.monotonic() - t_kill
        time.sleep(3)
    after_kill = [t for t in w.ack_times if t > t_kill]
    assert new_leader != old_leader
    assert elected_after < 5, f"new leader took {elected_after:.1f} s"
    assert len(after_kill) > 10, f"writes did not continue after the kill: {w.errors[-3:]}"
    _assert_all_present(cluster, w.acked)


def test_killed_node_restarts_and_catches_up(cluster: LocalCluster) -> None:
    victim = _followers(cluster)[0]
    cluster.kill_node(victim)
    with _client(cluster, *[i for i in cluster.node_ids if i != victim]) as c:
        for i in range(100):
            rev = c.put(f"k{i}", str(i)).revision
    cluster.start_and_wait(victim)
    with _client(cluster, victim) as c:
        kv = c.get("k99", consistency="serializable", min_revision=rev)
        assert kv.text == "99"
        assert len(list(c.scan("k", consistency="serializable"))) == 100


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_full_cluster_restart_keeps_every_acknowledged_write(cluster: LocalCluster, how: str) -> None:
    urls = [cluster.url(i) for i in cluster.node_ids]
    with AckedWriter(urls) as w:
        time.sleep(2)
    assert w.acked
    if how == "sigterm":
        cluster.down()
    else:
        cluster.kill_all()
    cluster.up()
    _assert_all_present(cluster, w.acked)
    with _client(cluster) as c:  # and it still takes writes
        c.put("after-restart", b"ok")


@pytest.mark.cluster_options(snapshot_min_entries=100)
def test_wiped_node_rejoins_through_a_snapshot(cluster: LocalCluster) -> None:
    victim = _followers(cluster)[0]
    with _client(cluster) as c:
        for i in range(150):
            c.put(f"before/{i}", str(i))
    cluster.stop_node(victim)
    cluster.wipe_node(victim)
    with _client(cluster, *[i for i in cluster.node_ids if i != victim]) as c:
        for i in range(300):  # enough entries that the leader compacts its log
            rev = c.put(f"after/{i}", str(i)).revision
    cluster.start_and_wait(victim, timeout=60)
    with _client(cluster, victim) as c:
        c.get("after/299", consistency="serializable", min_revision=rev)
        assert len(list(c.scan("before/", consistency="serializable"))) == 150
        assert len(list(c.scan("after/", consistency="serializable"))) == 300
    assert "restoring state machine from snapshot" in cluster.log_file(victim).read_text()


def test_reads_at_a_past_revision_and_deletes(shared_cluster: LocalCluster) -> None:
    with _client(shared_cluster) as c:
        r1 = c.put("doc", b"v1").revision
        c.put("doc", b"v2")
        d = c.delete("doc")
        assert d.deleted == 1
        assert c.get("doc", revision=r1).value == b"v1"
        with pytest.raises(NotFound):
            c.get("doc")


def test_linearizable_reads_on_the_leader_add_no_log_entries(shared_cluster: LocalCluster) -> None:
    """ReadIndex: the leader confirms itself with a heartbeat round instead of a barrier
    entry (which cost an append and an fsync on every node per read batch), and the read
    still sees every write acknowledged before it, wherever that write was sent."""
    leader = shared_cluster.leader_id()
    follower = _followers(shared_cluster)[0]
    with (
        _client(shared_cluster, leader) as at_leader,
        _client(shared_cluster, follower) as at_follower,
    ):
        at_leader.put("warm", b"up")
        before = at_leader.status()["commit_index"]
        for i in range(30):
            at_follower.put("seen", str(i))  # acknowledged by another node...
            assert at_leader.get("seen").text == str(i)  # ...read at once on the leader
        writes = 30
        assert at_leader.status()["commit_index"] - before == writes, "reads appended entries"
