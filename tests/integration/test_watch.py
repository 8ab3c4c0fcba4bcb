"""Watch against a real 3-node cluster, through both clients: every change after the start
revision, in order, without gap or duplicate (key, prefix and range watches, prev_kv),
progress frames when idle, `compacted` naming the compact revision, the wire framing
(NDJSON and length-prefixed msgpack), bad input as coded errors, the CLI, and a watcher
whose node is killed (SIGKILL) or stopped while writes go on: it resumes on another node and
still sees exactly the committed changes."""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import msgpack
import pytest

from statekeeper.client import (
    AsyncClient,
    Client,
    Compacted,
    InvalidRequest,
    RetryPolicy,
    StatekeeperError,
)
from statekeeper.client.watch.core import WatchEvent, WatchProgress
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.cluster_fixture import raw_connection, raw_headers

pytestmark = pytest.mark.integration

PATIENT = RetryPolicy(max_attempts=100, deadline=60.0, backoff_max=0.5)


def _urls(lc: LocalCluster, first: str | None = None) -> list[str]:
    ids = sorted(lc.node_ids, key=lambda n: n != first)
    return [lc.url(i) for i in ids]


def _ns() -> str:
    return f"w-{uuid.uuid4().hex[:8]}"


def _collect(items: Any, until: int, limit: float = 30.0) -> list[WatchEvent]:
    """The events of a watch (asked with progress_events) up to revision `until`."""
    got: list[WatchEvent] = []
    deadline = time.monotonic() + limit
    for item in items:
        if isinstance(item, WatchEvent):
            got.append(item)
        if item.revision >= until and isinstance(item, WatchProgress):
            break
        assert time.monotonic() < deadline, f"watch stuck at {item}"
    items.close()
    return got


def _changes(events: list[WatchEvent]) -> list[tuple[int, str, str, bytes]]:
    return [(e.revision, e.type, e.kv.key, e.kv.value) for e in events]


def test_watch_delivers_every_change_in_order_sync(shared_cluster: LocalCluster) -> None:
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        r1 = c.put("a/1", "one").revision
        c.put("b", "other key")
        c.put("other", "x", ns="elsewhere")
        r3 = c.put("a/2", "two").revision
        c.txn([], success=[c.ops.put("a/1", "uno"), c.ops.put("a/3", "tres")])
        r5 = c.delete("a/", prefix=True).revision
        r6 = c.put("a/1", "again").revision
        watch = c.watch("a/", start_revision=r1, prev_kv=True, progress=0.2, progress_events=True)
        events = _collect(watch, r6)
        assert _changes(events) == [
            (r1, "put", "a/1", b"one"),
            (r3, "put", "a/2", b"two"),
            (r3 + 1, "put", "a/1", b"uno"),
            (r3 + 1, "put", "a/3", b"tres"),
            (r5, "delete", "a/1", b""),
            (r5, "delete", "a/2", b""),
            (r5, "delete", "a/3", b""),
            (r6, "put", "a/1", b"again"),
        ]
        assert events[2].prev_kv.value == b"one" and events[0].prev_kv is None
        assert events[4].prev_kv.value == b"uno" and events[4].kv.mod_revision == r5
        assert (events[7].kv.version, events[7].kv.create_revision) == (1, r6)
        # A key, a range, and a start in the middle.
        key = _collect(
            c.watch(key="a/1", start_revision=r1, progress=0.2, progress_events=True), r6
        )
        assert [e.revision for e in key] == [r1, r3 + 1, r5, r6]
        rng = c.watch(start="a/2", end="a/3", start_revision=r3, progress=0.2, progress_events=True)
        assert [(e.type, e.key) for e in _collect(rng, r6)] == [("put", "a/2"), ("delete", "a/2")]
        whole = _collect(c.watch(start_revision=r5, progress=0.2, progress_events=True), r6)
        assert [e.key for e in whole] == ["a/1", "a/2", "a/3", "a/1"]


def test_live_changes_and_progress_async(shared_cluster: LocalCluster) -> None:
    async def main() -> None:
        async with AsyncClient(_urls(shared_cluster), ns=_ns()) as c:
            start = (await c.put("k", "0")).revision
            watch = c.watch("k", start_revision=start + 1, progress=0.2, progress_events=True)
            first = await asyncio.wait_for(watch.__anext__(), 5)
            assert isinstance(first, WatchProgress) and first.revision >= start  # idle
            second = await asyncio.wait_for(watch.__anext__(), 5)
            assert isinstance(second, WatchProgress)  # idle watches keep getting them
            revs = [(await c.put("k", str(i))).revision for i in range(1, 4)]
            await c.delete("k")
            got = []
            async for item in watch:
                if isinstance(item, WatchEvent):
                    got.append((item.revision, item.type, item.kv.value))
                    if item.type == "delete":
                        break
            await watch.aclose()
            assert got == [(r, "put", b"%d" % i) for i, r in enumerate(revs, 1)] + [
                (revs[-1] + 1, "delete", b"")
            ]
            assert not c._streams  # its connection is closed

    asyncio.run(main())


def test_a_compacted_start_is_a_coded_error(shared_cluster: LocalCluster) -> None:
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        first = c.put("c", "1").revision
        last = c.put("c", "2").revision
        c.compact(last)
        with pytest.raises(Compacted) as ei:
            next(iter(c.watch("c", start_revision=first)))
        assert ei.value.compact_revision == last and ei.value.code == "compacted"
        assert ei.value.details["revision"] >= last
    status, headers, body = _raw(shared_cluster, {"key": "c", "start_revision": first})
    assert status == 200 and headers["transfer-encoding"] == "chunked"
    (frame,) = [json.loads(line) for line in body.splitlines()]
    assert frame["error"]["code"] == "compacted" and frame["error"]["compact_revision"] == last


def _raw(lc: LocalCluster, body: dict, fmt: str = "json", read: float = 0.0):
    """POST /v1/watch; the status, headers and what arrived of the body within `read`
    seconds (all of it when the stream ends first)."""
    conn = raw_connection(lc, lc.node_ids[1], timeout=10)
    ctype = "application/json" if fmt == "json" else "application/msgpack"
    data = json.dumps(body).encode() if fmt == "json" else msgpack.packb(body)
    try:
        conn.request("POST", "/v1/watch", body=data, headers=raw_headers(ctype))
        r = conn.getresponse()
        headers = {k.lower(): v for k, v in r.getheaders()}
        if r.status != 200 or not read:
            return r.status, headers, r.read()
        out = b""
        end = time.monotonic() + read
        while time.monotonic() < end:
            part = r.read1(65536)
            if not part:
                break
            out += part
        return r.status, headers, out
    finally:
        conn.close()


BAD = [
    ("no start_revision", {"prefix": "a/"}, 400, "invalid_argument"),
    ("start_revision 0", {"prefix": "a/", "start_revision": 0}, 400, "invalid_argument"),
    ("empty range", {"start": "b", "end": "a", "start_revision": 1}, 400, "invalid_argument"),
    ("two selections", {"key": "k", "prefix": "a/", "start_revision": 1}, 400, "invalid_argument"),
    ("key too large", {"key": "k" * 5000, "start_revision": 1}, 413, "key_too_large"),
    ("future start", {"prefix": "a/", "start_revision": 10**12}, 400, "future_revision"),
]


@pytest.mark.parametrize(("name", "body", "status", "code"), BAD, ids=[b[0] for b in BAD])
def test_bad_watch_input_gets_a_coded_error(
    shared_cluster: LocalCluster, name: str, body: dict, status: int, code: str
) -> None:
    got, _, raw = _raw(shared_cluster, body)
    answer = json.loads(raw)
    assert (got, answer["error"]["code"]) == (status, code), answer
    assert answer["error"]["message"]
    with Client(_urls(shared_cluster)) as c, pytest.raises(StatekeeperError) as ei:
        it = c.watch(
            body.get("prefix"),
            key=body.get("key"),
            start=body.get("start"),
            end=body.get("end"),
            start_revision=body.get("start_revision", 0),
        )
        next(iter(it))
    assert isinstance(ei.value, InvalidRequest)


def test_the_wire_framing(shared_cluster: LocalCluster) -> None:
    ns = _ns()
    with Client(_urls(shared_cluster), ns=ns) as c:
        rev = c.put("f", b"\xff\x00").revision
        c.put("f", "text")
    body = {"ns": ns, "key": "f", "start_revision": rev, "progress_ms": 100}
    status, headers, raw = _raw(shared_cluster, body, read=0.5)
    assert headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in raw.splitlines()]
    assert lines[0]["events"][0]["kv"]["value_b64"] == "/wA=" and lines[0]["revision"] == rev
    assert lines[1]["events"][0]["kv"]["value"] == "text"
    assert lines[2] == {"progress": True, "revision": lines[2]["revision"]}
    status, headers, raw = _raw(shared_cluster, body, fmt="msgpack", read=0.5)
    assert headers["content-type"] == "application/msgpack; framing=length-prefixed"
    (n,) = struct.unpack(">I", raw[:4])
    frame = msgpack.unpackb(raw[4 : 4 + n], raw=False)
    assert frame["events"][0]["kv"]["value"] == b"\xff\x00"


def test_the_watch_cli(shared_cluster: LocalCluster) -> None:
    ns = _ns()
    urls = ",".join(_urls(shared_cluster))
    with Client(urls, ns=ns) as c:
        rev = c.put("jobs/1", "queued").revision
    cmd = [
        sys.executable,
        "-m",
        "statekeeper.cluster.cli",
        "watch",
        "jobs/",
        "--from",
        str(rev),
        "--json",
        "--ns",
        ns,
        "--endpoints",
        urls,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        assert (first["revision"], first["type"], first["key"], first["value"]) == (
            rev,
            "put",
            "jobs/1",
            "queued",
        )
        with Client(urls, ns=ns) as c:
            c.delete("jobs/1")
        assert json.loads(proc.stdout.readline())["type"] == "delete"
    finally:
        proc.kill()
        proc.wait()
    # From revision 1: the shared cluster's history was compacted by an earlier test (exit
    # 1 saying so), or it was not and the watch streams (it never ends by itself: reading
    # its first line is the test; waiting for an exit timed out in a two-worker run).
    proc = subprocess.Popen(
        [*cmd[:5], "--from", "1", "--ns", ns, "--endpoints", urls],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # "" once it exited
        if line:
            assert line.split()[1:3] == ["put", "jobs/1"], line
        else:
            assert proc.wait(30) == 1 and "compacted" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


# -- node failures --------------------------------------------------------------------------


class Writer(threading.Thread):
    """Puts w/0, w/1, ... one at a time until stopped; remembers what was acknowledged."""

    def __init__(self, urls: list[str], ns: str) -> None:
        super().__init__(daemon=True)
        self.client = Client(urls, ns=ns, retry=PATIENT)
        self.acked: dict[str, int] = {}
        self.stop = threading.Event()
        self.i = 0

    def run(self) -> None:
        while not self.stop.is_set():
            key = f"w/{self.i}"
            self.i += 1
            try:
                self.acked[key] = self.client.put(key, key).revision
            except StatekeeperError:
                pass  # unknown outcome: may or may not be committed
            time.sleep(0.005)

    def finish(self) -> dict[str, int]:
        self.stop.set()
        self.join(30)
        committed = {kv.key: kv.mod_revision for kv in self.client.scan("w/")}
        self.client.close()
        return committed


def _check(events: list[WatchEvent], committed: dict[str, int], acked: dict[str, int]) -> None:
    revs = [e.revision for e in events]
    assert revs == sorted(set(revs)), "a revision twice or out of order"
    seen = {e.key: e.revision for e in events}
    assert all(e.type == "put" and e.kv.value.decode() == e.key for e in events)
    assert seen == committed  # exactly the committed changes: no gap, nothing extra
    assert all(committed[k] == r for k, r in acked.items())


@pytest.mark.cluster_options(size=3)
def test_a_watcher_resumes_after_its_node_is_killed(cluster: LocalCluster) -> None:
    ns = _ns()
    victim = cluster.leader_id()  # the hardest case: the writes' leader too
    assert victim is not None
    writer = Writer(_urls(cluster), ns)
    start = writer.client.put("probe", "x").revision + 1
    writer.start()
    with Client(
        _urls(cluster, first=victim), ns=ns, prefer_leader=False, retry=PATIENT, timeout=3.0
    ) as c:
        watch = c.watch("w/", start_revision=start, progress=0.2, progress_events=True)
        events: list[WatchEvent] = []
        for item in watch:
            if isinstance(item, WatchEvent):
                events.append(item)
                if len(events) == 20:
                    break
        assert c.endpoint == cluster.url(victim)
        cluster.kill_node(victim)
        time.sleep(2.0)  # writes go on through the new leader
        committed = writer.finish()
        events += _collect(watch, max(committed.values()), limit=60)
        assert c.endpoint != cluster.url(victim)
    _check(events, committed, writer.acked)


@pytest.mark.cluster_options(size=3)
def test_an_async_watcher_resumes_after_its_node_stops(cluster: LocalCluster) -> None:
    ns = _ns()
    victim = next(n for n in cluster.node_ids if n != cluster.leader_id())  # a follower
    writer = Writer(_urls(cluster), ns)
    start = writer.client.put("probe", "x").revision + 1
    writer.start()

    async def main() -> list[WatchEvent]:
        async with AsyncClient(
            _urls(cluster, first=victim), ns=ns, prefer_leader=False, retry=PATIENT, timeout=3.0
        ) as c:
            watch = c.watch("w/", start_revision=start, progress=0.2, progress_events=True)
            events: list[WatchEvent] = []
            stopped = False
            committed: dict[str, int] = {}
            async for item in watch:
                if isinstance(item, WatchEvent):
                    events.append(item)
                if len(events) >= 20 and not stopped:
                    stopped = True  # a graceful stop: the node ends its streams cleanly
                    await asyncio.to_thread(cluster.stop_node, victim)
                    await asyncio.sleep(1.0)
                    committed.update(await asyncio.to_thread(writer.finish))
                if (
                    stopped
                    and isinstance(item, WatchProgress)
                    and committed
                    and (item.revision >= max(committed.values()))
                ):
                    break
            await watch.aclose()
            assert c.endpoint != cluster.url(victim)
            _check(events, committed, writer.acked)
            return events

    assert len(asyncio.run(main())) > 20


@pytest.mark.cluster_options(size=3)
def test_a_watcher_leaves_a_frozen_node(cluster: LocalCluster) -> None:
    """SIGSTOP: no reset, no FIN, the node just stops answering. The watcher notices after
    timeout + progress seconds without a frame and resumes elsewhere."""
    ns = _ns()
    victim = next(n for n in cluster.node_ids if n != cluster.leader_id())
    writer = Writer(_urls(cluster), ns)
    start = writer.client.put("probe", "x").revision + 1
    writer.start()
    try:
        with Client(
            _urls(cluster, first=victim), ns=ns, prefer_leader=False, retry=PATIENT, timeout=1.0
        ) as c:
            watch = c.watch("w/", start_revision=start, progress=0.2, progress_events=True)
            events = [
                i for _, i in zip(range(30), watch, strict=False) if isinstance(i, WatchEvent)
            ]
            cluster.pause_node(victim)
            t0 = time.monotonic()
            time.sleep(1.5)
            committed = writer.finish()
            events += _collect(watch, max(committed.values()), limit=60)
            assert time.monotonic() - t0 < 10
            assert c.endpoint != cluster.url(victim)
    finally:
        cluster.resume_node(victim)
    _check(events, committed, writer.acked)


def test_closing_the_client_ends_a_watch_blocked_in_another_thread(
    shared_cluster: LocalCluster,
) -> None:
    c = Client(_urls(shared_cluster), ns=_ns())
    start = c.put("k", "v").revision + 1
    got: list[Any] = []
    ended = threading.Event()

    def consume() -> None:
        for item in c.watch("k", start_revision=start, progress=None):
            got.append(item)  # nothing comes: the thread blocks in a read
        ended.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    time.sleep(0.5)
    assert not ended.is_set() and len(c._streams) == 1
    c.close()
    assert ended.wait(5), "the watch did not end when its client closed"
    assert got == [] and not c._streams
