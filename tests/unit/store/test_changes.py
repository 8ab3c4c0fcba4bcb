"""node/store/changes.py and the change log kv.py writes: what changed at each revision, read
for watches in bounded pages, pruned with the history."""

from __future__ import annotations

import pytest

from statekeeper.node.config import Retention
from statekeeper.node.errors import OpError
from statekeeper.node.store import compaction, keys
from statekeeper.node.store.changes import read_changes, selection
from tests.unit.store.util import Node, put, raw_items


def _read(node, first, *, ns="default", key=None, prefix=None, start=None, end=None, **kw):
    lo, hi = selection(ns, key, prefix, start, end)
    with node.sm.read_view() as view:
        return read_changes(view, lo, hi, first, **kw)


def _log(node) -> list[tuple[int, bytes]]:
    return [(keys.u64(k[1:9]), k[9:]) for k, _ in raw_items(node.sm) if k[:1] == keys.CHANGE]


def _events(page) -> list[tuple[int, str, str]]:
    return [(f["revision"], e["type"], e["kv"]["key"]) for f in page.frames for e in f["events"]]


def test_every_put_and_delete_is_logged_at_its_revision(node):
    node.put("a", b"1")  # 1
    node.apply(put("b", b"2"), put("c", b"3", ns="other"))  # 2, 3
    node.delete("a")  # 4
    node.delete("missing")  # no revision, no record
    node.one({"op": "txn", "success": [put("x/1", b""), put("x/2", b"")]})  # 5
    node.one({"op": "delete", "key": "x/", "prefix": True})  # 6
    node.one({"op": "cas", "key": "a", "value": b"n", "expect": {"exists": False}})  # 7
    node.one({"op": "append", "stream": "s", "events": [{"data": b"e"}]})  # 8: no kv change
    assert _log(node) == [
        (1, b"default\x00a"),
        (2, b"default\x00b"),
        (3, b"other\x00c"),
        (4, b"default\x00a"),
        (5, b"default\x00x/1"),
        (5, b"default\x00x/2"),
        (6, b"default\x00x/1"),
        (6, b"default\x00x/2"),
        (7, b"default\x00a"),
    ]


def test_frames_hold_a_whole_revision_with_values_and_prev_kv(node):
    node.put("a", b"1")  # 1
    node.put("a", b"2")  # 2
    node.one({"op": "txn", "success": [put("a", b"3"), put("b", b"x")]})  # 3
    node.delete("a")  # 4
    page = _read(node, 1, prev_kv=True)
    assert [f["revision"] for f in page.frames] == [1, 2, 3, 4]
    assert (page.scanned_to, page.more, page.revision) == (4, False, 4)
    three = page.frames[2]["events"]
    assert [(e["type"], e["kv"]["key"], e["kv"]["value"]) for e in three] == [
        ("put", "a", b"3"),
        ("put", "b", b"x"),
    ]
    assert three[0]["kv"] == {
        "key": "a",
        "value": b"3",
        "version": 3,
        "create_revision": 1,
        "mod_revision": 3,
    }
    assert three[0]["prev_kv"]["value"] == b"2" and "prev_kv" not in three[1]
    (gone,) = page.frames[3]["events"]
    assert gone["type"] == "delete"
    assert gone["kv"] == {"key": "a", "version": 0, "create_revision": 0, "mod_revision": 4}
    assert gone["prev_kv"]["value"] == b"3"
    assert "prev_kv" not in _read(node, 4).frames[0]["events"][0]


def test_selections(node):
    for k in ("a", "a/1", "a/2", "ab", "b", "c"):
        node.put(k, b"v")  # revisions 1..6 in this order
    node.one(put("a/1", b"v", ns="other"))  # 7: another namespace
    assert [k for _, _, k in _events(_read(node, 1, key="a"))] == ["a"]
    assert [k for _, _, k in _events(_read(node, 1, prefix="a/"))] == ["a/1", "a/2"]
    assert [k for _, _, k in _events(_read(node, 1, start="a/2", end="b"))] == ["a/2", "ab"]
    assert [k for _, _, k in _events(_read(node, 1, start="b"))] == ["b", "c"]
    assert len(_events(_read(node, 1))) == 6  # the whole namespace, not "other"
    assert _events(_read(node, 1, ns="other")) == [(7, "put", "a/1")]
    assert _read(node, 1, key="zzz").frames == []


def test_from_a_later_revision_and_past_the_end(node):
    for i in range(5):
        node.put(f"k{i}", b"v")
    assert [f["revision"] for f in _read(node, 3).frames] == [3, 4, 5]
    empty = _read(node, 6)
    assert (empty.frames, empty.scanned_to, empty.more) == ([], 5, False)


def test_pages_are_bounded_but_never_split_a_revision(node):
    node.apply(*[put(f"k{i}", b"v") for i in range(5)])  # revisions 1..5, one entry
    node.one({"op": "txn", "success": [put(f"t{i}", b"v") for i in range(7)]})  # 6
    for i in range(4):
        node.put("z", b"%d" % i)  # 7..10
    seen, first, pages = [], 1, 0
    while True:
        page = _read(node, first, max_changes=3)
        pages += 1
        assert all(len(f["events"]) == (7 if f["revision"] == 6 else 1) for f in page.frames)
        seen += [f["revision"] for f in page.frames]
        first = page.scanned_to + 1
        if not page.more:
            break
    assert seen == list(range(1, 11)) and pages >= 4
    # The byte bound: two revisions of 40 bytes each fit a bound of 50 (the second one
    # crosses it), the third waits for the next page.
    for _ in range(3):
        node.put("big", b"x" * 40)  # 11..13
    page = _read(node, 11, max_bytes=50)
    assert [f["revision"] for f in page.frames] == [11, 12] and page.more
    assert page.scanned_to == 12
    # The step bound stops a scan over revisions that changed nothing watched, too.
    page = _read(node, 1, key="z", max_steps=2)
    assert page.frames == [] and page.more and page.scanned_to < 13


def test_revisions_without_watched_changes_cost_no_frame(node):
    node.put("a", b"1")
    node.one({"op": "append", "stream": "s", "events": [{"data": b"e"}]})
    node.put("b", b"1", ns="other")
    node.put("a", b"2")
    page = _read(node, 1, key="a")
    assert [f["revision"] for f in page.frames] == [1, 4] and page.scanned_to == 4


def test_compacted_start_names_the_compact_revision(node):
    for i in range(6):
        node.put("a", b"%d" % i)
    node.one({"op": "compact", "revision": 4})
    for first in (1, 4):
        with pytest.raises(OpError) as ei:
            _read(node, first)
        assert ei.value.code == "compacted"
        assert ei.value.extra == {"compact_revision": 4, "revision": 6}
    assert [f["revision"] for f in _read(node, 5, prev_kv=True).frames] == [5, 6]
    assert _read(node, 5, prev_kv=True).frames[0]["events"][0]["prev_kv"]["value"] == b"3"


def test_the_log_is_pruned_with_the_history(tmp_path):
    n = Node(tmp_path / "db", retention=Retention(history_revisions=16))
    for i in range(200):
        n.put(f"k{i % 9}", b"%d" % i)
    c = n.sm.compact_revision
    n.apply()  # prune what the last entry compacted
    revs = [r for r, _ in _log(n)]
    assert min(revs) == c + 1 and max(revs) == 200
    with n.sm.read_view() as view:
        assert view.meta.changes_pruned == c  # caught up: nothing <= c is left
    page = _read(n, c + 1)
    assert [f["revision"] for f in page.frames] == list(range(c + 1, 201))


def test_pruning_the_log_is_bounded_per_entry(tmp_path, monkeypatch):
    monkeypatch.setattr(compaction, "HIST_PRUNE_MIN", 3)
    n = Node(tmp_path / "db")
    n.apply(*[put(f"k{i}", b"v") for i in range(30)])  # 30 creations: no "s" entries
    n.one({"op": "compact", "revision": 30})  # its own entry prunes the first 3
    left = [len(_log(n))]
    for _ in range(12):
        n.apply()
        left.append(len(_log(n)))
    assert left[0] == 27 and left[-1] == 0
    assert all(a - b <= 3 for a, b in zip(left, left[1:], strict=False))
