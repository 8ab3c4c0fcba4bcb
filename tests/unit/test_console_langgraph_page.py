"""The LangGraph page's handlers (console/pages/langgraph.py) over the in-memory client:
the thread list with its namespace box and paging, a thread's checkpoints drawn as a tree
(the fork point, the abandoned branch indented), a checkpoint's values, pending writes and
metadata as JSON; the browser tests are tests/integration/test_console_langgraph.py."""

from __future__ import annotations

import html
import json
import re

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from statekeeper.client.auth.commands import TokenInfo
from statekeeper.client.langgraph.saver import StatekeeperSaver
from statekeeper.console.app import ConsoleApp
from statekeeper.console.pages import langgraph as page
from statekeeper.console.views.langgraph import CheckpointNode
from statekeeper.node import config as node_config
from statekeeper.node.api.server import Request
from tests.unit.test_agent_fake import AsyncMemoryClient, MemoryClient

AUTH_OFF = TokenInfo(None, "", (), 0, 0)


class SessionClient(AsyncMemoryClient):
    async def close(self) -> None:
        pass


def put_checkpoint(saver: StatekeeperSaver, thread: str, parent: dict | None, step: int) -> dict:
    cfg = generate_config(thread)
    if parent is not None:
        cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    versions = {"n": step + 1, "notes": step + 1}
    cp = generate_checkpoint(
        channel_values={"n": step, "notes": [f"s{step}"]}, channel_versions=versions
    )
    return saver.put(cfg, cp, generate_metadata(step=step, source="loop"), versions)


def cid(cfg: dict) -> str:
    return cfg["configurable"]["checkpoint_id"]


@pytest.fixture
def store() -> tuple[MemoryClient, list[dict]]:
    """Namespace "lg": thread "t": c0 <- c1 <- c2, then a time travel c1 <- c3 with a
    pending write; threads "u0".."u2" with one checkpoint each."""
    inner = MemoryClient()
    saver = StatekeeperSaver(inner, ns="lg")
    c0 = put_checkpoint(saver, "t", None, 0)
    c1 = put_checkpoint(saver, "t", c0, 1)
    c2 = put_checkpoint(saver, "t", c1, 2)
    c3 = put_checkpoint(saver, "t", c1, 2)
    saver.put_writes(c3, [("notes", ["<b>late</b>"])], "task-1")
    for i in range(3):
        put_checkpoint(saver, f"u{i}", None, 0)
    return inner, [c0, c1, c2, c3]


async def get(inner: MemoryClient, path: str, query: str = "") -> tuple[int, str]:
    app = ConsoleApp(node_config.local_cluster(secret="s"), make_client=SessionClient)
    session = await app.sessions.open(SessionClient(inner), AUTH_OFF)
    headers = {"host": "127.0.0.1:7000", "cookie": f"sk_console={session.id}"}
    resp = await app.handle(Request("GET", path, query, headers, b""))
    return resp.status, resp.body.decode()


def rows_of(body: str) -> list[dict[str, str]]:
    """The tree's rows: data-checkpoint, data-depth and the row's classes."""
    found = re.findall(
        r'<tr class="checkpoint([^"]*)" data-checkpoint="([^"]+)" data-parent="[^"]*" '
        r'data-depth="(\d+)"',
        body,
    )
    return [{"id": i, "depth": d, "classes": c.split()} for c, i, d in found]


async def test_threads_page_has_the_namespace_box_and_pages(store) -> None:
    inner, _ = store
    status, body = await get(inner, page.PATH, "ns=lg&limit=2")
    assert status == 200
    assert 'name="ns" value="lg"' in body
    assert re.findall(r'data-thread="([^"]+)"', body) == ["t", "u0"]
    assert '<td class="count">4</td>' in body  # thread t's checkpoints
    nxt = re.search(r'href="([^"]+)" id="next-page"', body).group(1)
    assert html.unescape(nxt) == "/ui/langgraph?ns=lg&limit=2&cursor=u0"
    status, body = await get(inner, page.PATH, "ns=lg&limit=2&cursor=u0")
    assert re.findall(r'data-thread="([^"]+)"', body) == ["u1", "u2"]
    assert 'id="next-page"' not in body and 'id="first-page"' in body
    # The default namespace is the saver's, and an empty one says so.
    status, body = await get(inner, page.PATH)
    assert 'name="ns" value="langgraph"' in body and 'id="no-threads"' in body


async def test_thread_page_draws_the_fork_and_the_abandoned_branch(store) -> None:
    inner, (c0, c1, c2, c3) = store
    status, body = await get(inner, page.THREAD, "ns=lg&thread=t")
    assert status == 200
    rows = rows_of(body)
    assert [r["id"] for r in rows] == [cid(c3), cid(c2), cid(c1), cid(c0)]
    assert [r["depth"] for r in rows] == ["0", "1", "0", "0"]
    assert [("abandoned" in r["classes"], "fork" in r["classes"]) for r in rows] == [
        (False, False),
        (True, False),
        (False, True),
        (False, False),
    ]
    assert "fork · 2 branches" in body and f"branch from {cid(c1)[-12:]}" in body
    link = f"/ui/langgraph/checkpoint?ns=lg&amp;thread=t&amp;id={cid(c2)}"
    assert link in body
    status, body = await get(inner, page.THREAD, "ns=lg&thread=t&limit=3")
    nxt = html.unescape(re.search(r'href="([^"]+)" id="next-page"', body).group(1))
    status, body = await get(inner, page.THREAD, nxt.partition("?")[2])
    assert [r["id"] for r in rows_of(body)] == [cid(c0)]
    assert (await get(inner, page.THREAD, "ns=lg"))[0] == 404


async def test_checkpoint_page_shows_values_writes_and_metadata_as_json(store) -> None:
    inner, (_, c1, c2, c3) = store
    status, body = await get(inner, page.CHECKPOINT, "ns=lg&thread=t")  # the newest
    assert status == 200 and f'id="checkpoint-id">{cid(c3)}<' in body
    blocks = [
        json.loads(html.unescape(b))
        for b in re.findall(r'<pre class="json">(.*?)</pre>', body, re.S)
    ]
    assert blocks[0] == 2 and blocks[1] == ["s2"]  # the channels n and notes
    assert blocks[2] == ["<b>late</b>"]  # the pending write, escaped in the page
    assert "&lt;b&gt;late" in body and "<b>late" not in body
    assert blocks[3]["step"] == 2 and blocks[3]["source"] == "loop"  # the metadata
    assert (
        f'id="parent-link" href="/ui/langgraph/checkpoint?ns=lg&amp;thread=t&amp;id={cid(c1)}"'
        in body
    )
    status, body = await get(inner, page.CHECKPOINT, f"ns=lg&thread=t&id={cid(c2)}")
    assert status == 200 and 'id="no-writes"' in body
    status, body = await get(inner, page.CHECKPOINT, "ns=lg&thread=t&id=nope")
    assert status == 404 and "checkpoint nope" in body


def node(i: str, parent: str | None, children: tuple[str, ...], on_head: bool) -> CheckpointNode:
    return CheckpointNode(
        i, "", parent, 0, "loop", None, None, 0, children, len(children) > 1, on_head
    )


def test_layout_indents_each_branch_once_and_keeps_a_run_flat() -> None:
    """a <- b <- c (head); b <- d <- e and d <- f (two abandoned branches, one off the
    other); g's parent is on an older page."""
    nodes = (
        node("c", "b", (), True),
        node("f", "d", (), False),
        node("e", "d", (), False),
        node("d", "b", ("f", "e"), False),
        node("b", "a", ("c", "d"), True),
        node("a", None, ("b",), True),
    )
    rows = page.layout(nodes)
    assert [(r.node.checkpoint_id, r.depth, r.branch_of) for r in rows] == [
        ("c", 0, None),
        ("f", 1, None),  # d's newest child continues d's branch
        ("e", 2, "d"),
        ("d", 1, "b"),
        ("b", 0, None),
        ("a", 0, None),
    ]
    off_page = page.layout((node("x", "older", (), False),))
    assert [(r.depth, r.branch_of) for r in off_page] == [(1, None)]
