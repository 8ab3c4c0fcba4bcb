"""benchmarks/cpu_per_op.py: its pure parts (reading /proc, roles, per-op arithmetic)."""

from __future__ import annotations

import math
import os

import pytest

from statekeeper.benchmarks import cpu_per_op as c


def _stat(comm: str, utime: int, stime: int) -> str:
    # /proc/<pid>/stat: pid (comm) state, then fields 4.. ; utime and stime are 14 and 15.
    rest = ["S"] + ["0"] * 10 + [str(utime), str(stime)] + ["0"] * 30
    return f"1234 ({comm}) " + " ".join(rest)


@pytest.mark.parametrize("comm", ["python", "odd name", "a) b (c"])
def test_cpu_ticks_counts_user_and_system_after_the_command_name(comm: str) -> None:
    assert c.cpu_ticks(_stat(comm, 70, 5)) == 75
    assert c.cpu_split(_stat(comm, 70, 5)) == (70, 5)


def test_cpu_ticks_of_this_process_grow() -> None:
    before = c.read_cpu_seconds(os.getpid())
    sum(i * i for i in range(300_000))
    assert c.read_cpu_seconds(os.getpid()) >= before


def test_roles_name_the_leader_and_number_the_followers() -> None:
    assert c.role_names(["n0", "n1", "n2"], "n1") == {
        "n0": "follower-1",
        "n1": "leader",
        "n2": "follower-2",
    }
    assert c.role_names(["n0"], None) == {"n0": "follower-1"}


def test_per_op_is_cpu_microseconds_over_ops() -> None:
    got = c.per_op_us({"leader": 1.0, "client": 2.0}, {"leader": 1.5, "client": 2.1}, 1000)
    assert got == pytest.approx({"leader": 500.0, "client": 100.0})
    assert all(math.isnan(v) for v in c.per_op_us({"leader": 1.0}, {"leader": 2.0}, 0).values())


def test_summary_gives_medians_ranges_and_per_request_cost() -> None:
    rounds = [
        c.Round(
            puts=6400,
            requests=100,
            seconds=2.0,
            us_per_put={"leader": x, "client": 1.0},
            sys_per_put={"leader": x / 2, "client": 0.5},
        )
        for x in (10.0, 30.0, 20.0)
    ]
    rows = c.summarize(rounds)
    assert rows[0] == ["leader", "20.0", "10.0-30.0", "10.0", "1280.0"]
    text = c.markdown(rows, rounds)
    assert "| leader | 20.0 |" in text and "3,200" in text


def test_help_runs() -> None:
    with pytest.raises(SystemExit) as e:
        c.build_parser().parse_args(["--help"])
    assert e.value.code == 0


def test_chart_is_a_png_of_every_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    roles = ("leader", "follower-1", "follower-2", c.CLIENT)
    rounds = [
        c.Round(
            puts=9_000 + 500 * i,
            requests=9_000 + 500 * i,
            seconds=3.0,
            us_per_put={r: 100.0 + 20 * k + 5 * i for k, r in enumerate(roles)},
            sys_per_put={r: 30.0 + k + i for k, r in enumerate(roles)},
        )
        for i in range(3)
    ]
    path = tmp_path / "results" / "cpu.png"
    assert c.write_chart(rounds, path, "put x64, 256 B")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    assert not c.write_chart([], tmp_path / "none.png", "no rounds")
