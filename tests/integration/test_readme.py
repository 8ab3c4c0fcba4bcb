"""The README's agent example runs as printed, against a real cluster."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration
README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_agent_example_works(cluster: LocalCluster) -> None:
    text = README.read_text()
    code = re.search(r"## An agent, in ten lines\n\n```python\n(.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) <= 12
    urls = [cluster.url(n) for n in cluster.node_ids]
    code = code.replace(
        '["http://127.0.0.1:7000", "http://127.0.0.1:7001", "http://127.0.0.1:7002"]', repr(urls)
    )
    outputs = []
    for _ in range(2):  # the second run finds the lock taken and the tool result stored once
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
        outputs.append(out.getvalue())
    assert outputs == ["", "thread-9 is held by worker-a\n"]


def test_the_readme_crash_and_resume_example_works(cluster: LocalCluster) -> None:
    text = README.read_text()
    code = re.search(
        r"## An agent that crashes and picks up where it left off\n\n```python\n(.*?)```", text, re.S
    ).group(1)
    urls = [cluster.url(n) for n in cluster.node_ids]
    code = code.replace(
        '["http://127.0.0.1:7000", "http://127.0.0.1:7001", "http://127.0.0.1:7002"]', repr(urls)
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    # Before the crash two tools ran; after the restart only the third one did.
    assert out.getvalue() == (
        "calling search_flights\ncalling book_flight\ncalling email_receipt\n"
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    # A second whole run hydrates the checkpoint: every tool is done, none is called.
    assert out.getvalue() == ""


def test_the_readme_coordination_example_works(cluster: LocalCluster) -> None:
    text = README.read_text()
    code = re.search(r"## Agents working together\n\n```python\n(.*?)```", text, re.S).group(1)
    urls = [cluster.url(n) for n in cluster.node_ids]
    code = code.replace(
        '["http://127.0.0.1:7000", "http://127.0.0.1:7001", "http://127.0.0.1:7002"]', repr(urls)
    )
    for _ in range(2):  # again: the lock is free once more and the effect answers from DONE
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
        assert out.getvalue() == (
            "put invoice-42/status sending\nput invoice-42/status sent\n"
        )


def test_the_readme_langgraph_example_works(cluster: LocalCluster) -> None:
    text = README.read_text()
    code = re.search(r"## A LangGraph graph that survives crashes\n\n```python\n(.*?)```", text, re.S).group(1)
    urls = [cluster.url(n) for n in cluster.node_ids]
    code = code.replace(
        '["http://127.0.0.1:7000", "http://127.0.0.1:7001", "http://127.0.0.1:7002"]', repr(urls)
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue() == "1\n"
    # The thread's checkpoints are in the cluster: a new saver (a new process) finds them.
    from client.langgraph import StatekeeperSaver

    with StatekeeperSaver.from_endpoints(urls) as saver:
        latest = saver.get_tuple({"configurable": {"thread_id": "agent-42"}})
    assert latest is not None and latest.checkpoint["channel_values"]["steps"] == 1
