"""The soak's nemesis (chaos/nemesis.py) and `chaos soak`, against fake faults and a fake
cluster: the seeded schedule, the windows, which faults it may pick, that stop() heals."""

from __future__ import annotations

import itertools
import random
import threading
import time
from pathlib import Path

import pytest

from statekeeper.chaos import cli as chaos_cli
from statekeeper.chaos import faults, nemesis, nemesis_report
from statekeeper.chaos.faults import FAULTS, Fault, FaultContext
from statekeeper.chaos.nemesis import (
    Nemesis,
    NemesisConfig,
    eligible_faults,
    make_nemesis,
    registered,
    schedule,
    soak_phases,
)

PROCESS = {
    "kill-leader", "kill-follower", "kill-random", "pause-leader", "rolling-restart",
    "kill-all", "wipe-follower",
}  # fmt: skip
PARTITION = {
    "partition-leader", "partition-follower", "partition-majority-minority",
    "partition-bridge", "one-way-loss", "packet-loss",
}  # fmt: skip


# -- schedule -------------------------------------------------------------------------


def _take(seed: int, names=("a", "b", "c", "d"), n: int = 60, **kw) -> list[nemesis.Step]:
    return list(itertools.islice(schedule(list(names), seed, **kw), n))


def test_schedule_is_reproducible_from_the_seed() -> None:
    assert _take(7) == _take(7)
    assert _take(7) != _take(8)
    assert [s.fault for s in _take(7)] != [s.fault for s in _take(8)]
    assert [s.index for s in _take(3, n=5)] == [1, 2, 3, 4, 5]


def test_schedule_windows_and_quiet_times_stay_within_bounds() -> None:
    steps = _take(11, n=400, fault_time=(3.0, 15.0), quiet_time=(2.0, 10.0))
    assert all(3.0 <= s.window <= 15.0 for s in steps)
    assert all(2.0 <= s.quiet <= 10.0 for s in steps)
    # drawn, not constant: both ends of the range are approached
    assert min(s.window for s in steps) < 4 and max(s.window for s in steps) > 14
    assert len({s.seed for s in steps}) > 390


def test_schedule_picks_only_the_given_faults_and_deals_them_like_a_deck() -> None:
    names = ["a", "b", "c", "d", "e"]
    steps = _take(5, names=names, n=50)
    assert {s.fault for s in steps} == set(names)
    for k in range(0, 50, 5):  # every round of five holds each fault once
        assert sorted(s.fault for s in steps[k : k + 5]) == names
    assert all(x.fault != y.fault for x, y in itertools.pairwise(steps))
    assert {s.fault for s in _take(1, names=["only"], n=5)} == {"only"}


def test_schedule_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        next(schedule([], 1))
    with pytest.raises(ValueError):
        next(schedule(["a"], 1, fault_time=(5.0, 2.0)))


# -- which faults ---------------------------------------------------------------------


def _available(monkeypatch) -> None:
    """Every topology available, whatever this machine has."""
    monkeypatch.setattr(Fault, "available", classmethod(lambda cls: (True, "")))


def test_eligible_faults_follow_the_topology(monkeypatch) -> None:
    _available(monkeypatch)
    plain, skipped = eligible_faults("plain")
    assert set(plain) == PROCESS
    assert "none" in skipped and "power-loss" in skipped and "proxy-down" in skipped
    links, _ = eligible_faults("links")
    assert set(links) == PROCESS | PARTITION
    proxy, _ = eligible_faults("proxy")
    assert set(proxy) == PROCESS | {n for n in FAULTS if n.startswith("proxy-")}
    lazy, _ = eligible_faults("lazyfs")
    assert set(lazy) == PROCESS | {"power-loss"}
    for topology in ("plain", "links", "proxy", "lazyfs"):
        names, skipped = eligible_faults(topology)
        assert "none" not in names and "nemesis" not in names
        assert set(names) | set(skipped) == set(FAULTS) - {"nemesis"}
        assert all(FAULTS[n].topology in ("plain", topology) for n in names)


def test_eligible_faults_drop_unavailable_ones_and_wrong_cluster_sizes(monkeypatch) -> None:
    from statekeeper.chaos import partition

    monkeypatch.setattr(partition, "available", lambda: (False, "no iptables here"))
    names, skipped = eligible_faults("links")
    assert set(names) == PROCESS
    assert "no iptables here" in skipped["partition-leader"]

    class FiveOnly(Fault):
        name = "five-only"
        min_nodes = 5

    monkeypatch.setitem(FAULTS, "five-only", FiveOnly)
    assert "five-only" not in eligible_faults("plain", nodes=3)[0]
    assert "five-only" in eligible_faults("plain", nodes=5)[0]


def test_faults_that_need_their_own_cluster_setup_are_never_picked(monkeypatch) -> None:
    _available(monkeypatch)

    class Armed(Fault):
        name = "fake-armed"
        failpoints = {"snapshot-install": "exit"}

    class Tuned(Fault):
        name = "fake-tuned"
        raft_settings = {"snapshot_min_entries": 40}

    class OwnEnv(Fault):
        name = "fake-env"

        def node_env(self, cfg, work):
            return {}

    for cls in (Armed, Tuned, OwnEnv):
        monkeypatch.setitem(FAULTS, cls.name, cls)
    for topology in ("plain", "links", "proxy", "lazyfs"):
        names, skipped = eligible_faults(topology, nodes=5)
        assert not {"fake-armed", "fake-tuned", "fake-env"} & set(names)
        assert "failpoints snapshot-install" in skipped["fake-armed"]
        assert "node_env" in skipped["fake-env"]
        for n in names:  # nor any real one (crash-*, clock-jump, deposed-leader-snapshot)
            cls = FAULTS[n]
            assert not getattr(cls, "failpoints", None)
            assert not getattr(cls, "raft_settings", None)
            assert not getattr(cls, "retention_settings", None)


def test_auto_topology_follows_only(monkeypatch) -> None:
    _available(monkeypatch)
    assert nemesis.auto_topology(["kill-leader", "proxy-down"]) == "proxy"
    assert nemesis.auto_topology(["packet-loss"]) == "links"
    assert nemesis.auto_topology(["power-loss", "kill-all"]) == "lazyfs"
    assert nemesis.auto_topology() == "links"  # everything available: iptables first
    assert nemesis.auto_topology(["proxy-down", "packet-loss"]) == "links"  # ambiguous


def test_eligible_faults_only_and_exclude(monkeypatch) -> None:
    _available(monkeypatch)
    names, skipped = eligible_faults("links", only=["kill-leader", "packet-loss", "proxy-down"])
    assert names == ["kill-leader", "packet-loss"]  # proxy-down: wrong topology
    names, _ = eligible_faults("plain", exclude=["kill-all"])
    assert "kill-all" not in names and "kill-leader" in names
    with pytest.raises(KeyError):
        eligible_faults("plain", only=["kill-everything"])


# -- the nemesis thread, with fake faults on a fake cluster ----------------------------


class FakeCluster:
    node_ids = ["node-0", "node-1", "node-2"]

    def __init__(self) -> None:
        self.running = set(self.node_ids)
        self.ready = True
        self.started: list[str] = []
        self.exit_codes: dict[str, int] = {}

    def is_running(self, nid: str) -> bool:
        return nid in self.running

    def is_ready(self, nid: str) -> bool:
        return self.ready and nid in self.running

    def start_node(self, nid: str) -> None:
        self.started.append(nid)
        self.running.add(nid)

    def wait_live(self, nid: str, timeout: float = 0) -> None:
        pass

    def log_tail(self, nid: str, lines: int = 40) -> str:
        return "last words"


class Journal:
    """What the fake faults did, in order (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, float]] = []  # (start|stop, name, ctx.window)
        self.active: set[str] = set()

    def add(self, what: str, name: str, window: float) -> None:
        with self.lock:
            self.events.append((what, name, window))
            (self.active.add if what == "start" else self.active.discard)(name)


JOURNAL = Journal()


def _fake(fault_name: str, *, start_sleep: float = 0.0, fail: bool = False) -> type[Fault]:
    class Fake(Fault):
        name = fault_name
        description = "a fake fault"

        def start(self, ctx: FaultContext) -> str:
            time.sleep(start_sleep)
            if fail:
                raise RuntimeError("no leader")
            JOURNAL.add("start", self.name, ctx.window)
            ctx.mark()
            return f"{self.name} did it (rng {ctx.rng.random():.3f})"

        def stop(self, ctx: FaultContext) -> None:
            JOURNAL.add("stop", self.name, ctx.window)

    return Fake


@pytest.fixture
def fakes(monkeypatch):
    global JOURNAL
    JOURNAL = Journal()
    for n in ("fake-a", "fake-b", "fake-c"):
        monkeypatch.setitem(FAULTS, n, _fake(n))
    monkeypatch.setitem(FAULTS, "fake-slow", _fake("fake-slow", start_sleep=0.3))
    monkeypatch.setitem(FAULTS, "fake-broken", _fake("fake-broken", fail=True))
    return JOURNAL


def _ctx(cluster: FakeCluster, window: float, log: list[str] | None = None) -> FaultContext:
    sink = log if log is not None else []
    return FaultContext(cluster=cluster, rng=random.Random(1), log=sink.append, window=window)  # type: ignore[arg-type]


def _cfg(names=("fake-a", "fake-b", "fake-c"), seed=3, **kw) -> NemesisConfig:
    kw.setdefault("fault_time", (0.05, 0.15))
    kw.setdefault("quiet_time", (0.01, 0.03))
    kw.setdefault("end_margin", 0.05)
    return NemesisConfig(faults=tuple(names), seed=seed, **kw)


def _wait_for(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_nemesis_cycles_faults_in_schedule_order_and_heals_each(fakes) -> None:
    cfg = _cfg()
    nem = Nemesis(cfg)
    cluster = FakeCluster()
    ctx = _ctx(cluster, window=1.5)
    assert "3 faults" in nem.start(ctx)
    assert ctx.injected_ns is not None  # the runner's fault start
    nem._thread.join(5.0)  # ends by itself when the window is used up
    nem.stop(ctx)
    recs = nem.records
    assert len(recs) >= 4
    expected = [
        s.fault
        for s in itertools.islice(
            schedule(cfg.faults, cfg.seed, cfg.fault_time, cfg.quiet_time), len(recs)
        )
    ]
    assert [r.name for r in recs] == expected
    # start, stop, start, stop, ...: never two faults at once, each healed
    kinds = [e[0] for e in fakes.events]
    assert kinds == ["start", "stop"] * len(recs)
    assert [e[1] for e in fakes.events[::2]] == expected and not fakes.active
    for r in recs:
        assert r.window <= r.step.window
        assert r.start_ns is not None and r.stop_ns is not None
        held = (r.heal_ns - r.start_ns) / 1e9
        assert r.window - 0.01 <= held < r.window + 0.5
        assert r.ready_s is not None and not r.crashed and not r.start_error
    for a, b in itertools.pairwise(recs):  # the quiet time is kept between faults
        assert (b.begin_ns - a.stop_ns) / 1e9 >= a.step.quiet - 0.01
    # nothing starts after the window: the last fault was healed before it ended (+ slack)
    assert (recs[-1].stop_ns - nem.injected_ns) / 1e9 <= 1.5 + 0.2


def test_same_seed_same_sequence_of_faults_and_of_their_own_choices(fakes) -> None:
    runs = []
    for _ in range(2):
        nem = Nemesis(_cfg(seed=42))
        ctx = _ctx(FakeCluster(), window=1.0)
        nem.start(ctx)
        nem._thread.join(5.0)
        nem.stop(ctx)
        runs.append([(r.name, r.step.window, r.description) for r in nem.records])
    n = min(len(runs[0]), len(runs[1]))
    assert n >= 3 and runs[0][:n] == runs[1][:n]


def test_stop_heals_the_fault_in_effect_at_once(fakes) -> None:
    nem = Nemesis(_cfg(names=("fake-a",), fault_time=(30.0, 30.0)))
    ctx = _ctx(FakeCluster(), window=120.0)
    nem.start(ctx)
    _wait_for(lambda: "fake-a" in fakes.active)
    assert nem.label().startswith("#1 fake-a")
    t = time.monotonic()
    nem.stop(ctx)
    assert time.monotonic() - t < 2.0  # did not sit out the 30 s window
    assert fakes.active == set() and fakes.events[-1][:2] == ("stop", "fake-a")
    assert not nem._thread.is_alive()
    assert nem.records[0].stop_ns is not None
    nem.stop(ctx)  # idempotent
    assert len(fakes.events) == 2


def test_stop_heals_from_outside_when_the_thread_is_stuck_in_start(fakes, monkeypatch) -> None:
    release = threading.Event()

    class Stuck(Fault):
        name = "fake-stuck"

        def start(self, ctx: FaultContext) -> str:
            JOURNAL.add("start", self.name, ctx.window)
            release.wait(10)
            return "stuck"

        def stop(self, ctx: FaultContext) -> None:
            JOURNAL.add("stop", self.name, ctx.window)

    monkeypatch.setitem(FAULTS, "fake-stuck", Stuck)
    nem = Nemesis(_cfg(names=("fake-stuck",), join_timeout=0.2))
    ctx = _ctx(FakeCluster(), window=60.0)
    nem.start(ctx)
    _wait_for(lambda: "fake-stuck" in fakes.active)
    nem.stop(ctx)
    assert fakes.events[-1][:2] == ("stop", "fake-stuck")
    release.set()
    nem._thread.join(5)
    assert [e[0] for e in fakes.events] == ["start", "stop"]  # healed once, not twice


def test_a_failed_injection_is_recorded_healed_and_the_soak_goes_on(fakes) -> None:
    log: list[str] = []
    nem = Nemesis(_cfg(names=("fake-broken", "fake-a")))
    ctx = _ctx(FakeCluster(), window=1.0, log=log)
    nem.start(ctx)
    nem._thread.join(5.0)
    nem.stop(ctx)
    broken = [r for r in nem.records if r.name == "fake-broken"]
    assert broken and all("no leader" in r.start_error for r in broken)
    assert ("stop", "fake-broken", broken[0].window) in fakes.events  # healed anyway
    assert any(r.name == "fake-a" and not r.start_error for r in nem.records)
    assert any("injection failed" in m for m in log)
    verdicts = {v.name: v for v in nemesis_report.nemesis_verdicts(nem)}
    assert verdicts["nemesis: faults injected"].status == "INFO"
    assert verdicts["nemesis: every heal worked"].status == "PASS"


def test_a_node_that_dies_by_itself_is_a_failure_and_is_restarted(fakes, monkeypatch) -> None:
    cluster = FakeCluster()

    class Killer(Fault):
        name = "fake-killer"

        def start(self, ctx: FaultContext) -> str:
            ctx.mark()
            return "nothing visible"

        def stop(self, ctx: FaultContext) -> None:
            cluster.running.discard("node-2")  # "crashes" while the fault is healed
            cluster.exit_codes["node-2"] = 71

    monkeypatch.setitem(FAULTS, "fake-killer", Killer)
    nem = Nemesis(_cfg(names=("fake-killer",)))
    ctx = _ctx(cluster, window=0.6)
    nem.start(ctx)
    nem._thread.join(5.0)
    nem.stop(ctx)
    assert nem.records[0].crashed and "node-2 (exit code 71)" in nem.records[0].crashed[0]
    assert "node-2" in cluster.started
    verdicts = {v.name: v for v in nemesis_report.nemesis_verdicts(nem)}
    assert verdicts["nemesis: no node crashed by itself"].status == "FAIL"


def test_a_cluster_that_does_not_become_ready_again_is_a_failure(fakes) -> None:
    cluster = FakeCluster()
    cluster.ready = False
    nem = Nemesis(_cfg(names=("fake-a",), recover_timeout=0.2))
    ctx = _ctx(cluster, window=0.8)
    nem.start(ctx)
    nem._thread.join(5.0)
    nem.stop(ctx)
    assert "not ready" in nem.records[0].not_ready
    verdicts = {v.name: v for v in nemesis_report.nemesis_verdicts(nem)}
    assert verdicts["nemesis: all nodes ready after every heal"].status == "FAIL"


def test_the_last_fault_is_cut_short_to_end_with_the_window(fakes) -> None:
    names, fault_time = ("fake-a", "fake-b"), (0.3, 3.0)
    seed = next(
        s for s in range(200) if next(schedule(names, s, fault_time, (0.01, 0.02))).window > 2.0
    )
    nem = Nemesis(_cfg(names=names, seed=seed, fault_time=fault_time))
    ctx = _ctx(FakeCluster(), window=1.0)
    t = time.monotonic()
    nem.start(ctx)
    nem._thread.join(5.0)
    assert time.monotonic() - t < 1.5  # did not hold the 2+ s the schedule asked for
    nem.stop(ctx)
    first = nem.records[0]
    assert first.step.window > 2.0 and first.window < 1.0
    assert first.heal_ns <= nem.end_ns


def test_no_fault_is_started_when_the_window_is_too_short(fakes) -> None:
    nem = Nemesis(_cfg(fault_time=(3.0, 5.0)))
    ctx = _ctx(FakeCluster(), window=2.0)
    nem.start(ctx)
    nem._thread.join(5.0)
    nem.stop(ctx)
    assert nem.records == [] and fakes.events == []


def test_allows_loss_only_if_an_injected_fault_allows_it(fakes) -> None:
    nem = Nemesis(_cfg(names=("power-loss",), fault_time=(0.05, 0.05)))
    assert not nem.allows_loss("never")  # nothing injected yet
    nem.records.append(nemesis.StepRecord(step=nemesis.Step(1, "power-loss", 1, 1, 1), window=1))
    assert nem.allows_loss("never") and not nem.allows_loss("always")


# -- registration, phases, CLI ---------------------------------------------------------


def test_nemesis_is_registered_only_inside_a_soak() -> None:
    cls = make_nemesis(_cfg())
    assert "nemesis" not in FAULTS and "nemesis" not in faults.fault_names()
    with registered(cls):
        assert isinstance(faults.get_fault("nemesis"), cls)
        assert cls.topology == "plain"
    assert "nemesis" not in FAULTS
    with pytest.raises(RuntimeError), registered(cls):
        raise RuntimeError("boom")
    assert "nemesis" not in FAULTS
    assert make_nemesis(_cfg(topology="links")).topology == "links"


def test_soak_phases() -> None:
    assert soak_phases(30) == (1800.0, 15.0, 1755.0)
    duration, warmup, window = soak_phases(2)
    assert duration == 120 and warmup == 6 and window == 102
    with pytest.raises(ValueError):
        soak_phases(0.1)
    with pytest.raises(ValueError):
        soak_phases(0)


def test_cli_soak_runs_the_runner_with_the_nemesis(monkeypatch, tmp_path: Path, capsys) -> None:
    from statekeeper.chaos import runner
    from statekeeper.chaos.report import RunResult

    seen = {}

    def fake_run_scenario(opts, say):
        seen["opts"] = opts
        seen["fault"] = faults.get_fault(opts.fault)
        say("  [  15.0s] FAULT nemesis                      ok    100 fail     0 unknown")
        return RunResult(fault=opts.fault, status="skipped", reason="fake")

    monkeypatch.setattr(runner, "run_scenario", fake_run_scenario)
    code = chaos_cli.main(
        ["soak", "--minutes", "1.5", "--seed", "9", "--topology", "plain",
         "--fault-time", "4-6", "--exclude", "kill-all", "--report-dir", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    opts = seen["opts"]
    assert opts.fault == "nemesis" and opts.duration == 90 and opts.seed == 9
    assert opts.warmup + opts.fault_window < opts.duration and opts.fault_window > 60
    nem = seen["fault"]
    assert isinstance(nem, Nemesis)
    assert nem.cfg.seed == 9 and nem.cfg.fault_time == (4.0, 6.0)
    assert set(nem.cfg.faults) == PROCESS - {"kill-all"}
    assert "nemesis" not in FAULTS  # gone again after the soak
    out = capsys.readouterr().out
    assert "FAULT nemesis" not in out and "nemesis: idle" in out  # progress shows its state


def test_cli_soak_usage_errors(capsys) -> None:
    assert chaos_cli.main(["soak", "--only", "kill-everything"]) == 2
    assert chaos_cli.main(["soak", "--minutes", "0.1"]) == 2
    with pytest.raises(SystemExit):
        chaos_cli.main(["soak", "--fault-time", "9-3"])
    capsys.readouterr()


def test_soak_report_lists_every_fault_with_its_times(fakes, tmp_path: Path) -> None:
    from statekeeper.chaos.history import HistoryWriter
    from statekeeper.chaos.report import PASS, RunResult, Verdict, compute_metrics

    nem = Nemesis(_cfg())
    ctx = _ctx(FakeCluster(), window=1.0)
    t0 = time.monotonic_ns()
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as h:
        nem.start(ctx)
        for i in range(40):  # one put every 25 ms while the nemesis works
            op = h.invoke(0, "put", "k", value=f"v{i}", idempotency_key=f"i{i}")
            time.sleep(0.025)
            if i % 3:
                h.ok(op, revision=i + 1)
            else:
                h.info(op, error="timeout")
        nem._thread.join(5.0)
        nem.stop(ctx)
    end = time.monotonic_ns()
    from statekeeper.chaos.history import read_history

    ops = read_history(path)
    result = RunResult(fault="nemesis", options={"clients": 16})
    result.fault_window = ((nem.injected_ns - t0) / 1e9, (end - t0) / 1e9)
    result.metrics = compute_metrics(ops, t0=t0, end=end)
    result.verdicts.append(Verdict("linearizable", PASS, "yes (40 ops)", "checked in 0.1 s"))
    md = nemesis_report.write_soak_report(result, nem, tmp_path).read_text()
    assert "## Nemesis" in md and "checked in 0.1 s" in md
    for r in nem.records:
        start = (r.start_ns - t0) / 1e9
        assert f"| {r.step.index} | {r.name} | {start:.2f} |" in md
        assert r.description in md
    assert md.index("## Nemesis") < md.index("## Files")
    assert (tmp_path / "nemesis.json").exists()
    assert "nemesis: no node crashed by itself" in md
