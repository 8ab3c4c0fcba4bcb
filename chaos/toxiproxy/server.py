"""Toxiproxy-compatible HTTP control API (aiohttp) and ``start_server``.

Routes, JSON shapes, status codes and error messages follow Toxiproxy 2.x:
proxies are ``{name, listen, upstream, enabled, toxics}``, toxics are
``{name, type, stream, toxicity, attributes}``, errors are
``{"error": message, "status": code}``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from . import errors
from .proxy import ProxyCollection
from .toxics import Toxic

log = logging.getLogger("statekeeper.chaos.toxiproxy")

# The Toxiproxy release whose API we follow (docker-compose.yml runs 2.9.0),
# tagged so a human can tell this server from the real one.
VERSION = "2.9.0+statekeeper"

COLLECTION_KEY: web.AppKey[ProxyCollection] = web.AppKey("collection", ProxyCollection)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data), status=status, content_type="application/json")


def _no_content() -> web.Response:
    return web.Response(status=204)


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw.strip():
        raise errors.BAD_REQUEST_BODY.joined("EOF")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise errors.BAD_REQUEST_BODY.joined(str(exc)) from None


@web.middleware
async def _api_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    # Toxiproxy refuses browsers so a web page cannot drive it (CSRF).
    if request.headers.get("User-Agent", "").startswith("Mozilla/"):
        return web.Response(text="User agent not allowed\n", status=403)
    try:
        return await handler(request)
    except errors.ApiError as exc:
        return _json(exc.to_json(), exc.status)


def _collection(request: web.Request) -> ProxyCollection:
    return request.app[COLLECTION_KEY]


async def version(request: web.Request) -> web.Response:
    return _json({"version": VERSION})


async def reset(request: web.Request) -> web.Response:
    await _collection(request).reset()
    return _no_content()


async def proxy_index(request: web.Request) -> web.Response:
    proxies = _collection(request).proxies
    return _json({name: proxy.to_json() for name, proxy in proxies.items()})


async def proxy_create(request: web.Request) -> web.Response:
    proxy = await _collection(request).create(await _body(request))
    return _json(proxy.to_json(), 201)


async def populate(request: web.Request) -> web.Response:
    proxies = await _collection(request).populate(await _body(request))
    return _json({"proxies": [p.to_json() for p in proxies]}, 201)


async def proxy_show(request: web.Request) -> web.Response:
    return _json(_collection(request).get(request.match_info["proxy"]).to_json())


async def proxy_update(request: web.Request) -> web.Response:
    collection = _collection(request)
    collection.get(request.match_info["proxy"])  # 404 before complaining about the body
    proxy = await collection.update(request.match_info["proxy"], await _body(request))
    return _json(proxy.to_json())


async def proxy_delete(request: web.Request) -> web.Response:
    await _collection(request).delete(request.match_info["proxy"])
    return _no_content()


async def toxic_index(request: web.Request) -> web.Response:
    return _json(_collection(request).get(request.match_info["proxy"]).toxic_list())


async def toxic_create(request: web.Request) -> web.Response:
    proxy = _collection(request).get(request.match_info["proxy"])
    toxic = Toxic.from_json(await _body(request))
    proxy.add_toxic(toxic)
    return _json(toxic.to_json())


async def toxic_show(request: web.Request) -> web.Response:
    proxy = _collection(request).get(request.match_info["proxy"])
    return _json(proxy.get_toxic(request.match_info["toxic"]).to_json())


async def toxic_update(request: web.Request) -> web.Response:
    proxy = _collection(request).get(request.match_info["proxy"])
    proxy.get_toxic(request.match_info["toxic"])
    toxic = proxy.update_toxic(request.match_info["toxic"], await _body(request))
    return _json(toxic.to_json())


async def toxic_delete(request: web.Request) -> web.Response:
    proxy = _collection(request).get(request.match_info["proxy"])
    proxy.remove_toxic(request.match_info["toxic"])
    return _no_content()


def make_app(collection: ProxyCollection | None = None) -> web.Application:
    """The control API as an aiohttp application."""
    app = web.Application(middlewares=[_api_errors])
    app[COLLECTION_KEY] = collection if collection is not None else ProxyCollection()
    app.router.add_post("/reset", reset)
    app.router.add_get("/proxies", proxy_index)
    app.router.add_post("/proxies", proxy_create)
    app.router.add_post("/populate", populate)
    app.router.add_get("/proxies/{proxy}", proxy_show)
    app.router.add_post("/proxies/{proxy}", proxy_update)
    app.router.add_patch("/proxies/{proxy}", proxy_update)
    app.router.add_delete("/proxies/{proxy}", proxy_delete)
    app.router.add_get("/proxies/{proxy}/toxics", toxic_index)
    app.router.add_post("/proxies/{proxy}/toxics", toxic_create)
    app.router.add_get("/proxies/{proxy}/toxics/{toxic}", toxic_show)
    app.router.add_post("/proxies/{proxy}/toxics/{toxic}", toxic_update)
    app.router.add_patch("/proxies/{proxy}/toxics/{toxic}", toxic_update)
    app.router.add_delete("/proxies/{proxy}/toxics/{toxic}", toxic_delete)
    app.router.add_get("/version", version)
    return app


@dataclass
class ServerHandle:
    """A running server: where it listens and how to stop it."""

    host: str
    port: int
    collection: ProxyCollection
    _runner: web.AppRunner

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        """Stop the API and every proxy (their connections are dropped)."""
        await self._runner.cleanup()
        await self.collection.close()


async def start_server(host: str = "127.0.0.1", port: int = 8474) -> ServerHandle:
    """Start the API on ``host:port`` (port 0 picks a free one) in the running loop."""
    collection = ProxyCollection()
    runner = web.AppRunner(make_app(collection), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0]
    log.info("toxiproxy API listening on %s:%s", bound[0], bound[1])
    return ServerHandle(host=bound[0], port=bound[1], collection=collection, _runner=runner)
