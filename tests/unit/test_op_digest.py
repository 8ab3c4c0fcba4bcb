"""node/store/apply.op_digest: the digest idempotency records keep must not change bytes
when its computation is made faster (records written by earlier code, and every node of a
cluster, must agree). The expected values were computed by the code before issue 17."""

from __future__ import annotations

import msgpack
import pytest

from node.config import Limits
from node.ops import validate_op
from node.store.apply import op_digest

CASES = [
    (
        {"op": "put", "ns": "a", "key": "k", "value": b"v", "idempotency_key": "x"},
        "4bc2a742104be942b957f5acb1239fba",
    ),
    (
        {"op": "delete", "ns": "a", "key": "k", "idempotency_key": "y"},
        "33e5b2070c3979e3e60cf5308893d4c7",
    ),
    (
        {
            "op": "txn",
            "ns": "a",
            "compare": [{"key": "k", "target": "version", "op": "==", "value": 1}],
            "success": [{"op": "put", "key": "k", "value": b"w", "lease": None}],
            "failure": [{"op": "get", "key": "k"}],
            "idempotency_key": "z",
        },
        "c3d64c132c439c778a6907129438086e",
    ),
]


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_digest_bytes_are_those_of_earlier_code(raw: dict, expected: str) -> None:
    assert op_digest(validate_op(raw, Limits())).hex() == expected


def test_digest_ignores_field_order_and_the_key_itself() -> None:
    op = validate_op(CASES[0][0], Limits())
    shuffled = dict(reversed(list(op.items())))
    assert op_digest(shuffled) == op_digest({**op, "idempotency_key": "other"}) == op_digest(op)
    assert op_digest({**op, "value": b"w"}) != op_digest(op)


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_digest_through_a_reused_packer_is_the_same(raw: dict, expected: str) -> None:
    # apply passes its store's Packer; the digest must not depend on which one packed it.
    packer = msgpack.Packer(use_bin_type=True)
    op = validate_op(raw, Limits())
    assert op_digest(op, packer.pack).hex() == expected
    assert op_digest(op, packer.pack).hex() == expected  # the Packer resets between calls
