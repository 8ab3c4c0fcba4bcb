"""node/store/retention.py and retention_select.py: policy records, gc re-checks in apply,
truncate_stream, the revision-time index, and the pure selection (what the leader's GC
task proposes) with no network; every time comes from the entries."""

from __future__ import annotations

import pytest

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import validate_op
from statekeeper.node.store import keys
from statekeeper.node.store.retention_select import Policy, doomed, plan_gc, revision_at
from tests.unit.store.util import Node, put, raw_items

MIN = 60_000


def policy(prefix, target="keys", **rules) -> dict:
    return {"op": "retention_set", "prefix": prefix, "target": target, **rules}


def append(stream, *datas, ids=None) -> dict:
    events = [{"data": d} for d in datas]
    for ev, i in zip(events, ids or (), strict=False):
        ev["id"] = i
    return {"op": "append", "stream": stream, "events": events}


def read(node: Node, op: dict) -> dict:
    return node.sm.read(validate_op(op, Limits()))


def live(node: Node, ns="default") -> list[str]:
    return [kv["key"] for kv in node.sm.range(ns)["kvs"]]


def plan(node: Node, now_ms: int, **kw) -> list[dict]:
    with node.sm.read_view() as view:
        return plan_gc(view, now_ms, **kw)


def apply_plan(node: Node, now_ms: int) -> list[dict]:
    return [node.one(op, t=now_ms) for op in plan(node, now_ms)]


# -- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, message",
    [
        (policy("a/"), "at least one"),
        (policy("a/", keep_every=3), "only allowed together with keep_last"),
        (policy("a/", "streams", keep_last=2, keep_every=3), "only for target 'keys'"),
        (policy("a/", keep_last=0), "keep_last must be an integer"),
        (policy("a/", keep_last=2, keep_every=1), "keep_every must be"),
        (policy("a/", "blobs", keep_last=2), "target must be one of"),
        (policy("a/", "streams", keep_last=2, within="ckpt"), "within is only for target"),
        (policy("a/", keep_last=2, within=""), "within must be a non-empty string"),
        (policy("a/", keep_last=2, within=3), "within must be a non-empty string"),
        (policy("a/", keep_last=2, within="a/b"), "no '/' or NUL"),
        (policy("a/", keep_last=2, within="ck\x00pt"), "no '/' or NUL"),
        (policy("a/", keep_last=2, within="é" * 129), "longer than 256 UTF-8 bytes"),
        (policy("a/", keep_last=2, within="\ud800"), "not valid unicode"),
        ({"op": "truncate_stream", "stream": "s", "before_seq": 0}, "before_seq"),
    ],
)
def test_bad_policies_are_refused_with_a_code(op, message):
    with pytest.raises(OpError) as ei:
        validate_op(op, Limits())
    assert ei.value.code == "invalid_argument" and message in ei.value.message


def test_within_is_validated_and_normalized():
    ok = validate_op(policy("agent/", keep_last=2, within="é" * 128), Limits())
    assert ok["within"] == "é" * 128  # 256 UTF-8 bytes: the most allowed
    assert validate_op(policy("agent/", keep_last=2), Limits())["within"] is None


def test_gc_is_refused_from_clients():
    op = {"op": "gc", "ns": "default", "deletes": [["k", 1]], "truncates": []}
    with pytest.raises(OpError) as ei:
        validate_op(op, Limits())
    assert ei.value.code == "unknown_op"
    assert validate_op(op, Limits(), internal=True)["deletes"] == [["k", 1]]
    from statekeeper.node.api.routes import OWN_ROUTES

    assert "gc" not in OWN_ROUTES.values() and "/internal/gc" not in OWN_ROUTES
    with pytest.raises(OpError):
        validate_op({**op, "deletes": [["k", 1]] * 501}, Limits(), internal=True)


# -- policy records --------------------------------------------------------------------------


def test_set_replace_list_delete(node):
    r = node.one(policy("agent/", keep_last=3, idempotency_key="p1"))
    assert r["created"] and r["revision"] == 1
    assert r["policy"] == {
        "ns": "default",
        "target": "keys",
        "prefix": "agent/",
        "keep_last": 3,
        "keep_every": None,
        "max_age_s": None,
        "create_revision": 1,
        "mod_revision": 1,
        "within": None,
    }
    r2 = node.one(policy("agent/", keep_last=5, keep_every=10))
    assert not r2["created"] and r2["policy"]["create_revision"] == 1
    node.one(policy("s", "streams", keep_last=2, ns="other"))
    listed = read(node, {"op": "retention_list", "ns": None, "limit": 1})
    assert [p["prefix"] for p in listed["policies"]] == ["agent/"] and listed["more"]
    rest = read(
        node,
        {"op": "retention_list", "ns": None, "limit": 10, "continuation": listed["continuation"]},
    )
    assert [(p["ns"], p["prefix"]) for p in rest["policies"]] == [("other", "s")]
    assert read(node, {"op": "retention_list", "ns": "other"})["policies"][0]["keep_last"] == 2
    assert node.one({"op": "retention_delete", "prefix": "agent/", "target": "keys"})["deleted"]
    d = node.one({"op": "retention_delete", "prefix": "agent/", "target": "keys"})
    assert d == {"revision": 4, "deleted": 0}


def test_within_round_trips_and_old_records_still_decode(node):
    r = node.one(policy("agent/", keep_last=3, within="ckpt"))
    assert r["policy"]["within"] == "ckpt"
    k = keys.retention_key(b"default", "keys", "agent/")
    assert keys.unpack(dict(raw_items(node.sm))[k]) == [3, None, None, 1, 1, "ckpt"]
    listed = read(node, {"op": "retention_list", "ns": "default"})["policies"]
    assert [(p["prefix"], p["within"]) for p in listed] == [("agent/", "ckpt")]
    status = read(node, {"op": "retention_status", "ns": "default"})
    assert status["policies"][0]["within"] == "ckpt"
    # replacing without within clears it, and writes the 5-item record of before
    r2 = node.one(policy("agent/", keep_last=3))
    assert r2["policy"]["within"] is None and r2["policy"]["create_revision"] == 1
    assert keys.unpack(dict(raw_items(node.sm))[k]) == [3, None, None, 1, 2]


def test_a_record_written_before_within_decodes():
    k = keys.retention_key(b"ns", "keys", "agent/")
    old = keys.msgpack.packb([3, 10, 60, 4, 7])  # the 5-item shape of before
    p = Policy.decode(k, old)
    assert (p.prefix, p.keep_last, p.keep_every, p.max_age_s, p.within) == (
        "agent/",
        3,
        10,
        60,
        None,
    )
    assert p.info()["within"] is None and p.covers_group("agent/a/chunk/x/")
    new = Policy.decode(k, keys.msgpack.packb([3, None, None, 4, 7, "ckpt"]))
    assert new.within == "ckpt"
    assert new.covers_group("agent/a/ckpt/") and not new.covers_group("agent/a/")
    assert not new.covers_group("agent/a/chunk/ab/") and not new.covers_group("")
    assert Policy.decode(k, keys.msgpack.packb([1, None, None, 1, 1, "a"])).covers_group("a/")


def test_an_old_entry_without_within_still_applies(node):
    op = validate_op(policy("agent/", keep_last=2), Limits())
    del op["within"]  # a retention_set logged before the field existed
    r = node.one(op)
    assert r["policy"]["within"] is None and r["policy"]["keep_last"] == 2


def test_at_most_1000_policies_per_namespace(node, monkeypatch):
    from statekeeper.node.store import retention

    monkeypatch.setattr(retention, "MAX_POLICIES_PER_NS", 3)
    for i in range(3):
        node.one(policy(f"p{i}/", keep_last=1))
    r = node.one(policy("p9/", keep_last=1))
    assert r["error"]["code"] == "too_many_policies"
    assert "error" not in node.one(policy("p1/", keep_last=2))  # replacing is fine
    assert "error" not in node.one(policy("p9/", keep_last=1, ns="other"))


# -- selection (pure) --------------------------------------------------------------------------


def test_doomed_positions():
    class P:
        keep_last, keep_every, max_age_s = 3, None, None

    assert doomed(5, [1] * 5, P, 0) == [0, 1]
    P.keep_every = 2
    assert doomed(8, [1] * 8, P, 0) == [1, 3]  # older: 0..4; kept 0, 2, 4 (no numbers)
    assert doomed(8, [1] * 8, P, 0, [1, 2, 3, 4, 5, 6, 7, 8]) == [0, 2, 4]  # kept 2, 4
    P.keep_every, P.max_age_s = None, 1
    P.keep_last = None
    assert doomed(4, [1, 2, 3, 4], P, 2) == [0, 1]
    P.keep_last, P.keep_every = 1, 2
    assert doomed(4, [1, 2, 3, 4], P, 9) == [0, 1, 2]  # age overrides keep_every, not keep_last


def test_keep_every_is_stable_across_gcs(node):
    node.one(policy("agent/", keep_last=2, keep_every=3))
    for n in range(1, 11):
        node.put(f"agent/a/ckpt/{n:012d}", b"x")
    apply_plan(node, 1_000)
    kept = [int(k[-12:]) for k in live(node)]
    assert kept == [3, 6, 9, 10]  # multiples of 3 among the older ones, and the newest 2
    assert plan(node, 1_000) == []  # a second gc drops nothing more
    for n in range(11, 14):
        node.put(f"agent/a/ckpt/{n:012d}", b"x")
    apply_plan(node, 1_000)
    assert [int(k[-12:]) for k in live(node)] == [3, 6, 9, 12, 13]


def test_keep_last_per_group(node):
    node.one(policy("agent/", keep_last=3))
    for a in ("a", "b"):
        for n in range(1, 6):
            node.put(f"agent/{a}/ckpt/{n:012d}", b"x")
    node.put("agent/a/meta", b"m")  # group agent/a/: alone, kept
    node.put("other/1", b"o")
    (op,) = plan(node, 1_000)
    assert op["ns"] == "default" and op["truncates"] == []
    assert [k for k, _ in op["deletes"]] == [
        f"agent/{a}/ckpt/{n:012d}" for a in ("a", "b") for n in (1, 2)
    ]
    (r,) = apply_plan(node, 1_000)
    assert (r["deleted"], r["skipped"]) == (4, 0)
    left = [k for k in live(node) if "/ckpt/" in k]
    assert left == [f"agent/{a}/ckpt/{n:012d}" for a in ("a", "b") for n in (3, 4, 5)]
    assert plan(node, 1_000) == []


def _agent_layout(node, agents=("a", "b"), n=5) -> None:
    """Per agent: n chunks in one chunk dir, ckpt/1..n manifests and a head."""
    for a in agents:
        for i in range(n):
            node.put(f"agent/{a}/chunk/{'ab' * 32}/{i:06d}", b"c")
        for i in range(1, n + 1):
            node.put(f"agent/{a}/ckpt/{i:012d}", b"m")
        node.put(f"agent/{a}/head", b"m")


def test_within_keep_last_trims_only_ckpt_groups(node):
    node.one(policy("agent/", keep_last=2, within="ckpt"))
    _agent_layout(node)
    node.put("agent/x/ckpt", b"a key named ckpt: its group is agent/x/, not covered")
    before = [k for k in live(node) if "/ckpt/" not in k]
    (op,) = plan(node, 1_000)
    assert [k for k, _ in op["deletes"]] == [
        f"agent/{a}/ckpt/{n:012d}" for a in ("a", "b") for n in (1, 2, 3)
    ]
    apply_plan(node, 1_000)
    assert [k for k in live(node) if "/ckpt/" in k] == [
        f"agent/{a}/ckpt/{n:012d}" for a in ("a", "b") for n in (4, 5)
    ]
    assert [k for k in live(node) if "/ckpt/" not in k] == before  # chunks, heads: all kept
    assert plan(node, 1_000) == []
    status = read(node, {"op": "retention_status", "ns": "default"})["policies"][0]
    assert status["within"] == "ckpt"
    assert status["holds"]["groups"] == 2 and status["holds"]["keys"] == 4


def test_without_within_the_same_policy_trims_chunks(node):
    """The footgun `within` avoids: chunk dirs are groups too."""
    node.one(policy("agent/", keep_last=2))
    _agent_layout(node, agents=("a",))
    (op,) = plan(node, 1_000)
    assert any("/chunk/" in k for k, _ in op["deletes"])


def test_within_max_age_leaves_chunks_alone(node):
    node.one(policy("agent/", max_age_s=60, within="ckpt"), t=MIN)  # index (MIN -> 1)
    _agent_layout(node, agents=("a",), n=3)  # revs 2..8, clock stays MIN
    node.one(put("x", b""), t=2 * MIN)  # rev 9, index (2 MIN -> 9)
    node.one(put("agent/a/ckpt/000000000009", b"new"), t=3 * MIN)  # rev 10
    (op,) = plan(node, 3 * MIN)  # cutoff 2 MIN -> rev 9: the layout's keys are old
    assert [k for k, _ in op["deletes"]] == [f"agent/a/ckpt/{n:012d}" for n in (1, 2, 3)]
    apply_plan(node, 3 * MIN)
    assert [k for k in live(node) if "/ckpt/" in k] == ["agent/a/ckpt/000000000009"]
    assert len([k for k in live(node) if "/chunk/" in k]) == 3
    assert "agent/a/head" in live(node)


def test_within_keeps_the_longest_prefix_rule(node):
    """Keys outside `within` under its prefix stay its own: a broader policy does not
    take them over."""
    node.one(policy("", keep_last=1))
    node.one(policy("agent/", keep_last=1, within="ckpt"))
    _agent_layout(node, agents=("a",), n=3)
    for n in range(3):
        node.put(f"other/{n}", b"")
    (op,) = plan(node, 1_000)
    assert sorted(k for k, _ in op["deletes"]) == [
        "agent/a/ckpt/000000000001",
        "agent/a/ckpt/000000000002",
        "other/0",
        "other/1",
    ]


def test_longest_prefix_wins(node):
    node.one(policy("agent/", keep_last=1))
    node.one(policy("agent/keep/", keep_last=3))
    for n in range(4):
        node.put(f"agent/x/{n}", b"")
        node.put(f"agent/keep/{n}", b"")
    (op,) = plan(node, 1_000)
    assert sorted(k for k, _ in op["deletes"]) == [
        "agent/keep/0",
        "agent/x/0",
        "agent/x/1",
        "agent/x/2",
    ]


def test_max_age_uses_the_time_index(node):
    node.one(policy("sess/", max_age_s=120), t=MIN)  # index record (MIN -> 1)
    node.put("sess/old", b"1")  # rev 2 at t=1000: clock stays MIN
    node.one(put("x", b""), t=2 * MIN)  # index record (2 MIN -> 3)
    node.one(put("sess/new", b"2"), t=3 * MIN)  # rev 4, index (3 MIN -> 4)
    with node.sm.read_view() as view:
        assert revision_at(view, MIN - 1) == 0
        assert revision_at(view, 2 * MIN + 59_999) == 3
    assert plan(node, 3 * MIN + 30_000) == []  # cutoff 1.5 MIN: record MIN -> rev 1
    (op,) = plan(node, 4 * MIN)  # cutoff 2 MIN -> rev 3: sess/old (rev 2) is older
    assert op["deletes"] == [["sess/old", 2]]
    apply_plan(node, 4 * MIN)
    assert live(node) == ["sess/new", "x"]


def test_gc_rechecks_mod_revision_and_takes_one_revision(node):
    node.put("a/1", b"1")
    node.put("a/2", b"2")
    node.put("a/3", b"3")
    node.put("a/1", b"rewritten")  # rev 4
    gc = {"op": "gc", "ns": "default", "deletes": [["a/1", 1], ["a/2", 2], ["a/3", 3]]}
    r = node.one(gc)
    assert r == {"revision": 5, "deleted": 2, "skipped": 1, "removed": 0}
    assert live(node) == ["a/1"]
    again = node.one(gc)
    assert again == {"revision": 5, "deleted": 0, "skipped": 3, "removed": 0}
    status = read(node, {"op": "retention_status", "ns": "default"})
    assert status["last_gc"]["default"]["revision"] == 5


# -- streams ---------------------------------------------------------------------------------


def test_truncate_stream_moves_first_seq_and_drops_dedup(node):
    node.one(append("s", b"1", b"2", b"3", b"4", ids=["i1", "i2", "i3", "i4"]))
    r = node.one({"op": "truncate_stream", "stream": "s", "before_seq": 3})
    assert r == {
        "revision": 2,
        "stream": "s",
        "first_seq": 3,
        "last_seq": 4,
        "removed": 2,
        "more": False,
    }
    info = read(node, {"op": "stream_info", "stream": "s"})
    assert (info["first_seq"], info["last_seq"], info["count"], info["bytes"]) == (3, 4, 2, 2)
    page = read(node, {"op": "read_stream", "stream": "s", "start": 1})
    assert [e["seq"] for e in page["events"]] == [3, 4] and page["first_seq"] == 3
    backward = read(node, {"op": "read_stream", "stream": "s", "direction": "backward"})
    assert [e["seq"] for e in backward["events"]] == [4, 3]
    # only forward; the dedup record of i1 is gone (i1 is new again), i3's remains
    back = node.one({"op": "truncate_stream", "stream": "s", "before_seq": 2})
    assert back["removed"] == 0 and back["revision"] == 2
    dedup = [k for k, _ in raw_items(node.sm) if k[:1] == keys.STREAM_DEDUP]
    assert [k[-2:] for k in dedup] == [b"i3", b"i4"]
    again = node.one(append("s", b"1", b"3", ids=["i1", "i3"]))
    assert [e["seq"] for e in again["events"]] == [5, 3]
    # a read at a past revision sees the events still stored
    old = read(node, {"op": "read_stream", "stream": "s", "revision": 1})
    assert [e["seq"] for e in old["events"]] == [3, 4] and old["last_seq"] == 4
    everything = node.one({"op": "truncate_stream", "stream": "s", "before_seq": 99})
    assert (everything["first_seq"], everything["last_seq"]) == (6, 5)
    assert read(node, {"op": "read_stream", "stream": "s"})["events"] == []
    assert read(node, {"op": "read_stream", "stream": "s", "revision": 1})["events"] == []
    node.one(append("s", b"6"))
    past = read(node, {"op": "read_stream", "stream": "s", "revision": 4})
    assert past["events"] == [] and past["last_seq"] == 5
    missing = node.one({"op": "truncate_stream", "stream": "nope", "before_seq": 2})
    assert missing["error"]["code"] == "stream_not_found"


def test_stream_keep_last_and_max_age(node):
    node.one(policy("log/", "streams", keep_last=2))
    node.one(policy("age/", "streams", max_age_s=60, keep_last=1))
    for i in range(5):
        node.one(append("log/a", b"%d" % i), t=1_000 + i)
    node.one(append("age/a", b"old1", b"old2"), t=10_000)
    node.one(append("age/a", b"new"), t=100_000)
    node.one(append("age/b", b"o1", b"o2"), t=100_001)
    ops = plan(node, 130_000)  # cutoff 70_000
    assert ops == [
        {
            "op": "gc",
            "ns": "default",
            "deletes": [],
            "truncates": [["age/a", 3], ["age/b", 2], ["log/a", 4]],
        }
    ]
    status = read(node, {"op": "retention_status", "ns": None})
    log = next(p for p in status["policies"] if p["prefix"] == "log/")
    assert log["holds"] == {"groups": 1, "events": 5, "bytes": 5}
    assert log["frees"] == {"events": 3, "bytes": 3}
    apply_plan(node, 130_000)
    info = read(node, {"op": "stream_info", "stream": "log/a"})
    assert (info["first_seq"], info["count"]) == (4, 2)


def test_status_reports_store_wide_retention(node):
    node.one(policy("k/", keep_last=1))
    node.put("k/1", b"abc")
    node.put("k/2", b"de")
    s = read(node, {"op": "retention_status", "ns": "default"})
    assert s["policies"][0]["holds"] == {"groups": 1, "keys": 2, "bytes": 5}
    assert s["policies"][0]["frees"] == {"keys": 1, "bytes": 3}
    assert s["last_gc"] == {"default": None}
    assert s["history"]["history_revisions"] == node.sm.retention.history_revisions
    assert s["idempotency"]["idempotency_seconds"] == node.sm.retention.idempotency_seconds


def test_time_index_is_deterministic(tmp_path):
    a, b = Node(tmp_path / "a"), Node(tmp_path / "b")
    try:
        for n in (a, b):
            for i in range(30):
                n.one(put(f"k{i}", b"v"), t=i * 25_000)
        assert raw_items(a.sm) == raw_items(b.sm)
        index = [k for k, _ in raw_items(a.sm) if k[:1] == keys.TIME_INDEX]
        times = sorted(keys.INF - keys.u64(k[1:]) for k in index)
        assert times == [
            75_000,
            150_000,
            225_000,
            300_000,
            375_000,
            450_000,
            525_000,
            600_000,
            675_000,
        ]
    finally:
        a.sm.close()
        b.sm.close()
