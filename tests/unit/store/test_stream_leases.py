"""node/store/stream_leases.py: streams attached to leases by an append's `lease`, and
deleted with every record of theirs by the lease's revoke or expiry (issue 12, item 1)."""

from __future__ import annotations

import tempfile
import time

import pytest

from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import validate_op
from statekeeper.node.store import StateMachine, keys
from tests.unit.store.util import Node, entry, put, raw_items

SEG = {
    "id": "20261201T005300Z-0badc0de",
    "url": "file:///a/seg.skseg",
    "sha256": "ab" * 32,
    "bytes": 9,
}
STREAM_TAGS = (keys.STREAM_META, keys.STREAM_EVENT, keys.STREAM_DEDUP, keys.ARCHIVED_EVENTS)


def grant(ttl_ms=5_000, **kw) -> dict:
    return {"op": "lease_grant", "ttl_ms": ttl_ms, **kw}


def append(stream, *data, lease=None, ids=False, **kw) -> dict:
    events = [{"data": d, "id": d.decode() if ids else None} for d in data]
    op = {"op": "append", "stream": stream, "events": events, **kw}
    if lease is not None:
        op["lease"] = lease
    return op


def info(node: Node, lease: int) -> dict:
    return node.sm.read({"op": "lease_info", "lease": lease})


def stream_info(node: Node, stream: str, ns="default") -> dict:
    return node.sm.read(
        validate_op({"op": "stream_info", "ns": ns, "stream": stream}, node.sm.limits)
    )


def records_of(sm: StateMachine, stream: str, ns="default") -> list[bytes]:
    """Every record of the stream: meta, events, dedup, tombstones, attachment rows."""
    member = ns.encode() + keys.SEP + stream.encode()
    out = []
    for k, _ in raw_items(sm):
        tag = k[:1]
        if tag in STREAM_TAGS and (k[1:] == member or k[1:].startswith(member + keys.SEP)):
            out.append(k)
        elif tag == keys.STREAM_LEASE and k[1:] == member:
            out.append(k)
        elif tag == keys.LEASE_STREAM and k[9:] == member:
            out.append(k)
    return out


def test_append_with_lease_attaches_moves_and_append_without_leaves_it(node):
    node.one(grant(), t=1_000)
    node.one(grant(), t=1_000)
    node.one(append("log", b"a", lease=1))
    node.one(append("other", b"x"))
    assert info(node, 1)["streams"] == ["log"] and info(node, 1)["more_streams"] is False
    node.one(append("log", b"b"))  # no lease: the attachment stays
    assert info(node, 1)["streams"] == ["log"]
    node.one(append("log", b"c", lease=2))  # moved
    assert info(node, 1)["streams"] == [] and info(node, 2)["streams"] == ["log"]
    j = [(k, keys.unpack(v)) for k, v in raw_items(node.sm) if k[:1] == keys.STREAM_LEASE]
    assert j == [(keys.stream_lease_key(b"default", b"log"), 2)]
    assert [k for k, _ in raw_items(node.sm) if k[:1] == keys.LEASE_STREAM] == [
        keys.lease_streams_prefix(2) + b"default\x00log"
    ]
    r = node.one(append("log", b"c", lease=1, ids=True))
    assert r["events"] == [{"seq": 4, "duplicate": False}]
    # A pure replay (every event a duplicate) stores nothing, takes no revision, but moves it.
    rev = node.sm.revision
    r = node.one(append("log", b"c", lease=2, ids=True))
    assert r["events"] == [{"seq": 4, "duplicate": True}] and node.sm.revision == rev
    assert info(node, 2)["streams"] == ["log"] and info(node, 1)["streams"] == []


def test_revoke_deletes_the_stream_with_every_record_at_the_keys_revision(node):
    node.one(grant(), t=1_000)
    node.put("k", b"v", lease=1)
    for i in range(6):
        node.one(append("log", b"e%d" % i, lease=1 if i == 0 else None, ids=True))
    node.one(append("kept", b"x", ids=True))
    node.one({"op": "archive_seal", "segment": SEG, "keys": [], "streams": [["log", 1, 3]]})
    before = records_of(node.sm, "log")
    tags = {k[:1] for k in before}
    assert tags == {b"Q", b"q", b"d", b"B", b"J", b"j"}  # all kinds present before
    kept = records_of(node.sm, "kept")
    segment = [kv for kv in raw_items(node.sm) if kv[0][:1] == keys.SEGMENT]
    rev = node.sm.revision
    r = node.one({"op": "lease_revoke", "lease": 1})
    assert r == {"revision": rev + 1, "deleted": 1, "deleted_streams": 1}
    assert node.sm.revision == rev + 1  # keys and streams at the one revision
    assert records_of(node.sm, "log") == []
    assert records_of(node.sm, "kept") == kept
    assert [kv for kv in raw_items(node.sm) if kv[0][:1] == keys.SEGMENT] == segment
    assert node.value("k") is None
    with pytest.raises(OpError) as ei:
        stream_info(node, "log")
    assert ei.value.code == "stream_not_found"
    # An append creates it anew from seq 1; the old ids are forgotten.
    r = node.one(append("log", b"e0", ids=True))
    assert r["first_seq"] == 1 and r["events"] == [{"seq": 1, "duplicate": False}]
    assert stream_info(node, "log")["create_revision"] == rev + 2
    assert stream_info(node, "log")["archived_before"] is None


def test_expiry_deletes_attached_streams_and_keepalive_saves_them(node):
    node.one(grant(2_000), t=1_000)
    node.one(grant(2_000), t=1_000)
    node.one(append("a", b"1", b"2", lease=1))
    node.one(append("b", b"1", lease=2))
    node.one({"op": "lease_keepalive", "leases": [2]}, t=2_500)
    rev = node.sm.revision
    r = node.one({"op": "lease_expire", "leases": [1, 2]}, t=3_000)
    assert r == {"revision": rev + 1, "expired": [1], "deleted": 0, "deleted_streams": 1}
    assert records_of(node.sm, "a") == []
    assert stream_info(node, "b")["last_seq"] == 1


def test_unknown_or_foreign_lease_appends_nothing(node):
    node.one(append("log", b"a"))
    node.one(grant(ns="other"))
    before = [kv for kv in raw_items(node.sm) if kv[0] != keys.META]
    r = node.one(append("log", b"b", lease=7))
    assert r["error"]["code"] == "lease_not_found" and r["error"]["lease"] == 7
    r = node.one(append("new", b"b", lease=7))
    assert r["error"]["code"] == "lease_not_found"
    r = node.one(append("log", b"b", lease=1))
    # Issue 27 item 11: another namespace's lease is not found there (its ns is not named).
    assert r["error"]["code"] == "lease_not_found" and r["error"]["lease"] == 1
    assert "'other'" not in r["error"]["message"]
    txn = {"op": "txn", "compare": [], "success": [put("k", b"v"), append("log", b"b", lease=9)]}
    r = node.one(txn)
    assert r["error"]["code"] == "lease_not_found"
    assert [kv for kv in raw_items(node.sm) if kv[0] != keys.META] == before


def test_append_in_a_txn_attaches_and_revoke_takes_both(node):
    node.one(grant())
    txn = {
        "op": "txn",
        "compare": [],
        "success": [put("k", b"v", lease=1), append("log", b"a", lease=1)],
    }
    r = node.one(txn)
    assert r["succeeded"] and info(node, 1)["streams"] == ["log"] and info(node, 1)["keys"] == ["k"]
    assert node.one({"op": "lease_revoke", "lease": 1})["deleted_streams"] == 1
    assert records_of(node.sm, "log") == []


def _check_invariants(sm: StateMachine) -> None:
    items = dict(raw_items(sm))
    leases = {keys.u64(k[1:]): keys.unpack(v) for k, v in items.items() if k[:1] == keys.LEASE}
    attached = {(keys.u64(k[1:9]), k[9:]) for k in items if k[:1] == keys.LEASE_STREAM}
    by_stream = {(keys.unpack(v), k[1:]) for k, v in items.items() if k[:1] == keys.STREAM_LEASE}
    assert attached == by_stream
    for lease, member in attached:
        assert lease in leases and keys.STREAM_META + member in items
        assert member.split(keys.SEP)[0].decode() == leases[lease][0]


def test_deterministic_state_machines_stay_byte_identical():
    ops = [
        [grant(2_000), grant(4_000)],
        [append("s1", b"a", b"b", lease=1, ids=True), append("s2", b"x", lease=2)],
        [put("k", b"v", lease=1), append("s3", b"y", lease=1)],
        [append("s2", b"z", lease=1), {"op": "lease_keepalive", "leases": [2]}],
        [{"op": "lease_expire", "leases": [1, 2]}],
        [append("s1", b"a", ids=True, lease=2)],
        [{"op": "lease_revoke", "lease": 2}],
    ]
    with tempfile.TemporaryDirectory() as d:
        a, b = StateMachine(f"{d}/a"), StateMachine(f"{d}/b")
        for i, batch in enumerate(ops, start=1):
            t = 1_000 * i
            assert a.apply(i, entry(*batch, t=t)) == b.apply(i, entry(*batch, t=t))
            assert raw_items(a) == raw_items(b)
            _check_invariants(a)
        assert not [k for k, _ in raw_items(a) if k[:1] in (keys.STREAM_LEASE, keys.LEASE_STREAM)]
        assert not [k for k, _ in raw_items(a) if k[:1] == keys.STREAM_META]
        a.close()
        b.close()


def test_deleting_a_10000_event_stream_in_one_apply(node):
    """The figure in stream_leases.py's docstring (printed with -s)."""
    node.one(grant())
    for i in range(10):
        node.one(append("big", *[b"e%d-%d" % (i, j) for j in range(1_000)], lease=1, ids=True))
    assert stream_info(node, "big")["count"] == 10_000
    t0 = time.perf_counter()
    r = node.one({"op": "lease_revoke", "lease": 1})
    took = time.perf_counter() - t0
    print(f"\nrevoke deleting a 10,000-event stream (with ids): {took:.3f} s")
    assert r["deleted_streams"] == 1 and records_of(node.sm, "big") == []
