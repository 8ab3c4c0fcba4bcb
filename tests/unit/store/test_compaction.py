"""node/store/compaction.py: the compact op, automatic compaction, bounded pruning."""

import pytest

from node.config import Retention
from node.errors import OpError
from node.store import compaction
from tests.unit.store.util import Node, history_records, put


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
