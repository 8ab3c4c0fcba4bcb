"""CRDT replicas on a real 3-node cluster (client.crdt; docs/crdt.md): every type through
the blocking and the asyncio client, 4 threads incrementing one counter through replicas
of their own, and the partition scenario: agents on both sides of an iptables partition
update a shared counter and set locally, the isolated one cannot sync (its deltas stay
pending), the partition heals, and every replica and the store converge to the sum of all
increments / the union of all adds, none counted twice."""

from __future__ import annotations

import random
import threading
import time
import uuid

import pytest

from statekeeper.chaos.partition import Partitioner, available
from statekeeper.client import AsyncClient, Client, RetryPolicy, StatekeeperError
from statekeeper.client.errors import CrdtTypeMismatch
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.raft_harness import wait_for

# iptables rules match loopback link addresses, which every link-address cluster shares:
# `make test`'s two workers run these modules on one worker (xdist group "links").
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("links")]
partitions_ok, partitions_why = available()


def _urls(lc: LocalCluster, nodes=None) -> list[str]:
    return [lc.url(n) for n in (nodes or lc.node_ids)]


def _sync_until_ok(replica, deadline_s: float = 30.0):
    """sync() until it succeeds (after a heal the isolated node needs a moment)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return replica.sync()
        except StatekeeperError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@pytest.mark.skipif(not partitions_ok, reason=partitions_why)
@pytest.mark.cluster_options(link_addresses=True, election_timeout_min=0.4, election_timeout_max=1.0)
def test_replicas_on_both_sides_of_a_partition_converge(cluster: LocalCluster) -> None:
    leader = wait_for(cluster.leader_id, 10, "a leader")
    cut = next(n for n in cluster.node_ids if n != leader)  # B's only node
    majority = [n for n in cluster.node_ids if n != cut]
    short = RetryPolicy(max_attempts=2, deadline=1.0)
    rng = random.Random(14)
    made: list[int] = []
    added: set[str] = set()
    with Client(_urls(cluster, majority), ns="crdt-part") as ca, Client(
        cluster.url(cut), ns="crdt-part", timeout=1.0, retry=short
    ) as cb:
        a_count, b_count = ca.crdt.counter("shared/visits"), cb.crdt.counter("shared/visits")
        a_set, b_set = ca.crdt.set("shared/found"), cb.crdt.set("shared/found")

        def bump(counter, s, who: str, i: int) -> None:
            n = rng.randint(1, 5)
            counter.increment(n)
            made.append(n)
            s.add(f"{who}-{i}")
            added.add(f"{who}-{i}")

        for i in range(3):  # before the partition: both sides sync fine
            bump(a_count, a_set, "a", i)
            bump(b_count, b_set, "b", i)
        for r in (a_count, a_set, b_count, b_set):
            r.sync()
        with Partitioner(cluster.config) as net:
            net.isolate(cut)
            failed = 0
            for i in range(3, 7):
                bump(a_count, a_set, "a", i)
                bump(b_count, b_set, "b", i)
                a_count.sync()  # the majority side keeps merging
                a_set.sync()
                for r in (b_count, b_set):
                    with pytest.raises(StatekeeperError) as e:
                        r.sync()
                    assert e.value.code in ("unavailable", "timeout", "client_timeout"), e.value
                    assert r.pending  # kept for the next sync
                    failed += 1
            assert failed == 8
            assert b_count.value == sum(made[:6]) + sum(made[7::2])  # its own offline updates
            assert a_count.value == sum(made) - sum(made[7::2])  # B's are not there yet
        # Healed: B's pending deltas go out; then everyone pulls.
        for r in (b_count, b_set):
            assert _sync_until_ok(r).sent
        for r in (a_count, a_set):
            r.sync()
        store = ca.crdt.get("shared/visits", state=True)
        assert a_count.value == b_count.value == store.value == sum(made)
        members = ca.crdt.get("shared/found").value
        assert a_set.value == b_set.value == members == sorted(added)
        # A repeated sync, even of the whole state, changes nothing: no double count.
        for r in (a_count, b_count, a_set, b_set):
            again = r.sync(full=True)
            assert again.sent and not again.changed
        after = ca.crdt.get("shared/visits")
        assert (after.value, after.mod_revision) == (sum(made), store.mod_revision)
    with Client(cluster.url(cut), ns="crdt-part") as c:  # the isolated node caught up
        got = c.crdt_get("shared/visits", consistency="serializable", min_revision=after.revision)
        assert got.value == sum(made)


def test_every_type_through_the_blocking_client(shared_cluster: LocalCluster) -> None:
    ns = f"crdt-{uuid.uuid4().hex[:8]}"
    with Client(_urls(shared_cluster), ns=ns) as c1, Client(_urls(shared_cluster), ns=ns) as c2:
        a, b = c1.crdt.counter("visits"), c2.crdt.counter("visits")
        a.increment(5)
        b.increment(2)
        b.decrement(1)
        a.sync()
        b.sync()
        assert a.sync().value == b.value == c1.crdt.get("visits").value == 6
        s1, s2 = c1.crdt.set("found"), c2.crdt.set("found")
        s1.add("x")
        s1.add(b"raw")
        s2.add(7)
        for r in (s1, s2):
            r.sync()
        s2.remove("x")
        for r in (s2, s1):
            r.sync()
        assert s1.value == s2.value == [7, b"raw"]
        r1, r2 = c1.crdt.register("plan"), c2.crdt.register("plan")
        r1.set({"step": 1, "tools": ["search"]})
        r1.sync()
        r2.sync()
        r2.set({"step": 2})
        r2.sync()
        assert r1.sync().value == {"step": 2}
        v1, v2 = c1.crdt.mvregister("doc"), c2.crdt.mvregister("doc")
        v1.set("draft A")
        v2.set("draft B")
        for r in (v1, v2, v1):
            r.sync()
        assert v1.values == v2.values == ["draft A", "draft B"]
        m1, m2 = c1.crdt.map("agent"), c2.crdt.map("agent")
        m1.increment("calls", 3)
        m1.add("tools", "search")
        m1.set("owner", "m1")
        m2.increment("calls", 1)
        m2.add("tools", "fetch")
        for r in (m1, m2, m1):
            r.sync()
        assert m1.value == m2.value == {"calls": 4, "tools": ["fetch", "search"], "owner": "m1"}
        c1.put("plain", "not a crdt")
        plain = c1.crdt.counter("plain")
        plain.increment()
        with pytest.raises(CrdtTypeMismatch) as e:
            plain.sync()
        assert e.value.found is None and plain.pending  # a plain value; deltas kept
        with pytest.raises(CrdtTypeMismatch) as e:
            c1.crdt.merge("visits", "gcounter", c1.crdt.model.empty("gcounter"))
        assert e.value.found == "pncounter" and e.value.status == 409


def test_four_threads_with_their_own_replicas_sum_exactly(shared_cluster: LocalCluster) -> None:
    ns = f"crdt-{uuid.uuid4().hex[:8]}"
    totals = [0] * 4
    with Client(_urls(shared_cluster), ns=ns) as c:
        replicas = [c.crdt.counter("hits") for _ in range(4)]

        def work(i: int) -> None:
            rng = random.Random(i)
            for k in range(60):
                n = rng.randint(1, 3)
                replicas[i].increment(n)
                totals[i] += n
                if k % 6 == 5:
                    replicas[i].sync()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in replicas + replicas:  # ship the rest, then pull everyone's
            r.sync()
        assert c.crdt.get("hits").value == sum(totals)
        assert [r.value for r in replicas] == [sum(totals)] * 4


async def test_every_type_through_the_async_client(shared_cluster: LocalCluster) -> None:
    ns = f"crdt-{uuid.uuid4().hex[:8]}"
    async with AsyncClient(_urls(shared_cluster), ns=ns) as c:
        counter, other = c.crdt.counter("visits"), c.crdt.counter("visits")
        counter.increment(4)
        other.increment(6)
        await counter.sync()
        assert (await other.sync()).value == 10
        s = c.crdt.set("found")
        s.add("a")
        m = c.crdt.map("agent")
        m.set("status", "running")
        m.increment("steps")
        r = c.crdt.register("plan")
        r.set([1, 2, 3])
        mv = c.crdt.mvregister("doc")
        mv.set("v1")
        for replica in (s, m, r, mv):
            assert (await replica.sync()).sent
        got = await c.crdt.get("agent", state=True)
        assert got.type == "ormap" and got.value == {"status": "running", "steps": 1}
        assert (await c.crdt_get("plan")).value == [1, 2, 3]
        res = await c.crdt.merge("found", "orset", c.crdt.model.empty("orset"))
        assert res.changed is False and res.value == ["a"]


def _crdt_cli(cluster: LocalCluster, ns: str, command: str, *argv: str):
    import subprocess
    import sys

    urls = ",".join(_urls(cluster))
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cluster.cli", "crdt", command, "--endpoints", urls, "--ns", ns, *argv],
        capture_output=True, text=True, timeout=60,
    )


def test_the_crdt_cli_reads_and_updates(shared_cluster: LocalCluster) -> None:
    import json

    ns = f"crdt-cli-{uuid.uuid4().hex[:8]}"
    for argv in (("incr", "visits"), ("incr", "visits", "5"), ("incr", "visits", "--", "-2")):
        r = _crdt_cli(shared_cluster, ns, *argv)
        assert r.returncode == 0, r.stderr
    got = _crdt_cli(shared_cluster, ns, "get", "visits", "--json", "--state")
    assert got.returncode == 0, got.stderr
    shown = json.loads(got.stdout)
    assert (shown["type"], shown["value"]) == ("pncounter", 4)
    assert len(shown["state"]["p"]) == 2  # one replica per `incr` that added
    assert _crdt_cli(shared_cluster, ns, "add", "found", "paris", "lyon").returncode == 0
    removed = _crdt_cli(shared_cluster, ns, "remove", "found", "lyon", "--json")
    assert removed.returncode == 0 and json.loads(removed.stdout)["value"] == ["paris"]
    assert _crdt_cli(shared_cluster, ns, "set", "owner", "agent-7").returncode == 0
    with Client(_urls(shared_cluster), ns=ns) as c:
        assert c.crdt_get("owner").value == "agent-7"
        assert c.crdt.get("found").value == ["paris"]
    wrong = _crdt_cli(shared_cluster, ns, "add", "visits", "x")  # a counter, not a set
    assert wrong.returncode == 1 and "pncounter" in wrong.stderr, wrong.stderr
    missing = _crdt_cli(shared_cluster, ns, "get", "nothing")
    assert missing.returncode == 3, missing.stderr  # not found: 3 in every command
