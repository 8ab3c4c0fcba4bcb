"""The sans-IO core of the client: request building, response parsing, error mapping,
retry decisions. No network."""

from __future__ import annotations

import json
import pickle
import uuid
from typing import Any

import msgpack
import pytest

from statekeeper.client import (
    Compacted,
    CompactResult,
    Conflict,
    DeleteResult,
    InvalidRequest,
    KeyValue,
    NotFound,
    RangeResult,
    RetryPolicy,
    StatekeeperError,
    Timeout,
    TxnResult,
    Unavailable,
    WriteResult,
    compare,
    ops,
)
from statekeeper.client.batch_ops import BatchOps
from statekeeper.client.errors import error_class
from statekeeper.client.kv_requests import (
    compact_request,
    get_request,
    range_request,
    scan_next,
    status_request,
    write_request,
)
from statekeeper.client.ops import cas_op, txn_op
from statekeeper.client.responses import connection_error
from statekeeper.client.retry import DEFAULT_RETRY, Backoff, Endpoints, Exchange, normalize_endpoint
from statekeeper.client.wire import Request, new_idempotency_key

MP = "application/msgpack"


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def body_of(req: Request) -> dict[str, Any]:
    assert req.body is not None
    return msgpack.unpackb(req.body, raw=False)


def kvd(key: str = "k", value: bytes = b"v", version: int = 1, rev: int = 3) -> dict[str, Any]:
    return {
        "key": key,
        "value": value,
        "version": version,
        "create_revision": rev,
        "mod_revision": rev,
    }


def err_body(code: str, **extra: Any) -> bytes:
    return pack({"error": {"code": code, "message": "m"}, **extra})


# ------------------------------------------------------------------ request building


def test_put_request_shape_and_generated_key() -> None:
    req = write_request(ops.put("k", "héllo"), "ns1")
    assert (req.method, req.path) == ("POST", "/v1/kv/put")
    assert req.headers["Content-Type"] == MP and req.headers["Accept"] == MP
    body = body_of(req)
    assert body["ns"] == "ns1" and body["key"] == "k"
    assert body["value"] == "héllo".encode()  # str values travel as UTF-8 bin
    assert isinstance(msgpack.unpackb(req.body, raw=True)[b"value"], bytes)
    ik = body["idempotency_key"]
    assert len(ik) == 32 and int(ik, 16) >= 0 and req.idempotency_key == ik
    assert "prev_kv" not in body
    assert write_request(ops.put("k", b"v"), "n").idempotency_key != ik  # fresh per call


def test_generated_keys_are_uuid4() -> None:
    keys = {new_idempotency_key() for _ in range(1000)}
    assert len(keys) == 1000
    assert all(uuid.UUID(hex=k).version == 4 and uuid.UUID(hex=k).hex == k for k in keys)


def test_caller_idempotency_key_and_flags() -> None:
    body = body_of(write_request(ops.put("k", bytearray(b"v"), prev_kv=True), "n", "mine"))
    assert body["idempotency_key"] == "mine" and body["prev_kv"] is True and body["value"] == b"v"
    body = body_of(write_request(ops.delete("pre/", prefix=True), "n", "d"))
    assert body == {"ns": "n", "key": "pre/", "prefix": True, "idempotency_key": "d"}


def test_value_and_key_types_are_checked() -> None:
    with pytest.raises(TypeError):
        ops.put("k", 42)
    with pytest.raises(TypeError):
        ops.put(b"k", b"v")  # type: ignore[arg-type]


def test_read_options() -> None:
    body = body_of(get_request("n", "k", consistency="linearizable"))
    assert body == {"ns": "n", "key": "k"}  # the server default is left out
    body = body_of(get_request("n", "k", revision=5, consistency="serializable", min_revision=4))
    assert (
        body["revision"] == 5
        and body["consistency"] == "serializable"
        and body["min_revision"] == 4
    )
    assert "idempotency_key" not in body and get_request("n", "k").idempotency_key is None
    with pytest.raises(InvalidRequest):
        get_request("n", "k", consistency="eventual")


def test_range_body() -> None:
    body = body_of(
        range_request("n", "a/", limit=10, keys_only=True, continuation="a/5", revision=9)
    )
    assert body == {
        "ns": "n",
        "prefix": "a/",
        "limit": 10,
        "keys_only": True,
        "continuation": "a/5",
        "revision": 9,
    }
    body = body_of(range_request("n", start="a", end="b"))
    assert body == {"ns": "n", "start": "a", "end": "b"}
    assert body_of(range_request("n")) == {"ns": "n"}
    with pytest.raises(InvalidRequest):
        range_request("n", "a", start="b")


def test_cas_expectations() -> None:
    body = body_of(write_request(cas_op("k", b"v", expect_version=0), "n", "c"))
    assert body == {
        "ns": "n", "key": "k", "value": b"v", "expect": {"version": 0}, "idempotency_key": "c"
    }  # fmt: skip
    assert cas_op("k", b"v", expect_mod_revision=7)["expect"] == {"mod_revision": 7}
    assert cas_op("k", b"v", must_not_exist=True)["expect"] == {"exists": False}
    for bad in ({}, {"expect_version": 1, "must_not_exist": True}):
        with pytest.raises(InvalidRequest):
            cas_op("k", b"v", **bad)
    with pytest.raises(ValueError):  # InvalidRequest is a ValueError too
        cas_op("k", b"v")


def test_txn_builders_and_plain_dicts() -> None:
    txn = txn_op(
        [
            compare.version("a") == 3,
            compare.mod_revision("b", ns="other") < 10,
            compare.value("c") != "old",
            compare.create_revision("d") > 1,
            compare.exists("e"),
            compare.missing("f"),
            {"key": "g", "target": "value", "op": "==", "value": "s"},
        ],
        [
            ops.put("a", "x", prev_kv=True),
            ops.delete("p/", prefix=True),
            {"op": "put", "key": "h", "value": "y"},
        ],
        [ops.get("a", ns="other"), ops.range("p/", limit=5)],
    )
    body = body_of(write_request(txn, "n", "t1"))
    assert body["idempotency_key"] == "t1" and body["ns"] == "n"
    assert body["compare"] == [
        {"key": "a", "target": "version", "op": "==", "value": 3},
        {"key": "b", "target": "mod_revision", "op": "<", "value": 10, "ns": "other"},
        {"key": "c", "target": "value", "op": "!=", "value": b"old"},
        {"key": "d", "target": "create_revision", "op": ">", "value": 1},
        {"key": "e", "target": "exists", "op": "==", "value": True},
        {"key": "f", "target": "exists", "op": "==", "value": False},
        {"key": "g", "target": "value", "op": "==", "value": b"s"},
    ]
    assert body["success"] == [
        {"op": "put", "key": "a", "value": b"x", "prev_kv": True},
        {"op": "delete", "key": "p/", "prefix": True},
        {"op": "put", "key": "h", "value": b"y"},
    ]
    assert body["failure"] == [
        {"op": "get", "key": "a", "ns": "other"},
        {"op": "range", "prefix": "p/", "limit": 5},
    ]
    # inner ops never carry idempotency keys; only the txn does
    assert all("idempotency_key" not in o for o in body["success"] + body["failure"])
    with pytest.raises(TypeError):
        txn_op([compare.version("a")], [])  # forgot "== x"
    with pytest.raises(TypeError):
        txn_op([], [{"key": "a"}])  # no op


def test_txn_result_parsing() -> None:
    txn = txn_op([compare.version("a") == 0], [ops.put("a", "x"), ops.get("b")], [ops.range("p/")])
    req = write_request(txn, "n")
    res = req.parse(
        200,
        MP,
        pack(
            {
                "succeeded": True,
                "revision": 4,
                "results": [{"revision": 4}, {"revision": 4, "kv": None}],
            }
        ),
    )
    assert res == TxnResult(True, 4, [WriteResult(4), None])
    res = req.parse(
        200,
        MP,
        pack(
            {
                "succeeded": False,
                "revision": 3,
                "results": [{"revision": 3, "kvs": [kvd("p/1")], "more": False}],
            }
        ),
    )
    assert not res.succeeded and isinstance(res.results[0], RangeResult)
    assert res.results[0].kvs[0].key == "p/1" and res.results[0].kvs[0].ns == "n"


def test_batch_ops_get_per_op_keys_and_results() -> None:
    b = BatchOps("n", consistency="serializable")
    b.put("a", "1").get("b", ns="o").delete("c").cas("d", b"v", expect_version=1).range("e/")
    b.txn([compare.missing("x")], [ops.put("x", "1")])
    b.add({"op": "put", "key": "f", "value": "2", "idempotency_key": "given"})
    req = b.request()
    assert req.path == "/v1/batch" and req.idempotency_key is None
    body = body_of(req)
    assert body["consistency"] == "serializable"
    got = body["ops"]
    assert [o["op"] for o in got] == ["put", "get", "delete", "cas", "range", "txn", "put"]
    assert [o["ns"] for o in got] == ["n", "o", "n", "n", "n", "n", "n"]
    keys = [o.get("idempotency_key") for o in got]
    assert keys[1] is None and keys[4] is None and keys[6] == "given"
    assert len({keys[0], keys[2], keys[3], keys[5]}) == 4
    assert "idempotency_key" not in got[5]["success"][0]
    assert body_of(b.request())["ops"] == got  # re-sending keeps the same keys
    results = req.parse(
        200,
        MP,
        pack(
            {
                "results": [
                    {"revision": 2},
                    {"revision": 2, "kv": kvd("b")},
                    {"revision": 2, "deleted": 0},
                    {"revision": 2, "succeeded": False, "kv": kvd("d", version=4)},
                    {"error": {"code": "compacted", "message": "old"}},
                    {"revision": 3, "succeeded": True, "results": [{"revision": 3}]},
                    {"revision": 4, "replayed": True},
                ]
            }
        ),
    )
    assert results[0] == WriteResult(2)
    assert results[1].key == "b" and results[1].ns == "o"
    assert results[2] == DeleteResult(2, 0)
    assert isinstance(results[3], Conflict) and results[3].current.version == 4
    assert isinstance(results[4], Compacted) and results[4].status is None
    assert results[5] == TxnResult(True, 3, [WriteResult(3)])
    assert results[6].replayed
    with pytest.raises(StatekeeperError) as ei:
        req.parse(200, MP, pack({"results": []}))
    assert ei.value.code == "malformed_response"


# ------------------------------------------------------------------ response parsing


def test_get_parsing_and_default() -> None:
    req = get_request("n", "k")
    kv = req.parse(200, MP, pack({"revision": 8, "kv": kvd(value=b"\xff\x00", rev=5)}))
    assert kv == KeyValue("k", b"\xff\x00", 1, 5, 5, "n") and kv.revision == 8
    with pytest.raises(UnicodeDecodeError):
        _ = kv.text
    with pytest.raises(NotFound) as ei:
        req.parse(404, MP, err_body("key_not_found", revision=8))
    assert ei.value.code == "key_not_found" and ei.value.revision == 8
    assert get_request("n", "k", default=None).parse(404, MP, err_body("key_not_found")) is None
    # a 404 for an unknown path is not "key missing": no default then
    with pytest.raises(NotFound):
        get_request("n", "k", default=None).parse(404, "text/plain", b"404: Not Found")
    assert get_request("n", "k", default=0).parse(200, MP, pack({"revision": 1, "kv": None})) == 0


def test_json_answers_are_understood() -> None:
    # Not what we send, but a JSON answer (e.g. from a proxy or a GET) must still parse.
    req = get_request("n", "k")
    kv = req.parse(
        200,
        "application/json; charset=utf-8",
        json.dumps({"revision": 2, "kv": {**kvd(), "value": "txt"}}).encode(),
    )
    assert kv.value == b"txt"
    kv = req.parse(
        200,
        "application/json",
        json.dumps({"revision": 2, "kv": {"key": "k", "value_b64": "/wA=", "version": 1}}).encode(),
    )
    assert kv.value == b"\xff\x00"
    with pytest.raises(InvalidRequest) as ei:
        req.parse(
            400,
            "application/json",
            b'{"error": {"code": "invalid_argument", "message": "bad key"}}',
        )
    assert ei.value.message == "bad key"


def test_write_results() -> None:
    res = write_request(ops.put("k", b"v", prev_kv=True), "n").parse(
        200, MP, pack({"revision": 3, "prev_kv": kvd(rev=2)})
    )
    assert res.revision == 3 and res.prev_kv.mod_revision == 2 and not res.replayed
    res = write_request(ops.delete("k"), "n").parse(
        200, MP, pack({"revision": 4, "deleted": 2, "prev_kvs": [kvd("a"), kvd("b")]})
    )
    assert res.deleted == 2 and [kv.key for kv in res.prev_kvs] == ["a", "b"]
    creq = compact_request(10)
    assert body_of(creq) == {"revision": 10, "idempotency_key": creq.idempotency_key}
    assert body_of(compact_request(10, idempotency_key="c"))["idempotency_key"] == "c"
    res = creq.parse(200, MP, pack({"revision": 12, "compact_revision": 10}))
    assert res == CompactResult(12, 10)
    res = range_request("n", "").parse(
        200, MP, pack({"revision": 4, "kvs": [kvd("a")], "more": True, "continuation": "b"})
    )
    assert (
        res.more and res.continuation == "b" and [kv.key for kv in res] == ["a"] and len(res) == 1
    )


def test_cas_conflict_carries_current() -> None:
    req = write_request(cas_op("k", b"v", expect_version=1), "n")
    with pytest.raises(Conflict) as ei:
        req.parse(409, MP, err_body("compare_failed", kv=kvd(version=5), revision=9))
    assert (
        ei.value.current.version == 5 and ei.value.current.revision == 9 and ei.value.revision == 9
    )
    assert ei.value.status == 409 and ei.value.code == "compare_failed"
    with pytest.raises(Conflict) as ei:  # kv inside the error object, key missing
        req.parse(
            409,
            MP,
            pack({"error": {"code": "compare_failed", "message": "m", "kv": None}, "revision": 9}),
        )
    assert ei.value.current is None
    with pytest.raises(Conflict):  # a 200 that reports succeeded=false is a conflict too
        req.parse(200, MP, pack({"revision": 9, "succeeded": False, "kv": None}))
    assert req.parse(200, MP, pack({"revision": 10, "succeeded": True})).revision == 10


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "malformed_body", InvalidRequest),
        (415, "unsupported_media_type", InvalidRequest),
        (400, "unsupported_media_type", InvalidRequest),
        (400, "unknown_op", InvalidRequest),
        (400, "invalid_argument", InvalidRequest),
        (413, "key_too_large", InvalidRequest),
        (413, "value_too_large", InvalidRequest),
        (413, "request_too_large", InvalidRequest),
        (413, "too_many_ops", InvalidRequest),
        (400, "future_revision", InvalidRequest),
        (405, "method_not_allowed", InvalidRequest),
        (404, "key_not_found", NotFound),
        (404, "not_found", NotFound),
        (409, "compare_failed", Conflict),
        (410, "compacted", Compacted),
        (503, "unavailable", Unavailable),
        (503, "not_ready", Unavailable),
        (504, "timeout", Timeout),
        (500, "internal", StatekeeperError),
        (400, "some_new_code", InvalidRequest),  # unknown code: by status
    ],
)
def test_error_mapping(status: int, code: str, cls: type[StatekeeperError]) -> None:
    with pytest.raises(StatekeeperError) as ei:
        range_request("n").parse(status, MP, err_body(code, revision=1))
    err = ei.value
    assert type(err) is cls and err.code == code and err.status == status and err.message == "m"
    assert err.details == {"revision": 1}
    assert code in str(err)


@pytest.mark.parametrize(
    ("status", "ctype", "body", "cls", "code"),
    [
        (502, "text/html", b"<h1>Bad Gateway</h1>", Unavailable, "unavailable"),
        (503, None, b"", Unavailable, "unavailable"),
        (504, "text/plain", b"gateway timeout", Timeout, "timeout"),
        (404, "text/plain", b"404: Not Found", NotFound, "not_found"),
        (500, MP, b"\xc1garbage", StatekeeperError, "http_500"),
        (418, None, b"", StatekeeperError, "http_418"),
    ],
)
def test_foreign_error_bodies(
    status: int, ctype: str | None, body: bytes, cls: type, code: str
) -> None:
    with pytest.raises(StatekeeperError) as ei:
        status_request().parse(status, ctype, body)
    assert type(ei.value) is cls and ei.value.code == code and ei.value.status == status


def test_malformed_success_body() -> None:
    for ctype, body in ((MP, b"\xc1"), (MP, pack([1, 2])), ("text/html", b"<html>")):
        with pytest.raises(StatekeeperError) as ei:
            get_request("n", "k").parse(200, ctype, body)
        assert ei.value.code == "malformed_response"


def test_error_class_and_retryable_flags() -> None:
    assert error_class("nope", None) is StatekeeperError
    assert Unavailable("x").retryable and Timeout("x").retryable
    assert not NotFound("x").retryable and not Conflict("x").retryable
    assert isinstance(InvalidRequest("x"), ValueError)


def test_errors_pickle() -> None:
    err = Conflict("m", current=KeyValue("k", b"v", 1, 1, 1), status=409, details={"revision": 3})
    err.idempotency_key = "ik"
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is Conflict and back.current == err.current and back.idempotency_key == "ik"
    assert back.revision == 3 and str(back) == str(err)


def test_connection_errors() -> None:
    cause = ConnectionRefusedError(111, "refused")
    err = connection_error("connect", "http://h:1", cause)
    assert (
        isinstance(err, Unavailable) and err.code == "connection_failed" and err.__cause__ is cause
    )
    assert err.status is None and err.endpoint == "http://h:1"
    assert isinstance(connection_error("lost", "u"), Unavailable)
    assert connection_error("timeout", "u").code == "client_timeout"
    assert isinstance(connection_error("timeout", "u"), Timeout)


def test_scan_next() -> None:
    assert scan_next(RangeResult([], 5, False)) is None
    nxt = scan_next(RangeResult([], 5, True, "k9"))
    assert nxt == {
        "continuation": "k9",
        "revision": 5,
        "min_revision": 5,
        "consistency": "serializable",
    }
    with pytest.raises(StatekeeperError):
        scan_next(RangeResult([], 5, True, None))


def test_status_request_is_bodiless_get() -> None:
    req = status_request()
    assert (req.method, req.path, req.body) == ("GET", "/v1/status", None)
    assert "Content-Type" not in req.headers and req.headers["Accept"] == MP
    assert req.parse(200, MP, pack({"role": "leader"})) == {"role": "leader"}


# ---------------------------------------------------------------------- retries


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _drive(
    req: Request,
    answers: list[Any],
    *,
    endpoints: Endpoints | None = None,
    policy: RetryPolicy = DEFAULT_RETRY,
    clock: FakeClock | None = None,
) -> tuple[Any, list[tuple[str, bytes | None]]]:
    """Run an Exchange against scripted answers: (status, body) or an exception kind."""
    eps = endpoints or Endpoints(["http://a:1", "http://b:2", "http://c:3"])
    clock = clock or FakeClock()
    ex = Exchange(req, eps, policy, 10.0, clock=clock, rand=lambda: 0.5)
    sent: list[tuple[str, bytes | None]] = []
    while True:
        url, _ = ex.next_attempt()
        sent.append((url, req.body))
        answer = answers.pop(0)
        if isinstance(answer, str):
            out = ex.failed(connection_error(answer, url))
        else:
            out = ex.received(answer[0], MP, pack(answer[1]))
            if not isinstance(out, Backoff):
                return out, sent
        clock.now += out.delay


def test_retry_reuses_the_same_body_and_key_and_rotates() -> None:
    req = write_request(ops.put("k", b"v"), "n")
    answers = [
        "connect",
        (503, {"error": {"code": "unavailable", "message": ""}}),
        "lost",
        "timeout",
        (504, {"error": {"code": "timeout", "message": ""}}),
        (200, {"revision": 7, "replayed": True}),
    ]
    res, sent = _drive(req, answers)
    assert res == WriteResult(7, replayed=True)
    assert len(sent) == 6 and {body for _, body in sent} == {req.body}
    keys = {msgpack.unpackb(b)["idempotency_key"] for _, b in sent}
    assert keys == {req.idempotency_key}
    assert [u for u, _ in sent] == [
        "http://a:1",
        "http://b:2",
        "http://c:3",
        "http://a:1",
        "http://b:2",
        "http://c:3",
    ]


def test_non_retryable_errors_are_raised_at_once_and_keep_endpoint() -> None:
    eps = Endpoints(["http://a:1", "http://b:2"])
    with pytest.raises(NotFound) as ei:
        _drive(
            get_request("n", "k"),
            [(404, {"error": {"code": "key_not_found", "message": ""}})],
            endpoints=eps,
        )
    assert (
        ei.value.attempts == 1
        and ei.value.endpoint == "http://a:1"
        and ei.value.idempotency_key is None
    )
    assert eps.current == "http://a:1"


def test_gives_up_after_max_attempts_with_key_attached() -> None:
    req = write_request(ops.put("k", b"v"), "n", "ik")
    with pytest.raises(Unavailable) as ei:
        _drive(req, ["connect"] * 10, policy=RetryPolicy(max_attempts=4))
    assert ei.value.attempts == 4 and ei.value.idempotency_key == "ik"


@pytest.mark.parametrize("unknown", ["timeout", "lost", (504, {"error": {"code": "timeout", "message": ""}})])
def test_a_write_that_gives_up_after_an_unknown_attempt_says_unknown(unknown) -> None:
    """A later attempt's 503 ("no leader, nothing was applied") is true of that attempt
    only: an earlier one that timed out or lost its connection may have been applied (a
    mixed-version cluster showed it: 503 after 8 s, the put was in the store). The call
    gives up with Timeout, code outcome_unknown, never with a claim of not applied."""
    req = write_request(ops.put("k", b"v"), "n", "ik")
    no_leader = (503, {"error": {"code": "unavailable", "message": "nothing was applied"}})
    with pytest.raises(Timeout) as ei:
        _drive(req, [unknown, no_leader, "connect", no_leader], policy=RetryPolicy(max_attempts=4))
    err = ei.value
    assert err.code == "outcome_unknown" and err.attempts == 4 and err.idempotency_key == "ik"
    assert "attempt 1" in err.message and "same idempotency_key" in err.message
    assert isinstance(err.__cause__, Unavailable)  # the last attempt's own answer


def test_a_read_or_a_write_without_an_unknown_attempt_keeps_its_last_error() -> None:
    no_leader = (503, {"error": {"code": "unavailable", "message": ""}})
    with pytest.raises(Unavailable):
        _drive(get_request("n", "k"), ["timeout", no_leader], policy=RetryPolicy(max_attempts=2))
    with pytest.raises(Unavailable):
        _drive(write_request(ops.put("k", b"v"), "n"), ["connect", no_leader], policy=RetryPolicy(max_attempts=2))
    with pytest.raises(Timeout) as ei:  # the last attempt is the unknown one: as it was
        _drive(write_request(ops.put("k", b"v"), "n"), [no_leader, "timeout"], policy=RetryPolicy(max_attempts=2))
    assert ei.value.code == "client_timeout"


def test_retry_timeouts_can_be_disabled() -> None:
    with pytest.raises(Timeout):
        _drive(
            get_request("n", "k"),
            ["timeout", (200, {"revision": 1, "kv": kvd()})],
            policy=RetryPolicy(retry_timeouts=False),
        )
    assert not RetryPolicy.disabled().is_retryable(NotFound("x"))


def test_deadline_bounds_the_call_and_each_attempt() -> None:
    clock = FakeClock()
    policy = RetryPolicy(
        max_attempts=100, deadline=1.0, backoff_base=0.3, backoff_max=0.3, jitter=0.0
    )
    req = get_request("n", "k")
    ex = Exchange(req, Endpoints("http://a:1"), policy, 10.0, clock=clock)
    assert ex.next_attempt()[1] == pytest.approx(1.0)  # attempt timeout capped by the deadline
    attempts = 1
    with pytest.raises(Unavailable):
        while True:
            clock.now += ex.failed(connection_error("connect", "http://a:1")).delay
            ex.next_attempt()
            attempts += 1
    assert clock.now - 100.0 < 1.0 and attempts == 4


def test_backoff_bounds_and_growth() -> None:
    pol = RetryPolicy(backoff_base=0.1, backoff_multiplier=2.0, backoff_max=1.5, jitter=0.5)
    for retry in range(1, 200):
        full = min(1.5, 0.1 * 2 ** min(retry - 1, 64))
        lo, hi = pol.backoff(retry, rand=lambda: 1.0), pol.backoff(retry, rand=lambda: 0.0)
        assert lo == pytest.approx(full * 0.5) and hi == pytest.approx(full)
        for _ in range(5):
            assert lo - 1e-12 <= pol.backoff(retry) <= hi + 1e-12
    assert (
        pol.backoff(1, rand=lambda: 0.0)
        < pol.backoff(2, rand=lambda: 0.0)
        < pol.backoff(3, rand=lambda: 0.0)
    )
    assert RetryPolicy(jitter=0.0).backoff(3) == pytest.approx(0.2)
    for bad in ({"max_attempts": 0}, {"jitter": 1.5}, {"deadline": 0}, {"backoff_multiplier": 0.5}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)


def test_endpoints_normalize_rotate_stick_prefer() -> None:
    assert normalize_endpoint("Node1:7000/") == "http://node1:7000"
    assert normalize_endpoint("https://h:1/prefix/") == "https://h:1/prefix"
    eps = Endpoints("a:1, http://b:2/,a:1")
    assert eps.urls == ("http://a:1", "http://b:2")
    eps.failed("http://b:2")  # not current: concurrent failures move the pointer once
    assert eps.current == "http://a:1"
    eps.failed("http://a:1")
    assert eps.current == "http://b:2"
    eps.failed("http://b:2")
    assert eps.current == "http://a:1"
    eps.succeeded("http://b:2")
    assert eps.current == "http://b:2" and eps.rotation() == ["http://b:2", "http://a:1"]
    assert eps.prefer("http://A:1/") and eps.current == "http://a:1"
    assert not eps.prefer("http://elsewhere:9") and eps.current == "http://a:1"
    with pytest.raises(ValueError):
        Endpoints([])
