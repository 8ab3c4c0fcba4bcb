"""PageContext: what a page handler (console/pages/<page>.py) gets for one request.

A handler is `async def handler(ctx: PageContext) -> Response`: it calls its view with
`ctx.client` (the user's own AsyncClient, carrying the user's token) and answers
`ctx.render("<page>.html", model=...)`. POST handlers need not check CSRF: the app has
checked `ctx.form["csrf"]` against the session before calling them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from statekeeper.console.views.paging import DEFAULT_LIMIT, page_limit
from statekeeper.node.api.authz import ROLE_ALLOWS, ns_matches
from statekeeper.node.api.server import Request, Response

if TYPE_CHECKING:
    from statekeeper.client.aio import AsyncClient
    from statekeeper.client.auth.commands import TokenInfo
    from statekeeper.console.session import Session


@dataclass
class PageContext:
    request: Request
    session: Session
    # One value per name (the last one given): ?ns=a&ns=b is ns="b".
    query: dict[str, str]
    # A POST's form fields (application/x-www-form-urlencoded), csrf included; {} for a GET.
    form: dict[str, str]
    # The cluster's nodes from the config: (node id, client URL), e.g. for a page that asks
    # every node (client.status(endpoint=url)).
    nodes: tuple[tuple[str, str], ...]
    # Renders a template of console/templates/ with the base values (nav, csrf, whoami).
    _render: Callable[..., Response] = field(repr=False)
    # App-wide objects pages keep between requests (see shared()).
    _shared: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def client(self) -> AsyncClient:
        """The user's own client: every call carries the user's token."""
        return self.session.client

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The cluster's client URLs."""
        return tuple(url for _, url in self.nodes)

    @property
    def csrf(self) -> str:
        """The session's CSRF token: every POST form's hidden `csrf` field."""
        return self.session.csrf

    @property
    def whoami(self) -> TokenInfo:
        """`auth_whoami` of the user's token at login (id None: the cluster runs without auth)."""
        return self.session.whoami

    def can(self, ns: str, access: str = "read", key: str = "") -> bool:
        """Whether the token's grants allow `access` ("read", "write", "admin") on `key` of
        `ns` (the API decides in the end; this only hides what it would refuse)."""
        if self.whoami.id is None:  # auth off: every request is allowed
            return True
        return any(
            ns_matches(g.get("ns", ""), ns)
            and access in ROLE_ALLOWS.get(g.get("role", ""), ())
            and key.startswith(g.get("prefix", ""))
            for g in self.whoami.grants
        )

    def can_write(self, ns: str, key: str = "") -> bool:
        return self.can(ns, "write", key)

    def namespace(self) -> str:
        """The namespace a page shows: ?ns=, else the first namespace the token is granted
        by name (no wildcard), else the client's: a token scoped to one namespace opens
        where it can look (one rule for every page)."""
        if self.query.get("ns"):
            return self.query["ns"]
        for grant in self.whoami.grants:
            ns = grant.get("ns", "")
            if ns and "*" not in ns:
                return str(ns)
        return str(self.client.ns)

    def page_args(self) -> tuple[int, str | None]:
        """(limit, cursor) of a paged list: limit from ?limit= (default 50, 1..500), the
        cursor as given (opaque: the view made it), None when absent or empty."""
        try:
            limit = int(self.query.get("limit", DEFAULT_LIMIT))
        except ValueError:
            limit = DEFAULT_LIMIT
        return page_limit(limit), self.query.get("cursor") or None

    def render(self, template: str, status: int = 200, **values: Any) -> Response:
        """The page `template` (autoescaped) with `values`, and the base template's own."""
        return self._render(template, status, self, values)

    def shared(self, name: str, make: Callable[[], Any]) -> Any:
        """An app-wide object kept between requests and sessions (made by `make` the first
        time), e.g. the Cluster page's metric history; name it after the page."""
        if name not in self._shared:
            self._shared[name] = make()
        return self._shared[name]

    @staticmethod
    def url(path: str, **query: Any) -> str:
        """`path` with a query string of the values that are not None."""
        params = {k: v for k, v in query.items() if v is not None}
        return f"{path}?{urlencode(params)}" if params else path
