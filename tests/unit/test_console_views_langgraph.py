"""The LangGraph page's data (console/views/langgraph.py) over the in-memory client: threads
paged, a thread's checkpoints as a tree with a fork, a checkpoint decoded; and the shared
reads of client/langgraph/inspect.py paging exactly."""

from __future__ import annotations

from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from statekeeper.client.langgraph.inspect import default_serde, history_plan, threads_plan
from statekeeper.client.langgraph.saver import StatekeeperSaver
from statekeeper.client.plan import run
from statekeeper.console.views import langgraph as view
from tests.unit.test_agent_fake import AsyncMemoryClient, MemoryClient


def _put(saver: StatekeeperSaver, thread: str, parent: dict | None, step: int) -> dict:
    cfg = generate_config(thread)
    if parent is not None:
        cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    cp = generate_checkpoint(channel_values={"n": step}, channel_versions={"n": step + 1})
    return saver.put(cfg, cp, generate_metadata(step=step, source="loop"), {"n": step + 1})


def _forked(inner: MemoryClient) -> tuple[list[dict], dict]:
    """Thread "t": c0 <- c1 <- c2, then a fork c1 <- c3 (a time travel back to c1)."""
    saver = StatekeeperSaver(inner, ns="langgraph")
    c0 = _put(saver, "t", None, 0)
    c1 = _put(saver, "t", c0, 1)
    c2 = _put(saver, "t", c1, 2)
    c3 = _put(saver, "t", c1, 2)
    saver.put_writes(c3, [("n", {"x": b"\x01"})], "task-1")
    return [c0, c1, c2, c3], saver


def _id(cfg: dict) -> str:
    return cfg["configurable"]["checkpoint_id"]


async def test_thread_history_is_a_tree_with_the_fork_and_the_head_branch() -> None:
    inner = MemoryClient()
    (c0, c1, c2, c3), _ = _forked(inner)
    h = await view.thread_history(AsyncMemoryClient(inner), "t")
    assert [n.checkpoint_id for n in h.nodes] == [_id(c3), _id(c2), _id(c1), _id(c0)]
    assert h.head == _id(c3) and h.fork_points == (_id(c1),)
    by = {n.checkpoint_id: n for n in h.nodes}
    assert by[_id(c1)].children == (_id(c3), _id(c2)) and by[_id(c1)].is_fork
    assert [by[_id(c)].on_head for c in (c0, c1, c2, c3)] == [True, True, False, True]
    assert by[_id(c3)].pending_writes == 1 and by[_id(c0)].parent_id is None
    assert by[_id(c2)].step == 2 and by[_id(c2)].source == "loop"

    first = await view.thread_history(AsyncMemoryClient(inner), "t", limit=3)
    assert len(first.nodes) == 3 and first.next_cursor is not None
    rest = await view.thread_history(AsyncMemoryClient(inner), "t", cursor=first.next_cursor)
    assert [n.checkpoint_id for n in rest.nodes] == [_id(c0)] and rest.next_cursor is None
    assert rest.head is None  # only the first page knows the newest


async def test_checkpoint_detail_decodes_values_writes_and_metadata() -> None:
    inner = MemoryClient()
    (_, c1, _, c3), _ = _forked(inner)
    d = await view.checkpoint(AsyncMemoryClient(inner), "t")
    assert d is not None and d.checkpoint_id == _id(c3) and d.parent_id == _id(c1)
    assert d.channel_values == {"n": 2} and d.metadata["step"] == 2
    assert d.pending_writes == (view.PendingWrite("task-1", "n", {"x": {"$bytes": "AQ=="}}),)
    old = await view.checkpoint(AsyncMemoryClient(inner), "t", _id(c1))
    assert old is not None and old.channel_values == {"n": 1} and old.pending_writes == ()
    assert await view.checkpoint(AsyncMemoryClient(inner), "nobody") is None


async def test_threads_page_by_cursor_with_counts() -> None:
    inner = MemoryClient()
    saver = StatekeeperSaver(inner, ns="langgraph")
    for i in range(5):
        parent = None
        for step in range(i + 1):
            parent = _put(saver, f"t{i}", parent, step)
    aclient = AsyncMemoryClient(inner)
    page = await view.threads(aclient, limit=2)
    assert [(t.thread_id, t.checkpoints, t.step) for t in page.threads] == [
        ("t0", 1, 0),
        ("t1", 2, 1),
    ]
    assert page.next_cursor == "t1"
    page = await view.threads(aclient, limit=3, cursor=page.next_cursor)
    assert [t.thread_id for t in page.threads] == ["t2", "t3", "t4"] and page.next_cursor is None
    assert [t.checkpoints for t in page.threads] == [3, 4, 5]


def test_plans_page_across_range_pages(monkeypatch) -> None:
    """A thread whose keys span several range pages is counted whole, and a history read
    in pages of 2 equals the one read at once."""
    from statekeeper.client.langgraph import inspect

    monkeypatch.setattr(inspect, "_KEY_PAGE", 2)
    inner = MemoryClient()
    saver = StatekeeperSaver(inner, ns="langgraph")
    parent = None
    for step in range(5):
        parent = _put(saver, "a", parent, step)
    _put(saver, "b", None, 0)
    page = run(inner, threads_plan("langgraph", default_serde(), limit=1))
    assert [(t.thread_id, t.checkpoints) for t in page.threads] == [("a", 5)]
    assert page.next_after == "a"
    whole = run(inner, history_plan("langgraph", default_serde(), "a")).rows
    assert [r.step for r in whole] == [4, 3, 2, 1, 0]
