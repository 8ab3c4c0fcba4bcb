"""Client and AsyncClient expose one API: the same public methods with the same signatures,
blocking in one and awaited in the other (client/commands.py defines each operation once;
this keeps the two from drifting apart again).

No server is needed: nothing here reaches the network.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from statekeeper.client import AsyncBatch, AsyncClient, Batch, Client, InvalidRequest, compare, ops

OPERATIONS = {"put", "get", "delete", "range", "scan", "cas", "txn", "batch", "compact", "status"}
STREAM_OPERATIONS = {"append", "read_stream", "events", "subscribe", "stream_info", "list_streams"}
LEASE_OPERATIONS = {"lease", "lease_grant", "lease_keepalive", "lease_revoke", "lease_info"}
OPERATIONS |= STREAM_OPERATIONS | LEASE_OPERATIONS | {"lease_list"} | {"watch"} | {"cache"}
# Return a batch object in both clients (``with client.batch()`` / ``async with``), a
# lease (granted now on a Client; awaited or entered on an AsyncClient) and a cache
# (loaded now on a Client; awaited or entered on an AsyncClient).
PLAIN_IN_BOTH = {"batch", "lease", "cache", "with_options"}
# Locks: acquired now on a Client, awaited or entered on an AsyncClient.
LOCK_OPERATIONS = {"lock", "lock_acquire", "lock_release", "lock_list"}
OPERATIONS |= LOCK_OPERATIONS
PLAIN_IN_BOTH |= {"lock"}


def _public(cls: type) -> dict[str, Any]:
    """Public class attributes, inherited ones included, as found on the class."""
    return {name: inspect.getattr_static(cls, name) for name in dir(cls) if name[0] != "_"}


def _check_same_callable(name: str, sync: Any, aio: Any) -> None:
    s, a = inspect.signature(sync), inspect.signature(aio)
    assert s.parameters == a.parameters, name  # names, kinds, defaults, annotations
    assert inspect.getdoc(sync) and inspect.getdoc(aio), f"{name} has no docstring"
    assert not inspect.iscoroutinefunction(sync) and not inspect.isasyncgenfunction(sync), name
    if name in PLAIN_IN_BOTH:
        assert not inspect.iscoroutinefunction(aio) and not inspect.isasyncgenfunction(aio)
        return
    if inspect.isgeneratorfunction(sync):  # scan: an async generator function
        assert inspect.isasyncgenfunction(aio), f"AsyncClient.{name} is no async generator"
        assert a.return_annotation == "Async" + s.return_annotation, name
    else:
        assert inspect.iscoroutinefunction(aio), f"AsyncClient.{name} is no coroutine function"
        assert a.return_annotation == s.return_annotation, name


def test_clients_have_the_same_public_methods_and_signatures() -> None:
    sync, aio = _public(Client), _public(AsyncClient)
    assert sync.keys() == aio.keys()
    assert OPERATIONS | {"close", "endpoint", "endpoints", "ops", "compare"} <= sync.keys()
    for name in sync:
        s, a = getattr(Client, name), getattr(AsyncClient, name)
        if isinstance(sync[name], property):
            assert isinstance(aio[name], property), name
        elif callable(s) and not isinstance(s, type):
            _check_same_callable(name, s, a)
        else:
            assert s is a, name  # ops, compare
    assert Client.ops is ops and AsyncClient.compare is compare
    assert inspect.signature(Client.__init__) == inspect.signature(AsyncClient.__init__)


def test_async_operations_stay_async_on_the_instance() -> None:
    c = AsyncClient(["http://127.0.0.1:1", "http://127.0.0.1:2"])  # connects on first use
    for name in OPERATIONS - PLAIN_IN_BOTH:
        method = getattr(c, name)
        assert inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method), name


def test_batches_have_the_same_api() -> None:
    sync, aio = _public(Batch), _public(AsyncBatch)
    assert sync.keys() == aio.keys()
    for name in sync:
        s, a = getattr(Batch, name), getattr(AsyncBatch, name)
        assert inspect.signature(s) == inspect.signature(a), name
        if name == "execute":
            assert inspect.iscoroutinefunction(a) and not inspect.iscoroutinefunction(s)
        else:  # the op collectors are shared
            assert s is a, name
    assert hasattr(Batch, "__enter__") and hasattr(AsyncBatch, "__aenter__")
    assert inspect.signature(Batch.__init__) == inspect.signature(AsyncBatch.__init__)


async def test_async_requests_are_built_when_awaited() -> None:
    """As with any coroutine: calling only creates it; a bad argument raises on await."""
    c = AsyncClient("http://127.0.0.1:1")
    pending = c.put(123, b"v")  # type: ignore[arg-type]  # a key must be str
    with pytest.raises(TypeError):
        await pending
    pages = c.scan("p", start="a")  # prefix and start: refused when iterated
    with pytest.raises(InvalidRequest):
        await pages.__anext__()
    await c.close()


def test_sync_scan_starts_on_first_iteration() -> None:
    with Client("http://127.0.0.1:1") as c:
        pages = c.scan("p", start="a")
        with pytest.raises(InvalidRequest):
            next(pages)


def test_subscribe_is_endless_and_starts_on_first_iteration() -> None:
    """subscribe (and events) are @paged: a generator on Client, an async generator on
    AsyncClient; a bad argument is refused when iterated, not when called."""
    assert inspect.isgeneratorfunction(Client.subscribe)
    assert inspect.isasyncgenfunction(AsyncClient.subscribe)
    assert inspect.signature(Client.subscribe).return_annotation == "Iterator[StreamEvent]"
    with Client("http://127.0.0.1:1") as c:
        sub = c.subscribe("s", wait=0)
        with pytest.raises(ValueError):
            next(sub)


def test_batches_take_the_stream_ops() -> None:
    for name in ("append", "read_stream", "stream_info", "list_streams"):
        assert getattr(Batch, name) is getattr(AsyncBatch, name), name
    params = inspect.signature(Batch.append).parameters
    assert list(params)[:3] == ["self", "stream", "events"] and "expect" in params


def test_watch_is_an_iterator_in_both_clients() -> None:
    """watch is @paged like subscribe: a generator on Client, an async generator on
    AsyncClient, started (and its arguments checked) on first iteration."""
    assert inspect.isgeneratorfunction(Client.watch)
    assert inspect.isasyncgenfunction(AsyncClient.watch)
    with Client("http://127.0.0.1:1") as c:
        it = c.watch("p", start_revision=0)
        with pytest.raises(InvalidRequest):
            next(it)


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_with_options_copies_the_configuration_and_changes_what_is_given(cls) -> None:
    # The token and TLS it carries: tests/integration/test_cache.py (the sync cache's watch).
    urls = ["http://10.0.0.1:7000", "http://10.0.0.2:7000"]
    c = cls(urls, ns="a", timeout=3, consistency="serializable", archive_roots=["/r"])
    d = c.with_options(ns="b")
    assert type(d) is cls and d.endpoints == c.endpoints and d.retry is c.retry
    assert (d.ns, d.timeout, d.consistency, d.archive_roots) == ("b", 3.0, "serializable", ("/r",))
    assert c.with_options(endpoints="http://10.0.0.3:7000").endpoints == ("http://10.0.0.3:7000",)
