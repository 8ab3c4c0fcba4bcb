"""The client cache against a real 3-node cluster, through both clients: another client's
write shows up in the view; a read after the cache's own write sees it (read-your-writes);
max_lag refuses a view whose node froze and serves again once the watch moved on; an
incomplete view evicts and fetches on demand; write-back flushes on flush(), on close and
on its timer; and the cache keeps up through a leader kill (its watch resumes)."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest

from statekeeper.client import AsyncClient, CacheStale, Client, NotFound, RetryPolicy
from statekeeper.client.tls import CA_ENV
from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration

PATIENT = RetryPolicy(max_attempts=100, deadline=60.0, backoff_max=0.5)


def _urls(lc: LocalCluster, first: str | None = None) -> list[str]:
    return [lc.url(i) for i in sorted(lc.node_ids, key=lambda n: n != first)]


def _ns() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


def test_other_writes_show_up_and_own_writes_are_read_back(shared_cluster: LocalCluster) -> None:
    ns = _ns()
    with Client(_urls(shared_cluster), ns=ns) as c, Client(_urls(shared_cluster), ns=ns) as other:
        c.put("a/1", "one")
        c.put("b/1", "not cached")
        with c.cache("a/") as cache:
            assert cache.get("a/1").text == "one" and len(cache) == 1
            assert cache.get("a/2", default=None) is None  # complete: answered locally
            rev = other.put("a/2", "two").revision
            assert cache.wait(rev, timeout=5) >= rev
            kv = cache.get("a/2")
            assert (kv.text, kv.version, kv.mod_revision) == ("two", 1, rev)
            other.delete("a/1")
            deadline = time.monotonic() + 5
            while cache.get("a/1", default=None) is not None:
                assert time.monotonic() < deadline, "the delete never reached the view"
                time.sleep(0.01)
            for i in range(30):  # read-your-writes, every time, without sleeping
                w = cache.put("a/ryw", f"v{i}")
                got = cache.get("a/ryw")
                assert got.text == f"v{i}" and got.revision >= w.revision
            cache.delete("a/ryw")
            with pytest.raises(NotFound):
                cache.get("a/ryw")
            assert cache.lag.revisions == 0 and cache.stats()["fetches"] == 0


def test_async_cache_sees_writes_and_reads_its_own(shared_cluster: LocalCluster) -> None:
    ns = _ns()

    async def main() -> None:
        async with AsyncClient(_urls(shared_cluster), ns=ns) as c:
            await c.put("a/1", "one")
            async with c.cache("a/") as cache, AsyncClient(_urls(shared_cluster), ns=ns) as o:
                assert (await cache.get("a/1")).text == "one"
                rev = (await o.put("a/1", "changed")).revision
                await cache.wait(rev, timeout=5)
                assert (await cache.get("a/1")).text == "changed"
                for i in range(20):
                    await cache.put("a/ryw", str(i))
                    assert (await cache.get("a/ryw")).text == str(i)
                assert (await cache.get("a/1", max_lag=0.5)).text == "changed"

    asyncio.run(main())


def test_eviction_and_on_demand_fetch(shared_cluster: LocalCluster) -> None:
    ns = _ns()
    with Client(_urls(shared_cluster), ns=ns) as c, Client(_urls(shared_cluster), ns=ns) as other:
        for i in range(20):
            c.put(f"k/{i:02d}", f"v{i}")
        with c.cache("k/", max_keys=5) as cache:
            assert len(cache) == 5 and not cache.stats()["complete"]
            for _ in range(2):
                for i in range(20):
                    assert cache.get(f"k/{i:02d}").text == f"v{i}"
            st = cache.stats()
            assert st["keys"] == 5 and st["fetches"] >= 15 and st["evictions"] >= 15
            assert cache.get("k/zz", default="none") == "none"  # a missing key, fetched
            # A fetch reads at the view's revision: once the view has another client's
            # write, so does a fetch of an evicted key.
            rev = other.put("k/00", "new").revision
            cache.wait(rev, timeout=5)
            assert cache.get("k/00").text == "new"


def test_max_lag_refuses_a_frozen_view_and_serves_once_the_watch_moved(
    cluster: LocalCluster,
) -> None:
    ns = _ns()
    victim = next(n for n in cluster.node_ids if n != cluster.leader_id())  # a follower
    urls = _urls(cluster, first=victim)
    with Client(urls, ns=ns, prefer_leader=False, retry=PATIENT, timeout=3.0) as c:
        c.put("m/k", "v")
        with c.cache("m/", progress=0.1) as cache:
            assert c.endpoint == cluster.url(victim)
            assert cache.get("m/k", max_lag=0.5).text == "v"
            cluster.pause_node(victim)  # SIGSTOP: no frames, no error either
            try:
                time.sleep(0.5)
                with pytest.raises(CacheStale) as ei:
                    cache.get("m/k", max_lag=0.3, timeout=0.3)
                assert ei.value.details["lag_seconds"] > 0.3
                assert cache.get("m/k").text == "v"  # no max_lag: still served
                # The watch gives the frozen node up (timeout 2 s + progress) and resumes
                # on another node: the view is fresh again.
                t0 = time.monotonic()
                assert cache.get("m/k", max_lag=0.5, timeout=15).text == "v"
                assert time.monotonic() - t0 < 10 and cache.lag.seconds < 0.5
            finally:
                cluster.resume_node(victim)


def test_write_back_flushes_on_flush_close_and_timer(shared_cluster: LocalCluster) -> None:
    ns = _ns()
    urls = _urls(shared_cluster)
    with Client(urls, ns=ns) as c, Client(urls, ns=ns) as other:
        cache = c.cache("wb/", mode="write-back", flush_ms=60_000)
        for i in range(50):
            assert cache.put(f"wb/{i}", str(i)) is None
        assert cache.get("wb/7").text == "7"  # its own, unflushed
        assert other.get("wb/7", default=None) is None
        cache.flush()
        assert other.get("wb/7").text == "7"
        assert len(list(other.scan("wb/"))) == 50 and cache.stats()["flushes"] == 1
        cache.put("wb/closed", "yes")
        cache.close()
        assert other.get("wb/closed").text == "yes"
        with c.cache("wb/", mode="write-back", flush_ms=200) as timed:
            # The timer (200 ms) flushes it, nobody else; the bound is generous (a loaded
            # CI machine once took over 3 s), the point is that it happens by itself.
            deadline = time.monotonic() + 15
            timed.put("wb/timer", "t")
            while other.get("wb/timer", default=None) is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert other.get("wb/timer").text == "t"
            assert timed.stats()["flushes"] == 1


def test_async_write_back(shared_cluster: LocalCluster) -> None:
    ns = _ns()

    async def main() -> None:
        async with AsyncClient(_urls(shared_cluster), ns=ns) as c:
            cache = await c.cache("wb/", mode="write-back", flush_ms=100)
            await cache.put("wb/a", "1")
            await cache.delete("wb/a")
            await cache.put("wb/b", "2")
            await asyncio.sleep(0.5)  # the timer
            assert await c.get("wb/a", default=None) is None
            assert (await c.get("wb/b")).text == "2"
            await cache.put("wb/c", "3")
            await cache.close()
            assert (await c.get("wb/c")).text == "3"

    asyncio.run(main())


@pytest.mark.cluster_options(size=3)
def test_the_cache_survives_a_leader_kill(cluster: LocalCluster) -> None:
    ns = _ns()
    leader = cluster.leader_id()
    urls = _urls(cluster, first=leader)
    with (
        Client(urls, ns=ns, retry=PATIENT, timeout=3.0) as c,
        Client(urls, ns=ns, retry=PATIENT, timeout=3.0) as other,
    ):
        c.put("L/k", "before")
        with c.cache("L/") as cache:
            assert cache.get("L/k").text == "before"
            assert c.endpoint == cluster.url(leader)  # the watch streams from the leader
            cluster.kill_node(leader)
            rev = other.put("L/k", "after").revision  # through the new leader
            cache.wait(rev, timeout=30)
            assert cache.get("L/k").text == "after"
            w = cache.put("L/own", "mine")
            assert cache.get("L/own").text == "mine" and cache.revision >= w.revision
            assert cache.get("L/k", max_lag=1.0, timeout=10).text == "after"
            assert c.endpoint != cluster.url(leader)


def test_a_cache_watches_with_the_clients_own_tls_and_token(
    shared_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CA and the token given as arguments, not through the environment: the sync
    cache's watch ran on a client of its own built from the environment only, so it
    failed TLS (or got 401) forever and the view never moved past its first load."""
    ca, token = os.environ.get(CA_ENV), os.environ.get("STATEKEEPER_TOKEN")
    if ca is None or token is None:
        pytest.skip("the shared cluster runs without TLS and auth (SHARED_SECURE off)")
    monkeypatch.delenv(CA_ENV)
    monkeypatch.delenv("STATEKEEPER_TOKEN")
    ns, urls = _ns(), _urls(shared_cluster)
    with Client(urls, ns=ns, ca=ca, token=token) as c, c.cache("a/") as cache:
        rev = c.put("a/1", "one").revision  # through the client: the view sees it by watch
        assert cache.wait(rev, timeout=10) >= rev
        assert cache.get("a/1").text == "one" and cache.stats()["fetches"] == 0

    async def main() -> None:
        async with AsyncClient(urls, ns=ns, ca=ca, token=token) as c, c.cache("a/") as cache:
            rev = (await c.put("a/2", "two")).revision
            assert await cache.wait(rev, timeout=10) >= rev
            assert (await cache.get("a/2")).text == "two"

    asyncio.run(main())
