"""The key-value ops: put, delete, cas, and get/range inside an entry (etcd's model) and
as reads of StateMachine.read (`reads.serves`).

A write at revision rev stages the key's new "c" record, its "h" record at rev, and its
change-log record "r" rev key (read by node/api/watch.py), whose value names the "h" records
the write supersedes at rev (node/store/keys.py).

Archival (node/store/archive.py, its lookups in node/store/archive_tombstones.py): a put that creates a key (it is not live) also removes
the key's archive tombstone b"A" if there is one: one point lookup, paid only by puts that
create a key. A get of the latest revision of a key that is not live but archived fails
410 `archived` (read path only: gets inside an entry or txn, and range, see the key as
absent).
"""

from __future__ import annotations

from typing import Any

from statekeeper.node.config import Limits
from statekeeper.node.store import lease_state, reads
from statekeeper.node.store.apply import EntryTx, handles
from statekeeper.node.store.archive_tombstones import check_key
from statekeeper.node.store.keys import (
    CUR,
    SEP,
    TOMBSTONE,
    archived_key,
    change_key,
    cur_key,
    cur_lease,
    hist_prefix,
    hist_prefix_of,
    inc,
    p64,
    unpack,
)


def write_put(
    tx: EntryTx, ns_b: bytes, key_b: bytes, key: str, value: bytes, want_prev: bool, lease: int = 0
):
    """Stage a put; returns (the previous kv when asked, else None; (version, create, rev)).
    The key ends up attached to `lease` (0: to no lease; node/store/lease_state.py).

    Three records (issue 28 item 3): "c", "h" at rev, and the change-log record "r" at rev
    whose value names the "h" record the put supersedes (the key's previous mod_revision;
    empty when the put creates the key), which before was a fourth record ("s")."""
    rev = tx.revision + 1
    ck = cur_key(ns_b, key_b)
    hb = hist_prefix(ns_b, key_b)
    staging = tx.staging
    cur = tx.point(ck)
    prev = None
    if cur is not None:
        meta = unpack(cur)
        if want_prev:
            prev = tx.kv_from_meta(ns_b, key_b, key, meta)
        version, create, mod = meta[0] + 1, meta[1], meta[2]
        old_lease = cur_lease(meta)  # None: an old-shape record, "K" knows
        superseded = p64(mod)
    else:
        version, create, old_lease, superseded = 1, rev, 0, b""
        ak = archived_key(ns_b, key_b)
        if tx.point(ak) is not None:  # an archived key written again: no longer archived
            staging[ak] = None
    pack = tx.pack
    staging[ck] = pack([version, create, rev, lease])
    staging[hb + p64(rev)] = pack([value, version, create])
    if old_lease != lease:  # None (old shape) != any lease: set_key_lease reads "K"
        lease_state.set_key_lease(tx, ns_b, key_b, lease, old_lease)
    staging[change_key(rev, ck)] = superseded
    tx.hist_written += 1
    tx.wrote = True
    return prev, (version, create, rev)


def write_delete(tx: EntryTx, ck: bytes, meta: list) -> None:
    """Stage the deletion of the live key whose "c" key is `ck` and record is `meta`: its
    tombstone "h" at rev and its change-log record "r" at rev naming the record it
    supersedes and the tombstone itself (a deleted key vanishes once compacted past rev)."""
    rev = tx.revision + 1
    rev8 = p64(rev)
    tx.stage(ck, None)
    lease_state.detach(tx, ck, cur_lease(meta))
    tx.stage(hist_prefix_of(ck) + rev8, TOMBSTONE)
    tx.stage(change_key(rev, ck), p64(meta[2]) + rev8)
    tx.hist_written += 1
    tx.wrote = True


@handles("put")
def put(tx: EntryTx, op: dict) -> dict:
    key = op["key"]
    if op.get("lease") is None and op.get("ttl_ms") is None:
        lease, granted = 0, False  # lease_state.for_put's answer, without the call
    else:
        lease, granted = lease_state.for_put(tx, op)
    want_prev = op["prev_kv"]
    prev, _ = write_put(tx, op["ns"].encode(), key.encode(), key, op["value"], want_prev, lease)
    result: dict[str, Any] = {"revision": tx.revision + 1}
    if want_prev:
        result["prev_kv"] = prev
    if granted:
        result["lease"] = lease
    return result


@handles("delete")
def delete(tx: EntryTx, op: dict) -> dict:
    ns_b, key_b = op["ns"].encode(), op["key"].encode()
    if op["prefix"]:
        base = CUR + ns_b + SEP
        targets = list(tx.scan(base + key_b, base + inc(key_b)))
    else:
        ck = cur_key(ns_b, key_b)
        cur = tx.point(ck)
        targets = [(ck, cur)] if cur is not None else []
    prev_kvs = []
    skip = len(ns_b) + 2
    for ck, raw in targets:
        meta = unpack(raw)
        if op["prev_kv"]:
            k_b = ck[skip:]
            prev_kvs.append(tx.kv_from_meta(ns_b, k_b, k_b.decode(), meta))
        write_delete(tx, ck, meta)
    result: dict[str, Any] = {
        "revision": tx.revision + 1 if targets else tx.revision,
        "deleted": len(targets),
    }
    if op["prev_kv"]:
        result["prev_kvs"] = prev_kvs
    return result


@handles("cas")
def cas(tx: EntryTx, op: dict) -> dict:
    ns_b, key = op["ns"].encode(), op["key"]
    key_b = key.encode()
    cur = tx.point(cur_key(ns_b, key_b))
    meta = unpack(cur) if cur is not None else None
    expect = op["expect"]
    if "version" in expect:
        ok = (meta[0] if meta else 0) == expect["version"]
    elif "mod_revision" in expect:
        ok = (meta[2] if meta else 0) == expect["mod_revision"]
    else:
        ok = meta is None
    if not ok:
        current = tx.kv_from_meta(ns_b, key_b, key, meta) if meta else None
        return {"revision": tx.revision, "succeeded": False, "kv": current}
    _, (version, create, rev) = write_put(tx, ns_b, key_b, key, op["value"], False)
    return {
        "revision": rev,
        "succeeded": True,
        "kv": reads.kv(key, op["value"], version, create, rev),
    }


@handles("get")
def get(tx: EntryTx, op: dict) -> dict:
    return reads.get(tx, op["ns"], op["key"], op["revision"])


@handles("range")
def range_(tx: EntryTx, op: dict) -> dict:
    return reads.range_(tx, tx.limits, *reads.range_args(op))


@reads.serves("get")
def read_get(src: reads.Source, limits: Limits, op: dict) -> dict:
    result = reads.get(src, op["ns"], op["key"], op.get("revision"))
    if result["kv"] is None and result["revision"] == src.revision:
        check_key(src, op["ns"], op["key"])
    return result


@reads.serves("range")
def read_range(src: reads.Source, limits: Limits, op: dict) -> dict:
    return reads.range_(src, limits, *reads.range_args(op))
