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

import pytest

from client import AsyncClient, Client, LeaseNotFound, NotFound
from cluster.supervisor import LocalCluster

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
    granting the lease its full TTL again (etcd's bug before lease checkpointing)."""
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
        gone = _gone_within(c, "orphan", t0 + ttl + GRACE + 1)
        print(f"expired {gone - t0:.2f} s after the grant (ttl {ttl} s)")


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
        [sys.executable, "-m", "cluster.cli", "lease", *argv, "--endpoints", urls],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_lease_cli_lists_shows_and_revokes(shared_cluster: LocalCluster) -> None:
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        g = c.lease_grant(60)
        c.put("cli/a", "1", lease=g.lease)
        listed = _lease_cli(shared_cluster, "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert g.lease in [x["lease"] for x in json.loads(listed.stdout)]
        shown = _lease_cli(shared_cluster, "info", str(g.lease))
        assert shown.returncode == 0 and "cli/a" in shown.stdout and c.ns in shown.stdout
        revoked = _lease_cli(shared_cluster, "revoke", str(g.lease))
        assert revoked.returncode == 0 and "1 keys deleted" in revoked.stdout, revoked.stderr
        assert not _exists(c, "cli/a")
        missing = _lease_cli(shared_cluster, "info", str(g.lease))
        assert missing.returncode == 2 and "does not exist" in missing.stderr
