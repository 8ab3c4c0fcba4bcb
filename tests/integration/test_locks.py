"""Locks with fencing against real node processes, through both clients: waiters get the
lock in arrival order (sync and async); a holder's lease revoke hands the lock to the next
waiter through its watch; wait=False and timeouts leave no waiter behind; Kleppmann's
scenario with real processes (the holder SIGSTOPped past its TTL cannot overwrite its
successor: its fenced write is refused); lock errors with state; the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from statekeeper.client import (
    AsyncClient,
    Client,
    FenceMismatch,
    LockHeld,
    LockNotHeld,
    LockTimeout,
)
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.line_child import LineChild

pytestmark = pytest.mark.integration

CHILD = Path(__file__).with_name("lock_child.py")
ROOT = Path(__file__).resolve().parents[2]


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(i) for i in lc.node_ids]


def _ns() -> str:
    return f"lk-{uuid.uuid4().hex[:8]}"


def _until(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _queued(c: Client, name: str) -> list:
    found = [x for x in c.lock_list(name).locks if x.name == name]
    return found[0].waiters if found else []


# -- fairness --------------------------------------------------------------------------------


def test_waiters_get_the_lock_in_arrival_order(shared_cluster: LocalCluster) -> None:
    ns, urls, n = _ns(), _urls(shared_cluster), 4
    held: list[tuple[str, int]] = []
    errors: list[BaseException] = []

    def contend(i: int) -> None:
        try:
            with Client(urls, ns=ns) as c, c.lock("fair", ttl=5, owner=f"w{i}") as lock:
                held.append((f"w{i}", lock.fence))
                c.put("last", f"w{i}", fence=lock)  # the holder's fenced write lands
                time.sleep(0.05)
        except BaseException as e:  # surfaced below
            errors.append(e)

    with Client(urls, ns=ns) as c:
        first = c.lock("fair", ttl=5, owner="first")
        threads = []
        for i in range(n):  # one at a time: arrival order is i's order
            threads.append(threading.Thread(target=contend, args=(i,)))
            threads[-1].start()
            _until(lambda i=i: len(_queued(c, "fair")) == i + 2, what=f"w{i} queued")
        queue_ = _queued(c, "fair")
        assert [w.owner for w in queue_] == ["first"] + [f"w{i}" for i in range(n)]
        assert [w.fence for w in queue_] == sorted(w.fence for w in queue_)
        t0 = time.monotonic()
        first.release()
        for t in threads:
            t.join(30)
        elapsed = time.monotonic() - t0
        assert not errors, errors
        assert held == [(w.owner, w.fence) for w in queue_[1:]]  # arrival order, fences grow
        assert c.get("last").text == f"w{n - 1}" and _queued(c, "fair") == []
    print(f"{n} hand-overs through watch in {elapsed:.2f} s")
    assert elapsed < n * 1.0  # woken by the watch, not by a poll or a TTL


async def test_async_waiters_get_the_lock_in_arrival_order(shared_cluster: LocalCluster) -> None:
    ns, urls = _ns(), _urls(shared_cluster)
    held: list[int] = []
    async with AsyncClient(urls, ns=ns) as c:

        async def contend(i: int) -> None:
            async with c.lock("fair", ttl=5, owner=f"a{i}") as lock:
                held.append(lock.fence)
                await c.put("last", f"a{i}", fence=lock)

        async def queued() -> list:
            return [x for x in (await c.lock_list("fair")).locks if x.name == "fair"]

        first = await c.lock("fair", ttl=5)
        tasks = []
        for i in range(4):
            tasks.append(asyncio.create_task(contend(i)))
            while not (q := await queued()) or q[0].count < i + 2:
                await asyncio.sleep(0.02)
        fences = [w.fence for w in (await queued())[0].waiters]
        assert await first.release() is True
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert held == fences[1:] and (await c.get("last")).text == "a3"
        assert await queued() == []


# -- hand-over -------------------------------------------------------------------------------


def test_a_revoked_holder_passes_the_lock_to_the_next_waiter_through_watch(
    shared_cluster: LocalCluster,
) -> None:
    ns, urls = _ns(), _urls(shared_cluster)
    got: dict = {}
    let_go = threading.Event()

    def waiter() -> None:
        with Client(urls, ns=ns) as c2, c2.lock("job", ttl=5) as lock:
            got["at"], got["fence"] = time.monotonic(), lock.fence
            got["rev"] = c2.put("out", "B", fence=lock).revision
            let_go.wait(20)

    with Client(urls, ns=ns) as c:
        g = c.lease_grant(30)  # nobody renews it; revoked below
        holder = c.lock("job", lease=g.lease)
        c.put("out", "A", fence=holder)
        t = threading.Thread(target=waiter)
        t.start()
        _until(lambda: len(_queued(c, "job")) == 2, what="the waiter queued")
        t0 = time.monotonic()
        c.lease_revoke(g.lease)  # the holder "dies": its waiter key goes with its lease
        _until(lambda: "rev" in got, what="the hand-over")
        print(f"hand-over {got['at'] - t0:.3f} s after the revoke")
        assert got["at"] - t0 < 1.0 and got["fence"] > holder.fence
        with pytest.raises(FenceMismatch) as ei:
            c.put("out", "A again", fence=holder)
        assert ei.value.holder_fence == got["fence"] and ei.value.token == holder.fence
        assert c.get("out").text == "B" and c.get("out").mod_revision == got["rev"]
        assert holder.release() is False  # its waiter went with the lease
        let_go.set()
        t.join(10)
        assert _queued(c, "job") == []


def test_wait_false_and_timeouts_leave_no_waiter_behind(shared_cluster: LocalCluster) -> None:
    ns, urls = _ns(), _urls(shared_cluster)
    with Client(urls, ns=ns) as c, c.lock("busy", ttl=5) as lock:
        with pytest.raises(LockHeld) as ei:
            c.lock("busy", ttl=5, wait=False)
        assert ei.value.holder_fence == lock.fence and ei.value.status == 409
        t0 = time.monotonic()
        with pytest.raises(LockTimeout) as et:
            c.lock("busy", ttl=5, timeout=0.5)
        assert 0.4 < time.monotonic() - t0 < 2.5 and et.value.holder_fence == lock.fence
        assert [w.fence for w in _queued(c, "busy")] == [lock.fence]
        c.put("k", "v", fence=lock)
        assert lock.held


async def test_async_timeout_and_cancel_leave_the_queue(shared_cluster: LocalCluster) -> None:
    ns, urls = _ns(), _urls(shared_cluster)
    async with AsyncClient(urls, ns=ns) as c, c.lock("busy", ttl=5) as lock:
        with pytest.raises(LockTimeout):
            await c.lock("busy", ttl=5, timeout=0.3)
        with pytest.raises(LockHeld):
            await c.lock("busy", wait=False)

        async def take() -> None:
            await c.lock("busy", ttl=5)

        task = asyncio.create_task(take())
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.2)
        locks = (await c.lock_list("busy")).locks
        assert [w.fence for w in locks[0].waiters] == [lock.fence]


# -- Kleppmann's scenario --------------------------------------------------------------------


def _child(urls: list[str], ns: str, value: str, ttl: float = 2.0) -> LineChild:
    argv = [sys.executable, str(CHILD), ",".join(urls), ns, "kleppmann", str(ttl), value]
    return LineChild(argv, ROOT)


def test_kleppmann_a_paused_holders_stale_write_is_refused(shared_cluster: LocalCluster) -> None:
    """A holds the lock and is SIGSTOPped past its TTL; B gets the lock and writes with its
    fence; A resumes and writes with its old fence: A's write is refused, B's stands."""
    ns, urls, ttl = _ns(), _urls(shared_cluster), 2.0
    a = b = None
    try:
        a = _child(urls, ns, "A", ttl)
        fence_a = int(a.expect("ACQUIRED", 30))
        b = _child(urls, ns, "B", ttl)
        with Client(urls, ns=ns) as c:
            _until(lambda: len(_queued(c, "kleppmann")) == 2, 30, "B queued behind A")
            os.kill(a.proc.pid, signal.SIGSTOP)  # A, keepalive thread included, freezes
            t0 = time.monotonic()
            fence_b = int(b.expect("ACQUIRED", ttl + 5))
            print(f"B took the lock {time.monotonic() - t0:.2f} s after A froze (ttl {ttl} s)")
            assert fence_b > fence_a
            b.send("write")
            rev_b = int(b.expect("OK", 10))
            os.kill(a.proc.pid, signal.SIGCONT)
            a.send("write")  # A still believes it holds the lock
            assert int(a.expect("FENCE_MISMATCH", 10)) == fence_b
            kv = c.get("shared")
            assert kv.text == "B" and kv.mod_revision == rev_b  # B's write stands
            b.send("release")
            b.expect("RELEASED", 10)
            a.send("release")
            a.expect("RELEASED", 10)
            assert _queued(c, "kleppmann") == []
    finally:
        for child in (a, b):
            if child is not None:
                if child.proc.poll() is None:
                    os.kill(child.proc.pid, signal.SIGCONT)
                child.stop()


# -- errors with state, the CLI ---------------------------------------------------------------


def test_lock_errors_change_nothing(shared_cluster: LocalCluster) -> None:
    ns, urls = _ns(), _urls(shared_cluster)
    with Client(urls, ns=ns) as c:
        g = c.lease_grant(30)
        r = c.lock_acquire("e", g.lease, owner="me")
        assert r.acquired and r.fence == r.revision == r.holder_fence
        rev = c.range("probe").revision
        with pytest.raises(LockHeld):
            c.lock_acquire("e", g.lease, wait=False)
        with pytest.raises(LockNotHeld) as ei:
            c.lock_release("e", r.fence + 1)
        assert ei.value.status == 404 and ei.value.fence == r.fence + 1
        for stale in (("e", r.fence + 1), ("other", r.fence)):
            with pytest.raises(FenceMismatch):
                c.put("k", "v", fence=stale)
            with pytest.raises(FenceMismatch):
                c.txn([], [c.ops.put("k", "v"), c.ops.delete("k2")], fence=stale)
            with pytest.raises(FenceMismatch):
                c.append("s", "e", fence=stale)
        assert c.range("probe").revision == rev  # nothing applied
        done = c.txn([], [c.ops.put("k", "v"), c.ops.delete(r.key)], fence=("e", r.fence))
        assert done.succeeded and _queued(c, "e") == []  # written and released at once
        with pytest.raises(FenceMismatch) as em:
            c.put("k", "w", fence=("e", r.fence))
        assert em.value.holder_fence is None


def _lock_cli(cluster: LocalCluster, *argv: str) -> subprocess.CompletedProcess:
    urls = ",".join(cluster.url(n) for n in cluster.node_ids)
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cluster.cli", "lock", *argv, "--endpoints", urls],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_the_lock_cli_lists_holders_and_waiters(shared_cluster: LocalCluster) -> None:
    ns, urls = _ns(), _urls(shared_cluster)
    with Client(urls, ns=ns) as c:
        g = c.lease_grant(30)
        for owner in ("alice", "bob"):
            c.lock_acquire("report", g.lease, owner=owner)
        c.lock_acquire("jobs/1", g.lease)
        listed = _lock_cli(shared_cluster, "list", "--ns", ns, "--json")
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        assert [x["name"] for x in rows] == ["jobs/1", "report"]
        assert [w["owner"] for w in rows[1]["waiters"]] == ["alice", "bob"]
        shown = _lock_cli(shared_cluster, "list", "--ns", ns, "--prefix", "rep")
        assert shown.returncode == 0 and "alice" in shown.stdout and "jobs/1" not in shown.stdout
        c.lease_revoke(g.lease)
        empty = _lock_cli(shared_cluster, "list", "--ns", ns)
        assert empty.returncode == 0 and "no locks" in empty.stdout
