# ruff: noqa: F811
"""Issue 30 items 6 and 1 on a real cluster: an agent process killed (SIGKILL) at points of
its loop and started again loses and repeats no step, with checkpoints in between;
rollback to a step between checkpoints is state_at of that step (Agent and AsyncAgent);
`statekeeper agent rollback` copies a dataclass state its process cannot decode."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from statekeeper.client import AsyncClient, Client
from statekeeper.client.agent import Agent, AsyncAgent, EveryNSteps, SchemaRegistry
from statekeeper.cluster.supervisor import LocalCluster

# The fixtures `client` and `ns` come from agent_helpers (tests take them as arguments).
from tests.integration.agent_helpers import client, ns, reducer  # noqa: F401

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LAST = 30

# The obvious loop: continue from hydrate()'s step, apply, checkpoint every 3, step += 1.
LOOP = """
import sys
from statekeeper.client import Client
from statekeeper.client.agent import Agent, EveryNSteps

def reducer(state, event):
    return {**state, "total": state.get("total", 0) + event.data}

urls, ns, last = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
with Client(urls, ns=ns) as c:
    agent = Agent(c, "looper", reducer=reducer, initial={}, policy=EveryNSteps(3))
    step = agent.hydrate().step
    while step <= last:
        agent.apply("add", step, step=step)
        print(step, flush=True)
        agent.maybe_checkpoint(agent.state, step=step)
        step += 1
"""


def run_loop(cluster: LocalCluster, ns: str, kill_after_lines: int | None) -> list[int]:
    urls = ",".join(cluster.url(n) for n in cluster.node_ids)
    proc = subprocess.Popen(
        [sys.executable, "-c", LOOP, urls, ns, str(LAST)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    seen: list[int] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(int(line))
        if kill_after_lines is not None and len(seen) >= kill_after_lines:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    proc.stdout.close()
    return seen


def test_a_killed_agent_loop_loses_no_step(
    shared_cluster: LocalCluster, client: Client, ns: str
) -> None:
    runs = [run_loop(shared_cluster, ns, k) for k in (2, 4, 7)]
    runs.append(run_loop(shared_cluster, ns, None))
    assert runs[0][0] == 1 and runs[-1][-1] == LAST
    steps = [e.meta["step"] for e in client.events("agent/looper")]
    assert steps == list(range(1, LAST + 1))  # each step once, none skipped
    h = Agent(client, "looper", reducer=reducer, initial={}).hydrate()
    assert (h.state, h.step) == ({"total": LAST * (LAST + 1) // 2}, LAST + 1)


def test_rollback_between_checkpoints_is_state_at(client: Client) -> None:
    a = Agent(client, "rb", reducer=reducer, initial={}, policy=EveryNSteps(3))
    a.hydrate()
    for s in range(1, 8):
        a.apply("add", s, step=s)
        a.maybe_checkpoint(a.state, step=s)  # checkpoints at steps 3 and 6
    want = a.state_at(step=5)
    assert want == {"total": 15} and a.checkpoints(limit=1)[0].step == 6
    rb = a.rollback(to=5)
    assert (rb.state, rb.step, rb.parent) == (want, 5, 1)
    h = Agent(client, "rb", reducer=reducer, initial={}).hydrate()
    assert (h.state, h.step) == (want, 6)


async def test_async_resume_and_rollback(shared_cluster: LocalCluster, ns: str) -> None:
    urls = [shared_cluster.url(n) for n in shared_cluster.node_ids]
    async with AsyncClient(urls, ns=ns) as c:
        a = AsyncAgent(c, "rb-async", reducer=reducer, initial={})
        await a.hydrate()
        for s in range(1, 5):
            await a.apply("add", s, step=s)
            if s == 2:
                await a.checkpoint(a.state)
        b = AsyncAgent(c, "rb-async", reducer=reducer, initial={})
        assert (await b.hydrate()).step == 5
        want = await b.state_at(step=3)
        assert (await b.rollback(to=3)).state == want == {"total": 6}
        h = await AsyncAgent(c, "rb-async", reducer=reducer, initial={}).hydrate()
        assert (h.state, h.step) == (want, 4)


@dataclasses.dataclass
class TripPlan:
    todo: list[str]


def test_cli_rolls_back_a_dataclass_state_it_cannot_decode(
    shared_cluster: LocalCluster, client: Client, ns: str
) -> None:
    """Issue 30 item 1: the CLI process has no registry holding TripPlan; it copies."""
    reg = SchemaRegistry()
    reg.register(TripPlan, "TripPlan", 1)
    a = Agent(client, "typed", registry=reg)
    a.hydrate()
    a.log("tool.ok", {"tool": "search"}, step=1)
    a.checkpoint(TripPlan(["a", "b"]), step=1)
    a.log("tool.ok", {"tool": "fetch"}, step=2)
    a.checkpoint(TripPlan(["a"]), step=2)
    urls = ",".join(shared_cluster.url(n) for n in shared_cluster.node_ids)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "statekeeper.cluster.cli",
            "agent",
            "rollback",
            "typed",
            "--to",
            "1",
            "--ns",
            ns,
            "--endpoints",
            urls,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "current again as checkpoint #3" in out.stdout, out.stderr
    assert Agent(client, "typed", registry=reg).latest().state == TripPlan(["a", "b"])
