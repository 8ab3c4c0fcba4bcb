"""The console's foundation without a network (console/app.py, session.py, context.py):
the session table's bound and expiry, CSRF on every POST, the security headers, routing,
the login. The cluster is a stand-in client; the browser tests are
tests/integration/test_console_app.py."""

from __future__ import annotations

import logging
import re
import types
from http.cookies import SimpleCookie

import pytest

from statekeeper.client.auth.commands import TokenInfo
from statekeeper.client.errors import PermissionDenied, Unauthenticated
from statekeeper.console.app import CSP, ConsoleApp
from statekeeper.console.pages import PAGES
from statekeeper.console.session import Sessions
from statekeeper.node import config as node_config
from statekeeper.node.api.audit_log import AuditLog, WindowBudget
from statekeeper.node.api.server import Request

GOOD = "sk_good_token"
READER = TokenInfo("t1", "reader", ({"ns": "app", "prefix": "", "role": "reader"},), 0, 0)


class StandInClient:
    """What ConsoleApp asks of a session's AsyncClient here: auth_whoami and close."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.closed = False

    async def auth_whoami(self) -> TokenInfo:
        if self.token != GOOD:
            raise Unauthenticated("unknown token", code="unauthenticated", status=401)
        return READER

    async def close(self) -> None:
        self.closed = True


def _page_module(calls: list[str]) -> types.ModuleType:
    """A page with a GET, an action (POST) and a GET that the API refuses."""

    async def show(ctx):
        return ctx.render("error.html", title="shown", message=ctx.query.get("q", ""))

    async def act(ctx):
        calls.append(ctx.form.get("what", ""))
        return ctx.render("error.html", title="done", message="")

    async def refused(ctx):
        raise PermissionDenied("reader may not", code="permission_denied", status=403)

    page = types.ModuleType("testpage")
    page.TITLE, page.PATH = "Test", "/ui/test"
    page.ROUTES = [("GET", "/ui/test", show), ("POST", "/ui/test", act), ("GET", "/ui/x", refused)]
    page.AUDITED = ("/ui/x",)  # a GET that acts (as the backup download)
    return page


@pytest.fixture
def calls() -> list[str]:
    return []


@pytest.fixture
def app(calls: list[str]) -> ConsoleApp:
    cfg = node_config.local_cluster(secret="s")
    return ConsoleApp(cfg, make_client=StandInClient, pages=(_page_module(calls),))


def _req(method: str, path: str, body: str = "", headers: dict | None = None, query: str = ""):
    h = {"host": "127.0.0.1:7000", **(headers or {})}
    if method == "POST":
        h.setdefault("content-type", "application/x-www-form-urlencoded")
    return Request(method, path, query, h, body.encode(), peer="10.0.0.9:5555")


def _header(resp, name: str) -> list[str]:
    return [v for k, v in resp.headers if k.lower() == name.lower()]


def _cookies(resp) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    for value in _header(resp, "Set-Cookie"):
        jar.load(value)
    return {k: m.value for k, m in jar.items()}


async def _login(app: ConsoleApp, token: str = GOOD):
    """(the answer to the login POST, the session cookie header, the session's CSRF token)."""
    form = await app.handle(_req("GET", "/ui/login"))
    nonce = _cookies(form)["sk_console_login"]
    assert f'value="{nonce}"' in form.body.decode()
    resp = await app.handle(
        _req(
            "POST",
            "/ui/login",
            f"csrf={nonce}&token={token}",
            {"cookie": f"sk_console_login={nonce}"},
        )
    )
    sid = _cookies(resp).get("sk_console", "")
    if not sid:
        return resp, "", ""
    page = await app.handle(_req("GET", "/ui/test", headers={"cookie": f"sk_console={sid}"}))
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.body.decode()).group(1)
    return resp, f"sk_console={sid}", csrf


async def test_login_with_a_good_token_opens_a_session(app: ConsoleApp) -> None:
    resp, cookie, csrf = await _login(app)
    assert resp.status == 303 and _header(resp, "Location") == ["/ui/test"]
    session_cookie = next(v for v in _header(resp, "Set-Cookie") if v.startswith("sk_console="))
    assert "HttpOnly" in session_cookie and "SameSite=Strict" in session_cookie
    assert "Secure" not in session_cookie  # the config has no TLS
    page = await app.handle(_req("GET", "/ui/test", headers={"cookie": cookie}, query="q=<b>"))
    assert page.status == 200
    assert "&lt;b&gt;" in page.body.decode()  # autoescaped
    assert GOOD not in page.body.decode()  # the token is never in a page
    assert len(app.sessions) == 1


async def test_a_wrong_token_is_refused_and_opens_no_session(app: ConsoleApp) -> None:
    resp, cookie, _ = await _login(app, "sk_bad_token")
    assert resp.status == 401 and not cookie
    assert "refused this token" in resp.body.decode()
    assert len(app.sessions) == 0


async def test_the_login_form_needs_its_csrf_cookie(app: ConsoleApp) -> None:
    resp = await app.handle(_req("POST", "/ui/login", f"csrf=x&token={GOOD}"))
    assert resp.status == 403 and len(app.sessions) == 0
    wrong = await app.handle(
        _req("POST", "/ui/login", f"csrf=x&token={GOOD}", {"cookie": "sk_console_login=y"})
    )
    assert wrong.status == 403 and len(app.sessions) == 0


@pytest.mark.parametrize("body", ["what=drop", "what=drop&csrf=", "what=drop&csrf=wrong"])
async def test_a_post_without_the_right_csrf_token_is_refused(
    app: ConsoleApp, calls: list[str], body: str
) -> None:
    _, cookie, csrf = await _login(app)
    resp = await app.handle(_req("POST", "/ui/test", body, {"cookie": cookie}))
    assert resp.status == 403 and calls == []  # the handler never ran
    ok = await app.handle(_req("POST", "/ui/test", f"what=drop&csrf={csrf}", {"cookie": cookie}))
    assert ok.status == 200 and calls == ["drop"]


async def test_a_post_from_another_origin_or_not_a_form_is_refused(
    app: ConsoleApp, calls: list[str]
) -> None:
    _, cookie, csrf = await _login(app)
    body = f"what=drop&csrf={csrf}"
    other = await app.handle(
        _req("POST", "/ui/test", body, {"cookie": cookie, "origin": "https://evil.example"})
    )
    json = await app.handle(
        _req("POST", "/ui/test", body, {"cookie": cookie, "content-type": "application/json"})
    )
    assert (other.status, json.status, calls) == (403, 415, [])
    # Under Referrer-Policy no-referrer a browser sends Origin: null: the token decides.
    same = await app.handle(_req("POST", "/ui/test", body, {"cookie": cookie, "origin": "null"}))
    assert same.status == 200 and calls == ["drop"]


async def test_logout_needs_the_csrf_token_and_ends_the_session(app: ConsoleApp) -> None:
    _, cookie, csrf = await _login(app)
    refused = await app.handle(_req("POST", "/ui/logout", "", {"cookie": cookie}))
    assert refused.status == 403 and len(app.sessions) == 1
    client = app.sessions.sessions()[0].client
    done = await app.handle(_req("POST", "/ui/logout", f"csrf={csrf}", {"cookie": cookie}))
    assert done.status == 303 and _header(done, "Location") == ["/ui/login"]
    assert len(app.sessions) == 0 and client.closed
    after = await app.handle(_req("GET", "/ui/test", headers={"cookie": cookie}))
    assert after.status == 303 and _header(after, "Location") == ["/ui/login"]


async def test_every_answer_carries_the_security_headers(app: ConsoleApp) -> None:
    _, cookie, _ = await _login(app)
    answers = [
        await app.handle(_req("GET", "/ui/login")),
        await app.handle(_req("GET", "/ui/test")),  # redirect to the login
        await app.handle(_req("GET", "/ui/test", headers={"cookie": cookie})),
        await app.handle(_req("GET", "/ui/nothing", headers={"cookie": cookie})),
        await app.handle(_req("GET", "/ui/static/htmx.min.js")),
        await app.handle(_req("POST", "/ui/test", "x=1", {"cookie": cookie})),  # refused
    ]
    for resp in answers:
        assert _header(resp, "Content-Security-Policy") == [CSP], resp.status
        assert _header(resp, "X-Content-Type-Options") == ["nosniff"]
        assert _header(resp, "Referrer-Policy") == ["no-referrer"]
        assert _header(resp, "X-Frame-Options") == ["DENY"]
    assert "script-src 'self'" in CSP and "'unsafe-inline'" not in CSP


async def test_routing(app: ConsoleApp) -> None:
    _, cookie, _ = await _login(app)
    h = {"cookie": cookie}
    assert (await app.handle(_req("GET", "/ui/nothing", headers=h))).status == 404
    assert (await app.handle(_req("HEAD", "/ui/test", headers=h))).status == 200
    root = await app.handle(_req("GET", "/ui/", headers=h))
    assert root.status == 303 and _header(root, "Location") == ["/ui/test"]
    js = await app.handle(_req("GET", "/ui/static/htmx.min.js"))
    assert js.status == 200 and js.content_type == "text/javascript"
    assert (await app.handle(_req("GET", "/ui/static/../app.py"))).status == 404
    refused = await app.handle(_req("GET", "/ui/x", headers=h))
    assert refused.status == 403 and "reader may not" in refused.body.decode()
    # htmx polling with an expired session: the page goes to the login.
    poll = await app.handle(_req("GET", "/ui/test", headers={"hx-request": "true"}))
    assert _header(poll, "HX-Redirect") == ["/ui/login"]


async def test_the_nav_comes_from_the_page_registry() -> None:
    app = ConsoleApp(node_config.local_cluster(secret="s"), make_client=StandInClient)
    assert app.nav == tuple((p.TITLE, p.PATH) for p in PAGES)
    assert ("Cluster", "/ui/cluster") in app.nav
    page = await app.handle(_req("GET", "/ui/login"))
    assert page.status == 200


async def test_the_session_table_is_bounded_and_drops_the_idle_longest() -> None:
    now = [0.0]
    sessions = Sessions(max_sessions=3, idle_seconds=60, clock=lambda: now[0])
    opened = []
    for i in range(3):
        now[0] = i
        opened.append(await sessions.open(StandInClient(GOOD), READER))
    now[0] = 3
    assert await sessions.get(opened[0].id) is opened[0]  # used: no longer the idle-longest
    fourth = await sessions.open(StandInClient(GOOD), READER)  # the table is full
    assert len(sessions) == 3
    assert await sessions.get(opened[1].id) is None and opened[1].client.closed
    assert {s.id for s in sessions.sessions()} == {opened[0].id, opened[2].id, fourth.id}


async def test_an_idle_session_expires() -> None:
    now = [0.0]
    sessions = Sessions(max_sessions=3, idle_seconds=60, clock=lambda: now[0])
    s = await sessions.open(StandInClient(GOOD), READER)
    now[0] = 59
    assert await sessions.get(s.id) is s
    now[0] = 59 + 61
    assert await sessions.get(s.id) is None and s.client.closed


async def test_can_write_follows_the_grants(app: ConsoleApp) -> None:
    session = await app.sessions.open(StandInClient(GOOD), READER)
    ctx = app.context(_req("GET", "/ui/test", query="limit=9999"), session)
    assert ctx.can("app") and not ctx.can_write("app") and not ctx.can("other")
    assert ctx.page_args() == (500, None)


def _audit_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "statekeeper.auth"]


async def test_every_action_taken_writes_one_audit_line(
    app: ConsoleApp, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 31, point 3: login (ok and refused), every POST, an audited GET and the logout
    each write one line in the API's format on its logger, naming the token by id and
    name, never the token."""
    caplog.set_level(logging.INFO, logger="statekeeper.auth")
    await _login(app, "sk_00000000000000b1_secretsecretsecret")
    _, cookie, csrf = await _login(app)
    h = {"cookie": cookie}
    await app.handle(_req("POST", "/ui/test", f"ns=app&what=agent-7&csrf={csrf}", h))
    await app.handle(_req("POST", "/ui/test", "ns=app&what=x&csrf=wrong", h))
    await app.handle(_req("GET", "/ui/x", headers=h, query="ns=app&id=b1"))
    await app.handle(_req("GET", "/ui/test", headers=h))  # a read: no line
    await app.handle(_req("POST", "/ui/logout", f"csrf={csrf}", h))
    client = "client 10.0.0.9:5555"
    assert _audit_lines(caplog) == [
        f"console_login: token 00000000000000b1, {client}: refused 401 (the cluster refused the token)",
        f"console_login: token t1 (name reader), {client}: done 303",
        "console_action: token t1 (name reader), POST /ui/test, ns app, object what=agent-7, "
        f"{client}: done 200",
        "console_action: token t1 (name reader), POST /ui/test, ns app, object what=x, "
        f"{client}: refused 403",
        f"console_action: token t1 (name reader), GET /ui/x, ns app, object id=b1, {client}: "
        "refused 403",
        f"console_logout: token t1 (name reader), {client}: done",
    ]
    levels = [r.levelno for r in caplog.records if r.name == "statekeeper.auth"]
    assert levels == [logging.WARNING, logging.INFO, logging.INFO] + [logging.WARNING] * 2 + [
        logging.INFO
    ]
    assert not any(GOOD in line or "secretsecret" in line for line in _audit_lines(caplog))


async def test_a_flood_of_actions_cannot_flood_the_log(
    calls: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The lines go through the given AuditLog's window budget (the node passes its own:
    one budget for the API's 401/403 lines and the console's)."""
    now = [0.0]
    audit = AuditLog(logging.getLogger("statekeeper.auth"), WindowBudget(3, 10.0, lambda: now[0]))
    cfg = node_config.local_cluster(secret="s")
    app = ConsoleApp(cfg, make_client=StandInClient, pages=(_page_module(calls),), audit=audit)
    caplog.set_level(logging.INFO, logger="statekeeper.auth")
    _, cookie, csrf = await _login(app)  # line 1
    for i in range(50):
        await app.handle(_req("POST", "/ui/test", f"what={i}&csrf={csrf}", {"cookie": cookie}))
    assert len(calls) == 50 and len(_audit_lines(caplog)) == 3
    now[0] += 10.0
    await app.handle(_req("POST", "/ui/test", f"what=last&csrf={csrf}", {"cookie": cookie}))
    lines = _audit_lines(caplog)
    assert lines[3].startswith("suppressed 48 more audit lines") and "what=last" in lines[4]
