"""benchmarks.compare without any server: formatting, ratios, the registry, the workloads
against an in-memory fake, and the CLI wiring. No etcd, no statekeeper node is started.
The rounds' aggregation itself is in test_bench_rounds.py."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from statekeeper.benchmarks import compare
from statekeeper.benchmarks.cluster_control import ClusterControl, rss_of_pid
from statekeeper.benchmarks.compare import (
    Measure,
    Row,
    Settings,
    Workload,
    first_put_after,
    format_ratio,
    format_value,
    markdown_table,
    parse_groups,
    ratio,
    row_notes,
    select_workloads,
)
from statekeeper.benchmarks.compare import measure as compare_measure
from statekeeper.benchmarks.harness import run_load
from statekeeper.benchmarks.systems import SYSTEMS, StatekeeperSystem, System, get_system_class


class FakeStore(System):
    """A dict with versions, behind a tiny sleep: enough for every compare workload."""

    name = "fake-compare"
    max_batch = 100

    def __init__(self, endpoints: Sequence[str] = ("mem://",), **_: object) -> None:
        super().__init__(endpoints)
        self.data: dict[str, tuple[bytes, int]] = {}
        self.txn_sizes: list[int] = []
        self.batch_sizes: list[int] = []

    async def setup(self) -> None:
        pass

    async def teardown(self) -> None:
        pass

    async def put(self, key: str, value: bytes) -> None:
        await asyncio.sleep(0.0005)
        self.data[key] = (value, self.data.get(key, (b"", 0))[1] + 1)

    async def get(self, key: str, consistency: str = "linearizable") -> object:
        await asyncio.sleep(0.0005)
        return self.data[key]  # KeyError if a read workload forgot to load its keys

    async def cas(self, key: str, value: bytes, expect_version: int) -> tuple[bool, int]:
        await asyncio.sleep(0.0005)
        version = self.data.get(key, (b"", 0))[1]
        if version != expect_version:
            return False, version
        self.data[key] = (value, version + 1)
        return True, version + 1

    async def txn_put(self, items: Sequence[tuple[str, bytes]]) -> None:
        assert len({k for k, _ in items}) == len(items), "a txn may not write a key twice"
        self.txn_sizes.append(len(items))
        for k, v in items:
            self.data[k] = (v, self.data.get(k, (b"", 0))[1] + 1)
        await asyncio.sleep(0.0005)

    async def batch_put(self, items: Sequence[tuple[str, bytes]]) -> None:
        assert len(items) <= self.max_batch
        self.batch_sizes.append(len(items))
        for k, v in items:
            self.data[k] = (v, self.data.get(k, (b"", 0))[1] + 1)
        await asyncio.sleep(0.0005)


# ------------------------------------------------------------------- ratios and table


def test_ratio_and_its_formatting() -> None:
    assert ratio(500.0, 1000.0) == 0.5
    assert ratio(None, 1000.0) is None and ratio(1.0, None) is None
    assert ratio(1.0, 0.0) is None  # no division by zero when etcd measured nothing
    assert format_ratio(0.5) == "0.50x"
    assert format_ratio(1.234) == "1.23x"
    assert format_ratio(None) == "-"


def test_value_formatting_by_row_kind() -> None:
    def one(m: Measure):  # type: ignore[no-untyped-def]
        return compare.summarize_row(Row("k", "k", "ops", {"statekeeper": [m]})).systems[
            "statekeeper"
        ]

    assert format_value("ops", one(Measure(value=1234.4))) == "1234"
    assert format_value("time", one(Measure(value=1.234))) == "1.23 s"
    assert format_value("memory", one(Measure(value=812.3))) == "812 MiB"
    assert format_value("ops", None) == "-"
    assert format_value("ops", one(Measure(failed="boom"))) == "failed"
    with pytest.raises(ValueError):
        format_value("furlongs", one(Measure(value=1.0)))


def test_table_has_both_figures_the_median_ratio_and_its_spread() -> None:
    def put(value: float, p50: float, p99: float, us: float, cores: float, **kw) -> Measure:  # type: ignore[no-untyped-def]
        return Measure(value=value, p50_ms=p50, p99_ms=p99, client_us_per_op=us,
                       client_cores=cores, **kw)  # fmt: skip

    rows = [
        Row("put-256-x64", "put 256 B x64", "ops", {
            "statekeeper": [put(2500, 20.0, 40.0, 90, 0.3), put(3000, 22.0, 44.0, 100, 0.4),
                            put(2000, 18.0, 38.0, 80, 0.5)],
            "etcd": [put(5000, 10.0, 150.0, 120, 0.6), put(4000, 12.0, 140.0, 110, 0.7),
                     put(4000, 11.0, 160.0, 130, 0.9, errors=3,
                         error_detail={"ConnectionFailedError": 3})],
        }),
        Row("failover", "failover: leader SIGKILL -> first put (5 trials)", "time", {
            "statekeeper": [Measure(value=0.9, p50_ms=900.0, p99_ms=1100.0, samples=[0.9])],
            "etcd": [Measure(value=1.2, p50_ms=1200.0, p99_ms=1500.0, samples=[1.2])],
        }),
        Row("rss", "RSS", "memory", {"statekeeper": [Measure(failed="no pid")]}),
    ]  # fmt: skip
    table = markdown_table(rows)
    lines = table.splitlines()
    assert lines[0].startswith("| workload") and "median ratio sk/etcd" in lines[0]
    assert "ratio spread" in lines[0] and "client CPU us/op sk / etcd" in lines[0]
    assert set(lines[1]) <= {"|", "-", ":"}
    assert len({len(line) for line in lines}) == 1  # aligned columns
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    # Medians per system: 2500 of (2500, 3000, 2000), 4000 of (5000, 4000, 4000); the
    # paired ratios are 0.50, 0.75, 0.50: median 0.50, not 2500/4000 = 0.62.
    assert cells[3] == "0.50x" and cells[4] == "0.50-0.75x"
    assert cells[1:3] == ["2500", "4000"] and cells[5:9] == ["20.00", "11.00", "40.00", "150"]
    assert cells[9:] == ["90 / 120", "0.40 / 0.70", "0 / 3"]
    fail = [c.strip() for c in lines[3].strip("|").split("|")]
    assert fail[1:5] == ["0.90 s", "1.20 s", "0.75x", "0.75-0.75x"]
    rss = [c.strip() for c in lines[4].strip("|").split("|")]
    assert rss[1:5] == ["failed", "-", "-", "-"]
    notes = row_notes(rows)
    assert any("etcd" in n and "ConnectionFailedError: 3" in n for n in notes)
    assert any("round 1: no figure: no pid" in n for n in notes)
    # etcd's client used 0.9 of a core in one round: flagged; statekeeper's never above 0.5
    busy = [n for n in notes if "may be what limits" in n]
    assert len(busy) == 1 and "etcd" in busy[0] and "0.90" in busy[0]


def test_results_section_has_command_machine_and_table(tmp_path: Path) -> None:
    rows = [Row("put-256-x1", "put 256 B x1", "ops", {"statekeeper": [Measure(value=10)]})]
    text = compare.results_section(
        rows,
        command="python -m statekeeper.benchmarks.compare --quick",
        settings="s",
        target="t",
        chart="results/c.png",
        info={"etcd": "3.4.23"},
        now=dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC),
        load="0.1 0.2 0.3",
        rounds="- rounds: 3, order: etcd, statekeeper | statekeeper, etcd | etcd, statekeeper",
    )
    assert "- rounds: 3, order: etcd, statekeeper | statekeeper, etcd" in text
    assert text.startswith("## 2026-01-02 03:04 UTC: statekeeper vs etcd")
    assert "`python -m statekeeper.benchmarks.compare --quick`" in text
    assert "- machine: nproc" in text and "etcd 3.4.23" in text
    assert (
        "| put 256 B x1" in text
        and "![median ratio per workload, with its spread](results/c.png)" in text
    )


def test_chart_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [
        Row(w.key, w.label, "ops", {
            "statekeeper": [Measure(value=100.0 * (i + r + 1)) for r in range(3)],
            "etcd": [Measure(value=150.0 * (i + 1)) for _ in range(3)],
        })
        for i, w in enumerate(select_workloads(compare.GROUPS, quick=True))
    ]  # fmt: skip
    path = tmp_path / "results" / "compare.png"
    assert compare.write_chart(rows, path, "t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------- registry and CLI


def test_registry_has_both_systems() -> None:
    from statekeeper.benchmarks.etcd import ETCD_MAX_TXN_OPS, EtcdSystem

    assert SYSTEMS["statekeeper"] is StatekeeperSystem
    assert SYSTEMS["etcd"] is EtcdSystem
    assert get_system_class("etcd") is EtcdSystem
    assert EtcdSystem.max_batch == ETCD_MAX_TXN_OPS == 128
    assert StatekeeperSystem.max_batch == 1024
    with pytest.raises(ValueError, match="known: .*etcd.*statekeeper"):
        get_system_class("nope")
    # Every registered system can build a managed cluster (what compare needs).
    for cls in (EtcdSystem, StatekeeperSystem):
        assert cls.managed_cluster.__func__ is not System.managed_cluster.__func__  # type: ignore[attr-defined]


def test_optional_ops_say_not_supported() -> None:
    class Minimal(System):
        name = "minimal"

        async def setup(self) -> None: ...
        async def teardown(self) -> None: ...
        async def put(self, key: str, value: bytes) -> None: ...
        async def get(self, key: str, consistency: str = "linearizable") -> object: ...

    m = Minimal(["x"])
    for call in (m.cas("k", b"v", 0), m.txn_put([]), m.batch_put([])):
        with pytest.raises(NotImplementedError):
            asyncio.run(call)
    assert compare.supports(m, "put") and not compare.supports(m, "cas")
    assert compare.supports(FakeStore(), "cas") and compare.supports(FakeStore(), "batch")
    s = Settings(duration=0.05, warmup=0, keys=100, keys_cold_start=1, failover_trials=1,
                 max_clients=1)  # fmt: skip
    out = asyncio.run(compare.run_kv_group(m, [Workload("txn", 1)], s, compare.QuietBar(1), "m"))
    assert out["txn-x1"].failed and "no txn operation" in out["txn-x1"].failed


def test_groups_and_quick_subset() -> None:
    assert parse_groups(None, False) == list(compare.GROUPS)
    assert "cold-start" not in parse_groups(None, True)
    assert parse_groups("failover, put,coldstart", False) == ["put", "failover", "cold-start"]
    with pytest.raises(ValueError, match="unknown group"):
        parse_groups("put,bogus", False)
    full = select_workloads(compare.GROUPS, quick=False)
    quick = select_workloads(compare.GROUPS, quick=True)
    assert set(quick) < set(full)
    labels = [w.label for w in full]
    for clients in (1, 16, 64, 256):
        assert f"put 256 B x{clients}" in labels and f"put 4 KiB x{clients}" in labels
    for c in ("linearizable", "serializable"):
        assert f"get {c} x1" in labels and f"get {c} x64" in labels
    kinds = {(w.kind, w.clients) for w in full}
    assert {("mix", 64), ("cas", 64), ("txn", 16), ("batch", 16)} <= kinds
    assert len({w.key for w in full}) == len(full)  # keys are unique row ids
    assert [w.kind for w in select_workloads(["get"], quick=True)] == ["get", "get"]


@pytest.mark.parametrize(
    "first",
    [
        "statekeeper.benchmarks.systems",
        "statekeeper.benchmarks.etcd",
        "statekeeper.benchmarks.load",
    ],
)
def test_systems_and_etcd_do_not_import_each_other(first: str) -> None:
    # A fresh interpreter: what an import pulls in depends on what was imported before.
    probe = f"""
import sys
import {first}
from statekeeper.benchmarks import load, systems
assert ("benchmarks.etcd" in sys.modules) == ({first!r} == "benchmarks.etcd")
assert systems.system_names() == ["etcd", "redis", "statekeeper"]
assert load.build_parser().parse_args(["--system", "etcd"]).system == "etcd"
assert systems.get_system_class("etcd").__name__ == "EtcdSystem"
assert systems.SYSTEMS.keys() == {{"etcd", "statekeeper"}}
"""
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_options_and_what_quick_changes() -> None:
    args = compare.build_parser().parse_args(
        ["--quick", "--only", "put,failover", "--duration", "2"]
    )
    assert args.quick and args.only == "put,failover" and args.duration == 2.0
    direct = compare.build_parser().parse_args(["--quick"])
    assert direct.keys == 10_000 and direct.failover_trials == 5 and direct.duration is None
    s = compare.settings_from_args(direct, select_workloads(compare.GROUPS, True))
    assert (s.duration, s.warmup, s.keys_cold_start) == (3.0, 1.0, 100_000)
    full = compare.settings_from_args(compare.build_parser().parse_args([]), [])
    assert (full.duration, full.warmup, full.keys_cold_start) == (10.0, 2.0, 1_000_000)


def test_rss_of_this_process() -> None:
    rss = rss_of_pid(os.getpid())
    assert rss is not None and rss > 1024 * 1024
    assert rss_of_pid(2**22 + 12345) is None  # no such pid


# ------------------------------------------------------------------- workloads on a fake


@pytest.mark.parametrize("kind", ["put", "get", "mix", "cas", "txn", "batch"])
async def test_every_workload_runs_on_a_fake(kind: str) -> None:
    fake = FakeStore()
    s = Settings(duration=0.2, warmup=0.05, keys=200, keys_cold_start=10, failover_trials=1,
                 max_clients=8)  # fmt: skip
    bar = compare.QuietBar(1)
    w = Workload(kind, 8)
    out = await compare.run_kv_group(fake, [w], s, bar, "fake")
    m = out[w.key]
    assert m.failed is None and m.errors == 0, m
    assert m.value and m.value > 0 and m.p50_ms is not None and m.p99_ms is not None
    if kind == "cas":
        assert "attempts per successful cas" in m.note
        assert sum(v for k, (_, v) in fake.data.items() if k.startswith("hot")) > 0
    if kind == "txn":
        assert set(fake.txn_sizes) == {compare.TXN_OPS}
    if kind == "batch":
        # ops/s counts puts, not requests
        assert {compare.BATCH_OPS} <= set(fake.batch_sizes)


async def test_bulk_populate_respects_the_batch_limit() -> None:
    fake = FakeStore()
    seen: list[int] = []
    keys = [f"k{i}" for i in range(1050)]
    await fake.bulk_populate(keys, b"v", batch=1024, concurrency=4, progress=seen.append)
    assert set(fake.data) == set(keys)
    assert max(fake.batch_sizes) <= fake.max_batch  # capped by the system's own limit
    assert sum(seen) == len(keys)


async def test_first_put_after_the_kill() -> None:
    t_kill = time.perf_counter()
    recover_at = t_kill + 0.15

    async def put() -> None:
        if time.perf_counter() < recover_at:
            await asyncio.sleep(0.01)
            raise ConnectionError("no leader")
        await asyncio.sleep(0.005)

    took = await first_put_after(put, t_kill, timeout=5.0)
    assert took is not None and 0.15 <= took < 1.0

    async def never() -> None:
        raise ConnectionError("down")

    assert await first_put_after(never, time.perf_counter(), timeout=0.1) is None


async def test_a_stuck_put_does_not_hide_recovery() -> None:
    # The first probe hangs (sent to the dead leader); later ones succeed.
    t_kill = time.perf_counter()
    calls = 0

    async def put() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(30)

    took = await first_put_after(put, t_kill, timeout=5.0)
    assert took is not None and took < 1.0


async def test_failover_and_cold_start_on_a_fake_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare_measure, "FAILOVER_SETTLE", 0.05)

    class FakeControl(ClusterControl):
        def __init__(self) -> None:
            super().__init__(["mem://a", "mem://b", "mem://c"], ["a", "b", "c"])
            self.up = {"a", "b", "c"}
            self.lead = "a"
            self.kills: list[str] = []

        async def leader(self) -> str | None:
            return self.lead if self.lead in self.up else None

        async def kill(self, member: str) -> None:
            self.up.discard(member)
            self.kills.append(member)
            self.lead = next(m for m in self.members if m in self.up)

        async def stop(self, member: str) -> None:
            self.up.discard(member)

        async def start(self, member: str) -> None:
            self.up.add(member)

        def is_ready(self, member: str) -> bool:
            return member in self.up

        def pid(self, member: str) -> int | None:
            return os.getpid() if member in self.up else None

    fake, control = FakeStore(), FakeControl()
    s = Settings(duration=0.1, warmup=0.0, keys=100, keys_cold_start=500, failover_trials=2,
                 max_clients=8)  # fmt: skip
    bar = compare.QuietBar(1)
    m = await compare.run_failover(fake, control, s, bar, "fake")
    assert m.failed is None and m.value is not None and len(control.kills) == 2
    assert len(m.samples) == 2 and m.value in m.samples  # the trials, pooled over rounds
    assert control.up == {"a", "b", "c"}  # every killed member was started again
    cold = await compare.run_cold_start(fake, control, s, bar, "fake")
    assert cold["cold-start"].value is not None and cold["cold-start"].value >= 0
    assert cold["rss-loaded"].value and cold["rss-restarted"].value
    assert sum(1 for k in fake.data if k.startswith("c")) == 500


async def test_harness_progress_lines_reach_the_bar() -> None:
    class Bar(compare.QuietBar):
        def __init__(self) -> None:
            super().__init__(1)
            self.postfix_lines: list[str] = []

        def set_postfix_str(self, s: str) -> None:
            self.postfix_lines.append(s)

    bar = Bar()

    async def op() -> None:
        await asyncio.sleep(0.001)

    await run_load(op, clients=2, duration=0.25, progress=compare.BarStream(bar),
                   progress_interval=0.05, label="x")  # fmt: skip
    assert bar.postfix_lines and all(line.startswith("[x] ") for line in bar.postfix_lines)


def test_simple_bar_in_a_log_writes_whole_lines() -> None:
    import io

    out = io.StringIO()
    bar = compare.SimpleBar(4, stream=out)
    bar.set_description("etcd: put 256 B x1")
    bar.set_postfix_str("300 ops/s")  # throttled in a log: no line per tick
    bar.update(1)
    bar.write("etcd: kv done")
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines[-2] == "[######..................] 1/4 etcd: put 256 B x1 | 300 ops/s"
    assert lines[-1] == "etcd: kv done"
