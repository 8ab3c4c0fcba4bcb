"""A real LangGraph graph made durable by StatekeeperSaver, end to end, on a real 3-node
cluster: the agent process is SIGKILLed in the middle of a superstep (after the tool of
that step ran and its pending write was saved, while the other task of the step still
runs), the leader node is SIGKILLed too, and new processes with the same thread_id resume:
the tool is not run again (its pending write is reused), the interrupted human approval is
resumed with Command(resume=...), and the run finishes with the tool's answer."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from statekeeper.client.langgraph import StatekeeperSaver
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.raft_harness import wait_for

pytestmark = pytest.mark.integration

CHILD = Path(__file__).with_name("langgraph_child.py")


def _run(mode: str, endpoints: list[str], thread: str, work: Path, timeout: float = 60) -> dict:
    p = subprocess.run(
        [sys.executable, str(CHILD), mode, json.dumps(endpoints), thread, str(work)],
        capture_output=True, text=True, timeout=timeout,
    )
    assert p.returncode == 0, f"{mode} failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def _tool_lines(work: Path) -> list[str]:
    f = work / "side-effects.log"
    return f.read_text().splitlines() if f.exists() else []


def test_graph_resumes_after_agent_and_leader_are_killed(cluster: LocalCluster, tmp_path: Path) -> None:
    endpoints = [cluster.url(n) for n in cluster.node_ids]
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread}}
    first = subprocess.Popen(
        [sys.executable, str(CHILD), "start", json.dumps(endpoints), thread, str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    with StatekeeperSaver.from_endpoints(endpoints) as saver:
        try:
            wait_for(lambda: _tool_lines(tmp_path), 60, "the tool to run")

            def tool_write_saved():
                t = saver.get_tuple(config)
                return t is not None and any(ch == "messages" for _, ch, _ in t.pending_writes)

            wait_for(tool_write_saved, 30, "the tool's pending write to be saved")
            assert first.poll() is None, first.communicate()[1][-3000:]
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        leader = cluster.leader_id()
        assert leader is not None
        cluster.kill_node(leader)

        before = saver.get_tuple(config)
        assert before is not None and before.metadata["step"] >= 0
        assert not before.checkpoint["channel_values"].get("notes")  # research never finished

        (tmp_path / "research-may-finish").touch()
        resumed = _run("resume", endpoints, thread, tmp_path)
        assert resumed["interrupts"] == [{"question": "send the answer?", "tool": "sunny in Paris"}]
        assert resumed["answer"] is None
        assert len(_tool_lines(tmp_path)) == 1, _tool_lines(tmp_path)  # not run again

        done = _run("approve", endpoints, thread, tmp_path)
        assert done["answer"] == "sunny in Paris; approved=yes"
        assert len(done["notes"]) == 1 and str(first.pid) not in done["notes"][0]
        assert len(_tool_lines(tmp_path)) == 1
        assert f"pid={first.pid}" in _tool_lines(tmp_path)[0]

        final = saver.get_tuple(config)
        assert final.checkpoint["channel_values"]["answer"] == done["answer"]
        history = list(saver.list(config))
        assert len(history) >= 5  # input, agent, tools+research, approve, answer
