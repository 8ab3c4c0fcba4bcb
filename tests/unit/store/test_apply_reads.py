"""What apply reads from RocksDB per op (issue 28, item 3), and "c" records of the old
3-field shape (node/store/keys.py): written by older versions, read and rewritten alike."""

from __future__ import annotations

import msgpack
from rocksdict import Rdict

from statekeeper.node.config import Limits, Retention
from statekeeper.node.store import StateMachine, keys
from statekeeper.node.store.apply import EntryTx
from statekeeper.node.store.backend import open_db
from tests.unit.store.util import Node, entry, put, raw_items, write_snapshot


class CountingDB:
    """An Rdict that records the keys of its point reads."""

    def __init__(self, db: Rdict) -> None:
        self.db = db
        self.reads: list[bytes] = []

    def get(self, k, *args):
        self.reads.append(k)
        return self.db.get(k, *args)

    def iter(self, *args):
        return self.db.iter(*args)


def reads_of(path, *ops) -> list[bytes]:
    """The point reads of applying one entry of `ops` to the closed store at `path`."""
    db = open_db(path)
    try:
        counting = CountingDB(db)
        meta = keys.Meta.decode(db.get(keys.META))
        packer = msgpack.Packer(use_bin_type=True)
        tx = EntryTx(counting, Limits(), Retention(), packer.pack, meta, None)
        results = tx.apply(entry(*ops, t=5_000))
        assert all("error" not in r for r in results), results
        return counting.reads
    finally:
        db.close()


def make_store(path, *ops) -> None:
    n = Node(path)
    n.apply(*ops)
    n.sm.close()


CK = keys.cur_key(b"default", b"k")


def test_a_put_of_a_live_key_without_lease_or_idempotency_key_reads_its_record_only(tmp_path):
    """No idempotency lookup without a key, and no "K" read: the "c" record says the key
    has no lease (before issue 28 a put of a live key also read "K")."""
    make_store(tmp_path / "db", put("k", b"1"))
    assert reads_of(tmp_path / "db", put("k", b"2")) == [CK]


def test_an_idempotency_key_costs_one_lookup(tmp_path):
    make_store(tmp_path / "db", put("k", b"1"))
    reads = reads_of(tmp_path / "db", put("k", b"2", idempotency_key="i"))
    assert reads == [keys.IDEM + keys.idem_record_id("default", "i"), CK]


def test_an_entry_reads_a_key_from_rocksdb_once(tmp_path):
    """A txn's compare and its put read the same "c" record: one RocksDB read."""
    make_store(tmp_path / "db", put("k", b"1"))
    txn = {
        "op": "txn",
        "compare": [{"key": "k", "target": "version", "op": "==", "value": 1}],
        "success": [put("k", b"2")],
    }
    assert reads_of(tmp_path / "db", txn, put("other", b"x")).count(CK) == 1


def test_a_leased_key_keeps_its_lease_in_its_record(node):
    node.one({"op": "lease_grant", "ttl_ms": 60_000})
    node.put("k", b"1", lease=1)
    items = dict(raw_items(node.sm))
    assert keys.unpack(items[CK]) == [1, 1, 1, 1]
    assert keys.unpack(items[keys.key_lease_key(b"default", b"k")]) == 1  # still written
    node.put("k", b"2")
    assert keys.unpack(dict(raw_items(node.sm))[CK]) == [2, 1, 2, 0]


def write_old_shape(path) -> None:
    """What a version before issue 28 left: keys "a" and "b" attached to lease 1, "c"
    with none, each "c" record in the 3-field shape."""
    n = Node(path)
    n.one({"op": "lease_grant", "ttl_ms": 60_000})
    n.apply(put("a", b"1", lease=1), put("b", b"2", lease=1), put("c", b"3"))
    n.sm.close()
    db = open_db(path)
    try:
        for k in (b"a", b"b", b"c"):
            ck = keys.cur_key(b"default", k)
            db[ck] = msgpack.packb(keys.unpack(db[ck])[:3])
    finally:
        db.close()


def lease_keys(node) -> list[str]:
    return node.sm.read({"op": "lease_info", "lease": 1, "keys": True})["keys"]


def test_old_shape_records_are_read_and_their_lease_found(tmp_path):
    write_old_shape(tmp_path / "db")
    node = Node(tmp_path / "db")
    node.index = node.sm.applied_index
    assert [kv["value"] for kv in node.sm.range("default")["kvs"]] == [b"1", b"2", b"3"]
    assert node.sm.get("default", "a")["kv"]["version"] == 1
    node.put("a", b"1'")  # no lease: detached (found through "K")
    node.delete("b")  # detached as well
    node.put("c", b"3'", lease=1)
    assert lease_keys(node) == ["c"]
    items = dict(raw_items(node.sm))
    assert keys.key_lease_key(b"default", b"a") not in items
    assert keys.key_lease_key(b"default", b"b") not in items
    assert keys.unpack(items[keys.cur_key(b"default", b"a")]) == [2, 1, 4, 0]
    node.one({"op": "lease_revoke", "lease": 1})
    assert [kv["key"] for kv in node.sm.range("default")["kvs"]] == ["a"]
    node.sm.close()


def test_a_snapshot_of_old_shape_records_restores_and_reads(tmp_path):
    write_old_shape(tmp_path / "old")
    old = StateMachine(tmp_path / "old")
    write_snapshot(old, tmp_path / "snap")
    old.close()
    node = Node(tmp_path / "new")
    node.sm.restore(tmp_path / "snap")
    node.index = node.sm.applied_index
    assert lease_keys(node) == ["a", "b"]
    node.put("b", b"2'", lease=1)  # same lease: stays attached
    node.put("a", b"1'")
    assert lease_keys(node) == ["b"]
    node.sm.close()
