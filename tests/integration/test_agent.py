# ruff: noqa: F811
"""The agent layer (client/agent/) against a real 3-node cluster: checkpoints, lists with
filters, hydrate with events after the checkpoint, rollback, time travel, chunked states
over 1 MiB, a crash between chunks and manifest, conflicting writers, a projection that
resumes after a restart, and the `statekeeper agent` CLI. Both Agent and AsyncAgent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from statekeeper.client import AsyncClient, Client
from statekeeper.client.agent import (
    Agent,
    AsyncAgent,
    AsyncProjection,
    CheckpointConflict,
    EveryNSteps,
    OnEvent,
    Projection,
)
from statekeeper.cluster.supervisor import LocalCluster

# The fixtures `client` and `ns` come from agent_helpers (tests take them as arguments).
from tests.integration.agent_helpers import client, ns, reducer  # noqa: F401

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def make(c, **kw) -> Agent:
    kw.setdefault("reducer", reducer)
    kw.setdefault("initial", {})
    return Agent(c, kw.pop("agent_id", "agent-7"), **kw)


class Crashing:
    """The client, except that the checkpoint txn never happens (the process 'dies'
    after writing the chunks)."""

    def __init__(self, inner: Client) -> None:
        self.inner, self.ns, self.timeout = inner, inner.ns, inner.timeout

    def __getattr__(self, name: str):
        if name == "txn":
            raise SystemExit("crashed before the manifest txn")
        return getattr(self.inner, name)


def test_checkpoint_latest_and_list_with_filters(client: Client) -> None:
    a = make(client)
    for s in range(1, 8):
        a.log("add", 1, step=s)
        a.checkpoint({"total": s}, step=s, metadata={"run": "even" if s % 2 == 0 else "odd"})
    latest = make(client).latest()
    assert (latest.n, latest.step, latest.position, latest.state) == (7, 7, 7, {"total": 7})
    assert latest.revision == client.get("agent/agent-7/head").mod_revision
    assert [c.n for c in a.checkpoints(limit=3)] == [7, 6, 5]
    assert [c.step for c in a.checkpoints(run="even")] == [6, 4, 2]
    assert a.get_checkpoint(3).state == {"total": 3} and a.get_checkpoint(3).parent == 2
    keys = [kv.key for kv in client.range("agent/agent-7/", keys_only=True)]
    assert keys[-1] == "agent/agent-7/head" and keys[0] == "agent/agent-7/ckpt/000000000001"


def test_hydrate_folds_the_events_after_the_checkpoint_in_one_request(client: Client) -> None:
    a = make(client, policy=EveryNSteps(3) | OnEvent(lambda e: e == "tool.ok"))
    written = []
    for s in range(1, 8):
        a.log("add", s, step=s)
        if a.maybe_checkpoint({"total": s * (s + 1) // 2}, step=s):
            written.append(s)
    assert written == [3, 6]
    h = make(client).hydrate()
    assert (h.state, h.step, h.position, h.events_folded, h.checkpoint.n) == (
        {"total": 28},
        8,  # the step to continue from
        7,
        1,
        2,
    )
    assert h.requests == 1
    sent = []
    real = client._execute
    client._execute = lambda request, *a: sent.append(request.path) or real(request, *a)
    try:
        assert make(client).hydrate().state == {"total": 28}
    finally:
        del client._execute
    assert sent == ["/v1/batch"]
    b = make(client)
    b.hydrate()
    ck = b.checkpoint({"total": 28}, events=[("add", 0)])
    assert (ck.n, ck.position, ck.parent) == (3, 8, 2)


def test_rollback_keeps_history_and_time_travel(client: Client) -> None:
    a = make(client)
    revs = {}
    for s in range(1, 6):
        revs[s] = a.log("add", 1, step=s).revision
        if s % 2 == 0:
            a.checkpoint({"total": s}, step=s)
    rb = a.rollback(to=2)
    assert (rb.n, rb.kind, rb.parent, rb.step, rb.state) == (3, "rollback", 1, 2, {"total": 2})
    assert rb.metadata == {"rollback_from": 2}
    events = client.read_stream("agent/agent-7").events
    assert events[-1].type == "statekeeper.rollback" and rb.position == events[-1].seq
    assert len(a.checkpoints(limit=None)) == 3  # nothing deleted
    kinds = [r.kind for r in a.history()]
    assert kinds.count("rollback") == 1 and kinds[-1] == "rollback" and kinds.count("event") == 5
    assert make(client).hydrate().state == {"total": 2}
    assert a.state_at(revision=revs[5]) == {"total": 5}
    assert a.state_at(revision=revs[3]) == {"total": 3}
    a.log("add", 10, step=3)
    assert a.state_at(step=3) == {"total": 12}  # the timeline after the rollback
    assert a.state_at(step=1) == {"total": 1}


def test_chunked_state_over_the_value_and_request_limits_round_trips(client: Client) -> None:
    a = make(client)
    state = {"blob": os.urandom(int(4.5 * MIB)), "note": "big"}  # > 1 MiB and > 4 MiB
    ck = a.checkpoint(state, step=1)
    assert ck.chunks == 10 and ck.size > 4.5 * MIB  # 512 KiB chunks (the last one small)
    assert all(len(kv.value) <= MIB for kv in client.range("agent/agent-7/chunk/"))
    assert make(client).latest().state == state
    sent = []
    real = client._execute
    client._execute = lambda request, *a: sent.append(request.path) or real(request, *a)
    try:
        h = make(client).hydrate()
    finally:
        del client._execute
    assert h.state == state and sent == ["/v1/batch"] * 6  # head + tail, then 5 x 2 chunks
    assert h.requests == 6


def test_crash_mid_chunking_keeps_the_previous_checkpoint_and_gc_collects(client: Client) -> None:
    a = make(client)
    a.checkpoint({"small": True}, step=1)
    crashing = make(Crashing(client))
    crashing.hydrate()
    with pytest.raises(SystemExit):
        crashing.checkpoint({"blob": os.urandom(2 * MIB)}, step=2)
    orphans = client.range("agent/agent-7/chunk/", keys_only=True).kvs
    assert len(orphans) == 5  # 2 MiB + the envelope's header: 4 x 512 KiB and a few bytes
    b = make(client)
    assert b.latest().state == {"small": True}
    assert b.gc() == 5
    assert client.range("agent/agent-7/chunk/", keys_only=True).kvs == []
    assert b.gc() == 0 and make(client).hydrate().state == {"small": True}


def test_conflicting_writers_get_checkpoint_conflict(client: Client) -> None:
    a, b = make(client), make(client)
    a.checkpoint({"v": 1}, step=1)
    b.hydrate()
    a.checkpoint({"v": 2}, step=2)
    with pytest.raises(CheckpointConflict) as err:
        b.checkpoint({"v": "b"}, step=2)
    assert err.value.current.n == 2
    with pytest.raises(CheckpointConflict, match="hydrate"):
        make(client).checkpoint({"v": "blind"})
    assert make(client).latest().state == {"v": 2}
    client.append("agent/agent-7", b"from another writer")  # the stream moves under `a`
    with pytest.raises(CheckpointConflict, match="stream moved"):
        a.checkpoint({"v": 3}, step=3, events=[("add", 1)])
    assert make(client).latest().state == {"v": 2}  # nothing of the txn applied
    assert client.read_stream("agent/agent-7").last_seq == 1


def test_projection_resumes_from_its_saved_position(client: Client) -> None:
    a = make(client)
    for i in range(30):
        a.log("tool.ok" if i % 3 else "tool.error", {"i": i}, step=i)
    seen: list[int] = []

    def fold(model: dict, ev) -> dict:
        seen.append(ev.seq)
        return {**model, ev.type: model.get(ev.type, 0) + 1}

    p = Projection(client, "tool-counts", "agent/agent-7", fold, {}, checkpoint_every=8, wait=0.5)
    assert p.run(max_events=20) == 20 and p.saved_position == 20
    del p  # the projector "restarts"
    for i in range(5):
        a.log("tool.ok", {"i": 100 + i})
    seen.clear()
    q = Projection(client, "tool-counts", "agent/agent-7", fold, {}, wait=0.5)
    assert q.catch_up() == {"tool.ok": 25, "tool.error": 10}
    assert seen == list(range(21, 36))  # resumed, not replayed from zero
    assert client.get("proj/tool-counts").mod_revision == q.revision
    # Live: the projector waits in long polls and folds events as they are appended.
    runner = threading.Thread(target=q.run, kwargs={"stop": lambda: q.position >= 38})
    runner.start()
    for i in range(3):
        time.sleep(0.2)
        a.log("tool.ok", {"i": 200 + i})
    runner.join(timeout=15)
    assert not runner.is_alive() and q.model["tool.ok"] == 28 and q.saved_position == 38


async def test_async_agent_and_projection(shared_cluster: LocalCluster, ns: str) -> None:
    urls = [shared_cluster.url(n) for n in shared_cluster.node_ids]
    async with AsyncClient(urls, ns=ns) as c:
        a = AsyncAgent(c, "agent-9", reducer=reducer, initial={})
        await a.log("add", 2, step=1)
        await a.checkpoint({"total": 2}, step=1)
        await a.log("add", 3, step=2)
        big = {"blob": os.urandom(int(1.5 * MIB))}
        b = AsyncAgent(c, "agent-9", reducer=reducer, initial={})
        h = await b.hydrate()
        assert h.state == {"total": 5} and h.requests == 1
        await b.checkpoint(big, step=3)
        assert (await AsyncAgent(c, "agent-9").latest()).state == big
        rb = await b.rollback(to=1)
        assert rb.state == {"total": 2} and (await b.history())[-1].kind == "rollback"
        assert await b.state_at(step=2) == {"total": 2}  # the timeline after the rollback
        assert await b.state_at(revision=h.revision) == {"total": 5}
        p = AsyncProjection(c, "sums", "agent/agent-9", reducer, {}, wait=0.5)
        assert (await p.catch_up()) == {"total": 5}


def cli(shared_cluster: LocalCluster, ns: str, *argv: str) -> subprocess.CompletedProcess:
    urls = ",".join(shared_cluster.url(n) for n in shared_cluster.node_ids)
    cmd = [
        sys.executable,
        "-m",
        "statekeeper.cluster.cli",
        "agent",
        *argv,
        "--ns",
        ns,
        "--endpoints",
        urls,
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_cli_list_show_history_rollback(
    shared_cluster: LocalCluster, client: Client, ns: str
) -> None:
    a = make(client)
    a.log("add", 1, step=1)
    a.checkpoint({"total": 1, "raw": b"\x00"}, step=1, metadata={"run": "r1"})
    a.log("add", 2, step=2)
    a.checkpoint({"total": 3}, step=2)
    out = cli(shared_cluster, ns, "list")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].split()[:5] == ["agent-7", "2", "2", "2", "2"]
    out = cli(shared_cluster, ns, "show", "agent-7", "--ckpt", "1")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.split("state:\n", 1)[1]) == {"total": 1, "raw": {"$bytes": "AA=="}}
    out = cli(shared_cluster, ns, "rollback", "agent-7", "--to", "1")
    assert out.returncode == 0 and "current again as checkpoint #3" in out.stdout, out.stderr
    out = cli(shared_cluster, ns, "history", "agent-7")
    kinds = [line.split()[3] for line in out.stdout.splitlines()[1:]]
    assert kinds == ["event", "checkpoint", "event", "checkpoint", "rollback"], out.stdout
    out = cli(shared_cluster, ns, "show", "agent-7", "--json")
    assert json.loads(out.stdout)["state"] == {"total": 1, "raw": {"$bytes": "AA=="}}
    out = cli(shared_cluster, ns, "show", "nobody")
    assert out.returncode == 3 and "no checkpoint" in out.stderr and "Traceback" not in out.stderr


def test_bad_input_gets_coded_errors_and_changes_nothing(client: Client) -> None:
    """Wrong expectations, oversize events, too many events, unknown and newer schema
    versions, garbage and pickled state: each a coded error; the head and the stream stay
    as they were."""
    import dataclasses
    import pickle

    from statekeeper.client import ExpectationFailed, InvalidRequest
    from statekeeper.client.agent import (
        CheckpointCorrupt,
        PickleRefused,
        PositionNotFound,
        SchemaRegistry,
        SchemaTooNew,
        decode,
    )

    v2, v3 = SchemaRegistry(), SchemaRegistry()

    @v3.schema("Chat", version=3)
    @dataclasses.dataclass
    class Chat3:
        turns: list
        model: str = "m"

    @v2.schema("Chat", version=2)
    @dataclasses.dataclass
    class Chat2:
        turns: list

    a = make(client, agent_id="bad", registry=v3, state_type=Chat3, reducer=None)
    a.hydrate()  # a brand-new agent: its first checkpoint includes no event, position 0
    ck = a.checkpoint(Chat3(["hi"]), step=1)
    assert ck.position == 0
    a.log("note", b"x")
    a.checkpoint(Chat3(["hi", "x"]), step=2)  # position 1 of stream agent/bad
    head = client.get("agent/bad/head")
    last = client.stream_info("agent/bad").last_seq

    # A checkpoint for a missing stream: a head naming seq 1 of agent/ghost, which does
    # not exist (copied without its stream). Refused with a coded 404, nothing written.
    client.put("agent/ghost/head", head.value)
    ghost_rev = client.get("agent/ghost/head").mod_revision
    for op in ("checkpoint", "hydrate", "latest"):
        ghost = make(client, agent_id="ghost", registry=v3, state_type=Chat3, reducer=None)
        with pytest.raises(PositionNotFound) as e:
            if op == "checkpoint":
                ghost.checkpoint(Chat3(["ghost"]), step=3)
            else:
                getattr(ghost, op)()
        assert (e.value.code, e.value.status, e.value.position) == ("stream_not_found", 404, 1)
    assert client.get("agent/ghost/head").mod_revision == ghost_rev
    assert client.read_stream("agent/ghost").last_seq == 0

    with pytest.raises(ExpectationFailed) as e:
        a.log("note", b"y", expect=5)
    assert e.value.code == "expectation_failed" and e.value.last_seq == last
    with pytest.raises(InvalidRequest) as e:
        a.log("big", b"x" * (MIB + 1))
    assert e.value.code == "value_too_large"
    with pytest.raises(InvalidRequest) as e:
        a.checkpoint(Chat3(["x"]), step=2, events=[("e", i) for i in range(1001)])
    assert e.value.code == "too_many_events"
    old = make(client, agent_id="bad", registry=v2, state_type=Chat2, reducer=None)
    with pytest.raises(SchemaTooNew, match="Chat v3 is newer than this reader's v2") as e:
        old.hydrate()
    assert e.value.code == "schema_too_new"
    assert client.get("agent/bad/head").mod_revision == head.mod_revision
    assert client.stream_info("agent/bad").last_seq == last

    client.put("agent/junk/head", b"\x00garbage")
    with pytest.raises(CheckpointCorrupt) as e:
        make(client, agent_id="junk").hydrate()
    assert e.value.code == "checkpoint_corrupt"
    pickled = pickle.dumps({"a": 1})
    client.append("agent/pickled", [pickled])  # event data that is not an envelope ...
    seen = make(client, agent_id="pickled", reducer=lambda s, e: [*s, e.data], initial=[])
    assert seen.hydrate().state == [pickled]  # ... reaches the reducer as bytes, never unpickled
    with pytest.raises(PickleRefused):
        decode(pickled)  # and as a state it is refused
