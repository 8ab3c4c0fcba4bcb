"""Client and AsyncClient against a tiny real aiohttp server that misbehaves on purpose.

The fake node speaks the msgpack HTTP API of docs/protocol.md for a few endpoints, keeps
an in-memory store with idempotency (so a retried write can be shown to apply once), and
injects faults from a queue: 503/504 answers, dropped connections, slow answers. It runs
in a background thread with its own event loop so the blocking Client can use it too.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack
import pytest
from aiohttp import web

from statekeeper.client import (
    AsyncClient,
    Client,
    Compacted,
    Conflict,
    InvalidRequest,
    KeyValue,
    NotFound,
    RetryPolicy,
    Timeout,
    Unavailable,
    compare,
    ops,
    wire,
)

MSGPACK = "application/msgpack"
FAST = RetryPolicy(max_attempts=5, backoff_base=0.01, backoff_max=0.05, deadline=5.0)


def _pack(obj: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=msgpack.packb(obj, use_bin_type=True), content_type=MSGPACK
    )


def _error(status: int, code: str, **extra: Any) -> web.Response:
    return _pack({"error": {"code": code, "message": f"injected {code}"}, **extra}, status)


@dataclass
class Seen:
    port: int
    path: str
    body: dict[str, Any] | None

    @property
    def idempotency_key(self) -> str | None:
        return (self.body or {}).get("idempotency_key")


@dataclass
class FakeNode:
    """State shared by every port of the fake server (reset per test)."""

    ports: list[int] = field(default_factory=list)
    # Faults, consumed one per request: "503", "504", "504_after_apply", "close",
    # "close_after_apply", "slow", or (status, code).
    faults: list[Any] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    store: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    applied: dict[str, Any] = field(default_factory=dict)
    revision: int = 0
    leader_port: int | None = None
    slow_seconds: float = 1.0
    epoch: int = 0  # bumped per test: a late "slow" request must not touch the next test

    def reset(self) -> None:
        self.epoch += 1
        self.faults.clear()
        self.seen.clear()
        self.store.clear()
        self.applied.clear()
        self.revision = 0
        self.leader_port = None

    def url(self, i: int = 0) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    def keys_seen(self, path: str) -> list[str | None]:
        return [s.idempotency_key for s in self.seen if s.path == path]

    # ---------------------------------------------------------------- store

    def _put(self, body: dict[str, Any]) -> dict[str, Any]:
        k = (body["ns"], body["key"])
        prev = self.store.get(k)
        self.revision += 1
        self.store[k] = {
            "key": body["key"],
            "value": body["value"],
            "version": (prev["version"] + 1) if prev else 1,
            "create_revision": prev["create_revision"] if prev else self.revision,
            "mod_revision": self.revision,
        }
        out: dict[str, Any] = {"revision": self.revision}
        if body.get("prev_kv") and prev:
            out["prev_kv"] = prev
        return out

    def _once(self, body: dict[str, Any], fn) -> dict[str, Any]:
        """Apply a write at most once per idempotency key (stored result replayed)."""
        ik = body.get("idempotency_key")
        if ik is not None and ik in self.applied:
            return {**self.applied[ik], "replayed": True}
        out = fn(body)
        if ik is not None:
            self.applied[ik] = out
        return out

    def _range(self, body: dict[str, Any]) -> dict[str, Any]:
        ns = body["ns"]
        prefix = body.get("prefix", "")
        keys = sorted(k for (n, k) in self.store if n == ns and k.startswith(prefix))
        if "continuation" in body:
            keys = [k for k in keys if k >= body["continuation"]]
        limit = body.get("limit", 1000)
        page = keys[:limit]
        kvs = [dict(self.store[(ns, k)]) for k in page]
        if body.get("keys_only"):
            for kv in kvs:
                del kv["value"]
        out: dict[str, Any] = {"revision": self.revision, "kvs": kvs, "more": len(keys) > limit}
        if out["more"]:
            out["continuation"] = keys[limit]
        return out

    # ---------------------------------------------------------------- http

    async def handle(self, request: web.Request) -> web.StreamResponse:
        port = request.transport.get_extra_info("sockname")[1]
        raw = await request.read()
        body = None
        if raw:
            assert request.content_type == MSGPACK, request.content_type
            body = msgpack.unpackb(raw, raw=False)
        self.seen.append(Seen(port, request.path, body))
        fault = self.faults.pop(0) if self.faults else None
        if fault == "503":
            return _error(503, "unavailable")
        if fault == "504":
            return _error(504, "timeout")
        if fault == "close":
            request.transport.close()
            return web.Response()
        if fault == "slow":
            epoch = self.epoch
            await asyncio.sleep(self.slow_seconds)
            if epoch != self.epoch:
                return _error(503, "unavailable")
        if isinstance(fault, tuple):
            status, code = fault
            return _error(status, code, revision=self.revision)
        resp = self.route(request.path, port, body)
        if fault == "504_after_apply":
            return _error(504, "timeout")
        if fault == "close_after_apply":
            request.transport.close()
        return resp

    def route(self, path: str, port: int, body: dict[str, Any] | None) -> web.Response:
        if path == "/v1/status":
            leader = self.leader_port
            return _pack(
                {
                    "role": "leader" if port == leader else "follower",
                    "leader_url": f"http://127.0.0.1:{leader}" if leader else None,
                    "revision": self.revision,
                    "id": str(port),
                }
            )
        assert body is not None
        if path == "/v1/kv/put":
            return _pack(self._once(body, self._put))
        if path == "/v1/kv/get":
            kv = self.store.get((body["ns"], body["key"]))
            if kv is None:
                return _error(404, "key_not_found", revision=self.revision)
            return _pack({"revision": self.revision, "kv": kv})
        if path == "/v1/kv/cas":
            kv = self.store.get((body["ns"], body["key"]))
            exp = body["expect"]
            ok = (
                (exp.get("exists") is False and kv is None)
                or ("version" in exp and (kv["version"] if kv else 0) == exp["version"])
                or (
                    "mod_revision" in exp
                    and kv is not None
                    and kv["mod_revision"] == exp["mod_revision"]
                )
            )
            if not ok:
                return _pack(
                    {
                        "error": {"code": "compare_failed", "message": "no"},
                        "kv": kv,
                        "revision": self.revision,
                    },
                    409,
                )
            return _pack({**self._once(body, self._put), "succeeded": True})
        if path == "/v1/kv/range":
            return _pack(self._range(body))
        if path == "/v1/kv/txn":
            ok = all(
                (self.store.get((c.get("ns", body["ns"]), c["key"])) or {"version": 0})["version"]
                == c["value"]
                for c in body["compare"]
            )
            results = []
            for op in body["success" if ok else "failure"]:
                op = {"ns": body["ns"], **op}
                if op["op"] == "put":
                    results.append(self._put(op))
                elif op["op"] == "get":
                    results.append(
                        {"revision": self.revision, "kv": self.store.get((op["ns"], op["key"]))}
                    )
            return _pack({"succeeded": ok, "revision": self.revision, "results": results})
        if path == "/v1/batch":
            results: list[Any] = []
            for op in body["ops"]:
                if op["op"] == "put":
                    results.append(self._once(op, self._put))
                elif op["op"] == "get":
                    results.append(
                        {"revision": self.revision, "kv": self.store.get((op["ns"], op["key"]))}
                    )
                else:
                    results.append({"error": {"code": "unknown_op", "message": op["op"]}})
            return _pack({"results": results})
        return _error(404, "not_found")


def _free_port() -> int:
    """A port nothing listens on: connecting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def _server() -> Iterator[FakeNode]:
    node = FakeNode()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runner_box: list[web.AppRunner] = []

    async def start() -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", node.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        for _ in range(2):  # two "nodes" sharing one store
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            node.ports.append(sock.getsockname()[1])
            await web.SockSite(runner, sock).start()
        runner_box.append(runner)

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert started.wait(5)
    yield node
    asyncio.run_coroutine_threadsafe(runner_box[0].cleanup(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    t.join(5)
    loop.close()


@pytest.fixture
def node(_server: FakeNode) -> FakeNode:
    _server.reset()
    return _server


# ------------------------------------------------------------------------- sync


def test_sync_roundtrip_msgpack(node: FakeNode) -> None:
    with Client(node.url(), ns="agents", retry=FAST) as c:
        blob = bytes(range(256))  # not UTF-8: must travel as msgpack bin
        w = c.put("a/1", blob)
        c.put("a/2", "héllo")
        kv = c.get("a/1")
        assert kv == KeyValue("a/1", blob, 1, w.revision, w.revision, "agents")
        assert kv.revision == 2
        assert c.get("a/2").text == "héllo"
        assert node.seen[0].body["value"] == blob
        assert c.put("a/2", b"x", prev_kv=True).prev_kv.text == "héllo"


def test_sync_client_is_thread_safe_and_keeps_shared_headers_intact(node: FakeNode) -> None:
    headers_before = dict(wire.POST_HEADERS)
    with Client(node.url(), retry=FAST) as c:

        def work(t: int) -> None:
            for i in range(20):
                c.put(f"t{t}/{i}", b"v")

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert node.revision == 160
        assert len(list(c.scan("t3/"))) == 20
    assert wire.POST_HEADERS == headers_before  # urllib3 must not have mutated them


def test_sync_retries_503_with_same_idempotency_key(node: FakeNode) -> None:
    node.faults[:] = ["503", "503"]
    with Client(node.url(), retry=FAST) as c:
        res = c.put("k", b"v")
    keys = node.keys_seen("/v1/kv/put")
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0]
    assert res.revision == 1 and not res.replayed


def test_sync_write_applied_once_despite_504_and_dropped_connection(node: FakeNode) -> None:
    # The server applies the write and then loses the answer twice; the retries
    # carry the same key, so the store applies the put once and replays the result.
    node.faults[:] = ["504_after_apply", "close_after_apply"]
    with Client(node.url(), retry=FAST) as c:
        res = c.put("k", b"v", idempotency_key="my-key")
        assert node.keys_seen("/v1/kv/put") == ["my-key"] * 3
        assert res.revision == 1 and res.replayed
        assert node.revision == 1
        assert c.get("k").version == 1


def test_sync_retries_dropped_connection(node: FakeNode) -> None:
    node.faults[:] = ["close"]
    with Client(node.url(), retry=FAST) as c:
        c.put("k", b"v")
    keys = node.keys_seen("/v1/kv/put")
    assert len(keys) == 2 and keys[0] == keys[1]


def test_sync_rotates_away_from_refused_endpoint_and_sticks(node: FakeNode) -> None:
    dead = f"http://127.0.0.1:{_free_port()}"
    with Client([dead, node.url()], retry=FAST) as c:
        assert c.endpoint == dead
        c.put("k", b"v")
        assert c.endpoint == node.url()
        c.get("k")
    assert len(node.keys_seen("/v1/kv/put")) == 1


def test_sync_all_endpoints_down_raises_unavailable(node: FakeNode) -> None:
    dead = [f"http://127.0.0.1:{_free_port()}" for _ in range(2)]
    with Client(dead, retry=FAST) as c, pytest.raises(Unavailable) as ei:
        c.put("k", b"v", idempotency_key="ik")
    assert ei.value.code == "connection_failed"
    assert ei.value.attempts == FAST.max_attempts
    assert ei.value.idempotency_key == "ik"


def test_sync_gives_up_on_persistent_503(node: FakeNode) -> None:
    node.faults[:] = ["503"] * 10
    with Client(node.url(), retry=FAST) as c, pytest.raises(Unavailable) as ei:
        c.get("k")
    assert ei.value.status == 503 and ei.value.code == "unavailable"
    assert len(node.seen) == FAST.max_attempts


def test_sync_client_timeout_is_retried_with_same_key(node: FakeNode) -> None:
    node.slow_seconds = 0.5
    node.faults[:] = ["slow"]
    with Client(node.url(), timeout=0.2, retry=FAST) as c:
        c.put("k", b"v")
    keys = node.keys_seen("/v1/kv/put")
    assert len(keys) == 2 and keys[0] == keys[1]


def test_sync_client_timeout_surfaces_as_timeout(node: FakeNode) -> None:
    node.slow_seconds = 0.5
    node.faults[:] = ["slow"]
    with Client(node.url(), timeout=0.2, retry=RetryPolicy.disabled()) as c:
        with pytest.raises(Timeout) as ei:
            c.put("k", b"v")
    assert ei.value.code == "client_timeout" and ei.value.idempotency_key


def test_sync_typed_errors(node: FakeNode) -> None:
    with Client(node.url(), retry=FAST) as c:
        with pytest.raises(NotFound) as nf:
            c.get("missing")
        assert nf.value.code == "key_not_found" and nf.value.status == 404
        assert nf.value.revision == 0
        assert c.get("missing", default=None) is None
        w = c.put("k", "v1")
        with pytest.raises(Conflict) as cf:
            c.cas("k", "v2", expect_version=7)
        assert cf.value.current.text == "v1" and cf.value.current.version == 1
        with pytest.raises(Conflict) as cf:
            c.cas("new", "v", expect_version=1)
        assert cf.value.current is None
        assert c.cas("k", "v2", expect_mod_revision=w.revision).revision == w.revision + 1
        assert c.cas("fresh", "v", must_not_exist=True).revision == w.revision + 2
        node.faults[:] = [(410, "compacted")]
        with pytest.raises(Compacted):
            c.get("k", revision=1)
        node.faults[:] = [(400, "future_revision")]
        with pytest.raises(InvalidRequest):
            c.get("k", revision=99)
        node.faults[:] = [(413, "value_too_large")]
        with pytest.raises(InvalidRequest) as ir:
            c.put("k", b"x")
        assert ir.value.code == "value_too_large"
    # non-retryable errors are raised at once: one request each
    assert [s.path for s in node.seen].count("/v1/kv/put") == 2


def test_sync_scan_follows_continuations(node: FakeNode) -> None:
    with Client(node.url(), retry=FAST) as c:
        for i in range(7):
            c.put(f"p/{i}", str(i))
        c.put("q/0", "x")
        keys = [kv.key for kv in c.scan("p/", page_size=3)]
        assert keys == [f"p/{i}" for i in range(7)]
        page = c.range("p/", limit=3, keys_only=True)
        assert page.more and len(page) == 3 and page.kvs[0].value == b""
    ranges = [s.body for s in node.seen if s.path == "/v1/kv/range"]
    assert len(ranges) == 4  # 3 scan pages + 1 range
    assert ranges[1]["revision"] == ranges[1]["min_revision"] == 8
    assert ranges[1]["continuation"] == "p/3"


def test_sync_txn_and_batch(node: FakeNode) -> None:
    with Client(node.url(), retry=FAST) as c:
        r = c.txn([compare.version("lock") == 0], [ops.put("lock", "me")], [ops.get("lock")])
        assert r.succeeded and r.results[0].revision == 1
        r = c.txn([c.compare.version("lock") == 0], [c.ops.put("lock", "you")], [c.ops.get("lock")])
        assert not r.succeeded and r.results[0].text == "me"
        node.faults[:] = ["503"]
        with c.batch() as b:
            b.put("a", "1").get("lock").get("nope").delete("x")
        wa, kv, none, err = b.results
        assert wa.revision == 2 and kv.text == "me" and none is None
        assert isinstance(err, InvalidRequest) and err.code == "unknown_op"
    batches = [s.body for s in node.seen if s.path == "/v1/batch"]
    assert batches[0] == batches[1]  # the retry resent the same per-op keys


def test_sync_prefer_leader(node: FakeNode) -> None:
    node.leader_port = node.ports[1]
    with Client([node.url(0), node.url(1)], prefer_leader=True, retry=FAST) as c:
        c.put("k", b"v")
        assert c.endpoint == node.url(1)
        assert c.status(node.url(0))["role"] == "follower"
    assert [s.port for s in node.seen if s.path == "/v1/kv/put"] == [node.ports[1]]


# ------------------------------------------------------------------------ async


async def test_async_roundtrip_and_retry_same_key(node: FakeNode) -> None:
    node.faults[:] = ["503", "close"]
    async with AsyncClient(node.url(), ns="agents", retry=FAST) as c:
        blob = b"\xff\x00\xfe"
        w = await c.put("a", blob)
        kv = await c.get("a")
        assert kv.value == blob and kv.mod_revision == w.revision and kv.ns == "agents"
    keys = node.keys_seen("/v1/kv/put")
    assert len(keys) == 3 and len(set(keys)) == 1


async def test_async_write_applied_once_despite_504(node: FakeNode) -> None:
    node.faults[:] = ["504_after_apply", "504_after_apply"]
    async with AsyncClient(node.url(), retry=FAST) as c:
        res = await c.put("k", b"v")
    assert res.replayed and res.revision == 1 and node.revision == 1
    keys = node.keys_seen("/v1/kv/put")
    assert len(keys) == 3 and len(set(keys)) == 1


async def test_async_rotates_away_from_refused_endpoint(node: FakeNode) -> None:
    dead = f"http://127.0.0.1:{_free_port()}"
    async with AsyncClient([dead, node.url()], retry=FAST) as c:
        await c.put("k", b"v")
        assert c.endpoint == node.url()


async def test_async_all_down_and_timeouts(node: FakeNode) -> None:
    async with AsyncClient(f"127.0.0.1:{_free_port()}", retry=FAST) as c:
        with pytest.raises(Unavailable) as ei:
            await c.get("k")
        assert ei.value.code == "connection_failed"
    node.slow_seconds = 0.5
    node.faults[:] = ["slow"]
    async with AsyncClient(node.url(), timeout=0.2, retry=RetryPolicy.disabled()) as c:
        with pytest.raises(Timeout) as te:
            await c.put("k", b"v")
        assert te.value.code == "client_timeout" and te.value.idempotency_key


async def test_async_typed_errors_scan_txn_batch(node: FakeNode) -> None:
    async with AsyncClient(node.url(), retry=FAST) as c:
        with pytest.raises(NotFound):
            await c.get("missing")
        assert await c.get("missing", default="d") == "d"
        await c.put("k", "v1")
        with pytest.raises(Conflict) as cf:
            await c.cas("k", "v2", must_not_exist=True)
        assert cf.value.current.text == "v1"
        node.faults[:] = [(410, "compacted")]
        with pytest.raises(Compacted):
            await c.range("k", revision=1)
        for i in range(5):
            await c.put(f"s/{i}", str(i))
        assert [kv.text async for kv in c.scan("s/", page_size=2)] == ["0", "1", "2", "3", "4"]
        r = await c.txn([compare.version("k") == 1], [ops.put("k", "v3")])
        assert r.succeeded
        async with c.batch() as b:
            b.get("k").put("z", b"1")
        assert b.results[0].text == "v3" and b.results[1].revision > r.revision


async def test_async_prefer_leader(node: FakeNode) -> None:
    node.leader_port = node.ports[1]
    async with AsyncClient([node.url(0), node.url(1)], prefer_leader=True, retry=FAST) as c:
        await c.put("k", b"v")
        assert c.endpoint == node.url(1)
        st = await c.status()
        assert st["role"] == "leader"


async def test_async_client_created_outside_loop_usable_inside(node: FakeNode) -> None:
    c = AsyncClient(node.url(), retry=FAST)
    try:
        t0 = time.monotonic()
        for i in range(20):  # keep-alive: one session, reused connection
            await c.put(f"k{i}", b"v")
        assert time.monotonic() - t0 < 5
    finally:
        await c.close()
    with pytest.raises(RuntimeError):
        await c.get("k0")


# ------------------------------------------------ a dead leader still named by a follower


def _dead_leader(node: FakeNode) -> list[str]:
    """node 0 answers, two endpoints refuse connections, and node 0 still names the second
    dead one the leader (as a follower does for an election timeout after a crash)."""
    dead = [_free_port(), _free_port()]
    node.leader_port = dead[1]
    return [node.url(0), *(f"http://127.0.0.1:{p}" for p in dead)]


def test_sync_a_refused_leader_is_not_chosen_again(node: FakeNode) -> None:
    # Before: every retry went back to the named leader, and the put failed with
    # "cannot connect to" it though node 0 serves (issue 30 item 16).
    with Client(_dead_leader(node), retry=FAST) as c:
        c.put("k", b"v")
        assert c.endpoint == node.url(0)
    assert [s.port for s in node.seen if s.path == "/v1/kv/put"] == [node.ports[0]]


async def test_async_a_refused_leader_is_not_chosen_again(node: FakeNode) -> None:
    async with AsyncClient(_dead_leader(node), retry=FAST) as c:
        await c.put("k", b"v")
        assert c.endpoint == node.url(0)
    assert [s.port for s in node.seen if s.path == "/v1/kv/put"] == [node.ports[0]]
