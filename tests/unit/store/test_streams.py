"""node/store/streams.py: append in apply (seqs, expectations, event-id dedup, txns) and
the stream reads over the store, with no network."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.store import StateMachine, keys
from statekeeper.node.store.streams import event_digest
from tests.unit.store.util import Node, entry, put, raw_items, write_snapshot


def ev(data: bytes, **kw) -> dict:
    return {"data": data, **kw}


def append(stream: str, *events: dict, **kw) -> dict:
    return {"op": "append", "stream": stream, "events": list(events), **kw}


def read(node: Node, stream: str = "s", **kw) -> dict:
    return node.sm.read({"op": "read_stream", "ns": "default", "stream": stream, **kw})


def seqs(result: dict) -> list[int]:
    return [e["seq"] for e in result["events"]]


def stream_records(sm: StateMachine) -> list[tuple[bytes, bytes]]:
    tags = (keys.STREAM_META, keys.STREAM_EVENT, keys.STREAM_DEDUP)
    return [(k, v) for k, v in raw_items(sm) if k[:1] in tags]


# -- append ----------------------------------------------------------------------------------


def test_seqs_are_consecutive_and_one_append_takes_one_revision(node):
    r1 = node.one(append("s", ev(b"a"), ev(b"b"), ev(b"c")), t=5_000)
    assert r1 == {
        "revision": 1,
        "stream": "s",
        "first_seq": 1,
        "last_seq": 3,
        "events": [{"seq": i, "duplicate": False} for i in (1, 2, 3)],
    }
    node.put("k", b"v")  # revision 2, another keyspace
    r2 = node.one(append("s", ev(b"d")), t=6_000)
    assert (r2["revision"], r2["first_seq"], r2["last_seq"]) == (3, 4, 4)
    assert node.sm.revision == 3
    page = read(node)
    assert seqs(page) == [1, 2, 3, 4]
    assert [e["data"] for e in page["events"]] == [b"a", b"b", b"c", b"d"]
    assert [e["revision"] for e in page["events"]] == [1, 1, 1, 3]
    assert [e["time"] for e in page["events"]] == [5_000] * 3 + [6_000]  # the entry's time
    assert "id" not in page["events"][0] and "meta" not in page["events"][0]


def test_streams_are_separate_per_name_and_namespace(node):
    node.apply(append("s", ev(b"1")), append("t", ev(b"2")), append("s", ev(b"3"), ns="other"))
    assert read(node)["last_seq"] == 1
    assert read(node, "t")["last_seq"] == 1
    other = node.sm.read({"op": "read_stream", "ns": "other", "stream": "s"})
    assert [e["data"] for e in other["events"]] == [b"3"]


@pytest.mark.parametrize(
    ("expect", "missing_ok", "at_two_ok"),
    [
        ("any", True, True),
        ("no_stream", True, False),
        ("exists", False, True),
        (0, True, False),
        (2, False, True),
    ],
)
def test_expectations(node, expect, missing_ok, at_two_ok):
    r = node.one(append("s", ev(b"x"), expect=expect))
    assert ("error" not in r) is missing_ok, r
    if not missing_ok:
        assert r["error"]["code"] == "expectation_failed"
        assert (r["error"]["last_seq"], r["error"]["exists"]) == (0, False)
    node.one(append("t", ev(b"1"), ev(b"2")))
    before = stream_records(node.sm)
    r = node.one(append("t", ev(b"3"), expect=expect))
    assert ("error" not in r) is at_two_ok, r
    if not at_two_ok:
        assert r["error"] == {
            "code": "expectation_failed",
            "message": r["error"]["message"],
            "last_seq": 2,
            "exists": True,
        }
        assert "'t'" in r["error"]["message"]
        assert stream_records(node.sm) == before  # nothing applied


def test_event_ids_deduplicate(node):
    first = node.one(append("s", ev(b"a", id="e1"), ev(b"b", id="e2", type="t", meta={"k": 1})))
    # A replay: every event a duplicate -> ok, no revision, and `expect` is not checked.
    replay = node.one(
        append("s", ev(b"a", id="e1"), ev(b"b", id="e2", type="t", meta={"k": 1}), expect=0)
    )
    assert replay == {
        "revision": first["revision"],
        "stream": "s",
        "first_seq": None,
        "last_seq": 2,
        "events": [{"seq": 1, "duplicate": True}, {"seq": 2, "duplicate": True}],
    }
    assert node.sm.revision == 1
    # A mix: duplicates report their stored seq, the rest are appended after last_seq.
    mixed = node.one(
        append("s", ev(b"c"), ev(b"b", id="e2", type="t", meta={"k": 1}), ev(b"d", id="e3"))
    )
    assert mixed["events"] == [
        {"seq": 3, "duplicate": False},
        {"seq": 2, "duplicate": True},
        {"seq": 4, "duplicate": False},
    ]
    assert (mixed["first_seq"], mixed["last_seq"], mixed["revision"]) == (3, 4, 2)
    # The expectation is checked when something is new.
    r = node.one(append("s", ev(b"a", id="e1"), ev(b"e"), expect=2))
    assert r["error"]["code"] == "expectation_failed" and r["error"]["last_seq"] == 4


def test_an_event_id_with_another_payload_fails_and_applies_nothing(node):
    node.one(append("s", ev(b"a", id="e1")))
    before, revision = raw_items(node.sm), node.sm.revision
    for other in (ev(b"A", id="e1"), ev(b"a", id="e1", type="x"), ev(b"a", id="e1", meta={"m": 1})):
        r = node.one(append("s", ev(b"fresh"), other))
        assert r["error"]["code"] == "idempotency_key_reused"
        assert (r["error"]["event_id"], r["error"]["index"]) == ("e1", 1)
        assert "e1" in r["error"]["message"] and "events[1]" in r["error"]["message"]
    assert node.sm.revision == revision
    assert [(k, v) for k, v in raw_items(node.sm) if k != keys.META] == [
        (k, v) for k, v in before if k != keys.META
    ]
    # The same id in another stream is another event.
    assert node.one(append("t", ev(b"A", id="e1")))["first_seq"] == 1


def test_the_event_digest_ignores_meta_key_order():
    a = event_digest({"data": b"x", "type": "", "meta": {"a": 1, "b": 2}})
    assert a == event_digest({"data": b"x", "type": "", "meta": {"b": 2, "a": 1}})
    assert a != event_digest({"data": b"x", "type": "", "meta": {"a": 1}})


def test_op_level_idempotency_key_replays_the_result(node):
    r = node.one(append("s", ev(b"a"), idempotency_key="k1"))
    again = node.one(append("s", ev(b"a"), idempotency_key="k1"))
    assert again == {**r, "replayed": True}
    assert read(node)["last_seq"] == 1
    reused = node.one(append("s", ev(b"other"), idempotency_key="k1"))
    assert reused["error"]["code"] == "idempotency_key_reused"


def test_limits_are_enforced_in_apply(tmp_path):
    n = Node(tmp_path / "db", limits=Limits(max_events_per_append=2, max_value_bytes=4))
    assert n.one(append("s", ev(b"1"), ev(b"2"), ev(b"3")))["error"]["code"] == "too_many_events"
    assert n.one(append("s", ev(b"12345")))["error"]["code"] == "value_too_large"
    assert n.sm.revision == 0 and stream_records(n.sm) == []
    n.sm.close()


# -- in a txn --------------------------------------------------------------------------------


def txn(*success, compare=()) -> dict:
    return {"op": "txn", "compare": list(compare), "success": list(success)}


def test_append_in_a_txn_is_atomic_with_a_put(node):
    r = node.one(txn(put("k", b"v"), append("s", ev(b"a"), ev(b"b"))))
    assert r["succeeded"] and r["revision"] == 1
    assert r["results"][1] == {
        "revision": 1,
        "stream": "s",
        "first_seq": 1,
        "last_seq": 2,
        "events": [{"seq": 1, "duplicate": False}, {"seq": 2, "duplicate": False}],
    }
    assert node.value("k") == b"v" and node.sm.revision == 1
    assert [e["revision"] for e in read(node)["events"]] == [1, 1]
    # Two appends to one stream in one txn see each other: consecutive seqs, one revision.
    r = node.one(txn(append("s", ev(b"c"), expect=2), append("s", ev(b"d"), expect=3)))
    assert [x["first_seq"] for x in r["results"]] == [3, 4] and r["revision"] == 2


def test_a_failing_expectation_fails_the_whole_txn(node):
    node.one(append("s", ev(b"a")))
    before = raw_items(node.sm)
    r = node.one(txn(put("k", b"v"), append("s", ev(b"b"), expect="no_stream")))
    assert r["error"]["code"] == "expectation_failed" and r["error"]["last_seq"] == 1
    assert node.value("k") is None and node.sm.revision == 1
    assert [kv for kv in raw_items(node.sm) if kv[0] != keys.META] == [
        kv for kv in before if kv[0] != keys.META
    ]


def test_a_txn_whose_append_is_all_duplicates_takes_the_puts_revision(node):
    node.one(append("s", ev(b"a", id="e")))
    r = node.one(txn(put("k", b"v"), append("s", ev(b"a", id="e"))))
    assert r["revision"] == 2 and r["results"][1]["revision"] == 2
    assert r["results"][1]["events"] == [{"seq": 1, "duplicate": True}]


# -- reads -----------------------------------------------------------------------------------


@pytest.fixture
def ten(node):
    """Stream "s" with seqs 1..10: seq i appended at revision i."""
    for i in range(1, 11):
        node.one(append("s", ev(b"%d" % i)))
    return node


def test_read_forward_backward_and_limit(ten):
    assert seqs(read(ten)) == list(range(1, 11))
    assert seqs(read(ten, start=8)) == [8, 9, 10]
    assert seqs(read(ten, start=11)) == [] and read(ten, start=11)["more"] is False
    page = read(ten, start=3, limit=4)
    assert seqs(page) == [3, 4, 5, 6] and page["more"] and page["last_seq"] == 10
    assert seqs(read(ten, direction="backward")) == list(range(10, 0, -1))
    back = read(ten, direction="backward", start=5, limit=3)
    assert seqs(back) == [5, 4, 3] and back["more"]
    assert seqs(read(ten, direction="backward", start=2, limit=3)) == [2, 1]
    assert seqs(read(ten, direction="backward", start=0)) == []


def test_continuation_pages_through_one_revision(ten):
    page = read(ten, limit=3)
    served, got = page["revision"], []
    ten.one(append("s", ev(b"later")))  # seq 11: not visible to the pages of `served`
    while True:
        got += seqs(page)
        assert page["revision"] == served and page["last_seq"] == 10
        if not page["more"]:
            break
        page = read(ten, continuation=page["continuation"])
    assert got == list(range(1, 11))
    assert read(ten)["last_seq"] == 11


def test_backward_continuation(ten):
    page = read(ten, limit=4, direction="backward")
    got = seqs(page)
    while page["more"]:
        page = read(ten, continuation=page["continuation"])  # the token carries the way
        got += seqs(page)
    assert got == list(range(10, 0, -1))


def test_read_at_a_past_revision(ten):
    for revision in (1, 4, 9, 10):
        page = read(ten, revision=revision)
        assert seqs(page) == list(range(1, revision + 1)) and page["last_seq"] == revision
        assert page["revision"] == revision
    assert read(ten, revision=0) == {
        "revision": 0,
        "stream": "s",
        "events": [],
        "first_seq": 1,
        "last_seq": 0,
        "more": False,
    }
    assert seqs(read(ten, revision=6, direction="backward", limit=2)) == [6, 5]
    with pytest.raises(OpError) as ei:
        read(ten, revision=11)
    assert ei.value.code == "future_revision"
    ten.one({"op": "compact", "revision": 5})
    with pytest.raises(OpError) as ei:
        read(ten, revision=4)
    assert ei.value.code == "compacted"
    assert seqs(read(ten)) == list(range(1, 11))  # compaction never prunes events


def test_past_revision_with_multi_event_appends(node):
    node.one(append("s", ev(b"1"), ev(b"2"), ev(b"3")))  # rev 1
    node.put("k", b"v")  # rev 2
    node.one(append("s", ev(b"4"), ev(b"5")))  # rev 3
    node.one(append("s", ev(b"6")))  # rev 4
    assert [read(node, revision=r)["last_seq"] for r in (1, 2, 3, 4)] == [3, 3, 5, 6]


def test_a_missing_stream_reads_as_empty(node):
    assert read(node, "nope") == {
        "revision": 0,
        "stream": "nope",
        "events": [],
        "first_seq": 1,
        "last_seq": 0,
        "more": False,
    }


def test_ids_and_meta_are_read_back(node):
    node.one(append("s", ev(b"x", id="e1", type="started", meta={"b": True, "a": 1.5})))
    (event,) = read(node)["events"]
    assert event["id"] == "e1" and event["type"] == "started"
    assert event["meta"] == {"a": 1.5, "b": True}


def test_stream_info(node):
    with pytest.raises(OpError) as ei:
        node.sm.read({"op": "stream_info", "ns": "default", "stream": "s"})
    assert ei.value.code == "stream_not_found"
    node.one(append("s", ev(b"ab"), ev(b"c")))
    node.put("k", b"v")
    node.one(append("s", ev(b"defg")))
    assert node.sm.read({"op": "stream_info", "ns": "default", "stream": "s"}) == {
        "revision": 3,
        "stream": "s",
        "first_seq": 1,
        "last_seq": 3,
        "count": 3,
        "bytes": 7,
        "create_revision": 1,
        "mod_revision": 3,
        "archived_before": None,
    }


def test_list_streams_pages_in_name_order(node):
    names = ["b", "a/2", "a/1", "c", "a/10"]
    for name in names:
        node.one(append(name, ev(b"x")))
    node.one(append("zz", ev(b"x"), ns="other"))

    def listing(**kw):
        return node.sm.read({"op": "list_streams", "ns": "default", **kw})

    got, page = [], listing(limit=2)
    while True:
        got += [s["stream"] for s in page["streams"]]
        if not page["more"]:
            break
        page = listing(limit=2, continuation=page["continuation"])
    assert got == sorted(names)
    assert [s["stream"] for s in listing(prefix="a/")["streams"]] == ["a/1", "a/10", "a/2"]
    first = listing(prefix="c")["streams"][0]
    assert first == {
        "stream": "c",
        "first_seq": 1,
        "last_seq": 1,
        "count": 1,
        "bytes": 1,
        "create_revision": 4,
        "mod_revision": 4,
    }
    assert listing(prefix="q") == {"revision": 6, "streams": [], "more": False}


def test_reads_inside_an_entry_see_its_earlier_writes(node):
    """The readers run over an EntryTx too (every validated op has an apply handler)."""
    results = node.apply(
        append("s", ev(b"a")),
        {"op": "read_stream", "stream": "s"},
        {"op": "stream_info", "stream": "s"},
        {"op": "list_streams"},
    )
    assert seqs(results[1]) == [1] and results[1]["revision"] == 1
    assert results[2]["last_seq"] == 1
    assert [s["stream"] for s in results[3]["streams"]] == ["s"]


# -- determinism and snapshots -----------------------------------------------------------------


STREAM_ENTRIES = [
    [append("s", ev(b"a", id="1"), ev(b"b")), put("k", b"v")],
    [append("s", ev(b"c", meta={"z": 1, "a": "x"}), expect=2)],
    [append("s", ev(b"a", id="1")), append("s", ev(b"x", id="1"))],  # duplicate, conflict
    [txn(append("t", ev(b"t")), put("k2", b"v"))],
    [append("s", ev(b"d"), expect="no_stream")],  # fails
]


def test_two_state_machines_fed_the_same_entries_end_byte_identical(tmp_path):
    a, b = StateMachine(tmp_path / "a"), StateMachine(tmp_path / "b")
    for index, ops in enumerate(STREAM_ENTRIES, 1):
        raw = entry(*ops, t=1_000 * index)
        assert a.apply(index, raw) == b.apply(index, raw)
    assert raw_items(a) == raw_items(b)
    assert stream_records(a)
    a.close()
    b.close()


def test_snapshot_restore_keeps_streams(tmp_path):
    src = Node(tmp_path / "src")
    for ops in STREAM_ENTRIES:
        src.apply(*ops)
    snap = tmp_path / "snap"
    write_snapshot(src.sm, snap)
    dst = StateMachine(tmp_path / "dst")
    dst.restore(snap)
    assert raw_items(dst) == raw_items(src.sm)
    op = {"op": "read_stream", "ns": "default", "stream": "s"}
    assert dst.read(op) == src.sm.read(op)
    more = entry(append("s", ev(b"after"), expect=3))
    assert dst.apply(src.index + 1, more) == src.sm.apply(src.index + 1, more)
    assert dst.read(op)["last_seq"] == 4
    dst.close()
    src.sm.close()


# -- property-based: a model of streams ----------------------------------------------------------

event_strategy = st.builds(
    lambda data, eid: ev(data, **({"id": eid} if eid else {})),
    st.sampled_from([b"x", b"y"]),
    st.sampled_from([None, None, "1", "2", "3"]),
)
append_strategy = st.builds(
    lambda stream, events, expect: append(stream, *events, expect=expect),
    st.sampled_from(["a", "b"]),
    st.lists(event_strategy, min_size=1, max_size=3),
    st.sampled_from(["any", "any", "no_stream", "exists", 0, 1, 2, 3]),
)


class StreamModel:
    """What appends must do: per stream its events (data, revision), per (stream, id) the
    seq and data it was stored with."""

    def __init__(self) -> None:
        self.events: dict[str, list[tuple[bytes, int]]] = {"a": [], "b": []}
        self.ids: dict[tuple[str, str], tuple[int, bytes]] = {}
        self.revision = 0

    def append(self, op: dict) -> str | None:
        """Apply `op` to the model; the error code it must fail with, or None."""
        stream, events = op["stream"], op["events"]
        ids = [e["id"] for e in events if "id" in e]
        if len(ids) != len(set(ids)):
            return "invalid_argument"
        stored = [self.ids.get((stream, e["id"])) if "id" in e else None for e in events]
        if any(s is not None and s[1] != e["data"] for s, e in zip(stored, events, strict=True)):
            return "idempotency_key_reused"
        if all(s is not None for s in stored):
            return None
        last, expect = len(self.events[stream]), op["expect"]
        ok = {"any": True, "no_stream": last == 0, "exists": last > 0}.get(expect, last == expect)
        if not ok:
            return "expectation_failed"
        self.revision += 1
        for e, s in zip(events, stored, strict=True):
            if s is None:
                self.events[stream].append((e["data"], self.revision))
                if "id" in e:
                    self.ids[(stream, e["id"])] = (len(self.events[stream]), e["data"])
        return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(append_strategy, min_size=1, max_size=3), min_size=1, max_size=8))
def test_random_appends_match_a_model_and_are_deterministic(entries):
    model = StreamModel()
    with tempfile.TemporaryDirectory() as d:
        a, b = StateMachine(f"{d}/a"), StateMachine(f"{d}/b")
        for index, ops in enumerate(entries, 1):
            raw = entry(*ops, t=index)
            results = a.apply(index, raw)
            assert b.apply(index, raw) == results
            for op, result in zip(ops, results, strict=True):
                assert result.get("error", {}).get("code") == model.append(op), (op, result)
        assert raw_items(a) == raw_items(b) and a.revision == model.revision
        for stream, events in model.events.items():
            for revision in range(a.revision + 1):
                page = a.read(
                    {"op": "read_stream", "ns": "default", "stream": stream, "revision": revision}
                )
                expected = [data for data, rev in events if rev <= revision]
                assert [e["data"] for e in page["events"]] == expected
                assert page["last_seq"] == len(expected)
        a.close()
        b.close()
