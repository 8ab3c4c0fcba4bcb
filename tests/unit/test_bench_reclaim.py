"""benchmarks.reclaim without a cluster: the key layout, argument checks, disk usage, the
samples at 0/10/25/50/75/100 %, the table, the flatness verdict, the record-type
breakdown and the plot (no timing assertions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.benchmarks import reclaim_report as rep
from statekeeper.benchmarks.reclaim import key_of, parse_args
from statekeeper.benchmarks.reclaim_report import Run, offline_line, per_version

MIB = 1 << 20
NODES = ["node-0", "node-1", "node-2"]


def sample(written: int, db_mib: float, rss_mib: float = 100.0, phase: str = "write",
           live: int | None = None) -> rep.Sample:  # fmt: skip
    db = int(db_mib * MIB)
    return rep.Sample(
        t=written / 1000,
        phase=phase,
        written=written,
        live=written if live is None else live,
        revision=written,
        db={n: db for n in NODES},
        raft={n: MIB for n in NODES},
        rss={n: int(rss_mib * MIB) for n in NODES},
    )


# ------------------------------------------------------------------------------ writes


def test_keys_round_robin_over_agents_and_sort_by_step() -> None:
    assert key_of(0, 100) == "agent/000/ckpt/000000000000"
    assert key_of(101, 100) == "agent/001/ckpt/000000000001"
    steps = [key_of(v, 7) for v in range(0, 70, 7)]  # agent 0's versions
    assert steps == sorted(steps) and len({k.rsplit("/", 1)[0] for k in steps}) == 1


def test_defaults_and_limits() -> None:
    a = parse_args([])
    assert (a.versions, a.agents, a.value_size, a.control_versions) == (
        1_000_000,
        100,
        1024,
        100_000,
    )
    assert a.gc_interval == 1.0 and a.history_revisions == 10_000
    with pytest.raises(SystemExit):
        parse_args(["--batch", "2000"])  # over max_ops_per_request
    with pytest.raises(SystemExit):
        parse_args(["--batch", "1000", "--value-size", "8192"])  # over max_request_bytes


# ------------------------------------------------------------------------------ sampling


def test_du_counts_allocated_blocks(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 10_000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"y" * 5000)
    assert rep.du(tmp_path) >= 15_000
    assert rep.du(tmp_path / "missing") == 0


def test_marks_pick_the_first_sample_at_or_past_each_share() -> None:
    samples = [sample(w, 1) for w in (0, 80, 260, 490, 510, 760, 1000)]
    samples.append(sample(1000, 1, phase="gc"))
    got = [s.written for s in rep.at_marks(samples, 1000)]
    assert got == [0, 260, 260, 510, 760, 1000]


def test_marks_fall_back_to_the_last_write_sample() -> None:
    samples = [sample(0, 1), sample(300, 2)]  # the run stopped early
    assert [s.written for s in rep.at_marks(samples, 1000)][-1] == 300


def test_table_rows_and_extra_rows() -> None:
    samples = [sample(w, w / 1000) for w in range(0, 1001, 100)]
    out = rep.table(
        samples, 1000, NODES, [("GC caught up", sample(1000, 0.5, phase="gc", live=10))]
    )
    lines = out.splitlines()
    assert lines[0].startswith("| point") and len(lines) == 2 + 6 + 1
    assert "| 50 %" in lines[5] and "500" in lines[5]
    assert "GC caught up" in lines[-1] and "0.5 / 0.5 / 0.5" in lines[-1]


# ------------------------------------------------------------------------------ verdict


def test_flat_when_growth_is_a_small_share_of_the_control() -> None:
    samples = [sample(w, 20 + w / 1e6, rss_mib=200) for w in range(0, 1_000_001, 100_000)]
    lines = rep.verdict(samples, 1_000_000, control_per_version=1300.0)
    assert lines[0].startswith("RocksDB size flat") and lines[1].startswith("RSS flat")


def test_not_flat_when_the_db_grows_like_the_control() -> None:
    samples = [
        sample(w, w * 1300 / MIB, rss_mib=100 + w / 2000) for w in range(0, 1_000_001, 100_000)
    ]
    lines = rep.verdict(samples, 1_000_000, control_per_version=1300.0)
    assert lines[0].startswith("RocksDB size NOT flat") and "100.0 %" in lines[0]
    assert lines[1].startswith("RSS NOT flat")


def test_verdict_without_a_control() -> None:
    samples = [sample(w, 1) for w in (0, 500, 1000)]
    assert rep.verdict(samples, 1000, None)[0].startswith("RocksDB size: 0.0 B")


def test_control_bytes_per_version() -> None:
    run = Run("control", 1000, samples=[sample(0, 0), sample(1000, 1000 * 1300 / MIB)])
    assert per_version(run) == pytest.approx(1300, rel=1e-3)
    assert per_version(Run("empty", 0)) is None


def test_offline_line() -> None:
    run = Run("keep-last-10", 10, offline={"node-0": (2 * MIB, MIB)})
    assert offline_line(run).endswith("node-0 2.0 -> 1.0 MiB")
    assert offline_line(Run("x", 1)) == ""


# ------------------------------------------------------------------------------ breakdown


def test_breakdown_by_record_type() -> None:
    items = [(b"c\x00k", b"123"), (b"h\x00k\x00" + b"\x00" * 8, b"v" * 100), (b"iabc", b"r"),
             (b"izz", b"rr"), (b"Z", b"")]  # fmt: skip
    parts = rep.breakdown(items)
    assert parts["live key index"] == (1, 6)
    assert parts["kv history (values)"] == (1, 112)
    assert parts["idempotency records"] == (2, 10)
    assert parts["other ('Z')"] == (1, 1)
    table = rep.breakdown_table(parts)
    assert table.splitlines()[2].startswith("| kv history")  # largest first


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    samples = [sample(w, w / 1000) for w in range(0, 1001, 250)]
    main = Run("keep-last-10", 1000, samples=samples, offline={"node-0": (2 * MIB, MIB)})
    main.extra = [("GC caught up", sample(1000, 0.5, phase="gc", live=10))]
    path = rep.plot([main, Run("control", 250, samples=samples[:2])], tmp_path / "r.png",
                    (1000, 1300.0))  # fmt: skip
    assert path is not None and path.stat().st_size > 0
