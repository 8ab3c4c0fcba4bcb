"""Watch without a network: the request's validation and schema (node/ops/watch.py), the
frames node/api/watch.py assembles from a real state machine (catch-up, live, progress, the
error frames), their wire framing, and the client's sans-IO half (client/watch/core.py): the
frame decoder and the session that resumes without gap or duplicate."""

from __future__ import annotations

import asyncio
import itertools
import json
import struct

import msgpack
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from statekeeper.client.errors import (
    Compacted,
    InvalidRequest,
    Unauthenticated,
    Unavailable,
    WatchOverflow,
)
from statekeeper.client.retry import Endpoints, RetryPolicy
from statekeeper.client.watch.core import (
    FrameDecoder,
    WatchEvent,
    WatchProgress,
    WatchSession,
    watch_request,
)
from statekeeper.node.api import codec, watch
from statekeeper.node.api.authz import ROOT, Authorizer, Principal
from statekeeper.node.api.chunked import Flow, pump
from statekeeper.node.api.server import StreamStalled
from statekeeper.node.api.stream_auth import StreamGuard, TokenChanges
from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError, status_for
from statekeeper.node.openapi import document as openapi
from statekeeper.node.ops.watch import validate_watch
from statekeeper.node.reads import RevisionWaiters
from tests.unit.store.util import Node, put

# -- the request --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"prefix": "a/"}, "start_revision is required"),
        ({"prefix": "a/", "start_revision": 0}, "start_revision must be an integer"),
        ({"start_revision": "3"}, "start_revision must be an integer"),
        ({"start_revision": True}, "start_revision must be an integer"),
        ({"start_revision": 1, "start": "b", "end": "a"}, "bad range"),
        ({"start_revision": 1, "start": "a", "end": "a"}, "bad range"),
        ({"start_revision": 1, "end": ""}, "bad range"),
        ({"start_revision": 1, "key": "k", "prefix": "p"}, "not key and prefix"),
        ({"start_revision": 1, "prefix": "p", "end": "q"}, "not prefix and start/end"),
        ({"start_revision": 1, "key": ""}, "key must not be empty"),
        ({"start_revision": 1, "key": "a\x00b"}, "NUL"),
        ({"start_revision": 1, "progress_ms": 60_001}, "progress_ms"),
        ({"start_revision": 1, "prev_kv": 1}, "prev_kv"),
    ],
)
def test_bad_watch_requests_are_invalid_argument(body, message):
    with pytest.raises(OpError) as ei:
        validate_watch(body, Limits())
    assert ei.value.code == "invalid_argument" and message in ei.value.message


def test_a_watch_request_is_normalized():
    assert validate_watch({"prefix": "", "start_revision": 7}, Limits()) == {
        "op": "watch",
        "ns": "default",
        "key": None,
        "prefix": "",
        "start": None,
        "end": None,
        "start_revision": 7,
        "progress_ms": 1000,
        "prev_kv": False,
    }
    with pytest.raises(OpError) as ei:
        validate_watch({"key": "k" * 5000, "start_revision": 1}, Limits())
    assert ei.value.code == "key_too_large"


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ({"prefix": "a/", "start_revision": 1}, True),
        ({"key": "k", "start_revision": 3, "prev_kv": True, "progress_ms": 0}, True),
        ({"start": "a", "end": "b", "start_revision": 3}, True),
        ({"prefix": "a/"}, False),
        ({"prefix": "a/", "start_revision": 0}, False),
        ({"key": "k", "prefix": "a/", "start_revision": 1}, False),
        ({"key": "k", "end": "z", "start_revision": 1}, False),
        ({"prefix": "a/", "start": "a", "start_revision": 1}, False),
        ({"prefix": "a/", "start_revision": 1, "progress_ms": 60_001}, False),
    ],
)
def test_the_openapi_request_schema_follows_the_declaration(value, ok):
    doc = openapi.document()
    registry = Registry().with_resource("urn:doc", DRAFT202012.create_resource(doc))
    v = Draft202012Validator(
        {"$ref": "urn:doc#/components/schemas/WatchRequest"}, registry=registry
    )
    assert v.is_valid(value) is ok
    frame = Draft202012Validator(
        {"$ref": "urn:doc#/components/schemas/WatchFrame"}, registry=registry
    )
    assert frame.is_valid({"progress": True, "revision": 3})
    assert frame.is_valid({"error": {"code": "compacted", "message": "m", "compact_revision": 2}})
    assert not frame.is_valid({"events": [], "revision": 3})


def test_the_client_refuses_a_start_revision_below_one():
    with pytest.raises(InvalidRequest):
        watch_request("ns", 0, prefix="p")
    body = msgpack.unpackb(watch_request("ns", 5, key="k", progress=0.25, prev_kv=True).body)
    assert body == {
        "ns": "ns",
        "start_revision": 5,
        "key": "k",
        "progress_ms": 250,
        "prev_kv": True,
    }


# -- framing ---------------------------------------------------------------------------------

FRAMES = [
    {
        "events": [
            {
                "type": "put",
                "kv": {
                    "key": "k",
                    "value": b"\xff\x00",
                    "version": 1,
                    "create_revision": 3,
                    "mod_revision": 3,
                },
            }
        ],
        "revision": 3,
    },
    {"progress": True, "revision": 9},
    {"error": {"code": "compacted", "message": "m", "compact_revision": 4, "revision": 9}},
]


@pytest.mark.parametrize("fmt", [codec.MSGPACK, codec.JSON])
def test_frames_round_trip_through_any_split(fmt):
    raw = watch.encode_frames(FRAMES, fmt)
    if fmt == codec.JSON:
        lines = raw.split(b"\n")
        assert len(lines) == 4 and lines[-1] == b"" and json.loads(lines[1]) == FRAMES[1]
        assert json.loads(lines[0])["events"][0]["kv"]["value_b64"] == "/wA="
    else:
        (n,) = struct.unpack(">I", raw[:4])
        assert msgpack.unpackb(raw[4 : 4 + n], raw=False) == FRAMES[0]
    for step in (1, 3, 7, len(raw)):
        dec = FrameDecoder(watch.content_type(fmt))
        got = []
        for i in range(0, len(raw), step):
            got += dec.feed(raw[i : i + step])
        assert len(got) == 3 and got[1] == FRAMES[1]


def test_the_decoder_bounds_a_frame():
    dec = FrameDecoder(watch.MSGPACK_FRAMES, max_frame_bytes=10)
    with pytest.raises(Exception, match="watch frame of 11 bytes"):
        dec.feed(struct.pack(">I", 11))
    with pytest.raises(Exception, match="undecodable"):
        FrameDecoder("application/x-ndjson").feed(b"{nope\n")


# -- frames from a state machine --------------------------------------------------------------


def _w(start_revision, progress_ms=0, **sel):
    body = {"start_revision": start_revision, "progress_ms": progress_ms, **sel}
    return validate_watch(body, Limits())


async def _next(gen, timeout=2.0):
    return await asyncio.wait_for(gen.__anext__(), timeout)


async def _frames(gen):
    """The next page of a watch_frames generator, decoded (it yields encoded pieces)."""
    pieces = await _next(gen)
    return FrameDecoder(watch.MSGPACK_FRAMES).feed(b"".join(p for p, _ in pieces))


async def test_catch_up_then_live_in_revision_order(tmp_path):
    node = Node(tmp_path / "db")
    waiters = RevisionWaiters(lambda: node.sm.revision)
    node.put("a/1", b"x")  # 1
    node.put("b", b"x")  # 2
    node.apply(put("a/2", b"y"), put("a/1", b"z"))  # 3, 4
    gen = watch.watch_frames(node.sm, waiters, _w(1, prefix="a/"))
    assert [f["revision"] for f in await _frames(gen)] == [1, 3, 4]
    pending = asyncio.ensure_future(_frames(gen))
    await asyncio.sleep(0.05)
    assert not pending.done()  # caught up: waiting for apply
    node.put("a/3", b"w")  # 5
    waiters.applied()
    (frame,) = await pending
    assert frame["revision"] == 5 and frame["events"][0]["kv"]["key"] == "a/3"
    await gen.aclose()
    node.sm.close()


async def test_progress_frames_when_idle(tmp_path):
    node = Node(tmp_path / "db")
    waiters = RevisionWaiters(lambda: node.sm.revision)
    node.put("a", b"1")
    node.put("other", b"1")
    gen = watch.watch_frames(node.sm, waiters, _w(1, progress_ms=50, key="a"))
    assert (await _frames(gen))[0]["revision"] == 1
    assert await _frames(gen) == [{"progress": True, "revision": 2}]
    assert await _frames(gen) == [{"progress": True, "revision": 2}]
    await gen.aclose()
    node.sm.close()


async def test_compacted_and_unavailable_end_the_stream(tmp_path, monkeypatch):
    node = Node(tmp_path / "db")
    waiters = RevisionWaiters(lambda: node.sm.revision)
    for i in range(5):
        node.put("a", b"%d" % i)
    node.one({"op": "compact", "revision": 3})
    gen = watch.watch_frames(node.sm, waiters, _w(2))
    (frame,) = await _frames(gen)
    assert frame["error"]["code"] == "compacted"
    assert (frame["error"]["compact_revision"], frame["error"]["revision"]) == (3, 5)
    with pytest.raises(StopAsyncIteration):
        await _frames(gen)
    stopping = watch.watch_frames(node.sm, waiters, _w(4), stopping=lambda: True)
    assert len(await _frames(stopping)) == 2  # revisions 4 and 5
    (frame,) = await _frames(stopping)
    assert frame["error"]["code"] == "unavailable" and frame["error"]["revision"] == 5
    monkeypatch.setattr(watch, "WATCH_LEADERLESS_SECONDS", 0.05)
    monkeypatch.setattr(watch, "WAIT_SLICE", 0.02)
    lonely = watch.watch_frames(node.sm, waiters, _w(6), leader_known=lambda: False)
    (frame,) = await _frames(lonely)
    assert frame["error"]["code"] == "unavailable" and "no raft leader" in frame["error"]["message"]
    node.sm.close()


async def test_a_stalled_client_gets_watch_overflow(tmp_path):
    node = Node(tmp_path / "db")
    waiters = RevisionWaiters(lambda: node.sm.revision)
    node.put("a", b"1")
    node.put("a", b"2")
    active = []
    frames = watch.watch_frames(node.sm, waiters, _w(1))
    body = watch.watch_body(frames, codec.MSGPACK, 1, active.append)
    first = await _next(body)
    assert FrameDecoder(watch.MSGPACK_FRAMES).feed(first)[1]["revision"] == 2
    last = await body.athrow(StreamStalled())
    (frame,) = FrameDecoder(watch.MSGPACK_FRAMES).feed(last)
    assert frame["error"]["code"] == "watch_overflow" and frame["error"]["revision"] == 2
    await body.aclose()
    assert active == [1, -1]
    node.sm.close()


# -- the client's session -------------------------------------------------------------------


THREE_ATTEMPTS = RetryPolicy(max_attempts=3, deadline=None)


def _session(start=5, policy=THREE_ATTEMPTS, **kw):
    eps = Endpoints(["http://a:1", "http://b:1"])
    make = lambda rev: watch_request("ns", rev, prefix="p/")  # noqa: E731
    return WatchSession(make, start, eps, policy, 2.0, progress=1.0, ns="ns", **kw), eps


def _feed(session, *frames):
    session.start(watch.MSGPACK_FRAMES)
    return list(session.feed(watch.encode_frames(list(frames), codec.MSGPACK)))


def _events_frame(rev, *keys):
    return {
        "events": [
            {
                "type": "put",
                "kv": {
                    "key": k,
                    "value": b"v",
                    "version": 1,
                    "create_revision": rev,
                    "mod_revision": rev,
                },
            }
            for k in keys
        ],
        "revision": rev,
    }


def test_the_session_resumes_after_the_last_revision_it_delivered():
    s, eps = _session(progress_events=True)
    url, req, timeout = s.attempt()
    assert url == "http://a:1" and timeout == 3.0
    assert msgpack.unpackb(req.body)["start_revision"] == 5
    items = _feed(s, _events_frame(5, "p/a", "p/b"), {"progress": True, "revision": 8})
    assert [type(i) for i in items] == [WatchEvent, WatchEvent, WatchProgress]
    assert items[1].kv.key == "p/b" and items[1].kv.ns == "ns" and items[1].revision == 5
    assert s.next_revision == 9
    delay = s.retry_after(s.ended())
    assert delay >= 0 and eps.current == "http://b:1"  # moved on
    url, req, _ = s.attempt()
    assert url == "http://b:1" and msgpack.unpackb(req.body)["start_revision"] == 9
    # A frame at or below what was delivered is dropped (no duplicate, whatever happens).
    assert _feed(s, _events_frame(7, "p/x"), _events_frame(9, "p/y"))[0].kv.key == "p/y"


def test_errors_frames_and_giving_up():
    s, _ = _session()
    s.attempt()
    with pytest.raises(Compacted) as ei:
        _feed(s, {"error": {"code": "compacted", "message": "m", "compact_revision": 4}})
    assert ei.value.compact_revision == 4
    with pytest.raises(Compacted):
        s.retry_after(ei.value)  # final
    s, _ = _session()
    s.attempt()
    with pytest.raises(WatchOverflow) as ei:
        _feed(s, _events_frame(5, "p/a"), {"error": {"code": "watch_overflow", "message": "m"}})
    assert s.next_revision == 6 and ei.value.retryable
    s.retry_after(ei.value)
    s.retry_after(Unavailable("down", code="connection_failed"))
    _feed(s, {"progress": True, "revision": 6})  # a frame: the failure count starts over
    assert s.failures == 0
    for _ in range(2):
        s.retry_after(Unavailable("down", code="connection_failed"))
    with pytest.raises(Unavailable):
        s.retry_after(Unavailable("down", code="connection_failed"))  # 3 in a row
    with pytest.raises(InvalidRequest):
        _session()[0].retry_after(
            s.refused(
                400,
                "application/json",
                b'{"error": {"code": "invalid_argument", "message": "bad range"}}',
            )
        )


def test_an_unauthenticated_frame_ends_the_watch_without_resuming():
    """The node ends a watch whose token was revoked or expired with this frame (node/
    stream_auth.py); the session raises Unauthenticated and does not try again."""
    s, _ = _session()
    s.attempt()
    frame = {"error": {"code": "unauthenticated", "message": "token x was revoked", "revision": 7}}
    with pytest.raises(Unauthenticated) as ei:
        _feed(s, _events_frame(5, "p/a"), frame)
    assert "revoked" in ei.value.message and s.next_revision == 6
    with pytest.raises(Unauthenticated):
        s.retry_after(ei.value)


def test_the_deadline_counts_from_the_last_frame():
    now = [0.0]
    s, _ = _session(policy=RetryPolicy(max_attempts=100, deadline=10.0), clock=lambda: now[0])
    s.attempt()
    now[0] = 8.0
    _feed(s, {"progress": True, "revision": 5})
    now[0] = 17.0
    s.retry_after(Unavailable("down", code="connection_lost"))
    now[0] = 18.5
    with pytest.raises(Unavailable):
        s.retry_after(Unavailable("down", code="connection_lost"))


# -- how many watches ---------------------------------------------------------------------


class _LocalReads:
    """ReadPolicy's two members Watches uses, for a single in-process state machine."""

    def __init__(self, sm):
        self.revisions = RevisionWaiters(lambda: sm.revision)

    async def wait(self, consistency, min_revision):
        return None


async def test_watches_per_token_are_bounded(tmp_path):
    """One reader token opened 500 watches (issue 27, item 4): each a page of memory and a
    task. The 101st open watch of one token is refused 429 `too_many_watches`; another
    token is not affected, and a watch that ends frees its place."""
    node = Node(tmp_path / "db")
    node.put("a", b"1")
    watches = watch.Watches(node.sm, _LocalReads(node.sm), Limits(), lambda: False, lambda: True)
    authz = Authorizer(dict, b"", lambda: 0)

    def caller(token_id):
        return StreamGuard(authz, Principal(token_id, token_id, ROOT, 0), TokenChanges(dict))

    body = {"start_revision": 1}
    opened = [await watches.open(body, codec.JSON, caller("t1")) for _ in range(100)]
    with pytest.raises(OpError) as ei:
        await watches.open(body, codec.JSON, caller("t1"))
    assert ei.value.code == "too_many_watches" and status_for(ei.value.code) == 429
    other = await watches.open(body, codec.JSON, caller("t2"))
    opened[0].on_end()
    opened.append(await watches.open(body, codec.JSON, caller("t1")))
    for resp in [*opened[1:], other]:
        resp.on_end()
        await resp.chunks.aclose()
    node.sm.close()


async def test_a_page_goes_out_in_pieces_and_the_loop_runs_between_them(tmp_path):
    """A watch encoded its whole page (up to 4 MiB of values) as one chunk and wrote it
    before looking at flow control, and the writer never let the loop run between chunks
    (issue 27, item 4: another tenant's get waited 11.6 s). Now pieces of about 64 KiB go
    out one at a time, with the loop's other tasks running between two."""
    node = Node(tmp_path / "db")
    for i in range(100):
        node.put(f"k{i:03}", b"v" * 8192)
    frames = watch.watch_frames(node.sm, RevisionWaiters(lambda: node.sm.revision), _w(1))
    body = watch.watch_body(frames, codec.MSGPACK, 1)
    written: list[tuple[int, int]] = []  # (bytes, turns the other task had by then)
    turns = 0

    async def other_tenant():
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    def write(data):
        written.append((len(data), turns))
        if sum(n for n, _ in written) > 800_000:  # the page is out: stop the stream
            writing.cancel()

    other = asyncio.ensure_future(other_tenant())
    writing = asyncio.ensure_future(
        pump(body, write, Flow(asyncio.get_running_loop()), 30.0, lambda: False)
    )
    with pytest.raises(asyncio.CancelledError):
        await writing
    other.cancel()
    await body.aclose()
    biggest = max(n for n, _ in written)
    assert biggest <= 64 * 1024 + 9000, f"one chunk of {biggest} bytes"
    seen = [t for _, t in written]
    assert all(a < b for a, b in itertools.pairwise(seen)), f"turns at each write: {seen}"
    node.sm.close()


# -- one read and one encoding for the watchers of one selection ------------------------------


async def test_watchers_of_one_selection_share_one_read_and_one_encoding(tmp_path, monkeypatch):
    """500 watches by one reader plus 30 writes of 64 KiB took a node from 88 MiB to 2.4 GB
    (issue 27, item 4): each watch read, encoded and buffered its own page. Watchers of the
    same selection, options and encoding at the same position now share one read and one
    encoding of the page (node/api/watch.py, SharedPages), and each gets the same bytes."""
    node = Node(tmp_path / "db")
    node.put("a/0", b"x")  # 1
    node.put("b", b"x")  # 2
    reads = _LocalReads(node.sm)
    watches = watch.Watches(node.sm, reads, Limits(), lambda: False, lambda: True)
    calls = {"read": 0, "encode": 0}
    real_read, real_encode = watch.read_changes, watch.encode_frame

    def counted_read(*a, **kw):
        calls["read"] += 1
        return real_read(*a, **kw)

    def counted_encode(*a, **kw):
        calls["encode"] += 1
        return real_encode(*a, **kw)

    monkeypatch.setattr(watch, "read_changes", counted_read)
    monkeypatch.setattr(watch, "encode_frame", counted_encode)
    body = {"start_revision": 3, "prefix": "a/", "progress_ms": 0}
    opened = [await watches.open(body, codec.MSGPACK) for _ in range(5)]
    pending = [asyncio.ensure_future(_next(r.chunks)) for r in opened]
    await asyncio.sleep(0.05)  # every watcher read its (empty) first page and waits
    assert not any(p.done() for p in pending)
    calls.update(read=0, encode=0)
    node.put("a/1", b"v" * 1000)  # 3
    reads.revisions.applied()
    got = await asyncio.gather(*pending)
    assert len(set(got)) == 1  # the same bytes for every watcher
    (frame,) = FrameDecoder(watch.MSGPACK_FRAMES).feed(got[0])
    assert frame["revision"] == 3 and frame["events"][0]["kv"]["key"] == "a/1"
    assert calls == {"read": 1, "encode": 1}
    for r in opened:
        await r.chunks.aclose()
        r.on_end()
    node.sm.close()


async def test_a_shared_page_gives_each_watcher_its_exact_frames(tmp_path):
    """Sharing changes no watcher's frames: a watcher that takes a page read before the
    last write gets that write with its next page (no gap, no duplicate); one starting at
    another revision reads its own page; a compaction past the page's first revision
    answers `compacted` rather than the page; a revoked caller gets `unauthenticated`
    rather than the page; and the page is dropped when its last watcher is done."""
    node = Node(tmp_path / "db")
    waiters = RevisionWaiters(lambda: node.sm.revision)
    for i in range(6):  # 1..6: a/0, b, a/1, b, a/2, b
        node.put(f"a/{i // 2}" if i % 2 == 0 else "b", b"%d" % i)
    pages = watch.SharedPages()

    def watcher(start, guard=None):
        w = _w(start, prefix="a/", progress_ms=0)
        return watch.watch_frames(node.sm, waiters, w, guard=guard, pages=pages)

    slow = watcher(1)
    assert [f["revision"] for f in await _frames(slow)] == [1, 3, 5]  # and holds the page
    node.put("a/9", b"7")  # 7
    waiters.applied()
    late = watcher(1)
    assert [f["revision"] for f in await _frames(late)] == [1, 3, 5]  # the page in flight
    assert (pages.reads, pages.shared) == (1, 1)
    assert [f["revision"] for f in await _frames(late)] == [7]  # then the rest, read anew
    other = watcher(3)
    assert [f["revision"] for f in await _frames(other)] == [3, 5, 7]
    gone = StreamGuard(
        Authorizer(dict, b"", lambda: 0), Principal("t", "t", ROOT, 0), TokenChanges(dict)
    )
    revoked = watcher(1, gone)
    (frame,) = await _frames(revoked)
    assert frame["error"]["code"] == "unauthenticated" and frame["error"]["revision"] == 0
    node.one({"op": "compact", "revision": 2})
    after = watcher(1)
    (frame,) = await _frames(after)
    assert frame["error"]["code"] == "compacted" and frame["error"]["compact_revision"] == 2
    assert pages.shared == 2  # the revoked watcher took the page, the compacted one did not
    for gen in (slow, late, other, revoked, after):
        await gen.aclose()
    assert len(pages) == 0  # nothing held once nobody sends it
    node.sm.close()
