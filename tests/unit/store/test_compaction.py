"""node/store/compaction.py: the compact op, automatic compaction, bounded pruning."""

import pytest

from statekeeper.node.config import Retention
from statekeeper.node.errors import OpError
from statekeeper.node.store import StateMachine, compaction, keys
from statekeeper.node.store.backend import open_db
from tests.unit.store.util import Node, history_records, put, raw_items


def test_explicit_compaction(node):
    for i in range(5):
        node.put("a", b"%d" % i)  # revs 1..5
    node.put("b", b"x")  # 6
    node.delete("b")  # 7
    node.put("c", b"x")  # 8
    snapshot = {r: node.sm.range("default", revision=r)["kvs"] for r in range(0, 9)}
    assert node.one({"op": "compact", "revision": 7}) == {"revision": 8, "compact_revision": 7}
    node.apply()  # physical pruning of what the entry above compacted
    assert node.sm.compact_revision == 7
    for r in range(7, 9):
        assert node.sm.range("default", revision=r)["kvs"] == snapshot[r]
    for r in range(0, 7):
        with pytest.raises(OpError) as ei:
            node.sm.get("default", "a", revision=r)
        assert ei.value.code == "compacted"
        with pytest.raises(OpError):
            node.sm.range("default", revision=r)
    # Only the newest record <= 7 of "a" and the live "c" remain; "b" is gone.
    assert len(history_records(node.sm)) == 2
    # Compacting backwards is a no-op; compacting the future is an error.
    assert node.one({"op": "compact", "revision": 3})["compact_revision"] == 7
    assert node.one({"op": "compact", "revision": 99})["error"]["code"] == "future_revision"


def test_continuation_of_compacted_revision(node):
    node.apply(put("a", b""), put("b", b""))
    page = node.sm.range("default", limit=1)
    node.put("c", b"")
    node.one({"op": "compact", "revision": 3})
    with pytest.raises(OpError) as ei:
        node.sm.range("default", continuation=page["continuation"])
    assert ei.value.code == "compacted"


def test_automatic_compaction_keeps_reads_exact(tmp_path):
    n = Node(tmp_path / "db", retention=Retention(history_revisions=16))
    seen = {}
    for i in range(100):
        n.put(f"k{i % 7}", b"%d" % i)
        if i % 5 == 0:
            n.delete(f"k{(i + 3) % 7}")
        seen[n.sm.revision] = n.sm.range("default")["kvs"]
    c = n.sm.compact_revision
    assert n.sm.revision - 18 <= c <= n.sm.revision - 16
    for r, kvs in seen.items():
        if r >= c:
            assert n.sm.range("default", revision=r)["kvs"] == kvs
        else:
            with pytest.raises(OpError):
                n.sm.range("default", revision=r)
    # History stays bounded: ~1 record per revision kept plus the live keys.
    assert len(history_records(n.sm)) <= (n.sm.revision - c) + 7
    n.sm.close()


def test_pruning_runs_in_bounded_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(compaction, "HIST_PRUNE_MIN", 1)
    n = Node(tmp_path / "db")
    for i in range(30):
        n.put("k", b"%d" % i)
    n.one({"op": "compact", "revision": 30})
    before = len(history_records(n.sm))
    n.apply()  # one empty entry prunes one record
    assert len(history_records(n.sm)) == before - 1
    for _ in range(40):
        n.apply()
        assert n.value("k", revision=30) == b"29"
    assert len(history_records(n.sm)) == 1
    n.sm.close()


def _index_records(sm, tag):
    return {k: v for k, v in raw_items(sm) if k[:1] == tag}


def test_a_write_names_what_it_supersedes_in_its_change_log_record(node):
    # Issue 28: a put writes "c", "h" and "r" (no "s" record); the "r" value names the
    # history records the write superseded: none for a create, the previous one for an
    # overwrite, the previous one and the tombstone itself for a delete.
    node.put("a", b"1")  # rev 1
    node.put("a", b"2")  # rev 2
    node.delete("a")  # rev 3
    assert _index_records(node.sm, keys.SUPERSEDED) == {}
    ck = keys.cur_key(b"default", b"a")
    assert _index_records(node.sm, keys.CHANGE) == {
        keys.change_key(1, ck): b"",
        keys.change_key(2, ck): keys.p64(1),
        keys.change_key(3, ck): keys.p64(2) + keys.p64(3),
    }


def _as_written_before_issue_28(path):
    """Rewrite the DB at `path` (closed) into the older index format: an "s" rev8 <history
    key> entry per superseded record and empty "r" values."""
    db = open_db(path)
    try:
        changes = [(k, v) for k, v in db.items(from_key=keys.CHANGE) if k[:1] == keys.CHANGE]
        for k, v in changes:
            hb = keys.HIST + k[9:] + keys.SEP
            for i in range(0, len(v), 8):
                db[keys.SUPERSEDED + k[1:9] + hb + v[i : i + 8]] = b""
            db[k] = b""
    finally:
        db.close()


def test_history_indexed_the_older_way_is_still_pruned(tmp_path):
    # Data dirs (and snapshots) of versions before issue 28 index superseded records with
    # "s" entries; history written after the upgrade names them in "r". Compaction must
    # prune both, leaving exactly what a store that never had the old format keeps.
    def writes(n, first, last):
        for i in range(first, last):
            n.put(f"k{i % 3}", b"%d" % i)
            if i % 4 == 0:
                n.delete(f"k{(i + 1) % 3}")

    old, twin = Node(tmp_path / "old"), Node(tmp_path / "twin")
    for n in (old, twin):
        writes(n, 0, 12)
    old.sm.close()
    _as_written_before_issue_28(tmp_path / "old")
    old.sm = StateMachine(tmp_path / "old")
    assert _index_records(old.sm, keys.SUPERSEDED)  # the conversion did something
    for n in (old, twin):
        writes(n, 12, 24)
        n.one({"op": "compact", "revision": n.sm.revision - 2})
        n.apply()  # physical pruning of what the entry above compacted
    assert _index_records(old.sm, keys.SUPERSEDED) == {}
    assert history_records(old.sm) == history_records(twin.sm)
    for r in range(old.sm.compact_revision, old.sm.revision + 1):
        assert old.sm.range("default", revision=r) == twin.sm.range("default", revision=r)
    for n in (old, twin):
        n.sm.close()
