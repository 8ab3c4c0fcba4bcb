"""The Coordination page's routes (console/pages/coordination.py) over in-memory fakes:
the page shows locks with holder and fence, leases with their TTL and keys, effects with
maybe_happened and CRDTs with value and replicas; the locks fragment follows a holder
change; the lease countdown runs on the console's clock while the API's remaining time
stands still. The browser tests: tests/integration/test_console_coordination.py."""

from __future__ import annotations

import re

import msgpack

from statekeeper.client.auth.commands import TokenInfo
from statekeeper.client.crdt import model
from statekeeper.client.effects.plan import EFFECTS_PREFIX
from statekeeper.client.leases.results import LeaseInfo
from statekeeper.client.locks.results import LockInfo, LockWaiter
from statekeeper.console.app import ConsoleApp
from statekeeper.console.pages.coordination import LeaseCountdown
from statekeeper.console.views.coordination import LeaseRow
from statekeeper.node import config as node_config
from statekeeper.node.api.server import Request
from tests.unit.test_console_views_coordination import Fake

ADMIN = TokenInfo("t1", "ops", ({"ns": "app", "prefix": "", "role": "admin"},), 0, 0)


class PageFake(Fake):
    """The views' fake plus what a session's client is asked at login and logout."""

    async def auth_whoami(self) -> TokenInfo:
        return ADMIN

    async def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _req(method: str, path: str, query: str = "", cookie: str = "", body: str = "") -> Request:
    h = {"host": "127.0.0.1:7000", "cookie": cookie}
    if method == "POST":
        h["content-type"] = "application/x-www-form-urlencoded"
    return Request(method, path, query, h, body.encode())


async def logged_in(client) -> tuple[ConsoleApp, str]:
    """A ConsoleApp whose every session uses `client`, and a session's cookie header."""
    app = ConsoleApp(node_config.local_cluster(secret="s"), make_client=lambda token: client)
    form = await app.handle(_req("GET", "/ui/login"))
    nonce = re.search(r'name="csrf" value="([^"]+)"', form.body.decode()).group(1)
    resp = await app.handle(
        _req("POST", "/ui/login", cookie=f"sk_console_login={nonce}", body=f"csrf={nonce}&token=x")
    )
    sid = next(v for k, v in resp.headers if k == "Set-Cookie" and v.startswith("sk_console="))
    return app, sid.split(";")[0]


def _fake() -> PageFake:
    held = LockInfo(
        "job", 12, 3, 2, [LockWaiter("w12", 12, 3, "pod-a"), LockWaiter("w15", 15, 4, "pod-b")]
    )
    fake = PageFake(
        locks=[held, LockInfo("effect:pay/2", 9, 3, 1, [LockWaiter("w9", 9, 3, None)])],
        leases=[LeaseInfo(3, "app", 10_000, 99_000, 4_000, ["agent/a/plan"], False, 8)],
    )
    rec = {"state": "claimed", "attempt": 2, "fence": 9, "idempotency_key": "k",
           "started_ms": 1, "result": None}  # fmt: skip
    fake.inner.put(EFFECTS_PREFIX + "pay/2", msgpack.packb(rec), ns="app")
    counter = model.pncounter_add(model.empty("pncounter"), "r1", 5)
    fake.inner.put(
        "hits", msgpack.packb([b"skcrdt", 1, "pncounter", counter], use_bin_type=True), ns="app"
    )
    return fake


async def test_the_page_shows_locks_leases_effects_and_crdts() -> None:
    app, cookie = await logged_in(_fake())
    resp = await app.handle(_req("GET", "/ui/coordination", cookie=cookie))
    html = resp.body.decode()
    assert resp.status == 200, html
    lock = re.search(r'data-lock="job">(.*?)</tr>', html, re.S).group(1)
    assert '<td class="fence">12</td>' in lock and '<td class="owner">pod-a</td>' in lock
    lease = re.search(r'data-lease="3">(.*?)</tr>', html, re.S).group(1)
    assert "4.0 s" in lease and "agent/a/plan" in lease
    effect = re.search(r'data-effect="pay/2">(.*?)</tr>', html, re.S).group(1)
    assert '<td class="attempt">2</td>' in effect and "yes" in effect and "running now" in effect
    crdt = re.search(r'data-crdt="hits">(.*?)</tr>', html, re.S).group(1)
    assert "<code>5</code>" in crdt and "r1" in crdt
    assert 'hx-get="/ui/coordination/locks?ns=app"' in html and 'hx-trigger="every 1s"' in html


async def test_the_locks_fragment_shows_a_new_holder() -> None:
    fake = _fake()
    app, cookie = await logged_in(fake)
    fake.locks[0] = LockInfo("job", 16, 5, 1, [LockWaiter("w16", 16, 5, "pod-c")])
    resp = await app.handle(_req("GET", "/ui/coordination/locks", "ns=app", cookie))
    html = resp.body.decode()
    assert html.startswith('<section id="coord-locks"')  # the fragment, no base page
    lock = re.search(r'data-lock="job">(.*?)</tr>', html, re.S).group(1)
    assert '<td class="fence">16</td>' in lock and '<td class="owner">pod-c</td>' in lock


async def test_the_lease_ttl_counts_down_while_the_cluster_clock_stands_still() -> None:
    fake = _fake()
    app, cookie = await logged_in(fake)
    clock = Clock()
    app.shared["coordination.lease_countdown"] = LeaseCountdown(clock)
    shown = []
    for _ in range(3):  # the API answers remaining_ms 4000 every time
        resp = await app.handle(_req("GET", "/ui/coordination/leases", "ns=app", cookie))
        shown.append(re.search(r'class="ttl-left" data-ms="(\d+)"', resp.body.decode()).group(1))
        clock.now += 1.5
    assert shown == ["4000", "2500", "1000"]
    clock.now += 5
    resp = await app.handle(_req("GET", "/ui/coordination/leases", "ns=app", cookie))
    assert 'data-ms="0"><span class="warn">due</span>' in resp.body.decode()


def test_a_keepalive_starts_a_new_countdown_and_the_table_is_bounded() -> None:
    clock = Clock()
    countdown = LeaseCountdown(clock)
    row = LeaseRow(1, 10_000, 50_000, 10_000, (), False, (), False)
    assert countdown.remaining_ms(row) == 10_000
    clock.now += 4
    assert countdown.remaining_ms(row) == 6_000
    kept = LeaseRow(1, 10_000, 60_000, 10_000, (), False, (), False)  # expires_ms moved
    assert countdown.remaining_ms(kept) == 10_000
    # a read where the cluster clock caught up (less left than the count): it wins
    clock.now += 1
    assert countdown.remaining_ms(LeaseRow(1, 10_000, 60_000, 7_000, (), False, (), False)) == (
        7_000
    )
    countdown.MAX = 3
    for i in range(10):
        countdown.remaining_ms(LeaseRow(i + 2, 1, 1, 1, (), False, (), False))
    assert len(countdown) == 3


async def test_the_namespace_comes_from_the_query_else_the_grants() -> None:
    app, cookie = await logged_in(_fake())
    resp = await app.handle(_req("GET", "/ui/coordination", "ns=other", cookie))
    html = resp.body.decode()
    assert 'value="other" id="ns"' in html and "/ui/coordination/locks?ns=other" in html
    assert app.context(_req("GET", "/x"), app.sessions.sessions()[0]).namespace() == (
        "app"  # the token's grant
    )
