"""What Client and AsyncClient share below their operations: the configuration, the
endpoints, and how one call runs (retries, backoff, leader discovery) as a sans-IO *plan*.

A plan is a generator that yields what to do next and is sent what came of it:

- ``(url, request, timeout)``: send ``request`` to ``url``, waiting at most ``timeout``
  seconds; send back ``(status, content_type, body)``, or, when the transport failed,
  the error :func:`responses.connection_error` maps the failure to (not raised);
- a :class:`retry.Backoff`: sleep ``delay`` seconds, then go on with ``next(plan)``.

It returns the call's result (``StopIteration.value``) or raises the call's error. Each
client runs plans over its own transport in ``_drive``: blocking over sockets in
client/sync.py, awaited over asyncio in client/aio.py. So the retry loop, which node to
ask and when to look for the leader are written once, here.

The decorators :class:`command` and :class:`paged` mark the operations of
:class:`commands.Commands` and make each one, defined once, a plain method (generator
function) on Client and a coroutine function (async generator function) on AsyncClient.
A ``@paged`` operation returns ``self._iterate(pages)``: ``pages`` is a sans-IO
:class:`Pages` (iterate it for the next request, hand each answer to ``pages.items``),
which may be endless (a stream subscription).
"""

from __future__ import annotations

import functools
import inspect
import ipaddress
import os
import ssl
import warnings
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterator, Sequence
from types import MethodType
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeAlias,
    TypeVar,
    overload,
)
from urllib.parse import urlsplit

from .errors import StatekeeperError
from .kv_requests import scan_next, status_request
from .locate import configured_endpoints
from .retry import DEFAULT_RETRY, Backoff, Endpoints, Exchange, RetryPolicy, normalize_endpoint
from .tls import client_tls_context
from .wire import CONSISTENCY_LEVELS, Request

if TYPE_CHECKING:
    from .commands import AsyncCommands

__all__ = ["Answer", "Attempt", "BaseClient", "Pages", "Plan", "ScanPages", "command", "paged"]

Attempt: TypeAlias = tuple[str, Request, float]
"""A step of a plan: send the request to the URL, with this timeout (seconds)."""
Answer: TypeAlias = tuple[int, str | None, bytes] | StatekeeperError
"""What an attempt came to: (status, content type, body), or the transport's failure."""
Plan: TypeAlias = Generator[Attempt | Backoff, Answer, Any]
"""One call, sans-IO (see the module docstring)."""


class Pages(Protocol):
    """The requests of a ``@paged`` operation, sans-IO: ``next(pages)`` is the next page's
    request (StopIteration: done), ``pages.items(answer)`` the items of its answer, called
    before the next request is asked for."""

    def __iter__(self) -> Iterator[Request]: ...

    def __next__(self) -> Request: ...

    def items(self, page: Any) -> list[Any]: ...


class ScanPages:
    """The page requests of one scan (range pages, or read_stream pages), sans-IO: see
    :class:`Pages`. Later pages are read at the first page's revision (see
    :func:`kv_requests.scan_next`); ``items_of`` picks a page's items (default: ``kvs``)."""

    __slots__ = ("_items_of", "_last", "_make", "_read")

    def __init__(
        self,
        make: Callable[..., Request],
        read: dict[str, Any],
        items_of: Callable[[Any], list[Any]] = lambda page: page.kvs,
    ) -> None:
        self._make = make  # the page request, given the read options
        self._read = read  # the read options of the next page
        self._items_of = items_of
        self._last: Any = None

    def __iter__(self) -> ScanPages:
        return self

    def __next__(self) -> Request:
        if self._last is not None:
            read = scan_next(self._last)
            if read is None:
                raise StopIteration
            self._read, self._last = read, None
        return self._make(**self._read)

    def items(self, page: Any) -> list[Any]:
        """The items of ``page``, the answer to the last request."""
        self._last = page
        return self._items_of(page)


class BaseClient:
    """Configuration and call plans shared by :class:`client.Client` and
    :class:`client.AsyncClient` (see their docstrings for the arguments).

    A transport subclass implements ``_init_transport(max_connections)`` (called by
    ``__init__``) and ``_drive(plan)``, which runs a plan and returns its result (an
    awaitable of it, for the async client).
    """

    def __init__(
        self,
        endpoints: str | Sequence[str] | None = None,
        *,
        ns: str = "default",
        timeout: float = 10.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        consistency: str = "linearizable",
        prefer_leader: bool = True,
        max_connections: int = 32,
        ca: str | os.PathLike[str] | None = None,
        cert: str | os.PathLike[str] | None = None,
        key: str | os.PathLike[str] | None = None,
        tls: ssl.SSLContext | None = None,
        token: str | None = None,
        archive_roots: Sequence[str] | None = None,
    ) -> None:
        if consistency not in CONSISTENCY_LEVELS:
            raise ValueError(f"consistency must be one of {CONSISTENCY_LEVELS}")
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        self.ns = ns
        self.timeout = float(timeout)
        self.retry = retry
        self.consistency = consistency
        # None: $STATEKEEPER_ENDPOINTS or ./cluster.toml, as the CLI reads them, never a
        # guess (client/locate.py).
        self._endpoints = Endpoints(configured_endpoints() if endpoints is None else endpoints)
        # Built only when an endpoint is https (reading files, and the env's paths).
        self._tls = (
            client_tls_context(ca, cert, key, tls)
            if any(u.startswith("https:") for u in self._endpoints.urls)
            else None
        )
        # "Bearer <token>" for every request's Authorization header ("" for none); never
        # shown by repr().
        self._authorization = bearer(token)
        if self._authorization:
            warn_plain_token(self._endpoints.urls)
        # Where archived="fetch" / archive_restore may read segment files from (only there:
        # client/archive/storage.py); kept as given, the env read when a segment is read.
        self.archive_roots = None if archive_roots is None else tuple(archive_roots)
        # What with_options() starts from (the resolved endpoints, TLS and token, so a
        # derived client never rereads the environment).
        self._options: dict[str, Any] = {
            "ns": ns, "timeout": self.timeout, "retry": retry, "consistency": consistency,
            "prefer_leader": prefer_leader, "max_connections": max_connections,
            "tls": self._tls, "token": self._authorization.removeprefix("Bearer "),
            "archive_roots": self.archive_roots,
        }  # fmt: skip
        self._init_transport(max_connections)
        # With one endpoint there is nothing to choose: no status round trip.
        self.prefer_leader = prefer_leader and len(self._endpoints.urls) > 1
        self._leader_stale = self.prefer_leader
        self._closed = False

    def _init_transport(self, max_connections: int) -> None:
        raise NotImplementedError

    def with_options(self, **overrides: Any) -> Any:
        """A new client of this class with this one's configuration (endpoints, namespace,
        timeout, retry, consistency, TLS context, token, archive roots), changed by
        ``overrides`` (any constructor keyword). It has connections of its own: close it
        as well. The sync cache's watch runs on one (client/cache/sync.py), with the
        user's TLS and token: built from the environment alone it failed TLS (or got 401)
        forever when those were given as arguments."""
        return type(self)(**{"endpoints": self.endpoints, **self._options, **overrides})

    def _drive(self, plan: Plan) -> Any:
        raise NotImplementedError

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The normalized endpoint URLs."""
        return self._endpoints.urls

    @property
    def endpoint(self) -> str:
        """The endpoint the next request goes to."""
        return self._endpoints.current

    def _ns(self, ns: str | None) -> str:
        return self.ns if ns is None else ns

    def _consistency(self, consistency: str | None) -> str:
        return self.consistency if consistency is None else consistency

    def _execute(self, request: Request, endpoint: str | None = None) -> Any:
        """Run one call: with retries (and leader discovery), or, given ``endpoint``, one
        attempt at that node. Returns the result, or for AsyncClient an awaitable of it."""
        return self._drive(self._plan(request, endpoint))

    def _plan(self, request: Request, endpoint: str | None = None) -> Plan:
        """The plan of one call (see the module docstring)."""
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")
        if endpoint is not None:
            url = normalize_endpoint(endpoint)
            return (yield from self._once(url, request, self.timeout + request.wait))
        ex = Exchange(request, self._endpoints, self.retry, self.timeout)
        if self._leader_stale:
            yield from self._discover_leader(ex)
        while True:
            url, timeout = ex.next_attempt()
            answer = yield url, request, timeout
            if isinstance(answer, StatekeeperError):
                backoff = ex.failed(answer)
            else:
                out = ex.received(*answer)
                if type(out) is not Backoff:
                    return out
                backoff = out
            yield backoff
            if self.prefer_leader:
                yield from self._discover_leader(ex)

    def _once(self, url: str, request: Request, timeout: float) -> Plan:
        """One attempt at ``url``, no retry."""
        answer = yield url, request, timeout
        if isinstance(answer, StatekeeperError):
            raise answer
        return request.parse(*answer)

    def _discover_leader(self, ex: Exchange) -> Plan:
        """Ask the nodes, current one first, which node leads, and make it current. What
        each node answered goes to the call's Exchange (its give-up message names them), and
        a leader it could not connect to in this call is not chosen again: with two of
        three nodes killed, node-0 still named the dead leader for seconds and every retry
        went there ("cannot connect to :8752" while node-0 answered)."""
        self._leader_stale = False
        timeout = min(self.timeout, 1.0)
        for url in self._endpoints.rotation():
            try:
                info = yield from self._once(url, status_request(), timeout)
            except StatekeeperError as err:
                ex.observed(url, err)
                continue
            leader = url if info.get("role") == "leader" else info.get("leader_url")
            ex.observed(url, f"{info.get('role') or 'no role'}, leader {leader or 'unknown'}")
            if isinstance(leader, str) and not ex.refused(leader):
                if self._endpoints.prefer(leader):
                    return

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.endpoints)!r}, ns={self.ns!r})"


class InsecureTokenWarning(UserWarning):
    """A bearer token is configured for a plain http:// URL to a host that is not loopback."""


_LOOPBACK_NAMES = ("localhost",)


def warn_plain_token(urls: Sequence[str]) -> None:
    """Warn (once per call site and process: Python's default warning filter) when a token
    would go to another machine unencrypted: whoever sees the traffic can use it (issue 27).
    Loopback is exempt: a dev cluster on this machine, with nothing on the wire."""
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme != "http" or _is_loopback(parts.hostname or ""):
            continue
        warnings.warn(
            f"a bearer token is sent to {parts.scheme}://{parts.netloc} in the clear (plain "
            "http:// to a host that is not loopback): use https:// ([tls] enabled)",
            InsecureTokenWarning,
            stacklevel=4,
        )
        return


def _is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bearer(token: str | None) -> str:
    """The Authorization value for ``token``, else $STATEKEEPER_TOKEN, else the content of
    the file named by $STATEKEEPER_TOKEN_FILE (stripped); "" when none is set."""
    if token is None:
        token = os.environ.get("STATEKEEPER_TOKEN") or None
    if token is None and os.environ.get("STATEKEEPER_TOKEN_FILE"):
        with open(os.environ["STATEKEEPER_TOKEN_FILE"]) as f:
            token = f.read()
    token = (token or "").strip()
    if any(c in token for c in "\r\n\x00 "):
        raise ValueError("the token must be one line without spaces")
    return f"Bearer {token}" if token else ""


P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class command(Generic[P, R]):
    """Marks an operation of :class:`commands.Commands`: a method returning
    ``self._execute(request)``.

    On a Client the operation is that method; :class:`commands.AsyncCommands` has a coroutine
    function around it (:meth:`awaited`), so its request is built when the call is
    awaited, like any coroutine's body. The ``__get__`` overloads tell type checkers so:
    ``AsyncClient.put(...)`` is a ``Coroutine[..., WriteResult]``.
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[Concatenate[Any, P], R]) -> None:
        self.fn = fn

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Callable[Concatenate[Any, P], R]: ...
    @overload
    def __get__(
        self, obj: AsyncCommands[Any], owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __get__(self, obj: object, owner: type[Any]) -> Callable[P, R]: ...
    def __get__(self, obj: object, owner: type[Any] | None = None) -> Any:
        return self.fn if obj is None else MethodType(self.fn, obj)

    def awaited(self) -> Callable[..., Coroutine[Any, Any, R]]:
        """The operation as a coroutine function (for AsyncCommands)."""
        fn = self.fn

        @functools.wraps(fn)
        async def call(self: Any, *args: Any, **kwargs: Any) -> R:
            return await fn(self, *args, **kwargs)  # type: ignore[misc]

        return call


class paged(Generic[P, T]):
    """Marks an operation of :class:`commands.Commands` that iterates: a method returning
    ``self._iterate(pages)``. On a Client it is a generator function; AsyncCommands has an
    async generator function around it (:meth:`awaited`). Both start on first iteration.
    """

    __slots__ = ("fn", "sync")

    def __init__(self, fn: Callable[Concatenate[Any, P], Iterator[T]]) -> None:
        self.fn = fn

        @functools.wraps(fn)
        def iterate(self: Any, *args: Any, **kwargs: Any) -> Iterator[T]:
            yield from fn(self, *args, **kwargs)

        self.sync = iterate

    @overload
    def __get__(
        self, obj: None, owner: type[Any]
    ) -> Callable[Concatenate[Any, P], Iterator[T]]: ...
    @overload
    def __get__(
        self, obj: AsyncCommands[Any], owner: type[Any]
    ) -> Callable[P, AsyncIterator[T]]: ...
    @overload
    def __get__(self, obj: object, owner: type[Any]) -> Callable[P, Iterator[T]]: ...
    def __get__(self, obj: object, owner: type[Any] | None = None) -> Any:
        return self.sync if obj is None else MethodType(self.sync, obj)

    def awaited(self) -> Callable[..., AsyncIterator[T]]:
        """The operation as an async generator function (for AsyncCommands)."""
        fn = self.fn

        @functools.wraps(fn)
        async def iterate(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[T]:
            inner = fn(self, *args, **kwargs)
            try:
                async for item in inner:  # type: ignore[attr-defined]
                    yield item
            finally:
                # Closing this iterator closes the transport's too (a watch's connection)
                # now, not whenever the event loop finalizes it.
                aclose = getattr(inner, "aclose", None)
                if aclose is not None:
                    await aclose()

        returns = fn.__annotations__.get("return")
        if isinstance(returns, str) and returns.startswith("Iterator["):
            returns = "Async" + returns  # what it is as an async generator function
            iterate.__annotations__ = {**fn.__annotations__, "return": returns}
            iterate.__signature__ = inspect.signature(fn).replace(  # type: ignore[attr-defined]
                return_annotation=returns
            )
        return iterate
