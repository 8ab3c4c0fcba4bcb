"""benchmarks/apply_cost.py: the entries it times and the summary it prints."""

from __future__ import annotations

from benchmarks.apply_cost import Entries, report
from node import entry


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
