# ruff: noqa: F811
"""The agent layer against a real 3-node cluster, for what the issue-11 audit found
untested or wrong: a blind first checkpoint, hydrate/state_at across truncated events,
reading an old checkpoint through an upcaster, a JSON-format checkpoint, an append over
the request-size limit, `statekeeper stream read --revision` and `statekeeper agent
checkpoints | gc`."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from statekeeper.client import Client, InvalidRequest
from statekeeper.client.agent import Agent, CheckpointConflict, EventsMissing, SchemaRegistry
from statekeeper.client.agent.envelope import peek
from statekeeper.cluster.supervisor import LocalCluster

# The fixtures `client` and `ns` come from agent_helpers (tests take them as arguments).
from tests.integration.agent_helpers import client, ns, reducer  # noqa: F401

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def make(c, agent_id: str = "agent-7", **kw) -> Agent:
    kw.setdefault("reducer", reducer)
    kw.setdefault("initial", {})
    return Agent(c, agent_id, **kw)


def cli(cluster: LocalCluster, ns: str, *argv: str) -> subprocess.CompletedProcess:
    urls = ",".join(cluster.url(n) for n in cluster.node_ids)
    cmd = [sys.executable, "-m", "statekeeper.cluster.cli", *argv, "--ns", ns, "--endpoints", urls]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_a_blind_first_checkpoint_over_unfolded_events_is_refused(client: Client) -> None:
    writer = make(client)
    for _ in range(3):
        writer.log("add", 1)  # events, then the writer dies before any checkpoint
    fresh = make(client)
    with pytest.raises(CheckpointConflict, match="hydrate"):
        fresh.checkpoint({"total": 0}, step=1)
    assert client.get("agent/agent-7/head", default=None) is None
    h = fresh.hydrate()
    assert fresh.checkpoint(h.state, step=1).position == 3
    assert make(client).hydrate().state == {"total": 3}


def test_hydrate_and_state_at_refuse_to_fold_across_truncated_events(client: Client) -> None:
    a = make(client)
    a.log("add", 1, step=1)
    a.checkpoint({"total": 1}, step=1)
    for s in range(2, 6):
        a.log("add", 10, step=s)  # seqs 2..5
    assert make(client).hydrate().state == {"total": 41}
    r = client.truncate_stream("agent/agent-7", 4)  # 1..3 gone: 2 and 3 were after the head
    assert r["first_seq"] == 4
    for tail in (100, 1):  # the tail inside the hydrate batch, or read forward after it
        with pytest.raises(EventsMissing) as err:
            make(client, tail=tail).hydrate()
        e = err.value
        assert (e.code, e.status, e.agent, e.position, e.first_seq) == (
            "events_missing",
            410,
            "agent-7",
            1,
            4,
        )
        assert "position 1" in str(e) and "first stored seq is 4" in str(e)
    with pytest.raises(EventsMissing):
        a.state_at(step=4)
    # The writer that folded everything checkpoints past the hole; hydrate works again.
    a.checkpoint({"total": 41}, step=5)
    assert make(client).hydrate().state == {"total": 41}


def test_an_old_checkpoint_is_read_through_an_upcaster(client: Client) -> None:
    v2, v3 = SchemaRegistry(), SchemaRegistry()

    @v2.schema("Chat", version=2)
    @dataclasses.dataclass
    class Chat2:
        turns: list

    @v3.schema("Chat", version=3)
    @dataclasses.dataclass
    class Chat3:
        turns: list
        model: str

    @v3.upcaster("Chat", 2, 3)
    def add_model(d: dict) -> dict:
        return {**d, "model": "legacy"}

    old = make(client, registry=v2, state_type=Chat2, reducer=None)
    old.checkpoint(Chat2(["hi"]), step=1)  # written by the old agent version
    new = make(client, registry=v3, state_type=Chat3, reducer=None)
    h = new.hydrate()
    assert h.state == Chat3(["hi"], "legacy") and h.checkpoint.header["version"] == 2
    assert new.get_checkpoint(1).state == Chat3(["hi"], "legacy")
    assert new.checkpoint(Chat3([*h.state.turns, "again"], "m2"), step=2).n == 2
    assert make(client, registry=v3, state_type=Chat3, reducer=None).latest().state == Chat3(
        ["hi", "again"], "m2"
    )


def test_a_json_checkpoint_is_readable_json(
    shared_cluster: LocalCluster, client: Client, ns: str
) -> None:
    a = make(client, format="json")
    a.log("add", 2, step=1)
    ck = a.checkpoint({"total": 2, "notes": ["é"], "raw": b"\x01"}, step=1)
    assert ck.header["format"] == "json"
    stored = client.get("agent/agent-7/head")
    assert stored.value  # the manifest; its inline envelope has a JSON body
    assert make(client, format="json").hydrate().state == {
        "total": 2,
        "notes": ["é"],
        "raw": b"\x01",
    }
    assert make(client).latest().state["notes"] == ["é"]  # any reader decodes it
    out = cli(shared_cluster, ns, "agent", "show", "agent-7", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["checkpoint"]["header"]["format"] == "json"
    assert doc["state"] == {"total": 2, "notes": ["é"], "raw": {"$bytes": "AQ=="}}
    env = a.ctx.codec.encode({"k": 1})
    assert peek(env).format == "json" and b'{"k":1}' in env.replace(b" ", b"")


def test_an_append_over_the_request_limit_is_413_and_stores_nothing(client: Client) -> None:
    client.append("big", [b"first"])
    rev = client.stream_info("big").mod_revision
    events = [os.urandom(900 * 1024) for _ in range(5)]  # each under 1 MiB, 4.5 MiB in all
    with pytest.raises(InvalidRequest) as err:
        client.append("big", events)
    assert (err.value.code, err.value.status) == ("request_too_large", 413)
    info = client.stream_info("big")
    assert (info.last_seq, info.count, info.mod_revision) == (1, 1, rev)
    with pytest.raises(InvalidRequest) as err:
        make(client, agent_id="big").log("blob", os.urandom(5 * MIB))
    # Refused before sending, naming the event (issue 30 item 19), with the server's code.
    assert err.value.code == "value_too_large" and "event 'blob'" in str(err.value)
    assert client.read_stream("agent/big").last_seq == 0


def test_stream_read_at_a_past_revision_in_the_cli(
    shared_cluster: LocalCluster, client: Client, ns: str
) -> None:
    first = client.append("orders", ["one", "two"])
    client.append("orders", ["three"])
    out = cli(
        shared_cluster, ns, "stream", "read", "orders", "--revision", str(first.revision), "--json"
    )
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert [r["data"] for r in rows] == ["one", "two"]
    out = cli(shared_cluster, ns, "stream", "read", "orders")
    assert out.returncode == 0 and "three" in out.stdout


def test_agent_checkpoints_and_gc_in_the_cli(
    shared_cluster: LocalCluster, client: Client, ns: str
) -> None:
    a = make(client)
    for s in range(1, 4):
        a.checkpoint({"total": s}, step=s, metadata={"run": "even" if s % 2 == 0 else "odd"})
    out = cli(shared_cluster, ns, "agent", "checkpoints", "agent-7")
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()[1:]] == ["#3", "#2", "#1"]
    out = cli(
        shared_cluster, ns, "agent", "checkpoints", "agent-7", "--filter", "run=odd", "--json"
    )
    assert [c["ckpt"] for c in json.loads(out.stdout)] == [3, 1]

    class Crashing:  # the checkpoint txn never happens: chunks are left behind
        def __init__(self, inner: Client) -> None:
            self.inner, self.ns, self.timeout = inner, inner.ns, inner.timeout

        def __getattr__(self, name: str):
            if name == "txn":
                raise SystemExit("crashed before the manifest txn")
            return getattr(self.inner, name)

    crashing = make(Crashing(client))
    crashing.hydrate()
    with pytest.raises(SystemExit):
        crashing.checkpoint({"blob": os.urandom(MIB)}, step=4)
    orphans = len(client.range("agent/agent-7/chunk/", keys_only=True).kvs)
    assert orphans == 3
    out = cli(shared_cluster, ns, "agent", "gc", "agent-7", "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == {"agent": "agent-7", "deleted": 3}
    assert client.range("agent/agent-7/chunk/", keys_only=True).kvs == []
