"""The Agents page's handlers (console/pages/agents.py) through ConsoleApp, over the agent
tests' in-memory store: the list with paging and prefix search, the timeline's windows,
state at a step, a checkpoint diff, and the rollback's confirmation and POST (the form
hidden from a reader, a reader's forged POST refused by the API with nothing changed, a
head that moved since the preview refused). The browser tests on a real cluster are
tests/integration/test_console_agents.py."""

from __future__ import annotations

import html
import re
from http.cookies import SimpleCookie

import pytest

from statekeeper.client.agent import Agent
from statekeeper.client.auth.commands import TokenInfo
from statekeeper.client.errors import PermissionDenied
from statekeeper.console.app import ConsoleApp
from statekeeper.console.pages import PAGES
from statekeeper.node import config as node_config
from statekeeper.node.api.server import Request

from .test_agent_fake import AsyncMemoryClient, MemoryClient

WRITER = TokenInfo("w1", "writer", ({"ns": "app", "prefix": "", "role": "writer"},), 0, 0)
READER = TokenInfo("r1", "reader", ({"ns": "app", "prefix": "", "role": "reader"},), 0, 0)
TOKENS = {"sk_writer": WRITER, "sk_reader": READER}
WRITES = {"put", "txn", "append", "delete", "truncate_stream"}


class TokenClient(AsyncMemoryClient):
    """The shared in-memory store as one token's AsyncClient: a reader's writes are
    refused as the API refuses them (403 permission_denied)."""

    def __init__(self, store: MemoryClient, token: str) -> None:
        super().__init__(store)
        self.info = TOKENS[token]

    async def auth_whoami(self) -> TokenInfo:
        return self.info

    async def close(self) -> None:
        pass

    def __getattr__(self, name):
        if name in WRITES and self.info is READER:
            raise PermissionDenied("a reader may not write", code="permission_denied", status=403)
        return super().__getattr__(name)


@pytest.fixture
def store() -> MemoryClient:
    c = MemoryClient()
    for i in range(12):
        Agent(c, f"bot-{i:02d}", ns="app").checkpoint({"i": i}, step=1)
    Agent(c, "other-1", ns="app").log("e", {"x": 1})
    busy = Agent(c, "busy", ns="app")
    for step in range(1, 16):
        busy.log("add", {"s": step}, step=step)
        if step % 3 == 0:
            busy.checkpoint({"upto": step, "tags": ["t"] * (step // 6)}, step=step)
    return c


@pytest.fixture
def app(store: MemoryClient) -> ConsoleApp:
    cfg = node_config.local_cluster(secret="s")
    return ConsoleApp(cfg, make_client=lambda token: TokenClient(store, token), pages=PAGES)


def _req(method: str, path: str, query: str = "", body: str = "", cookie: str = ""):
    h = {"host": "127.0.0.1:7000", "cookie": cookie}
    if method == "POST":
        h["content-type"] = "application/x-www-form-urlencoded"
    return Request(method, path, query, h, body.encode())


async def _session(app: ConsoleApp, token: str) -> tuple[str, str]:
    """(cookie header, csrf) of a logged-in session."""
    form = await app.handle(_req("GET", "/ui/login"))
    nonce = re.search(r'name="csrf" value="([^"]+)"', form.body.decode()).group(1)
    resp = await app.handle(
        _req("POST", "/ui/login", body=f"csrf={nonce}&token={token}",
             cookie=f"sk_console_login={nonce}")
    )  # fmt: skip
    jar: SimpleCookie = SimpleCookie()
    for k, v in resp.headers:
        if k == "Set-Cookie":
            jar.load(v)
    cookie = f"sk_console={jar['sk_console'].value}"
    page = await app.handle(_req("GET", "/ui/agents", "ns=app", cookie=cookie))
    return cookie, re.search(r'name="csrf" value="([^"]+)"', page.body.decode()).group(1)


async def _get(app: ConsoleApp, cookie: str, path: str, query: str = "") -> tuple[int, str]:
    resp = await app.handle(_req("GET", path, query, cookie=cookie))
    return resp.status, html.unescape(resp.body.decode())


def _agents(body: str) -> list[str]:
    return re.findall(r'<tr class="agent" data-agent="([^"]+)"', body)


async def test_list_pages_and_searches_by_prefix(app: ConsoleApp) -> None:
    cookie, _ = await _session(app, "sk_writer")
    status, body = await _get(app, cookie, "/ui/agents", "limit=5")  # ns from the grant: app
    assert status == 200 and _agents(body) == ["bot-00", "bot-01", "bot-02", "bot-03", "bot-04"]
    seen = list(_agents(body))
    while m := re.search(r'id="next-page" href="/ui/agents\?([^"]+)"', body):
        status, body = await _get(app, cookie, "/ui/agents", m.group(1))
        seen += _agents(body)
    assert seen == [f"bot-{i:02d}" for i in range(12)] + ["busy", "other-1"]
    status, body = await _get(app, cookie, "/ui/agents/list", "ns=app&prefix=bu")
    assert status == 200 and _agents(body) == ["busy"] and "<html" not in body  # the fragment
    assert '<td class="ckpt">#5</td>' in body and '<td class="events">15</td>' in body
    status, body = await _get(app, cookie, "/ui/agents", "ns=app&cursor=garbage")
    assert status == 400 and "not a cursor" in body


async def test_timeline_windows_state_and_diff(app: ConsoleApp) -> None:
    cookie, _ = await _session(app, "sk_writer")
    status, body = await _get(app, cookie, "/ui/agents/timeline", "ns=app&agent=busy&limit=4")
    assert status == 200 and 'id="head">#5<' in body
    assert re.findall(r'data-seq="(\d+)"', body) == ["15", "14", "13", "12"]  # newest first
    older = re.search(r'class="older" href="/ui/agents/timeline\?([^"]+)"', body).group(1)
    status, body = await _get(app, cookie, "/ui/agents/timeline", older)
    assert re.findall(r'data-seq="(\d+)"', body) == ["11", "10", "9", "8"]
    assert re.findall(r'data-kind="checkpoint" data-ckpt="(\d+)"', body) == ["3"]
    assert 'class="newer"' in body
    status, body = await _get(app, cookie, "/ui/agents/state", "ns=app&agent=busy&step=7")
    assert status == 200 and "checkpoint <strong>#2</strong>" in body
    assert '"upto": 6' in body and "add" in body  # step 7's event after it
    status, body = await _get(app, cookie, "/ui/agents/diff", "ns=app&agent=busy&left=1&right=4")
    assert status == 200
    assert re.findall(r'data-op="(\w+)" data-path="([^"]+)"', body) == [
        ("replace", "/upto"), ("add", "/tags/0"), ("add", "/tags/1")
    ]  # fmt: skip
    status, body = await _get(app, cookie, "/ui/agents/diff", "ns=app&agent=busy&left=1&right=99")
    assert status == 404
    status, _ = await _get(app, cookie, "/ui/agents/diff", "ns=app&agent=busy&left=x&right=1")
    assert status == 400


def _form(body: str) -> str:
    form = re.search(r'<form method="post" action="/ui/agents/rollback".*?</form>', body, re.S)
    fields = re.findall(r'name="(\w+)" value="([^"]*)"', form.group(0))
    return "&".join(f"{k}={v}" for k, v in fields)


async def test_rollback_confirms_then_posts_with_the_previewed_head(
    app: ConsoleApp, store: MemoryClient
) -> None:
    cookie, _ = await _session(app, "sk_writer")
    _, timeline = await _get(app, cookie, "/ui/agents/timeline", "ns=app&agent=busy")
    assert 'href="/ui/agents/rollback?ns=app&agent=busy&ckpt=2"' in timeline
    status, body = await _get(app, cookie, "/ui/agents/rollback", "ns=app&agent=busy&ckpt=2")
    assert status == 200 and "#5</strong> (step 15) is current" in body
    assert re.findall(r'data-op="(\w+)" data-path="([^"]+)"', body) == [
        ("replace", "/upto"), ("remove", "/tags/1")
    ]  # fmt: skip
    form = _form(body)
    assert "expect_head=5" in form and "ckpt=2" in form and "csrf=" in form
    resp = await app.handle(_req("POST", "/ui/agents/rollback", body=form, cookie=cookie))
    assert resp.status == 303
    location = dict(resp.headers)["Location"]
    assert location == "/ui/agents/timeline?ns=app&agent=busy&rolled=6"
    head = Agent(store, "busy", ns="app").latest()
    assert head.n == 6 and head.state == {"upto": 6, "tags": ["t"]}
    # The same form again: the head moved since its preview, nothing is rolled back.
    resp = await app.handle(_req("POST", "/ui/agents/rollback", body=form, cookie=cookie))
    assert resp.status == 409 and "Nothing was rolled back" in html.unescape(resp.body.decode())
    assert Agent(store, "busy", ns="app").latest().n == 6


async def test_a_reader_sees_no_rollback_and_a_forged_post_is_refused(
    app: ConsoleApp, store: MemoryClient
) -> None:
    writer, _ = await _session(app, "sk_writer")
    _, body = await _get(app, writer, "/ui/agents/rollback", "ns=app&agent=busy&ckpt=2")
    forged = _form(body)
    cookie, csrf = await _session(app, "sk_reader")
    _, timeline = await _get(app, cookie, "/ui/agents/timeline", "ns=app&agent=busy")
    assert "rollback-link" not in timeline and 'id="head">#5<' in timeline
    status, body = await _get(app, cookie, "/ui/agents/rollback", "ns=app&agent=busy&ckpt=2")
    assert status == 200 and 'id="rollback-form"' not in body and "cannot write" in body
    forged = re.sub(r"csrf=[^&]*", f"csrf={csrf}", forged)  # the reader's own session
    resp = await app.handle(_req("POST", "/ui/agents/rollback", body=forged, cookie=cookie))
    text = html.unescape(resp.body.decode())
    assert resp.status == 403 and "Nothing was rolled back" in text and "a reader may not" in text
    assert Agent(store, "busy", ns="app").latest().n == 5
