"""TCP proxies: listeners, connections, and the two toxic links of each connection.

Each accepted client gets a ``Connection`` with two ``Link``s:

* upstream:   client -> server bytes
* downstream: server -> client bytes

A link has a reader task (socket -> bounded queue, stamping each chunk with
the time it was read) and a pump task that pushes every chunk through the
link's current chain of toxic runtimes and writes it out.  Toxics added or
removed through the API are attached to / detached from every live link, so
a partition also hits connections that are already open.

When a link's source ends, its chain gets the EOF (slow_close may hold it),
then the link closes its destination socket.  The other link then reads EOF
from that socket and does the same, so a close travels through the proxy the
way it does through Toxiproxy (no half-close).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Iterator
from typing import Any

from . import errors
from .toxics import DIRECTIONS, Toxic, ToxicRuntime, new_runtime

log = logging.getLogger("statekeeper.chaos.toxiproxy")

READ_SIZE = 64 * 1024
QUEUE_CHUNKS = 32  # chunks read ahead per link; bounds memory, keeps TCP backpressure
UPSTREAM_CONNECT_TIMEOUT = 10.0
DEFAULT_LISTEN = "127.0.0.1:0"


def parse_address(addr: str) -> tuple[str, int]:
    """Split ``host:port`` / ``[v6]:port``; an empty host means all interfaces."""
    if addr.startswith("["):
        host, sep, port = addr[1:].partition("]:")
    else:
        host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"invalid address {addr!r}, expected host:port")
    return host, int(port)


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bind(addr: str) -> socket.socket:
    host, port = parse_address(addr)
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    # One socket only: binding every address of "localhost" with port 0 would
    # give several different ports, and a proxy has exactly one listen address.
    family, _, _, _, sockaddr = infos[0]
    return socket.create_server(sockaddr[:2], family=family, backlog=128)


def _transport_socket(writer: asyncio.StreamWriter) -> Any:
    return writer.get_extra_info("socket")


class Link:
    """One direction of a connection with its chain of toxic runtimes."""

    def __init__(
        self,
        conn: Connection,
        direction: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.conn = conn
        self.direction = direction
        self._reader = reader
        self._writer = writer
        self.chain: list[ToxicRuntime] = []
        self.closed = False
        self._queue: asyncio.Queue[tuple[bytes, float] | None] = asyncio.Queue(QUEUE_CHUNKS)
        self._tasks: list[asyncio.Task[None]] = []

    # Toxic management (called by the proxy, in the event loop) -----------

    def attach(self, toxic: Toxic) -> None:
        runtime = new_runtime(toxic, self)
        self.chain.append(runtime)
        runtime.start()

    def detach(self, name: str) -> None:
        for runtime in self.chain:
            if runtime.toxic.name == name:
                self.chain.remove(runtime)
                runtime.stop(removed=True)
                return

    def refresh(self, name: str) -> None:
        for runtime in self.chain:
            if runtime.toxic.name == name:
                runtime.restart()
                return

    # LinkControl ---------------------------------------------------------

    def close_output(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._writer.close()  # flushes what was already written, then FIN
        self._cancel_tasks()

    def reset_connection(self) -> None:
        self.conn.reset()

    # Running -------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._read_loop()),
            asyncio.create_task(self._pump()),
        ]

    async def wait(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def kill(self) -> None:
        """Stop moving data; the sockets were already closed by the caller."""
        self.closed = True
        self._cancel_tasks()

    def shutdown(self) -> None:
        """Connection teardown: stop tasks and timers without closing sockets."""
        self.kill()
        for runtime in self.chain:
            runtime.stop(removed=False)
        self.chain.clear()

    def _cancel_tasks(self) -> None:
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()

    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await self._reader.read(READ_SIZE)
                if not data:
                    break
                await self._queue.put((data, loop.time()))
        except OSError:
            pass  # a read error ends the stream like EOF does
        await self._queue.put(None)

    async def _pump(self) -> None:
        try:
            while not self.closed:
                item = await self._queue.get()
                if item is None:
                    for runtime in list(self.chain):
                        await runtime.eof()
                    break
                data, ts = item
                await self._emit(list(self.chain), 0, data, ts)
        except OSError:
            pass  # the destination went away; the other link will notice too
        except Exception:
            log.exception("link %s of a connection failed", self.direction)
        finally:
            self.close_output()

    async def _emit(self, chain: list[ToxicRuntime], index: int, data: bytes, ts: float) -> None:
        if self.closed:
            return
        if index == len(chain):
            if self._writer.is_closing():
                raise ConnectionResetError("destination closed")
            self._writer.write(data)
            await self._writer.drain()
            return

        async def out(chunk: bytes) -> None:
            await self._emit(chain, index + 1, chunk, ts)

        await chain[index].process(data, ts, out)


class Connection:
    """A client connection and its upstream connection."""

    def __init__(
        self,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self._client_writer = client[1]
        self._upstream_writer = upstream[1]
        self.links = {
            "upstream": Link(self, "upstream", client[0], upstream[1]),
            "downstream": Link(self, "downstream", upstream[0], client[1]),
        }

    async def run(self) -> None:
        for link in self.links.values():
            link.start()
        for link in self.links.values():
            await link.wait()
        self._client_writer.close()
        self._upstream_writer.close()

    def reset(self) -> None:
        """Close both sockets with RST (SO_LINGER 0), as reset_peer does."""
        for writer in (self._client_writer, self._upstream_writer):
            sock = _transport_socket(writer)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        self._kill_links()

    def abort(self) -> None:
        """Drop the connection at once (proxy disabled or deleted)."""
        for writer in (self._client_writer, self._upstream_writer):
            writer.transport.abort()
        self._kill_links()

    def _kill_links(self) -> None:
        for link in self.links.values():
            link.kill()

    def shutdown(self) -> None:
        for link in self.links.values():
            link.shutdown()


class Proxy:
    """A named listener forwarding to an upstream address, with its toxics."""

    def __init__(self, name: str, listen: str, upstream: str) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics: dict[str, Toxic] = {}
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": self.toxic_list(),
        }

    def toxic_list(self) -> list[dict[str, Any]]:
        # Upstream toxics first, then downstream, each in creation order.
        return [t.to_json() for d in DIRECTIONS for t in self.toxics.values() if t.stream == d]

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def _links(self, direction: str) -> Iterator[Link]:
        for conn in list(self._connections):
            yield conn.links[direction]

    # Listener ------------------------------------------------------------

    async def start(self) -> None:
        if self.enabled:
            return
        try:
            sock = _bind(self.listen)
        except ValueError as exc:
            raise errors.ApiError(str(exc), 400) from exc
        except OSError as exc:
            raise errors.ApiError(f"listen tcp {self.listen}: {exc.strerror or exc}", 500) from exc
        self._server = await asyncio.start_server(self._accept, sock=sock)
        host, port = sock.getsockname()[:2]
        # With port 0 the API reports the port actually picked; re-enabling reuses it.
        self.listen = format_address(host, port)
        self.enabled = True
        log.info("proxy %s listening on %s -> %s", self.name, self.listen, self.upstream)

    async def stop(self) -> None:
        if not self.enabled:
            return
        self.enabled = False
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for conn in list(self._connections):
            conn.abort()
        if server is not None:
            await server.wait_closed()
        log.info("proxy %s stopped", self.name)

    async def update(self, listen: str, upstream: str, enabled: bool) -> None:
        if listen != self.listen or upstream != self.upstream:
            parse_address(listen)
            parse_address(upstream)
            await self.stop()  # new addresses drop existing connections
            self.listen = listen
            self.upstream = upstream
        if enabled and not self.enabled:
            await self.start()
        elif not enabled:
            await self.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.enabled:
            writer.transport.abort()
            return
        host, port = parse_address(self.upstream)
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), UPSTREAM_CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            log.warning("proxy %s: cannot reach upstream %s: %s", self.name, self.upstream, exc)
            writer.transport.abort()
            return
        if not self.enabled:  # disabled while we were connecting
            writer.transport.abort()
            up_writer.transport.abort()
            return
        conn = Connection((reader, writer), (up_reader, up_writer))
        self._connections.add(conn)
        for toxic in self.toxics.values():
            conn.links[toxic.stream].attach(toxic)
        try:
            await conn.run()
        finally:
            self._connections.discard(conn)
            conn.shutdown()

    # Toxics --------------------------------------------------------------

    def add_toxic(self, toxic: Toxic) -> None:
        if toxic.name in self.toxics:
            raise errors.TOXIC_ALREADY_EXISTS
        self.toxics[toxic.name] = toxic
        for link in self._links(toxic.stream):
            link.attach(toxic)

    def get_toxic(self, name: str) -> Toxic:
        try:
            return self.toxics[name]
        except KeyError:
            raise errors.TOXIC_NOT_FOUND from None

    def update_toxic(self, name: str, body: Any) -> Toxic:
        toxic = self.get_toxic(name)
        toxic.apply_update(body)
        for link in self._links(toxic.stream):
            link.refresh(name)
        return toxic

    def remove_toxic(self, name: str) -> None:
        toxic = self.get_toxic(name)
        del self.toxics[name]
        for link in self._links(toxic.stream):
            link.detach(name)

    def remove_all_toxics(self) -> None:
        for name in list(self.toxics):
            self.remove_toxic(name)


def _proxy_fields(body: Any, where: str = "") -> tuple[str, str, str, bool]:
    """Validate a proxy create body; returns (name, listen, upstream, enabled)."""
    if not isinstance(body, dict):
        raise errors.BAD_REQUEST_BODY.joined("expected a JSON object")
    name = body.get("name")
    upstream = body.get("upstream")
    listen = body.get("listen")
    enabled = body.get("enabled", True)
    if not name:
        raise errors.MISSING_FIELD.joined("name" + where)
    if not upstream:
        raise errors.MISSING_FIELD.joined("upstream" + where)
    if not isinstance(name, str) or not isinstance(upstream, str):
        raise errors.BAD_REQUEST_BODY.joined("name and upstream must be strings")
    if listen is None or listen == "":
        listen = DEFAULT_LISTEN
    if not isinstance(listen, str):
        raise errors.BAD_REQUEST_BODY.joined("listen must be a string")
    if enabled is None:
        enabled = True
    if not isinstance(enabled, bool):
        raise errors.BAD_REQUEST_BODY.joined("enabled must be a boolean")
    for field, value in (("listen", listen), ("upstream", upstream)):
        try:
            parse_address(value)
        except ValueError as exc:
            raise errors.BAD_REQUEST_BODY.joined(f"{field}: {exc}") from None
    return name, listen, upstream, enabled


class ProxyCollection:
    """All proxies of one server, keyed by name."""

    def __init__(self) -> None:
        self.proxies: dict[str, Proxy] = {}

    def get(self, name: str) -> Proxy:
        try:
            return self.proxies[name]
        except KeyError:
            raise errors.PROXY_NOT_FOUND from None

    async def create(self, body: Any) -> Proxy:
        name, listen, upstream, enabled = _proxy_fields(body)
        if name in self.proxies:
            raise errors.PROXY_ALREADY_EXISTS
        proxy = Proxy(name, listen, upstream)
        if enabled:
            await proxy.start()
        # Re-check: another request may have added the name while we bound.
        if name in self.proxies:
            await proxy.stop()
            raise errors.PROXY_ALREADY_EXISTS
        self.proxies[name] = proxy
        return proxy

    async def update(self, name: str, body: Any) -> Proxy:
        proxy = self.get(name)
        if not isinstance(body, dict):
            raise errors.BAD_REQUEST_BODY.joined("expected a JSON object")
        # Fields left out keep their current values (the client sends only "enabled").
        listen = body.get("listen", proxy.listen)
        upstream = body.get("upstream", proxy.upstream)
        enabled = body.get("enabled", proxy.enabled)
        if not isinstance(listen, str) or not isinstance(upstream, str):
            raise errors.BAD_REQUEST_BODY.joined("listen and upstream must be strings")
        if not isinstance(enabled, bool):
            raise errors.BAD_REQUEST_BODY.joined("enabled must be a boolean")
        try:
            await proxy.update(listen, upstream, enabled)
        except ValueError as exc:
            raise errors.BAD_REQUEST_BODY.joined(str(exc)) from None
        return proxy

    async def delete(self, name: str) -> None:
        proxy = self.get(name)
        del self.proxies[name]
        await proxy.stop()
        proxy.toxics.clear()  # its connections are gone, nothing to detach from

    async def populate(self, body: Any) -> list[Proxy]:
        """Create or replace a list of proxies; validates all before changing any."""
        if not isinstance(body, list):
            raise errors.BAD_REQUEST_BODY.joined("expected a JSON array of proxies")
        wanted: list[tuple[str, str, str, bool]] = []
        seen: set[str] = set()
        for index, item in enumerate(body, start=1):
            fields = _proxy_fields(item, f" at proxy {index}")
            if fields[0] in seen:
                raise errors.BAD_REQUEST_BODY.joined(f"duplicate proxy name {fields[0]!r}")
            seen.add(fields[0])
            wanted.append(fields)
        result: list[Proxy] = []
        for name, listen, upstream, enabled in wanted:
            existing = self.proxies.get(name)
            if existing is not None and existing.listen == listen and existing.upstream == upstream:
                result.append(existing)
                continue
            if existing is not None:
                await self.delete(name)
            result.append(
                await self.create(
                    {"name": name, "listen": listen, "upstream": upstream, "enabled": enabled}
                )
            )
        return result

    async def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        for proxy in list(self.proxies.values()):
            await proxy.start()
            proxy.remove_all_toxics()

    async def close(self) -> None:
        for proxy in list(self.proxies.values()):
            await proxy.stop()
            proxy.toxics.clear()
        self.proxies.clear()
