"""The client's stream operations, sans-IO: request bodies and paths, answer parsing, error
mapping, the subscription's requests, the long poll's timeouts. No network."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest

from statekeeper.client import (
    AppendedEvent,
    AppendResult,
    Conflict,
    Event,
    ExpectationFailed,
    InvalidRequest,
    NotFound,
    StreamEvent,
    StreamInfo,
    StreamNotFound,
    StreamPage,
    ops,
)
from statekeeper.client.batch_ops import BatchOps
from statekeeper.client.kv_requests import write_request
from statekeeper.client.ops import txn_op
from statekeeper.client.retry import DEFAULT_RETRY, Endpoints, Exchange
from statekeeper.client.streams.requests import (
    Subscription,
    list_streams_request,
    read_stream_request,
    stream_info_request,
)
from statekeeper.client.wire import Request

MP = "application/msgpack"


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def body_of(req: Request) -> dict[str, Any]:
    assert req.body is not None
    return msgpack.unpackb(req.body, raw=False)


def test_append_request_takes_every_event_form() -> None:
    events = [
        b"raw",
        "text",
        Event("e", type="t", id="i1", meta={"k": 1}),
        {"data": b"d", "id": "i2"},
    ]
    req = write_request(ops.append("s", events, expect=3), "ns1", "ik")
    assert (req.method, req.path, req.op) == ("POST", "/v1/streams/append", "append")
    assert body_of(req) == {
        "stream": "s",
        "events": [
            {"data": b"raw"},
            {"data": b"text"},
            {"data": b"e", "type": "t", "id": "i1", "meta": {"k": 1}},
            {"data": b"d", "id": "i2"},
        ],
        "expect": 3,
        "ns": "ns1",
        "idempotency_key": "ik",
    }
    for one in (b"x", "x", Event(b"x"), {"data": b"x"}):  # a single event alone
        assert ops.append("s", one)["events"] == [{"data": b"x"}]
    assert "expect" not in ops.append("s", b"x")  # "any" is the server's default
    with pytest.raises(InvalidRequest):
        ops.append("s", [])
    with pytest.raises(TypeError):
        ops.append("s", [3])
    with pytest.raises(InvalidRequest):
        ops.append("s", [{"type": "no data"}])


def test_append_result_parsing() -> None:
    req = write_request(ops.append("s", b"x"), "n")
    answer = {
        "revision": 9,
        "stream": "s",
        "first_seq": 4,
        "last_seq": 4,
        "events": [{"seq": 2, "duplicate": True}, {"seq": 4, "duplicate": False}],
    }
    res = req.parse(200, MP, pack(answer))
    assert res == AppendResult(9, "s", 4, 4, [AppendedEvent(2, True), AppendedEvent(4, False)])
    assert (res.duplicates, res.seqs) == (1, [2, 4])


def test_expectation_failed_is_a_conflict_with_last_seq() -> None:
    req = write_request(ops.append("s", b"x", expect=0), "n")
    body = pack(
        {"error": {"code": "expectation_failed", "message": "m", "last_seq": 7, "exists": True}}
    )
    with pytest.raises(ExpectationFailed) as ei:
        req.parse(409, MP, body)
    err = ei.value
    assert isinstance(err, Conflict) and (err.last_seq, err.exists, err.status) == (7, True, 409)
    assert err.current is None


def test_read_stream_request_and_page() -> None:
    req = read_stream_request(
        "n", "s", start=5, direction="backward", limit=2, revision=8, consistency="serializable"
    )
    assert (req.path, req.wait) == ("/v1/streams/read", 0.0)
    assert body_of(req) == {
        "stream": "s",
        "ns": "n",
        "start": 5,
        "limit": 2,
        "revision": 8,
        "direction": "backward",
        "consistency": "serializable",
    }
    answer = {
        "revision": 8,
        "stream": "s",
        "events": [
            {"seq": 5, "data": b'{"a": 1}', "type": "t", "time": 11, "revision": 6, "id": "i"},
            {"seq": 4, "data": b"x", "type": "", "time": 10, "revision": 5, "meta": {"m": 1}},
        ],
        "last_seq": 9,
        "more": True,
        "continuation": "tok",
    }
    page = req.parse(200, MP, pack(answer))
    assert isinstance(page, StreamPage) and (page.revision, page.last_seq, page.more) == (
        8,
        9,
        True,
    )
    first, second = page
    assert first == StreamEvent(5, b'{"a": 1}', "t", 11, 6, "i", {})
    assert first.json() == {"a": 1} and second.text == "x" and second.meta == {"m": 1}
    # JSON answers carry non-UTF-8 data as data_b64.
    json_answer = {
        **answer,
        "events": [{"seq": 1, "data_b64": "/w==", "type": "", "time": 1, "revision": 1}],
    }
    page = req.parse(200, "application/json", json.dumps(json_answer).encode())
    assert page.events[0].data == b"\xff"


def test_long_poll_wait_stretches_the_attempt_timeout_and_deadline() -> None:
    req = read_stream_request("n", "s", start=3, wait=2.5)
    assert body_of(req)["wait_ms"] == 2500 and req.wait == 2.5
    ex = Exchange(req, Endpoints("http://a:1"), DEFAULT_RETRY, 10.0)
    assert ex.next_attempt()[1] == pytest.approx(12.5)
    with pytest.raises(InvalidRequest):
        read_stream_request("n", "s", wait=61)
    assert "wait_ms" not in body_of(read_stream_request("n", "s", wait=0))


def test_stream_info_and_list_streams() -> None:
    req = stream_info_request("n", "s")
    assert (req.path, body_of(req)) == ("/v1/streams/info", {"stream": "s", "ns": "n"})
    counters = {
        "stream": "s",
        "first_seq": 1,
        "last_seq": 3,
        "count": 3,
        "bytes": 9,
        "create_revision": 2,
        "mod_revision": 5,
    }
    assert req.parse(200, MP, pack({"revision": 6, **counters})) == StreamInfo(
        "s", 1, 3, 3, 9, 2, 5, 6
    )
    with pytest.raises(StreamNotFound) as ei:
        req.parse(404, MP, pack({"error": {"code": "stream_not_found", "message": "m"}}))
    assert isinstance(ei.value, NotFound)
    req = list_streams_request("n", "a/", limit=2, continuation="c")
    assert body_of(req) == {"ns": "n", "prefix": "a/", "limit": 2, "continuation": "c"}
    assert req.path == "/v1/streams/list"
    listed = req.parse(
        200, MP, pack({"revision": 6, "streams": [counters], "more": True, "continuation": "d"})
    )
    assert [s.stream for s in listed] == ["s"] and listed.more and listed.continuation == "d"


def test_subscription_follows_the_seqs_and_stays_monotonic() -> None:
    sub = Subscription(
        lambda **kw: read_stream_request("n", "s", wait=5.0, **kw), start=1, consistency=None
    )
    first = next(sub)
    assert body_of(first) == {"stream": "s", "ns": "n", "start": 1, "wait_ms": 5000}
    page = StreamPage([StreamEvent(1, b"a"), StreamEvent(2, b"b")], revision=7, last_seq=2)
    assert [e.seq for e in sub.items(page)] == [1, 2]
    second = body_of(next(sub))
    assert (second["start"], second["consistency"], second["min_revision"]) == (
        3,
        "serializable",
        7,
    )
    sub.items(StreamPage([], revision=9, last_seq=2))  # a poll that timed out: same seq
    third = body_of(next(sub))
    assert (third["start"], third["min_revision"]) == (3, 9)


def test_batch_takes_append_and_stream_reads() -> None:
    b = BatchOps("n")
    b.append("s", [b"x"], expect="no_stream").read_stream("s", limit=5).stream_info("s")
    b.list_streams("p")
    kinds = [(o["op"], "idempotency_key" in o) for o in b.ops]
    assert kinds == [
        ("append", True),
        ("read_stream", False),
        ("stream_info", False),
        ("list_streams", False),
    ]
    assert b.ops[0]["events"] == [{"data": b"x"}] and b.ops[0]["expect"] == "no_stream"
    results = b.request().parse(
        200,
        MP,
        pack(
            {
                "results": [
                    {
                        "error": {
                            "code": "expectation_failed",
                            "message": "m",
                            "last_seq": 2,
                            "exists": True,
                        }
                    },
                    {"revision": 3, "stream": "s", "events": [], "last_seq": 2, "more": False},
                    {"error": {"code": "stream_not_found", "message": "m"}},
                    {"revision": 3, "streams": [], "more": False},
                ]
            }
        ),
    )
    assert isinstance(results[0], ExpectationFailed) and results[0].last_seq == 2
    assert isinstance(results[1], StreamPage) and isinstance(results[2], StreamNotFound)
    assert results[3].streams == []


def test_append_in_a_txn_branch() -> None:
    op = txn_op([], [ops.put("k", "v"), ops.append("s", "e", ns="other", expect="exists")])
    assert op["success"][1] == {
        "op": "append",
        "stream": "s",
        "events": [{"data": b"e"}],
        "expect": "exists",
        "ns": "other",
    }
    raw = txn_op([], [{"op": "append", "stream": "s", "events": ["text"]}])
    assert raw["success"][0]["events"] == [{"data": b"text"}]
