"""Retention policies enforced by a real 3-node cluster (docs/protocol.md, "Retention"):
keep_last 3 within "ckpt" on agent checkpoints written by the agent layer leaves the 3
newest of each agent within a few gc intervals, and never touches heads or the chunks of
a chunked state (kept checkpoints stay readable); a stream keep_last policy truncates;
truncate_stream through both clients; `statekeeper gc status` and `gc policy` on the
command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from statekeeper.client import AsyncClient, Client, StreamNotFound
from statekeeper.client.agent import Agent
from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration

GC_INTERVAL = 0.3
# The leader waits the lease grace (max election timeout + 1 s) after its election.
SETTLE = 0.7 + 1.0 + 10 * GC_INTERVAL


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(n) for n in lc.node_ids]


def _until(check, timeout: float = SETTLE + 10):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def _gc_cli(lc: LocalCluster, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cluster.cli", "gc", *argv, "--endpoints", ",".join(_urls(lc))],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _ckpt_keys(c: Client, agent_id: str) -> list[str]:
    return [kv.key for kv in c.range(prefix=f"agent/{agent_id}/ckpt/").kvs]


@pytest.mark.cluster_options(gc_interval_seconds=GC_INTERVAL)
def test_the_cluster_enforces_retention_policies(cluster: LocalCluster) -> None:
    ns = f"ret-{uuid.uuid4().hex[:8]}"
    with Client(_urls(cluster), ns=ns) as c:
        set_ = _gc_cli(cluster, "policy", "set", "--ns", ns, "--prefix", "agent/",
                       "--within", "ckpt", "--keep-last", "3")
        assert set_.returncode == 0 and "keep_last=3 within=ckpt" in set_.stdout, set_.stderr
        agents = ("a1", "a2")
        for agent_id in agents:
            a = Agent(c, agent_id, reducer=lambda s, e: s, initial={})
            for step in range(1, 11):
                a.checkpoint({"step": step}, step=step)
        # a chunked state over 3 chunks (chunk size 512 KiB, client/agent/checkpoints.py):
        # without `within` keep_last 3 would trim its chunk dir. Checkpoints 1, 4 and 5
        # share it (content-addressed: stored once); 1 is dropped, 4 and 5 need it.
        big = {"blob": os.urandom(1800 * 1024), "note": "big"}
        b = Agent(c, "big", reducer=lambda s, e: s, initial={})
        for step, state in enumerate((big, {"s": 2}, {"s": 3}, big, big), start=1):
            ck = b.checkpoint(state, step=step)
        assert ck.chunks == 4
        chunk_keys = [kv.key for kv in c.range(prefix="agent/big/chunk/", keys_only=True).kvs]
        assert len(chunk_keys) == 4
        # keys policy: the 3 newest checkpoints of each agent stay, the head too
        for agent_id in agents:
            want = [f"agent/{agent_id}/ckpt/{n:012d}" for n in (8, 9, 10)]
            assert _until(lambda a=agent_id, w=want: _ckpt_keys(c, a) == w), _ckpt_keys(c, a)
            latest = Agent(c, agent_id, reducer=lambda s, e: s, initial={}).latest()
            assert (latest.n, latest.state) == (10, {"step": 10})
        want = [f"agent/big/ckpt/{n:012d}" for n in (3, 4, 5)]
        assert _until(lambda: _ckpt_keys(c, "big") == want), _ckpt_keys(c, "big")
        # the chunks and the head are untouched, and the kept checkpoints read back
        after = [kv.key for kv in c.range(prefix="agent/big/chunk/", keys_only=True).kvs]
        assert after == chunk_keys
        reader = Agent(c, "big", reducer=lambda s, e: s, initial={})
        h = reader.hydrate()
        assert h.checkpoint.n == 5 and h.state == big
        assert reader.state_at(step=4) == big and reader.state_at(step=3) == {"s": 3}
        assert reader.gc() == 0  # kept checkpoints still reference the chunk set

        # streams policy: keep the last 5 events of log/*
        c.retention_set("log/", target="streams", keep_last=5)
        for i in range(12):
            c.append("log/x", [{"data": f"e{i}", "id": f"id{i}"}])
        info = _until(lambda: (i := c.stream_info("log/x")).first_seq == 8 and i)
        assert info and (info.first_seq, info.last_seq, info.count) == (8, 12, 5)
        page = c.read_stream("log/x", start=1)
        assert [e.seq for e in page.events] == [8, 9, 10, 11, 12] and page.first_seq == 8

        # truncate_stream by hand, on a stream no policy covers
        c.append("other", [{"data": str(i)} for i in range(4)])
        r = c.truncate_stream("other", 3)
        assert (r["first_seq"], r["last_seq"], r["removed"], r["more"]) == (3, 4, 2, False)
        with pytest.raises(StreamNotFound):
            c.truncate_stream("missing", 2)

        status = _gc_cli(cluster, "status", "--ns", ns)
        assert status.returncode == 0, status.stderr
        assert "agent/" in status.stdout and "log/" in status.stdout
        assert "within=ckpt" in status.stdout
        assert "last gc in " + ns + ": revision" in status.stdout
        assert "mvcc history: compact_revision" in status.stdout
        as_json = json.loads(_gc_cli(cluster, "status", "--ns", ns, "--json").stdout)
        keys_policy = next(p for p in as_json["policies"] if p["prefix"] == "agent/")
        assert keys_policy["frees"]["keys"] == 0
        assert keys_policy["within"] == "ckpt"
        # the three agents' ckpt/ groups (3 keys each); heads and chunk dirs not counted
        assert keys_policy["holds"]["groups"] == 3 and keys_policy["holds"]["keys"] == 9

        listed = _gc_cli(cluster, "policy", "list", "--ns", ns, "--json")
        policies = json.loads(listed.stdout)["policies"]
        assert [(p["prefix"], p["within"]) for p in policies] == [("agent/", "ckpt"), ("log/", None)]
        table = _gc_cli(cluster, "policy", "list", "--ns", ns)
        assert "within=ckpt" in table.stdout, table.stderr
        deleted = _gc_cli(cluster, "policy", "delete", "--ns", ns, "--prefix", "log/",
                          "--target", "streams")
        assert deleted.returncode == 0 and "1 policy deleted" in deleted.stdout


async def test_retention_through_the_async_client(shared_cluster: LocalCluster) -> None:
    ns = f"ret-{uuid.uuid4().hex[:8]}"
    async with AsyncClient(_urls(shared_cluster), ns=ns) as c:
        r = await c.retention_set("sessions/s1/", max_age="7d")
        assert r["created"] and r["policy"]["max_age_s"] == 7 * 86_400
        listed = await c.retention_list()
        assert [p["prefix"] for p in listed["policies"]] == ["sessions/s1/"]
        st = await c.retention_status()
        assert st["policies"][0]["frees"] == {"keys": 0, "bytes": 0}
        await c.append("s", [{"data": "a"}, {"data": "b"}])
        t = await c.truncate_stream("s", 2)
        assert t["first_seq"] == 2
        assert (await c.retention_delete("sessions/s1/"))["deleted"] == 1
