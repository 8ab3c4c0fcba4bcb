"""benchmarks.compare's append rows (issue 28) without any server: the rows, each system's
mapping of an append (statekeeper append, etcd puts / Txn, Redis XADD / MULTI), the
three-system tables, the rotating order and the runner's per-system groups, and the
redis-server start/stop helper against a stand-in process (tests/integration/
test_bench_redis.py runs the real redis-server)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from statekeeper.benchmarks import compare
from statekeeper.benchmarks.compare import (
    Measure,
    Row,
    Settings,
    Workload,
    parse_groups,
    select_workloads,
)
from statekeeper.benchmarks.compare.rounds import REDIS, SK, order_text, round_order
from statekeeper.benchmarks.compare.table import append_tables, is_append_row
from statekeeper.benchmarks.compare.workloads import APPEND_EVENTS, STREAMS, append_events
from statekeeper.benchmarks.etcd import EtcdSystem
from statekeeper.benchmarks.redis_streams import RedisControl, RedisServer, RedisSystem
from statekeeper.benchmarks.systems import StatekeeperSystem, System, get_system_class
from tests.unit.test_bench_rounds import fake_system

# ------------------------------------------------------------------------- the rows


def test_the_append_rows_and_what_they_count() -> None:
    rows = select_workloads(["append"], quick=True)
    assert [(w.clients, w.events) for w in rows] == [(1, 1), (64, 1), (1, APPEND_EVENTS)]
    assert rows == select_workloads(["append"], quick=False)  # all three are quick rows
    assert [w.key for w in rows] == ["append-1x256-x1", "append-1x256-x64", "append-100x256-x1"]
    assert [w.label for w in rows] == [
        "append 1 event of 256 B x1 (events/s)",
        "append 1 event of 256 B x64 (events/s)",
        "append 100 events of 256 B x1 (events/s)",
    ]
    assert [w.ops_per_request for w in rows] == [1, 1, 100]  # ops/s counts events
    assert [append_events(w.key) for w in rows] == [1, 1, 100]
    assert append_events("put-256-x64") is None and append_events("batch-x16") is None
    assert parse_groups("append", False) == ["append"]
    # --only put does not bring the append rows along, and the full run has them
    assert not any(w.kind == "append" for w in select_workloads(["put"], quick=False))
    assert {w.key for w in rows} <= {w.key for w in select_workloads(compare.GROUPS, True)}


def test_every_system_says_it_can_append() -> None:
    for cls in (StatekeeperSystem, EtcdSystem, RedisSystem):
        assert compare.supports(cls(["x://"]), "append"), cls
    assert get_system_class("redis") is RedisSystem
    assert RedisSystem.compare_groups == ("append",)
    assert StatekeeperSystem.compare_groups is None and EtcdSystem.compare_groups is None


class Appender(System):
    """Records every append; a tiny sleep stands for the round trip."""

    name = "fake-appender"

    def __init__(self, endpoints: Sequence[str] = ("mem://",), **_: object) -> None:
        super().__init__(endpoints)
        self.appends: list[tuple[str, int]] = []

    async def setup(self) -> None: ...
    async def teardown(self) -> None: ...
    async def put(self, key: str, value: bytes) -> None: ...

    async def get(self, key: str, consistency: str = "linearizable") -> object:
        return None

    async def append(self, stream: str, events: Sequence[bytes]) -> None:
        assert all(len(e) == 256 for e in events)
        self.appends.append((stream, len(events)))
        await asyncio.sleep(0.0005)


async def test_append_rows_count_events_over_random_streams() -> None:
    fake = Appender()
    s = Settings(duration=0.2, warmup=0.05, keys=100, keys_cold_start=1, failover_trials=1,
                 max_clients=4)  # fmt: skip
    w1, w100 = Workload("append", 4), Workload("append", 1, events=APPEND_EVENTS)
    out = await compare.run_kv_group(fake, [w1, w100], s, compare.QuietBar(2), "fake")
    assert {n for _, n in fake.appends} == {1, APPEND_EVENTS}
    assert len({st for st, _ in fake.appends}) > 4  # spread over up to STREAMS streams
    assert all(st in {f"s{i:02d}" for i in range(STREAMS)} for st, _ in fake.appends)
    one, hundred = out[w1.key], out[w100.key]
    assert one.failed is None and hundred.failed is None
    # The 100-event row's requests take as long as the 1-event row's, so its events/s is
    # far higher: it counts events, not requests.
    assert hundred.value is not None and one.value is not None and hundred.value > 5 * one.value


# --------------------------------------------------- each system's mapping of an append


async def test_etcd_appends_are_puts_under_new_keys_and_a_txn_for_many() -> None:
    etcd = EtcdSystem(["http://127.0.0.1:1"])
    puts: list[tuple[str, bytes]] = []
    txns: list[list[tuple[str, bytes]]] = []

    async def put(key: str, value: bytes) -> None:
        puts.append((key, value))

    async def txn(items: Sequence[tuple[str, bytes]]) -> None:
        txns.append(list(items))

    etcd.put, etcd._txn = put, txn  # type: ignore[method-assign]
    await etcd.append("s01", [b"a"])
    await etcd.append("s01", [b"b"] * 100)
    await etcd.append("s02", [b"c"])
    assert puts == [("s01/000000000000", b"a"), ("s02/000000000101", b"c")]
    assert len(txns) == 1 and len(txns[0]) == 100
    keys = [k for k, _ in puts] + [k for k, _ in txns[0]]
    assert len(set(keys)) == 102  # every event its own key: nothing overwritten


class FakePipe:
    def __init__(self, log: list[Any], transaction: bool) -> None:
        self.log, self.transaction, self.queued = log, transaction, []

    async def __aenter__(self) -> FakePipe:
        return self

    async def __aexit__(self, *exc: object) -> None: ...

    def xadd(self, stream: str, fields: dict[str, bytes]) -> None:
        self.queued.append((stream, fields))

    async def execute(self) -> None:
        self.log.append(("pipeline", self.transaction, list(self.queued)))


class FakeRedis:
    def __init__(self) -> None:
        self.log: list[Any] = []

    async def xadd(self, stream: str, fields: dict[str, bytes]) -> None:
        self.log.append(("xadd", stream, fields))

    def pipeline(self, transaction: bool) -> FakePipe:
        return FakePipe(self.log, transaction)


async def test_redis_appends_are_xadd_and_one_multi_exec_for_many() -> None:
    redis = RedisSystem(["redis://127.0.0.1:1"])
    redis._client = fake = FakeRedis()
    await redis.append("s03", [b"x"])
    await redis.append("s04", [b"y"] * 100)
    assert fake.log[0] == ("xadd", "s03", {"d": b"x"})
    kind, transaction, queued = fake.log[1]
    assert kind == "pipeline" and transaction  # MULTI ... EXEC: atomic, one round trip
    assert queued == [("s04", {"d": b"y"})] * 100 and len(fake.log) == 2


# ------------------------------------------------------------------ three systems


def test_three_systems_rotate_so_each_goes_first_once_per_three_rounds() -> None:
    three = ["etcd", "statekeeper", "redis"]
    orders = [round_order(three, r) for r in range(3)]
    assert orders == [three, ["statekeeper", "redis", "etcd"], ["redis", "etcd", "statekeeper"]]
    assert order_text(["etcd", "statekeeper"], 2) == "etcd, statekeeper | statekeeper, etcd"
    assert round_order([], 3) == []


def _m(value: float, p50: float, us: float, leader: float | None = None) -> Measure:
    return Measure(value=value, p50_ms=p50, p99_ms=p50 * 3, client_us_per_op=us,
                   client_cores=0.3, leader_us_per_op=leader)  # fmt: skip


def test_the_append_tables_show_three_systems_both_ratios_and_what_each_did() -> None:
    w = Workload("append", 64)
    rows = [
        Row(w.key, w.label, "ops", {
            SK: [_m(3000, 20, 90, 120), _m(3300, 19, 95, 130), _m(2700, 21, 85, 110)],
            "etcd": [_m(4000, 15, 100), _m(3000, 16, 110), _m(3000, 17, 105)],
            REDIS: [_m(10000, 5, 60, 30), _m(12000, 4, 55, 28), _m(9000, 6, 65, 33)],
        }),
        Row("put-256-x64", "put 256 B x64", "ops", {SK: [_m(1, 1, 1)], "etcd": [_m(1, 1, 1)]}),
    ]  # fmt: skip
    assert [is_append_row(r) for r in rows] == [True, False]
    text = append_tables(rows, "Redis: one node")
    assert text is not None
    lines = text.splitlines()
    head = lines[0]
    for col in (
        "statekeeper events/s",
        "etcd events/s",
        "redis events/s",
        "median ratio sk/etcd",
        "median ratio sk/redis",
        "p50 ms sk / etcd / redis",
    ):
        assert col in head  # fmt: skip
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    # sk/etcd per round 0.75, 1.10, 0.90 -> 0.90; sk/redis 0.30, 0.275, 0.30 -> 0.30
    assert cells[:4] == ["append 1 event of 256 B x64 (events/s)", "3000", "3000", "10000"]
    assert cells[4:8] == ["0.90x", "0.75-1.10x", "0.30x", "0.28-0.30x"]
    assert cells[8] == "20.00 / 16.00 / 5.00" and cells[10] == "90 / 105 / 60"
    assert cells[11] == "0 / 0 / 0"
    assert "put 256 B x64" not in text  # the key-value rows stay in the etcd table
    server = next(line for line in lines if line.startswith("| append") and "events/s)" in line
                  and line.count("|") == 7)  # fmt: skip
    # sk leader 120 (median of 120, 130, 110), no follower figure, etcd none, redis 30
    assert [c.strip() for c in server.strip("|").split("|")][1:] == ["120", "-", "-", "-", "30"]
    assert "`client.append(stream, [event])`" in text and "`XADD stream * d <event>`" in text
    assert "under a new key" in text and text.rstrip().endswith("Redis: one node.")
    assert append_tables(rows[1:]) is None


def test_results_section_keeps_the_etcd_table_and_adds_the_append_tables() -> None:
    import datetime as dt

    w = Workload("append", 1, events=APPEND_EVENTS)
    rows = [
        Row("put-256-x1", "put 256 B x1", "ops", {SK: [_m(10, 1, 1)], "etcd": [_m(20, 1, 1)]}),
        Row(w.key, w.label, "ops", {SK: [_m(5, 1, 1)], "etcd": [_m(5, 1, 1)],
                                    REDIS: [_m(50, 1, 1)]}),
    ]  # fmt: skip
    text = compare.results_section(
        rows, command="c", settings="s", target="t", chart=None, info={}, redis_setup="R1",
        now=dt.datetime(2026, 1, 2, tzinfo=dt.UTC), load="0",
    )  # fmt: skip
    main_table = text.split("Stream appends")[0]
    assert "| put 256 B x1" in main_table and "append 100 events" not in main_table
    appends = text.split("Stream appends")[1]
    assert "append 100 events of 256 B x1" in appends and "MULTI, 100 x `XADD`" in appends
    assert "R1." in appends


def _fake_class(name: str, started: list[str], groups: tuple[str, ...] | None) -> type[System]:
    """test_bench_rounds' fake system, with an append and the compare groups given."""

    class Fake(fake_system(name, started)):  # type: ignore[misc]
        compare_groups = groups

        async def append(self, stream: str, events: Sequence[bytes]) -> None:
            await asyncio.sleep(0.0005)

    Fake.name = name
    return Fake


async def test_redis_runs_only_the_append_group(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from statekeeper.benchmarks.compare import runner
    from statekeeper.benchmarks.compare.progress import QuietBar

    started: list[str] = []
    classes = {
        "etcd": _fake_class("etcd", started, None),
        "statekeeper": _fake_class("statekeeper", started, None),
        "redis": _fake_class("redis", started, ("append",)),
    }
    monkeypatch.setattr(runner, "get_system_class", classes.__getitem__)
    s = Settings(duration=0.05, warmup=0.0, keys=100, keys_cold_start=1, failover_trials=1,
                 max_clients=2, rounds=2)  # fmt: skip
    workloads = [Workload("put", 1), Workload("append", 2)]
    systems = ["etcd", "statekeeper", "redis"]
    bar = QuietBar(runner.total_steps(["put", "append"], s, workloads, systems))
    assert bar.total == 2 * (1 * 2 + 1 * 3)  # the put row on 2 systems, the append row on 3
    rows = await runner.run_compare(
        systems, ["put", "append"], s, workloads=workloads, data_dir=tmp_path, bar=bar
    )
    # kv group: etcd, sk | sk, etcd; append group: etcd, sk, redis | sk, redis, etcd
    assert started == ["etcd", "statekeeper", "statekeeper", "etcd",
                       "etcd", "statekeeper", "redis", "statekeeper", "redis", "etcd"]  # fmt: skip
    by_key = {r.key: r for r in rows}
    assert set(by_key["put-256-x1"].results) == {"etcd", "statekeeper"}
    assert set(by_key["append-1x256-x2"].results) == {"etcd", "statekeeper", "redis"}
    assert bar.n == bar.total


# ------------------------------------------------------------ the redis-server helper


def test_redis_server_argv_is_durable_and_local(tmp_path: Path) -> None:
    argv = RedisServer("/usr/bin/redis-server", tmp_path, 6390).argv()
    pairs = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert pairs["--appendonly"] == "yes" and pairs["--appendfsync"] == "always"
    assert pairs["--save"] == "" and pairs["--bind"] == "127.0.0.1"
    assert pairs["--port"] == "6390" and pairs["--dir"] == str(tmp_path)
    assert pairs["--daemonize"] == "no"
    never_argv = RedisServer("r", tmp_path, 1, fsync="never").argv()
    never = dict(zip(never_argv[1::2], never_argv[2::2], strict=True))
    assert never["--appendfsync"] == "no"
    with pytest.raises(ValueError, match="fsync"):
        RedisServer("r", tmp_path, 1, fsync="sometimes")


async def test_redis_server_start_and_stop_leave_no_process(tmp_path: Path) -> None:
    # A stand-in for redis-server: takes any arguments, exits on SIGTERM.
    fake = tmp_path / "fake-redis"
    fake.write_text(f"#!{sys.executable}\nimport time\nwhile True:\n    time.sleep(0.05)\n")
    fake.chmod(0o755)
    server = RedisServer(str(fake), tmp_path / "r0", 1)  # port 1: nothing answers PING
    control = RedisControl(server)
    assert control.pid("r0") is None and await control.leader() is None
    pid = server.start()
    assert control.pid("r0") == pid and await control.leader() == "r0"
    assert (tmp_path / "r0").is_dir()
    with pytest.raises(RuntimeError, match="already running"):
        server.start()
    assert not control.is_ready("r0")  # running but not answering PING
    await control.stop("r0")
    assert control.pid("r0") is None and server.proc is not None
    assert server.proc.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    await control.start("r0")
    await control.kill("r0")  # SIGKILL path
    assert control.pid("r0") is None
    server.stop()  # stopping a stopped server is a no-op
