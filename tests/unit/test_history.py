"""chaos.history: writing JSONL events and pairing them into ops."""

from __future__ import annotations

import io
import json
import math
import threading

import pytest

from statekeeper.chaos.history import HistoryError, HistoryWriter, parse_events, read_history


def fake_clock(start: int = 1000, step: int = 10):
    t = [start]

    def clock() -> int:
        t[0] += step
        return t[0]

    return clock


def test_round_trip_of_every_outcome(tmp_path):
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path, clock=fake_clock()) as w:
        a = w.invoke(1, "put", "k", value="1-0", idempotency_key="ik-a")
        b = w.invoke(2, "get", "k")
        w.ok(a, revision=5)
        w.ok(b, value="1-0", revision=5, mod_revision=5)
        c = w.invoke(3, "cas", "k", value="3-0", expect="1-0", idempotency_key="ik-c")
        w.info(c, error="timeout")
        d = w.invoke(1, "delete", "k", idempotency_key="ik-d")
        w.fail(d, error="unavailable")
        t = w.invoke(
            2,
            "txn",
            keys=["k", "j"],
            compare=[{"key": "k", "value": None}],
            success=[{"f": "put", "key": "j", "value": "2-1"}],
            failure=[],
        )
        w.ok(t, succeeded=False, results=[], revision=5)
        w.invoke(4, "get", "j")  # never completes: the workload stopped
    ops = read_history(path)
    by_id = {o.id: o for o in ops}
    assert [o.id for o in ops] == [a, b, c, d, t, 5]  # by invoke time

    put = by_id[a]
    assert (put.f, put.key, put.process, put.outcome) == ("put", "k", 1, "ok")
    assert put.input == {"value": "1-0", "idempotency_key": "ik-a"}
    assert put.output == {"revision": 5}
    assert put.invoke_time < put.complete_time == put.end_time

    assert by_id[b].output == {"value": "1-0", "revision": 5, "mod_revision": 5}

    cas = by_id[c]
    assert cas.outcome == "info" and cas.complete_time == math.inf
    assert cas.end_time is not None and cas.output == {"error": "timeout"}
    assert cas.input == {"value": "3-0", "expect": "1-0", "idempotency_key": "ik-c"}

    assert by_id[d].outcome == "fail" and by_id[d].complete_time == by_id[d].end_time

    txn = by_id[t]
    assert txn.keys == ("j", "k") and txn.key is None
    assert txn.output == {"succeeded": False, "results": [], "revision": 5}

    dangling = by_id[5]
    assert dangling.outcome == "info" and dangling.end_time is None
    assert dangling.complete_time == math.inf


def test_completions_repeat_f_and_key(tmp_path):
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        op = w.invoke(0, "put", "k", value="v")
        w.ok(op, revision=1)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["type"] for e in lines] == ["invoke", "ok"]
    assert lines[1]["f"] == "put" and lines[1]["key"] == "k" and lines[1]["process"] == 0
    assert isinstance(lines[0]["time"], int)


def test_writer_is_thread_safe_and_ids_are_unique(tmp_path):
    path = tmp_path / "h.jsonl"
    w = HistoryWriter(path)

    def client(process: int) -> None:
        for i in range(200):
            op = w.invoke(process, "put", "k", value=f"{process}-{i}")
            w.ok(op, revision=i)

    threads = [threading.Thread(target=client, args=(p,)) for p in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    w.close()
    ops = read_history(path)
    assert len(ops) == 1600
    assert len({o.id for o in ops}) == 1600
    assert all(o.outcome == "ok" for o in ops)


def test_writer_rejects_misuse():
    w = HistoryWriter(io.StringIO())
    with pytest.raises(HistoryError):
        w.ok(42)  # never invoked
    op = w.invoke(0, "get", "k")
    w.ok(op, value=None)
    with pytest.raises(HistoryError):
        w.ok(op, value=None)  # completed twice
    with pytest.raises(HistoryError):
        w.invoke(0, "get", "k", id=op)  # id reused
    with pytest.raises(HistoryError):
        w.invoke(0, "frobnicate", "k")
    with pytest.raises(HistoryError):
        w.append({"type": "nope", "process": 0, "id": 1})
    with pytest.raises(TypeError):
        w.invoke(0, "put", "k", value=object())  # not JSON: nothing written
    assert w.pending() == []
    w.close()
    with pytest.raises(HistoryError):
        w.invoke(0, "get", "k")


def test_flush_makes_events_visible(tmp_path):
    path = tmp_path / "h.jsonl"
    w = HistoryWriter(path, fsync=True)
    w.invoke(0, "get", "k", id="op-1")
    w.flush()
    assert '"op-1"' in path.read_text()
    assert w.pending() == ["op-1"]
    w.close()
    w.close()  # idempotent


def test_bytes_values_round_trip(tmp_path):
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        op = w.invoke(0, "put", "k", value=b"\xff\x00raw")
        w.ok(op, revision=1)
    (put,) = read_history(path)
    assert put.input["value"] == b"\xff\x00raw"


def test_torn_last_line_is_ignored_but_not_a_torn_middle(tmp_path):
    path = tmp_path / "h.jsonl"
    good = [
        {"type": "invoke", "process": 0, "id": 1, "time": 1, "f": "get", "key": "k"},
        {"type": "ok", "process": 0, "id": 1, "time": 2, "value": None},
    ]
    text = "\n".join(json.dumps(e) for e in good)
    path.write_text(text + '\n{"type": "invo')
    (op,) = read_history(path)
    assert op.outcome == "ok"
    path.write_text('{"type": "invo\n' + text + "\n")
    with pytest.raises(HistoryError):
        read_history(path)


def test_parse_events_validation():
    inv = {"type": "invoke", "process": 0, "id": 1, "time": 10, "f": "get", "key": "k"}
    with pytest.raises(HistoryError):
        parse_events([{"type": "ok", "process": 0, "id": 1, "time": 5}])  # no invoke
    with pytest.raises(HistoryError):
        parse_events([inv, inv])  # invoked twice
    with pytest.raises(HistoryError):
        parse_events([inv, {"type": "ok", "process": 0, "id": 1, "time": 5, "value": 1}])
    with pytest.raises(HistoryError):
        parse_events([inv, {"type": "ok", "process": 0, "id": 1, "time": 11}])  # no value
    cas = {"type": "invoke", "process": 0, "id": 2, "time": 10, "f": "cas", "key": "k"}
    with pytest.raises(HistoryError):
        parse_events([cas, {"type": "ok", "process": 0, "id": 2, "time": 11}])  # succeeded?
    with pytest.raises(HistoryError):
        parse_events([{"type": "invoke", "process": 0, "id": 3, "f": "get"}])  # no time
    # A failed get without a value is fine: it did not happen.
    (op,) = parse_events([inv, {"type": "fail", "process": 0, "id": 1, "time": 11}])
    assert op.outcome == "fail"
