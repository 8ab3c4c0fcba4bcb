"""The chaos watchers (chaos.watch_workload) over real HTTP against a fake node on
loopback that streams NDJSON watch frames, ends a stream, and on the resumed stream
re-sends a revision already delivered: what the watcher records (connections with their
resume revision and cause, the node's raw frames, the deliveries) and what the checker
makes of it; the mutation that drops an event; the run option and the CLI flags."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import msgpack
import pytest
from aiohttp import web

from statekeeper.chaos.checker.watch import WatchTruth, check_watch
from statekeeper.chaos.history import Op
from statekeeper.chaos.watch_workload import Watchers
from statekeeper.chaos.workload_config import WorkloadConfig

START = 11  # the fake's range answers revision 10


def _events(rev: int, key: str) -> bytes:
    kv = {"key": key, "value": f"v{rev}", "version": 1, "create_revision": rev,
          "mod_revision": rev}  # fmt: skip
    return json.dumps({"events": [{"type": "put", "kv": kv}], "revision": rev}).encode() + b"\n"


def _progress(rev: int) -> bytes:
    return json.dumps({"progress": True, "revision": rev}).encode() + b"\n"


class FakeWatchNode:
    """/v1/kv/range: revision 10, no keys. /v1/watch: the first stream sends 11 and 12 and
    ends (no error frame: the node went away); the next one, from 13, re-sends 12 (a
    node bug the client hides) and 13, then progress frames at 13 until the client goes."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.url = ""
        self._ready = threading.Event()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = msgpack.unpackb(await request.read())
        if request.path == "/v1/kv/range":
            return web.json_response({"revision": 10, "kvs": [], "more": False})
        assert request.path == "/v1/watch" and body["prefix"] == "k"
        self.starts.append(body["start_revision"])
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if len(self.starts) == 1:
            await resp.write(_events(11, "k0") + _events(12, "k1"))
            await resp.write_eof()
            return resp
        await resp.write(_events(12, "k1") + _events(13, "k2"))
        try:
            for _ in range(100):
                await resp.write(_progress(13))
                await asyncio.sleep(0.1)
        except ConnectionError:
            pass  # the watcher closed
        return resp

    async def _main(self) -> None:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> FakeWatchNode:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@pytest.fixture
def node() -> Iterator[FakeWatchNode]:
    with FakeWatchNode() as n:
        yield n


def _watch(node: FakeWatchNode, **cfg) -> Watchers:
    w = Watchers([node.url], ["node-0"], WorkloadConfig(watchers=1, watch_progress=0.1, **cfg))
    assert w.start() == START
    try:
        assert w.wait_reach(13, 10.0) < 10.0, w.logs[0].records
    finally:
        w.stop()
    return w


TRUTH = WatchTruth("k", START, 13, {r: [(k, "put", f"v{r}")] for r, k in
                                    ((11, "k0"), (12, "k1"), (13, "k2"))},
                   initial={}, final={"k0": "v11", "k1": "v12", "k2": "v13"})  # fmt: skip


# The writes behind the fake's changes, acknowledged at their revisions.
HISTORY = [
    Op(i, 0, "put", (k,), i, i + 1, "ok", {"value": f"v{r}"}, {"revision": r})
    for i, (r, k) in enumerate(((11, "k0"), (12, "k1"), (13, "k2")))
]


def test_a_watcher_records_its_resume_and_the_frame_the_node_sent_twice(node) -> None:
    w = _watch(node)
    assert node.starts == [11, 13]  # resumed from the last delivered revision + 1
    recs = [
        r[:1] + r[2:] for r in w.logs[0].records if r[0] != "progress" and r[2:] != ("progress", 13)
    ]
    assert recs == [
        ("connect", "node-0", 11, None),
        ("frame", "events", 11),
        ("event", 11, "k0", "put", "v11"),
        ("frame", "events", 12),
        ("event", 12, "k1", "put", "v12"),
        ("connect", "node-0", 13, "unavailable"),  # the stream ended: "unavailable"
        ("frame", "events", 12),  # re-sent by the node, dropped by the client
        ("frame", "events", 13),
        ("event", 13, "k2", "put", "v13"),
    ]
    assert w.logs[0].of("progress") and w.counts() == (3, 1)
    res = check_watch(HISTORY, w.logs, TRUTH, "k")
    assert [v.rule for v in res.violations] == ["frames"], res.violations
    assert "node-0 sent an events frame at revision 12 after 12" in res.violations[0].message


def test_the_drop_mutation_loses_one_event_and_the_check_sees_the_gap(node) -> None:
    w = _watch(node, watch_drop=2)
    assert [r[2] for r in w.logs[0].of("event")] == [11, 13]
    assert {v.rule for v in check_watch(HISTORY, w.logs, TRUTH, "k").violations} == {
        "frames",
        "gap",
    }


def test_watchers_are_a_run_option_and_flags() -> None:
    from statekeeper.chaos.cli import build_parser, run_options
    from statekeeper.chaos.runner import RunOptions

    p = build_parser()
    assert run_options(p.parse_args(["run", "--fault", "none"]), "none").watchers == 2
    opts = run_options(p.parse_args("run --fault none --watchers 0".split()), "none")
    assert opts.watchers == 0 and not opts.debug_watch_drop
    opts = run_options(p.parse_args("suite --smoke --debug-watch-drop".split()), "none")
    assert opts.debug_watch_drop
    with pytest.raises(ValueError, match="watchers"):
        RunOptions(watchers=-1).validate()
    with pytest.raises(ValueError, match="debug-watch-drop"):
        RunOptions(watchers=0, debug_watch_drop=True).validate()
    assert WorkloadConfig().watchers == 2
    assert all(k.startswith(WorkloadConfig().watch_prefix) for k in WorkloadConfig().key_names())
