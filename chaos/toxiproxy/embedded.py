"""Running the server from synchronous code, and choosing real vs. embedded.

``ToxiproxyServer`` runs ``start_server`` on its own event loop in a daemon
thread, for pytest code that is not async.  ``toxiproxy_endpoint`` yields the
URL of the Toxiproxy to use: ``$TOXIPROXY_URL`` if set (a real Toxiproxy),
otherwise an embedded one started for the duration of the ``with`` block.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

from .server import ServerHandle, start_server

URL_ENV = "TOXIPROXY_URL"


class ToxiproxyServer:
    """A Toxiproxy-compatible server in a background thread.

    >>> with ToxiproxyServer() as server:
    ...     requests.get(server.url + "/version")
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._bind = (host, port)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._handle: ServerHandle | None = None

    @property
    def handle(self) -> ServerHandle:
        if self._handle is None:
            raise RuntimeError("server is not running")
        return self._handle

    @property
    def host(self) -> str:
        return self.handle.host

    @property
    def port(self) -> int:
        return self.handle.port

    @property
    def url(self) -> str:
        return self.handle.url

    def start(self, timeout: float = 10.0) -> Self:
        if self._thread is not None:
            raise RuntimeError("server already started")
        self._thread = threading.Thread(target=self._run, name="toxiproxy-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("toxiproxy server did not start in time")
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise self._error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the API and all proxies; safe to call twice."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        thread.join(timeout)
        self._handle = None

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # surfaced to start() via _error
            if not self._ready.is_set():
                self._error = exc
                self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._handle = await start_server(*self._bind)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self._handle.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def split_url(url: str) -> tuple[str, int]:
    """``http://host:port`` -> (host, port), port defaulting to 8474."""
    parts = urlsplit(url if "//" in url else f"http://{url}")
    return parts.hostname or "127.0.0.1", parts.port or 8474


def configure_client(url: str) -> None:
    """Point the ``toxiproxy-python`` client at ``url``.

    That client keeps host and port as class attributes, so this affects
    every ``Toxiproxy``/``Proxy`` object in the process.
    """
    from toxiproxy import Toxiproxy  # imported late: only this helper needs it

    host, port = split_url(url)
    Toxiproxy().update_api_consumer(host, port)


@contextmanager
def toxiproxy_endpoint() -> Iterator[str]:
    """The URL of the Toxiproxy to use: ``$TOXIPROXY_URL`` or an embedded one."""
    external = os.environ.get(URL_ENV)
    if external:
        yield external.rstrip("/")
        return
    with ToxiproxyServer() as server:
        yield server.url
