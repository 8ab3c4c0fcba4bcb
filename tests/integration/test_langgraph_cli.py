"""`statekeeper langgraph threads | history | show` (cluster/langgraph_cli.py, issue 30 item
18) on the shared cluster, as a user runs them: a small LangGraph graph checkpoints two
threads through StatekeeperSaver (one interrupted, so it has pending writes and a
subgraph-free history), then the CLI reads them back as tables and JSON. Also the command
docs/langgraph.md gives for reading the key layout: it must print only the saver's
``ckpt/`` keys (it printed base64 values and ran on into ``last/``, ``run/`` ...)."""

from __future__ import annotations

import json
import re
import shlex
import uuid
from pathlib import Path

import pytest

from statekeeper.client.langgraph.saver import StatekeeperSaver
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.langgraph_helpers import think_act_graph
from tests.integration.test_kv_cli import ok, run

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def written(shared_cluster: LocalCluster) -> tuple[str, str, str]:
    """(ns, a finished thread, an interrupted thread) written by a real graph."""
    ns = f"lg-cli-{uuid.uuid4().hex[:6]}"
    urls = [shared_cluster.url(n) for n in shared_cluster.node_ids]
    done, paused = f"done-{uuid.uuid4().hex[:4]}", f"paused/{uuid.uuid4().hex[:4]}"
    with StatekeeperSaver.from_endpoints(urls, ns=ns) as saver:
        think_act_graph(saver).invoke(
            {"notes": [], "count": 0}, {"configurable": {"thread_id": done}}
        )
        think_act_graph(saver, interrupt=True).invoke(
            {"notes": ["hi"], "count": 1}, {"configurable": {"thread_id": paused}}
        )
    return ns, done, paused


def test_doc_key_layout_command_prints_only_checkpoint_keys(
    shared_cluster: LocalCluster, written: tuple[str, str, str]
) -> None:
    ns, done, _ = written
    doc = (ROOT / "docs" / "langgraph.md").read_text()
    heading = next(line for line in doc.splitlines() if line.startswith("### Key layout"))
    command = re.search(r"`(statekeeper [^`]+)`", heading).group(1)
    argv = [a for a in shlex.split(command)[1:]]
    i = argv.index("--ns")
    assert argv[i + 1] == "langgraph"  # the saver's default namespace; the test's own here
    del argv[i : i + 2]
    lines = ok(run(shared_cluster, *argv, ns=ns)).splitlines()
    assert lines, "the command printed nothing"
    assert all(line.startswith("ckpt/") for line in lines), lines[:8]
    assert any(line.startswith(f"ckpt/{done}//") for line in lines)


def test_threads_lists_each_thread_with_checkpoints_and_step(
    shared_cluster: LocalCluster, written: tuple[str, str, str]
) -> None:
    ns, done, paused = written
    rows = json.loads(ok(run(shared_cluster, "langgraph", "threads", "--json", ns=ns)))
    by = {r["thread_id"]: r for r in rows}
    assert set(by) == {done, paused}
    assert by[done]["checkpoints"] == 4 and by[done]["step"] == 2  # input, -1..2
    assert by[paused]["checkpoints"] == 3 and by[paused]["step"] == 1
    assert by[done]["source"] == "loop" and by[done]["lease"] is None
    table = ok(run(shared_cluster, "langgraph", "threads", ns=ns)).splitlines()
    assert table[0].split() == ["THREAD", "CHECKPOINTS", "STEP", "SOURCE", "LAST", "LEASE"]
    assert any(line.split()[:3] == [paused, "3", "1"] for line in table[1:])


def test_history_is_the_checkpoint_chain_oldest_first(
    shared_cluster: LocalCluster, written: tuple[str, str, str]
) -> None:
    ns, done, paused = written
    rows = json.loads(ok(run(shared_cluster, "langgraph", "history", done, "--json", ns=ns)))
    assert [r["step"] for r in rows] == [-1, 0, 1, 2]
    assert [r["source"] for r in rows] == ["input", "loop", "loop", "loop"]
    assert rows[0]["parent"] is None
    assert [r["parent"] for r in rows[1:]] == [r["checkpoint_id"] for r in rows[:-1]]
    table = ok(run(shared_cluster, "langgraph", "history", paused, ns=ns)).splitlines()
    assert table[0].split() == ["CHECKPOINT", "PARENT", "NS", "STEP", "SOURCE", "WRITES", "TS"]
    assert len(table) == 4
    missing = run(shared_cluster, "langgraph", "history", "no-such-thread", ns=ns)
    assert missing.returncode == 3 and "no-such-thread" in missing.stderr


def test_show_decodes_values_metadata_and_pending_writes(
    shared_cluster: LocalCluster, written: tuple[str, str, str]
) -> None:
    ns, done, paused = written
    latest = json.loads(ok(run(shared_cluster, "langgraph", "show", done, "--json", ns=ns)))
    assert latest["channel_values"] == {"notes": ["thought 0", "acted"], "count": 11}
    assert latest["metadata"]["step"] == 2 and latest["metadata"]["source"] == "loop"
    history = json.loads(ok(run(shared_cluster, "langgraph", "history", done, "--json", ns=ns)))
    first = history[1]["checkpoint_id"]  # step 0: the input applied, before "think"
    older = json.loads(ok(run(shared_cluster, "langgraph", "show", done, first, "--json", ns=ns)))
    assert older["checkpoint_id"] == first and older["channel_values"]["count"] == 0
    assert {w["channel"] for w in older["pending_writes"]} >= {"notes", "count"}
    text = ok(run(shared_cluster, "langgraph", "show", paused, ns=ns))
    assert '"thought 1"' in text and "channel values:" in text
    gone = run(shared_cluster, "langgraph", "show", done, "1f0-nope", ns=ns)
    assert gone.returncode == 3 and "1f0-nope" in gone.stderr
