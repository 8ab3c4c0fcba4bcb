"""benchmarks.scaling without a server: the sweep points, bend detection, the table, the
lazy key sequences, VmRSS parsing, the plan from the command line and the plot file."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.benchmarks.cluster_control import parse_vmrss
from statekeeper.benchmarks.scaling.__main__ import build_parser, plan, sweep_table
from statekeeper.benchmarks.scaling.measure import KeyRange, Repeated, dir_bytes
from statekeeper.benchmarks.scaling.plot import write_plot
from statekeeper.benchmarks.scaling.points import (
    MIB,
    Point,
    Stat,
    bend_line,
    bend_lines,
    first_bend,
    format_bytes,
    history_points,
    markdown_table,
    size_points,
    value_keys,
    value_points,
)


def test_size_points_are_capped_by_max_keys() -> None:
    assert size_points(10_000_000, quick=False) == [10_000, 100_000, 1_000_000, 10_000_000]
    assert size_points(1_000_000, quick=False) == [10_000, 100_000, 1_000_000]
    # A cap between two points is measured itself, as the last point.
    assert size_points(500_000, quick=False) == [10_000, 100_000, 500_000]
    assert size_points(20_000_000, quick=False)[-1] == 10_000_000
    assert size_points(10_000_000, quick=True) == [10_000, 100_000]
    assert size_points(5_000, quick=True) == [5_000]
    with pytest.raises(ValueError):
        size_points(0, quick=False)


def test_value_and_history_points() -> None:
    assert value_points(False) == [64, 1024, 16 * 1024, 256 * 1024, MIB]
    assert value_points(True) == [64, 1024, 16 * 1024]
    assert history_points(False) == [0, 10, 100, 1000]
    assert history_points(True) == [0, 10]
    assert value_keys(64, 2000, 256 * MIB) == 2000
    assert value_keys(MIB, 2000, 256 * MIB) == 256
    assert value_keys(MIB, 2000, MIB) == 16  # never fewer than 16 keys
    assert [format_bytes(n) for n in (64, 1024, 16 * 1024, MIB, 1500)] == [
        "64 B", "1 KiB", "16 KiB", "1 MiB", "1500 B",
    ]  # fmt: skip


def test_first_bend_rising_and_falling() -> None:
    assert first_bend([1.0, 1.4, 2.2, 5.0]) == 2  # 2.2 > 1.5 * 1.4
    assert first_bend([1.0, 1.4, 2.0, 5.0]) == 3  # 2.0 < 2.1: the bend is at 5.0
    assert first_bend([1.0, 1.5, 2.25]) is None  # exactly 1.5x is not a bend
    assert first_bend([1.0, None, 1.6]) == 2  # a missing point is skipped, not the base
    assert first_bend([0.0, 1.0, 1.2]) is None  # no base yet at 0 latency
    assert first_bend([100.0, 80.0, 50.0], rising=False) == 2  # 50 < 80 / 1.5
    assert first_bend([100.0, 0.0], rising=False) == 1  # throughput collapsed to nothing
    assert first_bend([100.0, 200.0, 150.0], rising=False) is None
    assert first_bend([]) is None


def _points() -> list[Point]:
    a = Point("10,000 keys", 1e4, {"put@1": Stat(2.0, 5.0, 400.0), "get@1": Stat(1.0, 2.0, 900.0)})
    b = Point("100,000 keys", 1e5, {"put@1": Stat(2.5, 6.0, 380.0), "get@1": Stat(1.1, 2.0, 880.0)})
    c = Point(
        "1,000,000 keys",
        1e6,
        {"put@1": Stat(4.0, 9.0, 240.0, errors=3)},  # get@1 not measured at this point
        {"restart to ready s": 1.234, "RSS MiB per member": "100 / 90 / 95"},
    )
    return [a, b, c]


def test_bend_lines_state_the_point_and_the_ratio() -> None:
    pts = _points()
    line = bend_line(pts, "put@1", "put 1 client", "p50_ms")
    assert line == (
        "put 1 client, p50: bends at 1,000,000 keys (4.00 ms after 2.50 ms at 100,000 keys: 1.60x)"
    )
    ops = bend_line(pts, "put@1", "put 1 client", "ops_s")
    assert "bends at 1,000,000 keys" in ops and "0.63x" in ops
    flat = bend_line(pts, "get@1", "get 1 client", "p50_ms")
    assert flat == "get 1 client, p50: no point above 1.5x the previous one"
    lines = bend_lines(pts)
    assert len(lines) == 4  # put@1 and get@1, p50 and ops/s each; nothing unmeasured
    assert not any("16 clients" in x for x in lines)


def test_markdown_table_columns_rows_and_gaps() -> None:
    table = markdown_table(_points(), "keys in the store").splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header == [
        "keys in the store",
        "put 1 client p50 / p99 ms",
        "put 1 client ops/s",
        "get 1 client p50 ms",
        "get 1 client ops/s",
        "restart to ready s",
        "RSS MiB per member",
    ]
    assert table[1].count("|") == len(header) + 1
    assert len(table) == 2 + 3
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in table[2:]]
    assert rows[0] == ["10,000 keys", "2.00 / 5.00", "400", "1.00", "900", "-", "-"]
    assert rows[2] == [
        "1,000,000 keys", "4.00 / 9.00", "240 (3 err)", "-", "-", "1.23", "100 / 90 / 95",
    ]  # fmt: skip


def test_sweep_table_has_the_bends_and_the_chart() -> None:
    text = sweep_table("size", _points(), "results/x.png")
    assert text.startswith("### Store size")
    assert "- put 1 client, p50: bends at 1,000,000 keys" in text
    assert text.rstrip().endswith("![size sweep](results/x.png)")


def test_key_range_is_lazy_indexable_and_sliceable() -> None:
    keys = KeyRange("s", 5, 10_000_000)
    assert len(keys) == 9_999_995
    assert keys[0] == "s00000005" and keys[-1] == "s09999999"
    assert keys[1:3] == ["s00000006", "s00000007"]
    assert keys[9_999_990:20_000_000] == [f"s0999999{i}" for i in range(5, 10)]
    with pytest.raises(IndexError):
        keys[9_999_995]
    with pytest.raises(ValueError):
        KeyRange("s", 3, 2)
    rounds = Repeated(KeyRange("h", 0, 3), 2)
    assert len(rounds) == 6
    assert list(rounds) == ["h00000000", "h00000001", "h00000002"] * 2
    assert rounds[3:6] == ["h00000000", "h00000001", "h00000002"]
    with pytest.raises(IndexError):
        rounds[6]


def test_parse_vmrss() -> None:
    status = "Name:\tpython\nVmPeak:\t  999 kB\nVmRSS:\t   12345 kB\nThreads:\t4\n"
    assert parse_vmrss(status) == 12345 * 1024
    assert parse_vmrss("Name:\tzombie\nThreads:\t1\n") is None  # a zombie has no VmRSS
    assert parse_vmrss("VmRSS:\tlots kB\n") is None


def test_dir_bytes_counts_allocated_blocks(tmp_path: Path) -> None:
    assert dir_bytes(None) is None and dir_bytes(tmp_path / "missing") is None
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_bytes(b"x" * 100_000)
    assert dir_bytes(tmp_path) >= 100_000  # type: ignore[operator]


def test_plan_from_the_command_line() -> None:
    p = build_parser()
    assert plan(p.parse_args([])) == {
        "size": [10_000, 100_000, 1_000_000, 10_000_000],
        "value": [64, 1024, 16384, 262144, MIB],
        "history": [0, 10, 100, 1000],
    }
    quick = plan(p.parse_args(["--quick", "--only", "history", "--only", "size"]))
    assert quick == {"size": [10_000, 100_000], "history": [0, 10]}  # always in sweep order
    assert plan(p.parse_args(["--only", "size", "--max-keys", "200000"])) == {
        "size": [10_000, 100_000, 200_000]
    }


def test_write_plot_makes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "plots" / "scaling-size.png"
    assert write_plot(_points(), "keys", "title", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not write_plot([], "keys", "title", tmp_path / "empty.png")
