"""ConsoleApp: the web console's HTTP handler (docs/console.md).

One object answers every request under /ui, as a handler of the node's own HTTP server
(node/api/server.py's Request -> Response): the node mounts it when `[ui] enabled = true`
(node/api/routes.py), `statekeeper console` serves it on a port of its own
(cluster/console_cli.py). Its parts:

- the router: exact (method, path) over every page's ROUTES (console/pages/PAGES), plus
  /ui/login, /ui/logout and /ui/static/<file>; a page's parameters are its query string;
- sessions (console/session.py): a login checks the token with `auth_whoami` and keeps an
  AsyncClient built from it; every page then calls the API as that user;
- CSRF: every POST must carry the session's token in its `csrf` field (the login form:
  a double-submit cookie, as there is no session yet), and an Origin, if sent, must be
  this site's; else 403 and the handler is not called;
- the security headers of SECURITY_HEADERS on every answer (no inline script or style can
  run: htmx works from attributes, charts are inline SVG elements);
- the audit: one line per action taken (login, logout, every POST, the GETs a page lists
  in AUDITED), in the API's format and through its AuditLog (console/audit.py).
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import jinja2

from statekeeper.client.aio import AsyncClient
from statekeeper.client.errors import PermissionDenied, StatekeeperError, Unauthenticated
from statekeeper.console.audit import ConsoleAudit
from statekeeper.console.charts import sparkline
from statekeeper.console.context import PageContext
from statekeeper.console.pages import PAGES
from statekeeper.console.session import Session, Sessions
from statekeeper.node.api.audit_log import AuditLog
from statekeeper.node.api.server import Request, Response
from statekeeper.node.config import ClusterConfig

log = logging.getLogger("statekeeper.console")

PREFIX = "/ui"
HERE = Path(__file__).parent
HTML = "text/html; charset=utf-8"
COOKIE = "sk_console"
LOGIN_COOKIE = "sk_console_login"  # the login form's double-submit CSRF value
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cache-Control", "no-store"),  # pages hold the user's data
)
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}
FORM_TYPE = "application/x-www-form-urlencoded"

Handler = Callable[[PageContext], Awaitable[Response]]
ClientFactory = Callable[[str], AsyncClient]


def client_factory(cluster: ClusterConfig, timeout: float = 5.0) -> ClientFactory:
    """Builds the AsyncClient of a session from the user's token: the cluster's node URLs
    and, under TLS, its CA, from the config."""
    ca = str(Path(cluster.base_dir) / cluster.tls.ca_file) if cluster.tls.enabled else None

    def make(token: str) -> AsyncClient:
        return AsyncClient(cluster.http_urls(), token=token, ca=ca, timeout=timeout)

    return make


class ConsoleApp:
    """The console's handler: `await app.handle(request)` answers any request whose path
    is /ui or under it. `close()` ends every session (their clients). `audit`: the node's
    AuditLog when a node serves it (one budget for the API's lines and the console's); by
    default one of its own on the same logger."""

    def __init__(
        self,
        cluster: ClusterConfig,
        *,
        make_client: ClientFactory | None = None,
        sessions: Sessions | None = None,
        secure_cookies: bool | None = None,
        pages: Sequence[Any] = PAGES,
        audit: AuditLog | None = None,
    ) -> None:
        self.cluster = cluster
        self.nodes = tuple((n.id, cluster.url(n.id)) for n in cluster.nodes)
        self.make_client = make_client or client_factory(cluster)
        # Not `sessions or Sessions()`: an empty table is falsy (Sessions has __len__).
        self.sessions = sessions if sessions is not None else Sessions()
        # Secure cookies when served over TLS (the node's port is HTTPS under [tls]).
        self.secure = cluster.tls.enabled if secure_cookies is None else secure_cookies
        self.pages = tuple(pages)
        self.nav = tuple((page.TITLE, page.PATH) for page in self.pages)
        self.routes: dict[tuple[str, str], Handler] = {}
        self.audit = ConsoleAudit(audit)
        # Routes audited besides every POST: GETs that act (the backup download).
        self.audited = {path for page in self.pages for path in getattr(page, "AUDITED", ())}
        for page in self.pages:
            for method, path, handler in page.ROUTES:
                if (method, path) in self.routes:
                    raise ValueError(f"two console routes for {method} {path}")
                self.routes[(method, path)] = handler
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.env.globals["sparkline"] = sparkline
        self.static = {
            p.name: (p.read_bytes(), STATIC_TYPES[p.suffix])
            for p in sorted((HERE / "static").iterdir())
            if p.suffix in STATIC_TYPES
        }
        self.shared: dict[str, Any] = {}  # PageContext.shared

    async def close(self) -> None:
        await self.sessions.close_all()

    # -- the entry point ------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        try:
            resp = await self._answer(request)
        except Exception:
            log.exception("console: unhandled error serving %s", request.path[:200])
            resp = self._plain(500, "internal error; see the log")
        resp.headers = (*SECURITY_HEADERS, *resp.headers)
        return resp

    async def _answer(self, request: Request) -> Response:
        path, method = request.path, request.method
        if path in (PREFIX, PREFIX + "/"):
            return redirect(self.nav[0][1] if self.nav else PREFIX + "/login")
        if path.startswith(PREFIX + "/static/") and method in ("GET", "HEAD"):
            return self._static(path.removeprefix(PREFIX + "/static/"))
        form: dict[str, str] = {}
        if method == "POST":
            refused = self._refuse_post(request)
            if refused is not None:
                return refused
            form = dict(parse_qsl(request.body.decode("utf-8", "replace"), keep_blank_values=True))
        cookies = _cookies(request)
        if path == PREFIX + "/login":
            if method == "POST":
                return await self._login(request, form, cookies)
            return self._login_page(request)
        session = await self.sessions.get(cookies.get(COOKIE))
        if method == "POST" and (session is None or not session.csrf_ok(form.get("csrf"))):
            self.audit.action(request, session and session.whoami, form, 403)
            return self._plain(403, "refused: the form's CSRF token is missing or wrong")
        if session is None:
            if "hx-request" in request.headers:  # htmx: the whole page goes to the login
                return Response(401, b"", HTML, (("HX-Redirect", PREFIX + "/login"),))
            return redirect(PREFIX + "/login")
        if path == PREFIX + "/logout" and method == "POST":
            await self.sessions.close(session.id)
            self.audit.logout(request, session.whoami)
            return redirect(PREFIX + "/login", (("Set-Cookie", self._cookie(COOKIE, "", 0)),))
        handler = self.routes.get(("GET" if method == "HEAD" else method, path))
        if handler is None:
            return self._plain(404, f"no console page at {path[:200]}")
        ctx = self.context(request, session, form)
        if method != "POST" and path not in self.audited:
            return await self._call(handler, ctx)
        status = 500  # an exception out of the handler: handle() answers 500
        try:
            resp = await self._call(handler, ctx)
            status = resp.status
            return resp
        finally:
            self.audit.action(request, session.whoami, form or ctx.query, status)

    def context(self, request: Request, session: Session, form: dict | None = None) -> PageContext:
        """The PageContext of `request` in `session` (also for a page's unit tests)."""
        query = dict(parse_qsl(request.query, keep_blank_values=True))
        return PageContext(
            request, session, query, form or {}, self.nodes, self._render, self.shared
        )

    async def _call(self, handler: Handler, ctx: PageContext) -> Response:
        """The handler's answer; the API's refusals as pages that say so."""
        try:
            return await handler(ctx)
        except Unauthenticated:  # the token was revoked or expired since the login
            await self.sessions.close(ctx.session.id)
            return redirect(PREFIX + "/login")
        except PermissionDenied as e:
            return ctx.render("error.html", 403, title="Not allowed", message=e.message)
        except StatekeeperError as e:
            return ctx.render("error.html", 502, title="The cluster answered", message=str(e))

    # -- login ----------------------------------------------------------------------------

    def _login_page(self, request: Request, error: str = "", status: int = 200) -> Response:
        nonce = secrets.token_urlsafe(32)
        body = self.env.get_template("login.html").render(
            csrf=nonce, error=error, nav=(), whoami=None, prefix=PREFIX, active=""
        )
        cookie = self._cookie(LOGIN_COOKIE, nonce, 600, path=PREFIX + "/login")
        return Response(status, body.encode(), HTML, (("Set-Cookie", cookie),))

    async def _login(self, request: Request, form: dict[str, str], cookies: dict) -> Response:
        sent, expected = form.get("csrf", ""), cookies.get(LOGIN_COOKIE, "")
        token = form.get("token", "").strip()
        if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
            self.audit.login(request, token, 403, "the login form's CSRF token")
            return self._plain(403, "refused: the login form's CSRF token is missing or wrong")
        try:
            client = self.make_client(token)
        except ValueError as e:  # a token with spaces or line breaks
            self.audit.login(request, token, 400, "not a token")
            return self._login_page(request, str(e), 400)
        try:
            whoami = await client.auth_whoami()
        except Unauthenticated:
            await client.close()
            self.audit.login(request, token, 401, "the cluster refused the token")
            return self._login_page(request, "the cluster refused this token", 401)
        except StatekeeperError as e:
            await client.close()
            self.audit.login(request, token, 503, "cannot ask the cluster")
            return self._login_page(request, f"cannot ask the cluster: {e}", 503)
        session = await self.sessions.open(client, whoami)
        self.audit.login(request, whoami, 303)
        return redirect(
            self.nav[0][1] if self.nav else PREFIX + "/",
            (
                ("Set-Cookie", self._cookie(COOKIE, session.id, None)),
                ("Set-Cookie", self._cookie(LOGIN_COOKIE, "", 0, path=PREFIX + "/login")),
            ),
        )

    # -- pieces -----------------------------------------------------------------------------

    def _refuse_post(self, request: Request) -> Response | None:
        """A POST must be a form, and from this site when the browser says where from."""
        ctype = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if ctype != FORM_TYPE:
            return self._plain(415, f"a console POST is a form ({FORM_TYPE})")
        # "null": what a browser sends under Referrer-Policy no-referrer (it hides where
        # from); the CSRF token and the SameSite cookie still decide.
        origin = request.headers.get("origin", "null")
        if origin != "null" and urlsplit(origin).netloc != request.headers.get("host", ""):
            return self._plain(403, "refused: a form posted from another site")
        return None

    def _render(
        self, template: str, status: int, ctx: PageContext, values: dict[str, Any]
    ) -> Response:
        path = ctx.request.path
        base = {
            "nav": self.nav,
            "active": next((p for _, p in self.nav if path.startswith(p)), ""),
            "csrf": ctx.csrf,
            "whoami": ctx.whoami,
            "prefix": PREFIX,
            "ctx": ctx,
        }
        body = self.env.get_template(template).render(**base, **values)
        return Response(status, body.encode(), HTML)

    def _static(self, name: str) -> Response:
        found = self.static.get(name)
        if found is None:
            return self._plain(404, "no such file")
        return Response(200, found[0], found[1])

    def _cookie(self, name: str, value: str, max_age: int | None, path: str = PREFIX) -> str:
        parts = [f"{name}={value}", f"Path={path}", "HttpOnly", "SameSite=Strict"]
        if max_age is not None:
            parts.append(f"Max-Age={max_age}")
        if self.secure:
            parts.append("Secure")
        return "; ".join(parts)

    @staticmethod
    def _plain(status: int, message: str) -> Response:
        return Response(status, message.encode(), "text/plain; charset=utf-8")


def redirect(location: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    """303 See Other: after a POST, the browser GETs `location`."""
    return Response(303, b"", HTML, (("Location", location), *headers))


def _cookies(request: Request) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(request.headers.get("cookie", ""))
    except CookieError:
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


__all__ = ["CSP", "PREFIX", "SECURITY_HEADERS", "ConsoleApp", "Session", "client_factory"]
