"""The Keys page's handlers (console/pages/keys.py) over the in-memory client: the browser's
paging, a key's decoded value and revisions with their cost, a diff, the live tail held by
the session, and the session closing what it holds (console/session.py) however it ends.
The browser tests are tests/integration/test_console_keys.py."""

from __future__ import annotations

import asyncio
import json
import re
import types

import pytest

from statekeeper.client.auth.commands import TokenInfo
from statekeeper.console.app import ConsoleApp
from statekeeper.console.pages import keys as page
from statekeeper.console.session import Sessions
from statekeeper.console.views.paging import page_limit
from statekeeper.node import config as node_config
from statekeeper.node.api.server import Request

from .test_agent_fake import AsyncMemoryClient, MemoryClient

AUTH_OFF = TokenInfo(None, "", (), 0, 0)


class WatchedClient(AsyncMemoryClient):
    """The in-memory client with auth_whoami, close and a watch fed by put(): what a
    session's AsyncClient is to the Keys page. ``watches`` counts the watches running."""

    def __init__(self, inner: MemoryClient | None = None) -> None:
        super().__init__(inner)
        self.queues: list[asyncio.Queue] = []
        self.watches = 0
        self.closed = False

    async def auth_whoami(self) -> TokenInfo:
        return AUTH_OFF

    async def close(self) -> None:
        self.closed = True

    async def put(self, key, value, **kw):
        result = self.inner.put(key, value, **kw)
        kv = self.inner.get(key, ns=kw.get("ns"))
        for q in self.queues:
            q.put_nowait(types.SimpleNamespace(type="put", kv=kv, revision=kv.mod_revision))
        return result

    async def watch(self, prefix, *, start_revision=None, ns=None):
        q: asyncio.Queue = asyncio.Queue()
        self.queues.append(q)
        self.watches += 1
        try:
            while True:
                ev = await q.get()
                if ev.kv.key.startswith(prefix):
                    yield ev
        finally:
            self.watches -= 1
            self.queues.remove(q)


@pytest.fixture
def app() -> ConsoleApp:
    return ConsoleApp(node_config.local_cluster(secret="s"), make_client=lambda t: WatchedClient())


async def _get(app: ConsoleApp, session, handler, query: str = "", path: str = page.PATH):
    resp = await handler(app.context(Request("GET", path, query, {}, b""), session))
    return resp.status, resp.body.decode()


async def test_browse_pages_by_cursor_and_links_each_key(app: ConsoleApp) -> None:
    client = WatchedClient()
    for i in range(5):
        await client.put(f"p/{i}", b"v")
    await client.put("q/0", b"v")
    s = await app.sessions.open(client, AUTH_OFF)
    status, html = await _get(app, s, page.browse, "ns=default&prefix=p/&limit=3")
    assert status == 200
    assert re.findall(r'data-key="([^"]+)"', html) == ["p/0", "p/1", "p/2"]
    nxt = re.search(r'id="next-page" href="([^"]+)"|href="([^"]+)" id="next-page"', html)
    query = (nxt.group(1) or nxt.group(2)).split("?", 1)[1].replace("&amp;", "&")
    status, html = await _get(app, s, page.browse, query)
    assert re.findall(r'data-key="([^"]+)"', html) == ["p/3", "p/4"]
    assert 'id="next-page"' not in html and 'id="first-page"' in html


async def test_a_key_shows_its_value_decoded_and_its_revisions_cost(app: ConsoleApp) -> None:
    client = WatchedClient()
    revs = [(await client.put("k", json.dumps({"n": i}).encode())).revision for i in range(4)]
    s = await app.sessions.open(client, AUTH_OFF)
    status, html = await _get(app, s, page.key, "ns=default&key=k&limit=3", page.KEY)
    assert status == 200
    assert 'id="value-format">json<' in html and "&#34;n&#34;: 3" in html
    assert re.findall(r'data-revision="(\d+)"', html) == [str(r) for r in revs[::-1][:3]]
    assert "took 3 reads" in html and 'id="older-revisions"' in html
    status, html = await _get(
        app, s, page.diff, f"ns=default&key=k&left={revs[0]}&right={revs[3]}", page.DIFF
    )
    assert status == 200
    assert "<td>replace</td><td><code>/n</code></td><td><code>0</code></td>" in html
    assert '<span class="add">+  &#34;n&#34;: 3</span>' in html
    assert (await _get(app, s, page.diff, "ns=default&key=k&left=1", page.DIFF))[0] == 400
    assert (await _get(app, s, page.key, "ns=default&key=nope", page.KEY))[0] == 404


async def test_the_tail_shows_new_puts_and_one_tail_per_session(app: ConsoleApp) -> None:
    client = WatchedClient()
    s = await app.sessions.open(client, AUTH_OFF)
    status, html = await _get(app, s, page.watch, "ns=default&prefix=t/", page.WATCH)
    assert status == 200 and 'hx-trigger="every 1s"' in html and client.watches == 0
    await asyncio.sleep(0)  # the watch task starts
    await client.put("t/a", b'{"x": 1}')
    await client.put("other", b"x")
    await asyncio.sleep(0.01)
    _, html = await _get(app, s, page.tail, "ns=default&prefix=t/", page.TAIL)
    assert re.findall(r'class="tail-event" data-key="([^"]+)"', html) == ["t/a"]
    assert client.watches == 1
    # Another prefix replaces the session's tail (the old watch ends): never two.
    await _get(app, s, page.tail, "ns=default&prefix=u/", page.TAIL)
    await asyncio.sleep(0.01)
    assert client.watches == 1 and s.held(page.TAIL_HELD).prefix == "u/"


async def test_an_evicted_sessions_tail_is_closed() -> None:
    app = ConsoleApp(
        node_config.local_cluster(secret="s"),
        make_client=lambda t: WatchedClient(),
        sessions=Sessions(max_sessions=1),
    )
    first = WatchedClient()
    s = await app.sessions.open(first, AUTH_OFF)
    await _get(app, s, page.watch, "ns=default&prefix=", page.WATCH)
    await asyncio.sleep(0.01)
    assert first.watches == 1
    await app.sessions.open(WatchedClient(), AUTH_OFF)  # the table is full: s is evicted
    await asyncio.sleep(0.01)
    assert first.watches == 0 and first.closed and s.held(page.TAIL_HELD) is None


class Resource:
    def __init__(self, fail: bool = False) -> None:
        self.fail, self.closed = fail, False

    async def close(self) -> None:
        self.closed = True
        if self.fail:
            raise RuntimeError("cannot close")


async def test_session_hold_closes_what_it_replaces_and_everything_at_the_end() -> None:
    sessions = Sessions()
    client = WatchedClient()
    s = await sessions.open(client, AUTH_OFF)
    a, b, c = Resource(), Resource(fail=True), Resource()
    await s.hold("x", a)
    await s.hold("x", b)
    assert a.closed and s.held("x") is b
    await s.hold("y", c)
    await sessions.close(s.id)  # b fails to close: c and the client are closed all the same
    assert b.closed and c.closed and client.closed


def test_page_limit_is_the_one_clamper() -> None:
    assert page_limit(None) == 50 and page_limit(0) == 1 and page_limit(10**6) == 500
    assert page_limit(None, 20, 100) == 20 and page_limit(300, 20, 100) == 100
    with pytest.raises(ValueError):
        page_limit("5")  # type: ignore[arg-type]


class GrantedClient(WatchedClient):
    def __init__(self, *grants: str) -> None:
        super().__init__()
        self.grants = tuple({"ns": g, "role": "reader", "prefix": ""} for g in grants)

    async def auth_whoami(self) -> TokenInfo:
        return TokenInfo("t1", "", self.grants, 0, 0)


async def test_the_chooser_opens_a_namespace_the_token_names(app: ConsoleApp) -> None:
    """Not the client's own ("default", which the token may not read: the nav link would
    land on a 403), but the first namespace the grants name; none named: type one."""
    client = GrantedClient("team-a", "team-*")
    await client.put("k", b"v", ns="team-a")
    s = await app.sessions.open(client, await client.auth_whoami())
    _, html = await _get(app, s, page.browse)
    assert 'id="keys-ns">team-a<' in html and 'data-key="k"' in html
    assert 'id="ns-other"' in html  # the pattern grant: a text box
    patterns_only = GrantedClient("team-*")
    s = await app.sessions.open(patterns_only, await patterns_only.auth_whoami())
    status, html = await _get(app, s, page.browse)
    assert status == 200 and 'id="pick-namespace"' in html
    assert [c[0] for c in patterns_only.inner.calls] == []  # no range of a namespace
