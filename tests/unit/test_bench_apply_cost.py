"""benchmarks/apply_cost.py: the entries it times and the summary it prints."""

from __future__ import annotations

from statekeeper.benchmarks.apply_cost import Entries, report
from statekeeper.node import entry


def test_entries_are_marked_only_when_asked():
    gen = Entries(batch=3, keys=2, value_size=4)
    _, marked = entry.decode(gen.make(True))
    _, plain = entry.decode(gen.make(False))
    assert [entry.VALIDATED in op for op in marked] == [True] * 3
    assert [entry.VALIDATED in op for op in plain] == [False] * 3
    assert [op["key"] for op in marked + plain] == ["k0000001", "k0000000"] * 3
    assert len({op["idempotency_key"] for op in marked + plain}) == 6


def test_report_pairs_the_blocks():
    text = report({"marked": [10.0, 12.0, 9.0], "unmarked": [13.0, 11.0, 12.0]})
    assert "marked: median 10.00 us/put" in text
    assert "median 3.00 us/put per block, the mark cheaper in 2 of 3 blocks" in text


def test_shape_entries_hold_the_puts_asked_for():
    from statekeeper.benchmarks.apply_cost import shape_entry

    gen = Entries(batch=1, keys=20, value_size=4)
    _, batch = entry.decode(shape_entry(gen, 3, 1, False))
    assert [op["op"] for op in batch] == ["put"] * 3
    assert [op["idempotency_key"] for op in batch] == [None] * 3
    _, (txn,) = entry.decode(shape_entry(gen, 1, 10, True))
    assert txn["op"] == "txn" and len(txn["success"]) == 10
    # marked as the proposer marks it (txn is trusted since issue 28, node/entry.py)
    assert txn["idempotency_key"] and txn[entry.VALIDATED] == entry.VALIDATED_SHAPE


def test_report_against_gives_medians_and_ratio():
    from statekeeper.benchmarks.apply_cost import SHAPES, report_against

    out = {"old": {s: [10.0, 20.0, 30.0] for s in SHAPES}}
    out["new"] = {s: [5.0, 10.0, 15.0] for s in SHAPES}
    text = report_against(out)
    assert "batch of 64" in text and "20.0 (10-30)" in text and "0.50" in text
