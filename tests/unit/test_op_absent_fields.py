"""validate_op stores Field.absent() for an absent field instead of calling its check
(node/ops/spec.py plan_checks): that value must be exactly what the check returns for None,
for every field of every op, in and out of a txn, whatever the limits."""

from __future__ import annotations

import dataclasses

import pytest

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.ops.core import INTERNAL_OPS, OPS, validate_op
from statekeeper.node.ops.fields import CHECK_ABSENT, Field, Key
from statekeeper.node.ops.locks import LockName
from statekeeper.node.ops.spec import absent_value

LIMITS = (Limits(), dataclasses.replace(Limits(), max_key_bytes=8, min_lease_ttl_ms=5000))


def _fields() -> list[tuple[str, Field]]:
    return [(s.name, f) for s in (*OPS.values(), *INTERNAL_OPS.values()) for f in s.fields]


@pytest.mark.parametrize(("op", "field"), _fields(), ids=lambda x: getattr(x, "name", x))
def test_an_absent_value_is_what_the_check_returns_for_none(op: str, field: Field) -> None:
    absent = absent_value(field)
    if absent is CHECK_ABSENT:
        return
    for limits in LIMITS:
        for in_txn in (False, True):
            out = {"op": op, "ns": "default"}
            assert field.check(None, limits, in_txn, out) == absent
            assert type(field.check(None, limits, in_txn, out)) is type(absent)


def test_the_absent_values_skip_the_checks_of_a_plain_put() -> None:
    """The put of a batch: prev_kv, lease, ttl_ms and fence have constant absent values."""
    skipped = {f.name for f in OPS["put"].fields if absent_value(f) is not CHECK_ABSENT}
    assert {"prev_kv", "lease", "ttl_ms", "fence", "idempotency_key"} <= skipped
    assert "key" not in skipped and "value" not in skipped  # required: None is refused


def test_a_subclass_overriding_check_alone_is_checked_as_before() -> None:
    assert absent_value(Key("k")) is None
    assert absent_value(LockName("name")) is CHECK_ABSENT  # its own check, Key's absent()

    class Odd(Key):
        def check(self, v, limits, in_txn, out):
            return "x" if v is None else v

    assert absent_value(Odd("k")) is CHECK_ABSENT


def test_a_null_field_validates_as_absent_and_a_required_one_is_still_refused() -> None:
    op = {"op": "put", "key": "k", "value": b"v", "prev_kv": None, "lease": None, "fence": None}
    out = validate_op(op, Limits())
    want = {"op": "put", "ns": "default", "key": "k", "value": b"v", "prev_kv": False,
            "idempotency_key": None}  # fmt: skip
    assert out == want and list(out) == list(want)  # the same fields in the same order
    txn = {"op": "txn", "success": [dict(op, ns=None)], "idempotency_key": "a"}
    assert validate_op(txn, Limits())["success"] == [want]
    with pytest.raises(OpError) as e:
        validate_op({"op": "put", "key": None, "value": b"v"}, Limits())
    assert e.value.code == "invalid_argument"
