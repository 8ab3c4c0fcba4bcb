"""The txn op: compares, then one branch of inner ops, all at one revision.

Inner ops run through apply.HANDLERS like top-level ones (node/ops/core.py limits which), so
they see the txn's earlier writes; their results report the txn's final revision.
"""

from __future__ import annotations

import base64

from statekeeper.node.ops.core import encode_continuation
from statekeeper.node.store.apply import HANDLERS, EntryTx, handles
from statekeeper.node.store.keys import cur_key, unpack

_META_INDEX = {"version": 0, "create_revision": 1, "mod_revision": 2}


def _compare(tx: EntryTx, c: dict) -> bool:
    ns_b, key_b = c["ns"].encode(), c["key"].encode()
    cur = tx.point(cur_key(ns_b, key_b))
    target, want = c["target"], c["value"]
    if target == "exists":
        actual = cur is not None
    elif cur is None:
        if target == "value":
            return c["op"] == "!="  # a missing key has no value to order
        actual = 0
    elif target == "value":
        actual = tx.kv_from_meta(ns_b, key_b, c["key"], unpack(cur))["value"]
    else:
        actual = unpack(cur)[_META_INDEX[target]]
    cmp = c["op"]
    if cmp == "==":
        return actual == want
    if cmp == "!=":
        return actual != want
    if cmp == "<":
        return actual < want
    return actual > want


@handles("txn")
def txn(tx: EntryTx, op: dict) -> dict:
    succeeded = all(_compare(tx, c) for c in op["compare"])
    branch = op["success"] if succeeded else op["failure"]
    results = [HANDLERS[inner["op"]](tx, inner) for inner in branch]
    final = tx.revision + 1 if tx.wrote else tx.revision
    for inner, r in zip(branch, results, strict=True):
        _fix_result(r, final, inner["ns"], op["ns"])
    return {"revision": final, "succeeded": succeeded, "results": results}


def _fix_result(result: dict, revision: int, op_ns: str, txn_ns: str) -> None:
    """Inner results report the txn's revision; kvs of another ns carry their ns."""
    result["revision"] = revision
    if "continuation" in result:
        result["continuation"] = _with_revision(result["continuation"], revision)
    if op_ns == txn_ns:
        return
    for name in ("kv", "prev_kv"):
        if result.get(name) is not None:
            result[name]["ns"] = op_ns
    for name in ("kvs", "prev_kvs"):
        for kv in result.get(name, ()):
            kv["ns"] = op_ns


def _with_revision(token: str, revision: int) -> str:
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    return encode_continuation(revision, unpack(raw)[1])
