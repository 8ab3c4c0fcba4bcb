"""Event streams against a real 3-node cluster, through both clients: append/read/info/list,
409 ExpectationFailed, a subscription woken by a later append (long poll), append in a txn
and in a batch; and bad input: a coded 4xx, nothing applied."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid

import pytest

from statekeeper.client import (
    AsyncClient,
    Client,
    Event,
    ExpectationFailed,
    InvalidRequest,
    StreamNotFound,
    StreamPage,
)
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.cluster_fixture import raw_connection, raw_headers

pytestmark = pytest.mark.integration


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(i) for i in lc.node_ids]


def _ns() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


# -- the blocking client ---------------------------------------------------------------------


def test_append_read_info_list_sync(shared_cluster: LocalCluster) -> None:
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        r = c.append("orders", [b"a", "b", Event('{"n": 3}', type="json", id="e3", meta={"k": 1})])
        assert (r.first_seq, r.last_seq, r.seqs, r.duplicates) == (1, 3, [1, 2, 3], 0)
        again = c.append("orders", Event('{"n": 3}', type="json", id="e3", meta={"k": 1}), expect=0)
        assert again.duplicates == 1 and again.seqs == [3] and again.revision == r.revision
        r2 = c.append("orders", b"d", expect=3)
        assert (r2.first_seq, r2.revision) == (4, r.revision + 1)

        page = c.read_stream("orders")
        assert [e.seq for e in page] == [1, 2, 3, 4] and page.last_seq == 4 and not page.more
        third = page.events[2]
        assert (third.json(), third.type, third.id, third.meta) == (
            {"n": 3},
            "json",
            "e3",
            {"k": 1},
        )
        assert third.revision == r.revision and third.time_ms > 1_600_000_000_000
        back = c.read_stream("orders", direction="backward", limit=2)
        assert [e.seq for e in back] == [4, 3] and back.more
        past = c.read_stream("orders", revision=r.revision)
        assert past.last_seq == 3 and [e.seq for e in past] == [1, 2, 3]
        assert [e.text for e in c.events("orders", page_size=3)] == ["a", "b", '{"n": 3}', "d"]

        info = c.stream_info("orders")
        assert (info.last_seq, info.count, info.create_revision, info.mod_revision) == (
            4,
            4,
            r.revision,
            r2.revision,
        )
        with pytest.raises(StreamNotFound):
            c.stream_info("nope")
        assert c.read_stream("nope").events == []
        c.append("orders-2", b"x")
        listed = c.list_streams("orders", limit=1)
        assert [s.stream for s in listed] == ["orders"] and listed.more
        rest = c.list_streams("orders", continuation=listed.continuation)
        assert [s.stream for s in rest] == ["orders-2"] and not rest.more


def test_expectation_failed_carries_last_seq(shared_cluster: LocalCluster) -> None:
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        c.append("s", [b"1", b"2"], expect="no_stream")
        for expect in ("no_stream", 1, 5):
            with pytest.raises(ExpectationFailed) as ei:
                c.append("s", b"3", expect=expect)
            assert (ei.value.last_seq, ei.value.exists, ei.value.status) == (2, True, 409)
        with pytest.raises(ExpectationFailed) as ei:
            c.append("missing", b"x", expect="exists")
        assert (ei.value.last_seq, ei.value.exists) == (0, False)
        assert c.stream_info("s").last_seq == 2


def test_subscribe_receives_an_event_appended_after_it_started(
    shared_cluster: LocalCluster,
) -> None:
    ns = _ns()
    with Client(_urls(shared_cluster), ns=ns) as c:
        c.append("feed", [b"old-1", b"old-2"])
        got: list[bytes] = []
        sub = c.subscribe("feed", wait=5.0)
        got += [next(sub).data, next(sub).data]  # catch-up
        late = threading.Timer(0.5, lambda: c.append("feed", b"new"))
        started = time.monotonic()
        late.start()
        event = next(sub)  # a long poll, woken by the append
        late.join()
        assert event.data == b"new" and event.seq == 3
        assert time.monotonic() - started < 4.5  # woken, not timed out
        assert got == [b"old-1", b"old-2"]
        # A long poll that finds nothing answers empty after `wait`.
        t0 = time.monotonic()
        page = c.read_stream("feed", start=4, wait=0.3)
        assert page.events == [] and time.monotonic() - t0 >= 0.25


def test_append_in_a_txn_and_a_batch(shared_cluster: LocalCluster) -> None:
    with Client(_urls(shared_cluster), ns=_ns()) as c:
        r = c.txn(
            [c.compare.missing("lock")], [c.ops.put("lock", "me"), c.ops.append("log", b"locked")]
        )
        assert r.succeeded and r.results[1].last_seq == 1 and r.results[1].revision == r.revision
        assert c.get("lock").mod_revision == c.read_stream("log").events[0].revision
        with pytest.raises(ExpectationFailed):  # a failed expectation fails the whole txn
            c.txn([], [c.ops.put("other", "x"), c.ops.append("log", b"no", expect="no_stream")])
        assert c.get("other", default=None) is None
        with c.batch() as b:
            b.append("log", b"batched", expect=1).read_stream("log").stream_info("log")
        appended, page, info = b.results
        assert appended.seqs == [2] and isinstance(page, StreamPage)
        assert [e.data for e in page] == [b"locked", b"batched"] and info.last_seq == 2
        with c.batch() as b:
            b.append("log", b"x", expect=0).stream_info("absent")
        assert isinstance(b.results[0], ExpectationFailed) and b.results[0].last_seq == 2
        assert isinstance(b.results[1], StreamNotFound)


# -- the asyncio client ----------------------------------------------------------------------


async def test_streams_through_the_async_client(shared_cluster: LocalCluster) -> None:
    async with AsyncClient(_urls(shared_cluster), ns=_ns()) as c:
        r = await c.append("s", [b"a", {"data": b"b", "id": "b"}])
        assert r.seqs == [1, 2]
        with pytest.raises(ExpectationFailed) as ei:
            await c.append("s", b"c", expect=0)
        assert ei.value.last_seq == 2
        page = await c.read_stream("s", start=2)
        assert [e.data for e in page] == [b"b"]
        assert [e.seq async for e in c.events("s", page_size=1)] == [1, 2]
        assert (await c.stream_info("s")).count == 2
        assert [s.stream for s in await c.list_streams()] == ["s"]

        sub = c.subscribe("s", start=3, wait=5.0)
        waiting = asyncio.ensure_future(sub.__anext__())
        await asyncio.sleep(0.5)
        assert not waiting.done()  # the long poll holds
        await c.append("s", b"late")
        event = await asyncio.wait_for(waiting, 5.0)
        assert (event.seq, event.data) == (3, b"late")
        await sub.aclose()

        t = await c.txn([], [c.ops.append("s", b"in-txn", expect=3), c.ops.put("k", "v")])
        assert t.results[0].first_seq == 4
        async with c.batch() as b:
            b.append("s", Event(b"batched", id="z")).read_stream("s", start=5)
        assert b.results[0].seqs == [5] and [e.data for e in b.results[1]] == [b"batched"]


# -- bad input, raw HTTP (no client-side validation) -------------------------------------------


def _post(lc: LocalCluster, path: str, body: dict) -> tuple[int, dict]:
    conn = raw_connection(lc, lc.node_ids[1], timeout=15)
    try:
        conn.request(
            "POST", path, body=json.dumps(body), headers=raw_headers("application/json")
        )
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def _revision(lc: LocalCluster) -> int:
    return _post(lc, "/v1/kv/get", {"key": "probe"})[1]["revision"]


BAD = [
    ("no events", "/v1/streams/append", {"stream": "bad", "events": []}, 400, "invalid_argument"),
    (
        "event without data",
        "/v1/streams/append",
        {"stream": "bad", "events": [{"type": "t"}]},
        400,
        "invalid_argument",
    ),
    (
        "too many events",
        "/v1/streams/append",
        {"stream": "bad", "events": [{"data": "x"}] * 1001},
        413,
        "too_many_events",
    ),
    (
        "data too large",
        "/v1/streams/append",
        {"stream": "bad", "events": [{"data": "x" * (1024 * 1024 + 1)}]},
        413,
        "value_too_large",
    ),
    (
        "duplicate ids",
        "/v1/streams/append",
        {"stream": "bad", "events": [{"data": "x", "id": "a"}, {"data": "y", "id": "a"}]},
        400,
        "invalid_argument",
    ),
    (
        "bad expect",
        "/v1/streams/append",
        {"stream": "bad", "events": [{"data": "x"}], "expect": "soon"},
        400,
        "invalid_argument",
    ),
    (
        "bad data_b64",
        "/v1/streams/append",
        {"stream": "bad", "events": [{"data_b64": "!!"}]},
        400,
        "invalid_argument",
    ),
    (
        "NUL in stream",
        "/v1/streams/append",
        {"stream": "b\u0000d", "events": [{"data": "x"}]},
        400,
        "invalid_argument",
    ),
    (
        "append in batch with bad op",
        "/v1/batch",
        {
            "ops": [
                {"op": "append", "stream": "bad", "events": [{"data": "x"}]},
                {"op": "read_stream"},
            ]
        },
        400,
        "invalid_argument",
    ),
    (
        "long poll in batch",
        "/v1/batch",
        {
            "ops": [
                {"op": "append", "stream": "bad", "events": [{"data": "x"}]},
                {"op": "read_stream", "stream": "bad", "wait_ms": 10},
            ]
        },
        400,
        "invalid_argument",
    ),
    (
        "backward long poll",
        "/v1/streams/read",
        {"stream": "bad", "direction": "backward", "wait_ms": 10},
        400,
        "invalid_argument",
    ),
    (
        "bad continuation",
        "/v1/streams/read",
        {"stream": "bad", "continuation": "%%%"},
        400,
        "invalid_argument",
    ),
    (
        "future revision",
        "/v1/streams/read",
        {"stream": "bad", "revision": 10**12},
        400,
        "future_revision",
    ),
    ("missing stream info", "/v1/streams/info", {"stream": "bad"}, 404, "stream_not_found"),
    ("unknown stream route", "/v1/streams/delete", {"stream": "bad"}, 404, "not_found"),
]


@pytest.mark.parametrize(("name", "path", "body", "status", "code"), BAD, ids=[b[0] for b in BAD])
def test_bad_stream_input_gets_a_coded_4xx_and_changes_nothing(
    shared_cluster: LocalCluster, name, path, body, status, code
) -> None:
    before = _revision(shared_cluster)
    got, answer = _post(shared_cluster, path, body)
    assert (got, answer["error"]["code"]) == (status, code), answer
    assert answer["error"]["message"]
    assert _revision(shared_cluster) == before
    assert _post(shared_cluster, "/v1/streams/info", {"stream": "bad"})[0] == 404


def test_an_event_id_with_another_payload_is_refused_whole(shared_cluster: LocalCluster) -> None:
    ns = _ns()
    assert (
        _post(
            shared_cluster,
            "/v1/streams/append",
            {"ns": ns, "stream": "s", "events": [{"data": "a", "id": "1"}]},
        )[0]
        == 200
    )
    before = _revision(shared_cluster)
    status, answer = _post(
        shared_cluster,
        "/v1/streams/append",
        {"ns": ns, "stream": "s", "events": [{"data": "new"}, {"data": "other", "id": "1"}]},
    )
    assert status == 422 and answer["error"]["code"] == "idempotency_key_reused"
    assert (answer["error"]["event_id"], answer["error"]["index"]) == ("1", 1)
    assert _revision(shared_cluster) == before
    status, page = _post(shared_cluster, "/v1/streams/read", {"ns": ns, "stream": "s"})
    assert [e["data"] for e in page["events"]] == ["a"] and page["last_seq"] == 1
    with Client(_urls(shared_cluster), ns=ns) as c, pytest.raises(InvalidRequest) as ei:
        c.append("s", Event("changed", id="1"))
    assert ei.value.code == "idempotency_key_reused"


def _stream_cli(cluster: LocalCluster, *argv: str, ns: str = "cli-streams") -> list[str]:
    urls = ",".join(cluster.url(n) for n in cluster.node_ids)
    return [sys.executable, "-m", "statekeeper.cluster.cli", "stream", *argv, "--ns", ns, "--endpoints", urls]


def test_the_stream_cli_appends_reads_follows_and_explains(shared_cluster: LocalCluster) -> None:
    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(_stream_cli(shared_cluster, *argv), capture_output=True, text=True,
                              timeout=60)

    r = run("append", "orders", "first", "second", "--type", "order", "--id", "a", "--id", "b")
    assert r.returncode == 0 and "seqs 1, 2" in r.stdout, r.stderr
    r = run("append", "orders", "first", "--type", "order", "--id", "a")
    assert r.returncode == 0 and "1 already there" in r.stdout  # event-id dedup
    r = run("append", "orders", "third", "--expect", "5")
    assert r.returncode == 1 and "expected 5" in r.stderr  # 409, one line, nothing written
    tail = subprocess.Popen(_stream_cli(shared_cluster, "tail", "orders", "--from", "2", "--json"),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(tail.stdout.readline())["data"] == "second"  # catch-up ...
        assert run("append", "orders", "third", "--expect", "2").returncode == 0
        assert json.loads(tail.stdout.readline())["data"] == "third"  # ... then live
    finally:
        tail.kill()
        tail.wait()
    r = run("read", "orders", "--backward", "--limit", "2")
    assert r.returncode == 0 and r.stdout.index("third") < r.stdout.index("second")
    r = run("info", "orders", "--json")
    assert json.loads(r.stdout)["last_seq"] == 3
    r = run("list", "ord")
    assert r.returncode == 0 and "orders" in r.stdout
    r = run("info", "missing")
    assert r.returncode == 3 and "missing" in r.stderr  # not found: 3 in every command
