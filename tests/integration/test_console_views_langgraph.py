"""The LangGraph page's data (console/views/langgraph.py) against a real 3-node cluster
(TLS and auth): a real graph's checkpoints, a time travel shown as a fork, a checkpoint's
values, writes and metadata as the saver reads them."""

from __future__ import annotations

import uuid

import pytest

from statekeeper.client import AsyncClient
from statekeeper.client.langgraph.saver import StatekeeperSaver
from statekeeper.cluster.supervisor import LocalCluster
from statekeeper.console.views import langgraph as view
from tests.integration.langgraph_helpers import think_act_graph

pytestmark = pytest.mark.integration


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(n) for n in lc.node_ids]


async def test_a_time_travel_is_shown_as_a_fork(shared_cluster: LocalCluster) -> None:
    ns, thread = f"lg-view-{uuid.uuid4().hex[:6]}", "travel"
    config = {"configurable": {"thread_id": thread}}
    with StatekeeperSaver.from_endpoints(_urls(shared_cluster), ns=ns) as saver:
        graph = think_act_graph(saver)
        graph.invoke({"notes": [], "count": 0}, config)
        after_think = next(s for s in graph.get_state_history(config) if s.next == ("act",))
        # time travel: run "act" again from the checkpoint after "think", with a new count
        forked = graph.update_state(after_think.config, {"count": 100})
        graph.invoke(None, forked)
        history = [
            s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(config)
        ]
        lineage, at = [], graph.get_state(config)
        while at is not None:  # the newest checkpoint and its ancestors
            lineage.append(at.config["configurable"]["checkpoint_id"])
            at = graph.get_state(at.parent_config) if at.parent_config else None
    async with AsyncClient(_urls(shared_cluster)) as c:
        page = await view.threads(c, ns=ns)
        assert [(t.thread_id, t.checkpoints) for t in page.threads] == [(thread, 6)]
        h = await view.thread_history(c, thread, ns=ns)
        fork = after_think.config["configurable"]["checkpoint_id"]
        assert h.fork_points == (fork,) and h.head == history[0]
        by = {n.checkpoint_id: n for n in h.nodes}
        assert len(by[fork].children) == 2
        assert [n.checkpoint_id for n in h.nodes] == history  # LangGraph's order: newest first
        assert [n.checkpoint_id for n in h.nodes if n.on_head] == lineage
        abandoned = [n for n in h.nodes if not n.on_head]
        assert [n.parent_id for n in abandoned] == [fork]  # the first run's "act"
        newest = await view.checkpoint(c, thread, ns=ns)
        assert newest is not None and newest.channel_values["count"] == 110
        assert newest.metadata["source"] == "loop"
        old = await view.checkpoint(c, thread, abandoned[0].checkpoint_id, ns=ns)
        assert old is not None and old.channel_values["count"] == 11
        first = await view.thread_history(c, thread, ns=ns, limit=2)
        second = await view.thread_history(c, thread, ns=ns, cursor=first.next_cursor)
        ids = [n.checkpoint_id for n in (*first.nodes, *second.nodes)]
        assert ids == [n.checkpoint_id for n in h.nodes]


async def test_pending_writes_of_an_interrupted_step(shared_cluster: LocalCluster) -> None:
    ns = f"lg-view-{uuid.uuid4().hex[:6]}"
    with StatekeeperSaver.from_endpoints(_urls(shared_cluster), ns=ns) as saver:
        cfg = saver.put(
            {"configurable": {"thread_id": "w", "checkpoint_ns": ""}},
            {"v": 1, "id": str(uuid.uuid4()), "ts": "2025-01-01T00:00:00+00:00",
             "channel_values": {"a": 1}, "channel_versions": {"a": 1}, "versions_seen": {}},
            {"source": "input", "step": -1},
            {"a": 1},
        )  # fmt: skip
        saver.put_writes(cfg, [("a", b"\x00raw")], "task-9")
    async with AsyncClient(_urls(shared_cluster)) as c:
        h = await view.thread_history(c, "w", ns=ns)
        assert [n.pending_writes for n in h.nodes] == [1]
        d = await view.checkpoint(c, "w", ns=ns)
        assert d.pending_writes == (view.PendingWrite("task-9", "a", {"$bytes": "AHJhdw=="}),)
