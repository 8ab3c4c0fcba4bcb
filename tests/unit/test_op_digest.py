"""node/store/apply.op_digest: the digest idempotency records keep must not change bytes
when its computation is made faster (records written by earlier code, and every node of a
cluster, must agree). The expected values were computed by the code before issue 17."""

from __future__ import annotations

import hashlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statekeeper.node.config import Limits
from statekeeper.node.ops.core import validate_op
from statekeeper.node.store.apply import op_digest

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


def _reference_canonical(v):
    """_canonical as it was before issue 28 (the bytes must not change)."""
    if isinstance(v, dict):
        return [[k, _reference_canonical(v[k])] for k in sorted(v)]
    if isinstance(v, list | tuple):
        return [_reference_canonical(x) for x in v]
    return v


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.binary(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=6), _values, max_size=6))
def test_the_faster_walk_packs_the_same_bytes(op: dict) -> None:
    reference = [(k, _reference_canonical(op[k])) for k in sorted(op) if k != "idempotency_key"]
    expected = hashlib.blake2b(msgpack.packb(reference, use_bin_type=True), digest_size=16)
    assert op_digest(op) == expected.digest()
