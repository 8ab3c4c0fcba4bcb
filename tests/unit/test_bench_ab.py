"""benchmarks.ab: which run comes when, the load generator's arguments, the table from
rounds, and the worktrees it leaves behind (none). No cluster, no network: the worktree
test uses a throw-away git repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statekeeper.benchmarks import ab
from statekeeper.benchmarks.ab_rounds import (
    DEFAULT_ROWS,
    OPS,
    P50,
    ROWS,
    A,
    B,
    failure_notes,
    header_lines,
    load_argv,
    make_rows,
    markdown_table,
    measure_from_run,
    parse_rows,
    plan,
    table_cells,
)
from statekeeper.benchmarks.compare.rounds import Measure
from statekeeper.benchmarks.load import build_parser

row_keys = st.lists(st.sampled_from(sorted(ROWS)), min_size=1, unique=True)


@given(row_keys, st.integers(min_value=1, max_value=6))
def test_every_row_side_and_round_runs_once_with_the_sides_back_to_back(
    keys: list[str], rounds: int
) -> None:
    rows = parse_rows(",".join(keys))
    runs = plan(rows, rounds)
    assert (
        len(runs) == len({(r.round_no, r.row.key, r.side) for r in runs}) == 2 * rounds * len(rows)
    )
    for i in range(0, len(runs), 2):  # a row's A and B of one round are neighbours
        first, second = runs[i], runs[i + 1]
        assert (first.round_no, first.row) == (second.round_no, second.row)
        assert {first.side, second.side} == {A, B}
        assert first.side == (A if first.round_no % 2 == 0 else B)
    assert [r.round_no for r in runs] == sorted(r.round_no for r in runs)  # rounds outermost


@given(row_keys, st.integers(min_value=1, max_value=6))
def test_over_an_even_number_of_rounds_each_side_goes_first_half_the_time(
    keys: list[str], n: int
) -> None:
    runs = plan(parse_rows(",".join(keys)), 2 * n)
    firsts = [runs[i].side for i in range(0, len(runs), 2)]
    assert firsts.count(A) == firsts.count(B)


def test_rows_default_to_the_four_of_the_brief_and_unknown_ones_are_refused() -> None:
    assert [r.key for r in parse_rows(None)] == list(DEFAULT_ROWS)
    assert [r.key for r in parse_rows("get64, put1,get64")] == ["get64", "put1"]
    assert ROWS["put1"].figure == P50 and ROWS["put64"].figure == OPS
    with pytest.raises(ValueError, match="nope"):
        parse_rows("put1,nope")


@pytest.mark.parametrize("key", sorted(ROWS))
def test_the_load_generator_parses_a_runs_arguments_to_that_row(key: str, tmp_path: Path) -> None:
    row = ROWS[key]
    argv = load_argv(row, duration=2, warmup=1, json_path=tmp_path / "x.json", data_dir=tmp_path)
    args = build_parser().parse_args(argv)
    assert (args.workload, args.clients, args.value_size) == (
        row.spec.workload, row.spec.clients, row.spec.value_size)  # fmt: skip
    assert args.start_cluster and args.fsync == "always" and args.no_results and args.no_progress
    assert (args.duration, args.warmup, args.json) == (2.0, 1.0, tmp_path / "x.json")


LOAD_RUN = {"ops_per_s": 812.5, "p50_ms": 1.25, "p99_ms": 4.0, "errors": {"timeout": 2},
            "unfinished": 1, "cpu": {"wall_s": 2.0, "ops": 1000, "client_s": 0.5}}  # fmt: skip


def test_a_runs_figure_is_ops_or_p50_as_the_row_says() -> None:
    ops = measure_from_run(LOAD_RUN, OPS)
    assert (ops.value, ops.p50_ms, ops.p99_ms) == (812.5, 1.25, 4.0)
    assert ops.errors == 3 and ops.error_detail == {"timeout": 2, "unfinished": 1}
    assert ops.client_cores == 0.25 and ops.client_us_per_op == 500
    assert measure_from_run({**LOAD_RUN, "cpu": None}, P50).value == 1.25


def test_the_table_has_medians_ranges_and_the_median_of_the_paired_ratios() -> None:
    rows = make_rows(parse_rows("put64,put1"))
    put64, put1 = rows
    for r, (a, b) in enumerate([(100, 150), (200, 180), (300, 330)]):
        put64.put(A, r, 3, Measure(value=a, p50_ms=2.0, p99_ms=9.0))
        put64.put(B, r, 3, Measure(value=b, p50_ms=1.0, p99_ms=5.0, errors=1))
    put1.put(A, 0, 1, Measure(value=2.0, p50_ms=2.0, p99_ms=3.0))
    put1.put(B, 0, 1, Measure(failed="load exited 1: boom"))
    cells = table_cells(put64)
    # ratios 1.5, 0.9, 1.1: median 1.1, spread 0.9-1.5; not the ratio of the medians (0.9)
    assert cells[1:5] == ["200 (100-300)", "180 (150-330)", "1.10x", "0.90-1.50x"]
    assert cells[5:] == ["2.00 / 9.00", "1.00 / 5.00", "0 / 3"]
    assert table_cells(put1)[1:5] == ["2.00 (2.00-2.00)", "failed", "-", "-"]
    text = markdown_table(rows)
    assert "put 256 B x64 (ops/s)" in text and "put 256 B x1 (p50 ms)" in text
    assert failure_notes(rows) == ["- put 256 B x1 (p50 ms), B round 1: load exited 1: boom"]


def test_the_header_names_both_revisions_the_command_and_the_order() -> None:
    revs = {B: {"rev": "main", "hash": "bbb", "subject": "new"},
            A: {"rev": "v1", "hash": "aaa", "subject": "old"}}  # fmt: skip
    lines = header_lines(command="python -m statekeeper.benchmarks.ab v1 main", revisions=revs,
                         settings="s", machine="m", load="0.1", rounds=3)  # fmt: skip
    assert lines[:2] == ["- A: aaa old (given as `v1`)", "- B: bbb new (given as `main`)"]
    assert "- command: `python -m statekeeper.benchmarks.ab v1 main`" in lines
    assert "- rounds: 3, order per row: A, B | B, A | A, B" in lines


def test_the_chart_has_every_row_latency_ones_too(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = make_rows(parse_rows("put1,put64"))
    for r in rows:
        r.put(A, 0, 1, Measure(value=10.0))
        r.put(B, 0, 1, Measure(value=12.0))
    revs = {A: {"hash": "aaa"}, B: {"hash": "bbb"}}
    path = tmp_path / "ab.png"
    assert ab.write_chart(rows, path, revs)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


def test_worktrees_are_removed_even_when_the_run_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f").write_text("1")
    _git(repo, "add", "f")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    monkeypatch.setattr(ab, "PROJECT", repo)
    revs = {A: ab.describe("HEAD"), B: ab.describe("HEAD")}
    assert revs[A]["subject"] == "first" and len(revs[A]["commit"]) == 40
    seen: dict[str, Path] = {}
    with pytest.raises(KeyboardInterrupt), ab.worktrees(revs) as trees:
        seen = dict(trees)
        assert (trees[A] / "f").read_text() == "1" and trees[A] != trees[B]
        raise KeyboardInterrupt
    assert seen and not any(p.exists() for p in seen.values())
    assert _git(repo, "worktree", "list").count("\n") == 1  # only the repo itself
    with pytest.raises(ValueError, match="no-such-rev"):
        ab.describe("no-such-rev")


def test_nodes_left_by_a_killed_run_are_killed_by_their_pid_files(tmp_path: Path) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    node = subprocess.Popen([*sleeper, "node"])  # looks like `python -m statekeeper.node`
    other = subprocess.Popen(sleeper)  # a reused pid: not a node, left alone
    try:
        for name, proc in (("node-0", node), ("node-1", other)):
            (tmp_path / "cluster" / name).mkdir(parents=True)
            (tmp_path / "cluster" / name / "node.pid").write_text(f"{proc.pid}\n")
        ab.kill_left_nodes(tmp_path)
        assert node.wait(timeout=10) == -9
        assert other.poll() is None
    finally:
        for proc in (node, other):
            proc.kill()
            proc.wait()


def test_a_tree_whose_code_python_would_not_import_is_refused(tmp_path: Path) -> None:
    # No packages there: the venv's editable install would run the main checkout instead.
    with pytest.raises(ValueError, match="come from"):
        ab.check_tree(A, tmp_path)
    ab.check_tree(A, Path(ab.__file__).resolve().parent.parent)  # this tree is fine


class _Bar:
    def set_description(self, s: str) -> None: ...
    def write(self, s: str) -> None: ...
    def update(self, n: int = 1) -> None: ...


def test_a_ctrl_c_keeps_the_runs_done_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def measure_one(run, tree, args, work):  # type: ignore[no-untyped-def]
        calls.append(run.side)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return Measure(value=10.0 * len(calls)), {"ops_per_s": 1}

    monkeypatch.setattr(ab, "measure_one", measure_one)
    args = ab.build_parser().parse_args(["a", "b", "--rows", "put64", "--data-dir", str(tmp_path)])
    rows, raw, interrupted = ab.run_all(
        parse_rows("put64"), {A: tmp_path, B: tmp_path}, args, _Bar()
    )
    assert interrupted and calls == [A, B, B]
    assert [r["side"] for r in raw] == [A, B]
    assert table_cells(rows[0])[1:4] == ["10 (10-10)", "20 (20-20)", "2.00x"]
