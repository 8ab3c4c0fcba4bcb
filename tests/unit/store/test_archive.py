"""node/store/archive.py: archive_plan, archive_seal, archive_restore, archive_list, and the
archived answers of get / read_stream / stream_info (docs/protocol.md, "Archival")."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import validate_op
from statekeeper.node.store import keys
from tests.unit.store.util import Node, put, raw_items, write_snapshot

SHA = "ab" * 32
SEG = {"id": "20261201T005300Z-0badc0de", "url": "file:///a/seg.skseg", "sha256": SHA, "bytes": 9}


def seal(keys_=(), streams=(), seg=SEG, **kw):
    return {
        "op": "archive_seal",
        "segment": seg,
        "keys": list(keys_),
        "streams": list(streams),
        **kw,
    }


def restore(keys_=(), streams=(), segment=SEG["id"], **kw):
    op = {"op": "archive_restore", "segment": segment, "keys": list(keys_), **kw}
    return {**op, "streams": list(streams)}


def append(stream, *events):
    return {"op": "append", "stream": stream, "events": list(events)}


def ev(data, eid=None, **kw):
    return {"data": data, "id": eid, **kw}


def read(node, op):
    return node.sm.read(validate_op({"ns": "default", **op}, node.sm.limits))


def archived_error(node, op) -> dict:
    with pytest.raises(OpError) as ei:
        read(node, op)
    assert ei.value.code == "archived" and ei.value.status == 410
    return ei.value.extra


def stored_events(node, stream):
    """[seq, data, type, time_ms, revision, id, meta] of every stored event, as restore
    wants them: exactly the stored fields plus the seq."""
    prefix = keys.stream_event_prefix(b"default", stream.encode())
    return [
        [keys.u64(k[-8:]), *keys.unpack(v)] for k, v in raw_items(node.sm) if k.startswith(prefix)
    ]


def ckpts(node, n=5):
    for i in range(n):
        node.put(f"agent/a/ckpt/{i:04d}", b"state-%d" % i)


# -- plan ------------------------------------------------------------------------------------


def test_plan_selects_what_the_policy_would_delete_ignoring_stored_policies(node):
    ckpts(node)
    node.put("agent/a/head", b"h")
    # A stored, longer-prefix policy would govern these keys for gc; the plan ignores it.
    node.one({"op": "retention_set", "prefix": "agent/a/", "target": "keys", "keep_last": 100})
    plan = read(node, {"op": "archive_plan", "prefix": "agent/", "within": "ckpt", "keep_last": 2})
    assert plan["keys"] == [[f"agent/a/ckpt/{i:04d}", i + 1, 7] for i in range(3)]
    assert plan["streams"] == [] and plan["more"] is False
    page = read(
        node,
        {"op": "archive_plan", "prefix": "agent/", "within": "ckpt", "keep_last": 2, "limit": 2},
    )
    assert len(page["keys"]) == 2 and page["more"] is True
    with pytest.raises(OpError) as ei:  # rules validated as retention_set's
        read(node, {"op": "archive_plan", "prefix": "", "target": "streams", "keep_every": 3})
    assert ei.value.code == "invalid_argument"


def test_plan_of_streams_caps_an_item_at_max_events(node, monkeypatch):
    from statekeeper.node.store import archive

    node.one(append("log", *[ev(b"x") for _ in range(5)]))
    plan = read(node, {"op": "archive_plan", "target": "streams", "prefix": "", "keep_last": 1})
    assert plan["streams"] == [["log", 1, 5]]
    monkeypatch.setattr(archive, "MAX_ARCHIVE_EVENTS", 2)
    plan = read(node, {"op": "archive_plan", "target": "streams", "prefix": "", "keep_last": 1})
    assert plan["streams"] == [["log", 1, 3]]


# -- seal ------------------------------------------------------------------------------------


def test_seal_rechecks_keys_and_takes_one_revision(node):
    ckpts(node, 3)  # revisions 1..3
    node.put("agent/a/ckpt/0001", b"rewritten")  # rev 4: the plan's mod_revision 2 is stale
    r = node.one(
        seal([["agent/a/ckpt/0000", 1], ["agent/a/ckpt/0001", 2], ["nope", 1]]),
    )
    assert r == {
        "revision": 5,
        "segment": SEG["id"],
        "sealed_keys": 1,
        "sealed_events": 0,
        "skipped": [["agent/a/ckpt/0001", "changed"], ["nope", "missing"]],
    }
    assert node.value("agent/a/ckpt/0001") == b"rewritten"
    rows = dict(raw_items(node.sm))  # the tombstone row, as keys.py documents it
    assert keys.unpack(rows[keys.archived_key(b"default", b"agent/a/ckpt/0000")]) == [
        SEG["id"],
        5,
        1,
    ]
    # Nothing sealed: no revision.
    again = node.one(seal([["agent/a/ckpt/0000", 1]]))
    assert again["revision"] == 5 and again["skipped"] == [["agent/a/ckpt/0000", "missing"]]


def test_get_of_an_archived_key_names_the_segment_and_history_still_reads(node):
    node.put("k", b"v1")
    node.put("k", b"v2")
    node.one(seal([["k", 2]]))
    extra = archived_error(node, {"op": "get", "key": "k"})
    assert extra == {
        "segment": SEG["id"],
        "url": SEG["url"],
        "sha256": SHA,
        "bytes": SEG["bytes"],  # the client reads at most this much (docs/archive.md)
        "archived_revision": 3,
        "key": "k",
    }
    archived_error(node, {"op": "get", "key": "k", "revision": 3})  # == current
    assert read(node, {"op": "get", "key": "k", "revision": 2})["kv"]["value"] == b"v2"
    # range and a missing key are unchanged
    assert read(node, {"op": "range", "prefix": "k"})["kvs"] == []
    assert read(node, {"op": "get", "key": "other"})["kv"] is None


def test_a_put_that_creates_the_key_removes_its_tombstone(node):
    node.put("k", b"v1")
    node.one(seal([["k", 1]]))
    node.put("k", b"new")
    assert read(node, {"op": "get", "key": "k"})["kv"]["value"] == b"new"
    node.delete("k")
    assert read(node, {"op": "get", "key": "k"})["kv"] is None  # deleted, not archived
    assert not [k for k, _ in raw_items(node.sm) if k[:1] == keys.ARCHIVED_KEY]


def test_seal_of_a_stream_rechecks_and_reads_below_first_seq_say_archived(node):
    node.one(append("log", *[ev(b"e%d" % i, f"id{i}") for i in range(6)]))
    r = node.one(seal(streams=[["log", 1, 4], ["log", 1, 5], ["gone", 1, 2]]))
    assert r["sealed_events"] == 3 and r["revision"] == 2
    assert r["skipped"] == [["log", "moved"], ["gone", "missing"]]
    extra = archived_error(node, {"op": "read_stream", "stream": "log", "start": 2})
    assert extra == {
        "segment": SEG["id"],
        "url": SEG["url"],
        "sha256": SHA,
        "bytes": SEG["bytes"],
        "stream": "log",
        "from_seq": 1,
        "before_seq": 4,
    }
    page = read(node, {"op": "read_stream", "stream": "log"})
    assert [e["seq"] for e in page["events"]] == [4, 5, 6]
    back = read(node, {"op": "read_stream", "stream": "log", "start": 2, "direction": "backward"})
    assert back["events"] == []  # backward reads unchanged
    info = read(node, {"op": "stream_info", "stream": "log"})
    assert info["first_seq"] == 4 and info["archived_before"] == 1
    # the removed events' dedup records are gone with them
    again = node.one(append("log", ev(b"e0", "id0")))
    assert again["events"] == [{"seq": 7, "duplicate": False}]


def test_truncated_not_archived_still_starts_at_first_seq(node):
    node.one(append("log", *[ev(b"x") for _ in range(6)]))
    node.one({"op": "truncate_stream", "stream": "log", "before_seq": 3})
    node.one(seal(streams=[["log", 3, 5]]))
    page = read(node, {"op": "read_stream", "stream": "log", "start": 1})
    # seq 1: truncated, no tombstone covers it: the read starts at first_seq as before
    assert [e["seq"] for e in page["events"]] == [5, 6] and page["first_seq"] == 5
    archived_error(node, {"op": "read_stream", "stream": "log", "start": 3})


def test_seal_of_a_segment_again_adds_counts_and_another_file_is_refused(node):
    for k in ("a", "b"):
        node.put(k, b"v")
    node.one(seal([["a", 1]]))
    node.one(seal([["b", 2]], idempotency_key="part-2"))
    (seg,) = read(node, {"op": "archive_list"})["segments"]
    assert seg == {
        "ns": "default",
        "id": SEG["id"],
        "url": SEG["url"],
        "sha256": SHA,
        "bytes": 9,
        "sealed_revision": 3,
        "keys": 2,
        "events": 0,
        "restored_keys": 0,
        "restored_events": 0,
    }
    node.put("c", b"v")
    r = node.one(seal([["c", 5]], seg={**SEG, "sha256": "cd" * 32}))
    assert r["error"]["code"] == "invalid_argument"
    assert node.value("c") == b"v"


# -- restore ---------------------------------------------------------------------------------


def test_restore_of_keys_writes_them_with_a_new_revision(node):
    node.put("k", b"v1")
    node.put("k", b"v2")
    node.put("live", b"x")
    node.one(seal([["k", 2]]))  # rev 4
    r = node.one(
        restore([["k", b"v2"], ["live", b"x"], ["never", b"y"]]),
    )
    assert r == {
        "revision": 5,
        "segment": SEG["id"],
        "restored_keys": 1,
        "restored_events": 0,
        "skipped": [["live", "live"], ["never", "not_archived"]],
    }
    kv = read(node, {"op": "get", "key": "k"})["kv"]
    assert kv == {"key": "k", "value": b"v2", "version": 1, "create_revision": 5, "mod_revision": 5}
    assert not [k for k, _ in raw_items(node.sm) if k[:1] == keys.ARCHIVED_KEY]
    node.delete("k")
    node.one(seal([["live", 3]], seg={**SEG, "id": "other"}))
    assert node.one(restore([["live", b"x"]]))["skipped"] == [["live", "other_segment"]]
    (seg,) = [s for s in read(node, {"op": "archive_list"})["segments"] if s["id"] == SEG["id"]]
    assert seg["restored_keys"] == 1


def test_restore_of_a_stream_is_byte_identical_and_rebuilds_dedup(node):
    node.one(append("log", ev(b"a", "id-a", type="t", meta={"z": 1, "a": "x"})), t=1_000)
    node.one(append("log", ev(b"b"), ev(b"c", "id-c")), t=2_000)
    node.one(append("log", ev(b"d")), t=3_000)
    before = raw_items(node.sm)
    events = stored_events(node, "log")
    node.one(seal(streams=[["log", 1, 4]]))
    r = node.one(restore(streams=[["log", events[:3]]]))
    assert r["restored_events"] == 3 and r["skipped"] == []
    after = dict(raw_items(node.sm))
    for k, v in before:  # every event and dedup record is back, byte for byte
        if k[:1] in (keys.STREAM_EVENT, keys.STREAM_DEDUP):
            assert after[k] == v
    meta = keys.unpack(after[keys.stream_meta_key(b"default", b"log")])
    assert meta == [1, 4, 4, 4, 1, r["revision"]]
    assert not [k for k in after if k[:1] == keys.ARCHIVED_EVENTS]
    dup = node.one(append("log", ev(b"c", "id-c")))
    assert dup["events"] == [{"seq": 3, "duplicate": True}]
    page = read(node, {"op": "read_stream", "stream": "log"})
    assert [(e["seq"], e["revision"], e["time"]) for e in page["events"]][:3] == [
        (1, 1, 1_000),
        (2, 2, 2_000),
        (3, 2, 2_000),
    ]


def test_restore_goes_newest_first_and_not_past_a_further_truncation(node):
    node.one(append("log", *[ev(b"x%d" % i) for i in range(8)]))
    events = stored_events(node, "log")
    node.one(seal(streams=[["log", 1, 5]]))  # tombstone [1, 5)
    # Oldest chunk first: not contiguous with first_seq 5.
    assert node.one(restore(streams=[["log", events[0:2]]]))["skipped"] == [
        ["log", "not_contiguous"]
    ]
    # Newest chunk first, then the rest: the tombstone shrinks, then goes.
    assert node.one(restore(streams=[["log", events[2:4]]]))["restored_events"] == 2
    assert read(node, {"op": "stream_info", "stream": "log"})["first_seq"] == 3
    archived_error(node, {"op": "read_stream", "stream": "log", "start": 1})
    assert node.one(restore(streams=[["log", events[0:2]]]))["restored_events"] == 2
    assert read(node, {"op": "stream_info", "stream": "log"})["archived_before"] is None
    # Archive again, then truncate further: the archived events cannot come back.
    node.one(seal(streams=[["log", 1, 3]], seg={**SEG, "id": "s2"}))
    node.one({"op": "truncate_stream", "stream": "log", "before_seq": 5})
    rev = node.sm.read({"op": "get", "ns": "default", "key": "x"})["revision"]
    r = node.one(restore(streams=[["log", events[0:2]]], segment="s2"))
    assert r["skipped"] == [["log", "not_contiguous"]] and r["revision"] == rev


# -- determinism, snapshots ------------------------------------------------------------------


def _workload(node: Node) -> None:
    ckpts(node, 4)
    node.one(append("log", *[ev(b"e%d" % i, f"i{i}") for i in range(5)]), t=5_000)
    node.one(seal([["agent/a/ckpt/0000", 1], ["agent/a/ckpt/0001", 2]], [["log", 1, 3]]))
    node.one(restore([["agent/a/ckpt/0000", b"state-0"]]))
    node.put("agent/a/ckpt/0001", b"again")


def test_two_state_machines_fed_the_same_entries_stay_identical(tmp_path):
    a, b = Node(tmp_path / "a"), Node(tmp_path / "b")
    try:
        _workload(a)
        _workload(b)
        items = raw_items(a.sm)
        assert items == raw_items(b.sm)
        assert {k[:1] for k, _ in items} >= {keys.ARCHIVED_EVENTS, keys.SEGMENT}
    finally:
        a.sm.close()
        b.sm.close()


def test_snapshot_carries_the_archive_records(tmp_path, node):
    _workload(node)
    snap = tmp_path / "snap"
    write_snapshot(node.sm, snap)
    other = Node(tmp_path / "other")
    try:
        other.sm.restore(snap)
        assert raw_items(other.sm) == raw_items(node.sm)
        archived_error(other, {"op": "read_stream", "stream": "log", "start": 1})
        assert read(other, {"op": "archive_list"})["segments"][0]["keys"] == 2
    finally:
        other.sm.close()


def test_limits_and_txn(node):
    too_many = seal([[f"k{i}", 1] for i in range(501)])
    assert node.one(too_many)["error"]["code"] == "too_many_ops"
    assert node.one(seal(streams=[["a", 1, 10_002]]))["error"]["code"] == "too_many_ops"
    bad = node.one(seal(seg={**SEG, "id": "no/slash"}))
    assert bad["error"]["code"] == "invalid_argument"
    txn = {"op": "txn", "success": [seal([["k", 1]])]}
    assert node.one(txn)["error"]["code"] == "invalid_argument"


KEYS = ["a/1", "a/2", "b"]
AUTO = -1  # resolved before the entry is applied: the key's current mod_revision / the
# newest archived events (so random entries seal and restore often, not only skip)
_archive_op = st.one_of(
    st.builds(put, st.sampled_from(KEYS), st.binary(max_size=2)),
    st.builds(lambda k: {"op": "delete", "key": k}, st.sampled_from(KEYS)),
    st.builds(
        lambda n, i: append("s", *[ev(b"x", f"i{i + j}") for j in range(n)]),
        st.integers(1, 3),
        st.integers(0, 5),
    ),
    st.builds(
        lambda ks, ss, sid: seal(ks, ss, seg={**SEG, "id": sid}),
        st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from([AUTO, AUTO, 1])), max_size=3),
        st.lists(
            st.tuples(st.just("s"), st.sampled_from([AUTO, 1]), st.integers(1, 3)), max_size=2
        ),
        st.sampled_from(["s1", "s2"]),
    ),
    st.builds(
        lambda ks, n, sid: restore(ks, [["s", n]] if n else [], segment=sid),
        st.lists(st.tuples(st.sampled_from(KEYS), st.binary(max_size=2)).map(list), max_size=2),
        st.integers(0, 3),
        st.sampled_from(["s1", "s2"]),
    ),
)


def _resolve(node: Node, op: dict, seen: dict) -> dict:
    """The op with its AUTO items made concrete from `node`'s state (and `seen`: every
    event ever stored, by seq)."""
    seen.update({e[0]: e for e in stored_events(node, "s")})
    info = node.sm.read({"op": "stream_info", "ns": "default", "stream": "s"}) if seen else None
    first = info["first_seq"] if info else 1
    if op["op"] == "archive_seal":
        keys_ = []
        for k, mod in op["keys"]:
            kv = node.sm.get("default", k, None)["kv"]
            keys_.append([k, (kv["mod_revision"] if kv else 0) if mod == AUTO else mod])
        streams = [
            ["s", first if lo == AUTO else lo, (first if lo == AUTO else lo) + n]
            for _, lo, n in op["streams"]
        ]
        return {**op, "keys": keys_, "streams": streams}
    if op["op"] == "archive_restore" and op["streams"]:
        n = op["streams"][0][1]
        events = [seen[q] for q in range(max(1, first - n), first) if q in seen]
        return {**op, "streams": [["s", events]] if events else []}
    return op


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_archive_op, min_size=1, max_size=3), min_size=1, max_size=10))
def test_random_archive_entries_are_deterministic_and_never_internal(entries):
    with tempfile.TemporaryDirectory() as d:
        a, b = Node(os.path.join(d, "a")), Node(os.path.join(d, "b"))
        seen: dict = {}
        try:
            for i, ops in enumerate(entries):
                ops = [_resolve(a, op, seen) for op in ops]
                ra, rb = a.apply(*ops, t=1_000 + i), b.apply(*ops, t=1_000 + i)
                assert ra == rb
                assert not [r for r in ra if r.get("error", {}).get("code") == "internal"], ra
            assert raw_items(a.sm) == raw_items(b.sm)
        finally:
            a.sm.close()
            b.sm.close()
