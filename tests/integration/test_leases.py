"""Leases against real node processes, through both clients: keys vanish within TTL + 1 s;
keepalives carry a lease through leader kills; a lease nobody renews still expires while
leaders keep changing (the remaining TTL is replicated, not reset per election); a revoke
deletes every attached key at one revision; an expired lease is simply gone; the CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from statekeeper.chaos.faults import faketime_env, find_libfaketime
from statekeeper.client import (
    AsyncClient,
    Client,
    LeaseNotFound,
    NotFound,
    StreamNotFound,
    WatchEvent,
    WatchProgress,
)
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.cluster_fixture import WrittenConfig

pytestmark = pytest.mark.integration

GRACE = 0.7 + 1.0  # max election timeout + 1 s (node/main.py)


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(i) for i in lc.node_ids]


def _ns() -> str:
    return f"l-{uuid.uuid4().hex[:8]}"


def _exists(c: Client, key: str) -> bool:
    return c.get(key, default=None) is not None


def _gone_within(c: Client, key: str, deadline: float) -> float:
    """Poll until `key` is gone; returns when (monotonic); fails past `deadline`."""
    while _exists(c, key):
        assert time.monotonic() < deadline, f"{key} still there"
        time.sleep(0.05)
    return time.monotonic()


def _new_leader(lc: LocalCluster, old: str | None, timeout: float = 15.0) -> str:
    """The leader once one other than `old` is elected and says so itself."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nid = lc.leader_id()
        if nid is not None and nid != old:
            st = lc.status(nid)
            if st is not None and st.get("role") == "leader":
                return nid
        time.sleep(0.05)
    raise AssertionError(f"no new leader after {old} within {timeout} s")


# -- expiry ----------------------------------------------------------------------------------


def test_keys_vanish_within_ttl_plus_one_second(shared_cluster: LocalCluster) -> None:
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        t0 = time.monotonic()
        r = c.put("session", "x", ttl=2)
        assert r.lease and _exists(c, "session")
        g = c.lease_grant(2)
        for k in ("a", "b", "c"):
            c.put(k, "v", lease=g.lease)
        time.sleep(1.5)
        assert all(_exists(c, k) for k in ("session", "a", "b", "c"))  # not early
        for k in ("session", "a", "b", "c"):
            _gone_within(c, k, t0 + 2 + 1)
        with pytest.raises(LeaseNotFound):
            c.lease_info(r.lease)


def test_an_expired_lease_is_gone_and_using_it_changes_nothing(
    shared_cluster: LocalCluster,
) -> None:
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        g = c.lease_grant(2)
        c.put("k", "v", lease=g.lease)
        _gone_within(c, "k", time.monotonic() + 4)
        rev = c.range("probe").revision  # linearizable: the current revision
        with pytest.raises(LeaseNotFound) as ei:
            c.put("k2", "v", lease=g.lease)
        assert ei.value.status == 404 and ei.value.lease == g.lease
        assert c.lease_keepalive(g.lease).missing == [g.lease]
        with pytest.raises(LeaseNotFound):
            c.lease_revoke(g.lease)
        assert not _exists(c, "k2")
        assert c.range("probe").revision == rev  # the failed writes took no revision


def test_revoke_deletes_every_attached_key_at_one_revision(shared_cluster: LocalCluster) -> None:
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        with c.lease(10) as lease:
            for i in range(5):
                c.put(f"k{i}", str(i), lease=lease)
            c.put("other", "stays")
            info = c.lease_info(lease)
            assert info.keys == [f"k{i}" for i in range(5)] and info.remaining_ms > 0
            assert lease.id in [x.lease for x in c.lease_list()]
            r = lease.revoke()
        assert r is not None and r.deleted == 5 and not lease.alive
        assert len(c.range("k", revision=r.revision - 1).kvs) == 5
        assert c.range("k", revision=r.revision).kvs == []
        for i in range(5):
            assert c.get(f"k{i}", revision=r.revision - 1).text == str(i)
            with pytest.raises(NotFound):
                c.get(f"k{i}", revision=r.revision)
        assert c.get("other").text == "stays"
        assert lease.revoke() is None  # already gone: nothing to do


def test_the_grant_lease_grant_returns_is_taken_where_a_lease_is(
    shared_cluster: LocalCluster,
) -> None:
    """Issue 30 item 3: put(lease=), append(lease=), lease_keepalive, lease_info and
    lease_revoke take the LeaseGrant the client returned, as they take a Lease."""
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        grant = c.lease_grant(10)
        c.put("granted", "v", lease=grant)
        c.append("granted-stream", b"e", lease=grant)
        assert c.lease_keepalive(grant).leases[0].lease == grant.lease
        info = c.lease_info(grant)
        assert info.keys == ["granted"] and info.streams == ["granted-stream"]
        assert c.lease_revoke(grant).deleted >= 1
        with pytest.raises(NotFound):
            c.get("granted")


def _stream_exists(c: Client, stream: str) -> bool:
    try:
        c.stream_info(stream)
    except StreamNotFound:
        return False
    return True


def test_streams_on_leases_go_with_them_within_ttl_plus_one_second(
    shared_cluster: LocalCluster,
) -> None:
    """A stream appended with a 2 s lease nobody renews is gone within TTL + 1 s (all its
    events: it starts anew at seq 1); one on a kept-alive lease survives."""
    with Client(_urls(shared_cluster), ns=_ns()) as c, c.lease(2) as kept:
        t0 = time.monotonic()
        g = c.lease_grant(2)
        c.append("brief", ["a", "b"], lease=g.lease)
        c.append("brief", "c")  # no lease: it stays attached
        c.append("kept", "x", lease=kept)
        assert c.lease_info(g.lease).streams == ["brief"]
        time.sleep(1.5)
        assert _stream_exists(c, "brief")  # not early
        while _stream_exists(c, "brief"):
            assert time.monotonic() < t0 + 2 + 1, "the stream outlived its lease"
            time.sleep(0.05)
        assert c.read_stream("brief").events == []
        time.sleep(max(0.0, t0 + 4 - time.monotonic()))  # two TTLs: `kept` was renewed
        assert kept.alive and c.stream_info("kept").last_seq == 1
        assert c.lease_info(kept).streams == ["kept"]
        again = c.append("brief", "new")
        assert again.first_seq == 1 and c.stream_info("brief").count == 1


def test_revoke_deletes_keys_and_streams_at_the_same_revision(
    shared_cluster: LocalCluster,
) -> None:
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        g = c.lease_grant(30)
        c.put("k", "v", lease=g.lease)
        a = c.append("s", ["1", "2", "3"], lease=g.lease)
        c.append("other", "stays")
        with pytest.raises(LeaseNotFound):
            c.append("s", "4", lease=10**12)  # unknown lease: nothing appended
        assert c.stream_info("s").last_seq == 3
        info = c.lease_info(g.lease)
        assert info.keys == ["k"] and info.streams == ["s"] and not info.more_streams
        r = c.lease_revoke(g.lease)
        assert (r.deleted, r.deleted_streams) == (1, 1)
        assert c.get("k", revision=r.revision - 1).text == "v"
        with pytest.raises(NotFound):
            c.get("k", revision=r.revision)
        # Stream records are not versioned: not even a read at a past revision sees them.
        assert c.read_stream("s", revision=a.revision).events == []
        assert not _stream_exists(c, "s") and c.read_stream("s").events == []
        assert c.stream_info("other").last_seq == 1
        assert c.stream_info("other").revision >= r.revision


# -- leader changes --------------------------------------------------------------------------


def test_keepalives_carry_a_lease_through_leader_kills(cluster: LocalCluster) -> None:
    """Nothing expires early because a leader died: the client's keepalives (every ttl/3)
    are retried on the next leader, which waits a grace before it expires anything."""
    with Client(_urls(cluster), ns=_ns()) as c:
        lease = c.lease(2)
        c.put("alive", "yes", lease=lease)
        for _ in range(2):
            old = cluster.leader_id()
            assert old is not None
            cluster.kill_node(old)
            _new_leader(cluster, old)
            time.sleep(2 * 2)  # two TTLs with the new leader
            assert _exists(c, "alive") and lease.alive, f"expired after killing {old}"
            cluster.start_and_wait(old)
        assert c.lease_info(lease).keys == ["alive"]
        lease.revoke()
        assert not _exists(c, "alive")


@pytest.mark.cluster_options(size=5)
def test_an_unrenewed_lease_expires_while_leaders_keep_changing(cluster: LocalCluster) -> None:
    """Nothing lives forever: each new leader resumes the replicated expiry instead of
    granting the lease its full TTL again (etcd's bug before lease checkpointing); and
    nothing expires early. The cluster's time (node/raft/cluster_clock.py) loses each election
    gap, so the bound allows the two elections (about 1.5 s each) on top of the grace."""
    ttl = 4.0
    with Client(_urls(cluster), ns=_ns()) as c:
        t0 = time.monotonic()
        g = c.lease_grant(ttl)
        c.put("orphan", "x", lease=g.lease)
        for _ in range(2):  # two leader kills within the TTL; 3 of 5 nodes remain
            old = cluster.leader_id()
            assert old is not None
            cluster.kill_node(old)
            _new_leader(cluster, old)
        assert time.monotonic() < t0 + ttl, "the elections took longer than the TTL"
        assert _exists(c, "orphan")  # and nothing expired early
        gone = _gone_within(c, "orphan", t0 + ttl + 2 * 1.5 + GRACE + 1)
        print(f"expired {gone - t0:.2f} s after the grant (ttl {ttl} s)")
        # Not early (audit gap 2: this was only printed). t0 is before the grant, and
        # `gone` is when a poll (every 0.05 s) first saw the key missing.
        assert gone - t0 >= ttl, f"expired {ttl - (gone - t0):.2f} s early"


def test_keepalives_and_grants_take_no_revision_and_a_watch_sees_nothing(
    cluster: LocalCluster,
) -> None:
    """Audit gap 9: a grant or a keepalive changes no key, so it takes no revision (etcd's
    rule): 1,000 clients renewing every ttl/3 no longer eat the history window. A fresh
    cluster, so that nothing else moves the revision meanwhile."""
    with Client(_urls(cluster), ns=_ns()) as c:
        rev = c.put("mark", "x").revision
        watch = c.watch(start_revision=rev + 1, progress=0.2, progress_events=True)
        g = c.lease_grant(5)
        assert g.revision == rev
        for _ in range(5):
            r = c.lease_keepalive(g.lease)
            assert r.revision == rev and r.missing == []
        kept = c.lease(2)  # renewed by the client's thread every 0.67 s
        time.sleep(2.5)
        assert kept.alive
        assert c.range("probe").revision == rev  # linearizable: the current revision
        progress = 0
        for item in watch:
            assert not isinstance(item, WatchEvent), f"a watch saw {item}"
            if isinstance(item, WatchProgress):
                assert item.revision == rev
                progress += 1
                if progress == 3:
                    break
        watch.close()
        c.put("after", "y", lease=g.lease)  # keys still take revisions, with a lease or not
        assert c.range("probe").revision == rev + 1


@pytest.fixture
def skewable(cluster_config: WrittenConfig, tmp_path) -> Any:
    """A 3-node cluster whose nodes run under libfaketime, each wall clock offset by its
    own file (chaos/faults/clock.py's environment); monotonic clocks untouched."""
    lib = find_libfaketime()
    if lib is None:
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    files, node_env = {}, {}
    for n in cluster_config.config.nodes:
        files[n.id] = tmp_path / f"clock-{n.id}"
        files[n.id].write_text("+0\n")
        node_env[n.id] = faketime_env(lib, files[n.id])
    lc = LocalCluster(cluster_config.config, cluster_config.path, node_env=node_env)
    try:
        lc.up(timeout=60.0)
        yield lc, files
    finally:
        lc.kill_all()
        lc.close()


def _skew(path, offset: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(offset + "\n")
    tmp.replace(path)


def test_a_leader_whose_wall_clock_is_50_s_ahead_expires_nothing_early(skewable) -> None:
    """Audit gap 10. The chaos clock-jump on a leader: its wall clock jumps +50 s. Before
    the fix its time for expiry was its wall clock (bounded to 60 s ahead), so within a
    second every lease with less than 50 s left expired, the kept-alive one included.
    Then that node, its clock still +50 s, is made leader again by an election (it
    anchors with a wall clock ahead), and then an honest node takes over from it.
    Throughout: a 5 s lease kept alive by a client lives on, and a 5 s lease nobody renews
    expires no earlier than 5 s after its grant (and not much later)."""
    lc, files = skewable
    ttl = 5.0
    with Client(_urls(lc), ns=_ns()) as c:
        kept = c.lease(ttl)
        c.put("alive", "yes", lease=kept)

        def orphan_not_early(label: str, slack: float) -> None:
            t0 = time.monotonic()
            g = c.lease_grant(ttl)
            name = f"orphan-{label}"
            c.put(name, "x", lease=g.lease)
            gone = _gone_within(c, name, t0 + ttl + slack)
            assert gone - t0 >= ttl, f"{label}: expired {ttl - (gone - t0):.2f} s early"
            print(f"{label}: orphan gone {gone - t0:.2f} s after its grant (ttl {ttl})")
            assert _exists(c, "alive") and kept.alive, f"{label}: the kept-alive lease expired"

        skewed = lc.leader_id()
        assert skewed is not None
        _skew(files[skewed], "+50")
        time.sleep(2.0)  # libfaketime re-reads the file within a second
        orphan_not_early("leader jumped +50 s", slack=1.5)

        # Elections until the skewed node wins one (each round kills the leader).
        for _ in range(8):
            leader = lc.leader_id()
            if leader == skewed:
                break
            if leader is not None:
                lc.kill_node(leader)
                _new_leader(lc, leader)
                lc.start_and_wait(leader)
            time.sleep(0.5)
        else:
            pytest.fail(f"{skewed} never won an election")
        orphan_not_early("elected +50 s", slack=GRACE + 2)

        lc.kill_node(skewed)  # an honest node takes over from the skewed one
        _new_leader(lc, skewed)
        orphan_not_early("after the skewed leader", slack=GRACE + 2)
        assert c.lease_info(kept).keys == ["alive"]


# -- the async client and the CLI ------------------------------------------------------------


async def test_leases_through_the_async_client(shared_cluster: LocalCluster) -> None:
    async with AsyncClient(_urls(shared_cluster), ns=_ns()) as c:
        async with c.lease(2) as lease:
            await c.put("held", "1", lease=lease)
            await asyncio.sleep(4)  # two TTLs: the task renewed it
            assert lease.alive and (await c.get("held")).text == "1"
            info = await c.lease_info(lease)
            assert info.keys == ["held"] and info.ttl_ms == 2000
        assert await c.get("held", default=None) is None  # revoked on exit
        r = await c.put("brief", "1", ttl=2)
        assert r.lease is not None
        later = await c.lease(3)  # granted when awaited; kept alive by the task
        await c.put("kept", "1", lease=later)
    # The client is closed: nothing renews `later` any more; it expires after its TTL.
    with Client(_urls(shared_cluster), ns=info.ns) as sync:
        _gone_within(sync, "kept", time.monotonic() + 3 + GRACE + 1)
        assert not _exists(sync, "brief")


def _lease_cli(cluster: LocalCluster, *argv: str) -> subprocess.CompletedProcess:
    urls = ",".join(cluster.url(n) for n in cluster.node_ids)
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cluster.cli", "lease", *argv, "--endpoints", urls],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_lease_cli_lists_shows_and_revokes(shared_cluster: LocalCluster) -> None:
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        g = c.lease_grant(60)
        c.put("cli/a", "1", lease=g.lease)
        c.append("cli/log", "e", lease=g.lease)
        listed = _lease_cli(shared_cluster, "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert g.lease in [x["lease"] for x in json.loads(listed.stdout)]
        shown = _lease_cli(shared_cluster, "info", str(g.lease))
        assert shown.returncode == 0 and "cli/a" in shown.stdout and c.ns in shown.stdout
        assert "stream cli/log" in shown.stdout
        as_json = json.loads(_lease_cli(shared_cluster, "info", str(g.lease), "--json").stdout)
        assert as_json["streams"] == ["cli/log"] and as_json["keys"] == ["cli/a"]
        revoked = _lease_cli(shared_cluster, "revoke", str(g.lease))
        assert revoked.returncode == 0, revoked.stderr
        assert "1 keys and 1 streams deleted" in revoked.stdout
        assert not _stream_exists(c, "cli/log")
        assert not _exists(c, "cli/a")
        missing = _lease_cli(shared_cluster, "info", str(g.lease))
        assert missing.returncode == 3 and "does not exist" in missing.stderr
