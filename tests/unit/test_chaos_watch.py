"""chaos.checker.watch on hand-written histories, watcher logs and truths: for every rule, a
case that breaks it is caught (and named by that rule) and the clean counterpart passes;
plus the verdict (ALLOWED under a contract-allowed loss), the watchers' log file, and the
hook that records connections and the nodes' raw frames on a real sans-IO WatchSession."""

from __future__ import annotations

import copy
import itertools
import math
from typing import Any

import msgpack
import pytest

from statekeeper.chaos.checker.watch import (
    RULES,
    WatcherLog,
    WatchTruth,
    check_watch,
    prefix_writes,
)
from statekeeper.chaos.history import Op
from statekeeper.chaos.report import ALLOWED, FAIL, PASS, RunResult
from statekeeper.chaos.run_checks import watch_verdict
from statekeeper.chaos.watch_workload import Watchers, WatchRun, instrument, load_logs
from statekeeper.chaos.workload_config import WorkloadConfig
from statekeeper.client import RetryPolicy
from statekeeper.client.retry import Endpoints
from statekeeper.client.watch.core import WatchEvent, WatchProgress, WatchSession, watch_request

_ids = itertools.count(1)
_t = itertools.count(1000)


def op(f: str, key: str | None, outcome: str = "ok", **io: Any) -> Op:
    """A history op; ``io`` splits into input (value, success, ...) and output (revision,
    succeeded, deleted)."""
    out_keys = {"revision", "succeeded", "deleted"}
    start = next(_t)
    return Op(
        id=next(_ids),
        process=0,
        f=f,
        keys=(key,) if key else ("k0", "k1"),
        invoke_time=start,
        complete_time=math.inf if outcome == "info" else start + 1,
        outcome=outcome,  # type: ignore[arg-type]
        input={k: v for k, v in io.items() if k not in out_keys},
        output={k: v for k, v in io.items() if k in out_keys},
    )


def history() -> list[Op]:
    """Revisions 2..7 change the prefix "k" (4 is a write elsewhere): every kind of write,
    every outcome."""
    return [
        op("put", "k0", value="a", revision=2),
        op("put", "k1", value="b", revision=3),
        op("put", "idem-0-1", value="x", revision=4),  # not the prefix
        op(
            "txn",
            None,
            revision=5,
            succeeded=True,
            success=[
                {"f": "put", "key": "k0", "value": "c"},
                {"f": "put", "key": "k1", "value": "cb"},
            ],
        ),  # fmt: skip
        op("delete", "k0", revision=6, deleted=1),
        op("put", "k2", "info", value="d"),  # unknown outcome: the truth proves it (7)
        op("put", "k3", "fail", value="never"),  # failed: must never show up
        op("cas", "k1", value="e", expect="zz", revision=7, succeeded=False),  # no change
        op("delete", "k3", revision=7, deleted=0),  # deleted nothing: no change
    ]


CHANGES = {
    2: [("k0", "put", "a")],
    3: [("k1", "put", "b")],
    5: [("k0", "put", "c"), ("k1", "put", "cb")],
    6: [("k0", "delete", None)],
    7: [("k2", "put", "d")],
}
FINAL = {"k1": "cb", "k2": "d"}


def truth(**kw: Any) -> WatchTruth:
    base = dict(
        prefix="k", start_revision=1, final_revision=8, changes=copy.deepcopy(CHANGES),
        initial={}, final=dict(FINAL), samples={3: {"k0": "a", "k1": "b"}, 7: dict(FINAL)},
    )  # fmt: skip
    base.update(kw)
    return WatchTruth(**base)


def frame(rev: int, changes: list[tuple[str, str, Any]]) -> list[tuple]:
    return [("frame", next(_t), "events", rev)] + [
        ("event", next(_t), rev, k, t, v) for k, t, v in changes
    ]


def clean_log(name: str = "w0", resume_after: int | None = None) -> WatcherLog:
    """What a correct watcher records: every change of CHANGES, then a progress frame at the
    final revision; with ``resume_after``, its connection breaks after that revision and
    it resumes on node-1."""
    log = WatcherLog(name, 1, [("connect", next(_t), "node-0", 1, None)])
    for rev, changes in CHANGES.items():
        log.records += frame(rev, changes)
        if rev == resume_after:
            log.records.append(("connect", next(_t), "node-1", rev + 1, "connection_lost"))
    log.records += [("frame", next(_t), "progress", 8), ("progress", next(_t), 8)]
    return log


def rules_of(
    *logs: WatcherLog, t: WatchTruth | None = None, ops: list[Op] | None = None
) -> set[str]:
    res = check_watch(ops if ops is not None else history(), list(logs), t or truth(), "k")
    assert all(v.rule in RULES for v in res.violations)
    return {v.rule for v in res.violations}


def without(log: WatcherLog, pred) -> WatcherLog:
    return WatcherLog(log.name, log.start_revision, [r for r in log.records if not pred(r)])


# -- clean ---------------------------------------------------------------------------------


def test_a_clean_run_passes_with_its_counts() -> None:
    res = check_watch(history(), [clean_log("w0"), clean_log("w1", resume_after=3)], truth(), "k")
    assert res.ok, [v.describe() for v in res.violations]
    st = res.stats
    assert (st["watchers"], st["events"], st["progress"], st["resumes"]) == (2, 12, 2, 1)
    assert st["nodes"] == "w0: node-0; w1: node-0, node-1"
    assert (st["truth_revisions"], st["truth_changes"], st["acknowledged"]) == (5, 6, 5)
    assert "2 watchers: 12 events, 2 progress frames, 1 resumes" in res.summary()


def test_only_the_prefix_and_only_real_changes_count_as_writes() -> None:
    writes = prefix_writes(history(), "k")
    assert {w.key for w in writes} == {"k0", "k1", "k2", "k3"}  # idem-0-1 is not watched
    acked = sorted((w.revision, w.key, w.type, w.value) for w in writes if w.acknowledged)
    assert acked == [(2, "k0", "put", "a"), (3, "k1", "put", "b"), (5, "k0", "put", "c"),
                     (5, "k1", "put", "cb"), (6, "k0", "delete", None)]  # fmt: skip


# -- each rule: broken, and caught -----------------------------------------------------------


def test_order_revisions_going_down() -> None:
    log = clean_log()
    recs = log.records
    i2 = recs.index(next(r for r in recs if r[0] == "frame" and r[3] == 2))
    i3 = recs.index(next(r for r in recs if r[0] == "frame" and r[3] == 3))
    recs[i2 : i3 + 2] = recs[i3 : i3 + 2] + recs[i2:i3]  # revision 3 delivered before 2
    assert "order" in rules_of(log)


def test_duplicate_a_revision_twice_or_a_key_twice_in_one() -> None:
    log = clean_log()
    log.records[-2:-2] = [("event", next(_t), 7, "k2", "put", "d")]  # 7 again, right after 7
    assert "duplicate" in rules_of(log)
    again = clean_log()
    again.records[-2:-2] = frame(3, CHANGES[3])  # revision 3 in a second frame, later
    assert {"duplicate", "order"} <= rules_of(again)


def test_progress_never_goes_back_and_promises_what_was_sent() -> None:
    back = clean_log()
    back.records[-2:] = [("progress", next(_t), 5), ("progress", next(_t), 8)]  # 5 after 7
    assert rules_of(back) == {"progress"}
    early = clean_log()
    at5 = next(i for i, r in enumerate(early.records) if r[0] == "frame" and r[3] == 5)
    early.records.insert(at5, ("progress", next(_t), 5))  # says 5 was sent; then 5 comes
    assert rules_of(early) == {"progress"}


def test_frames_resume_point_and_a_node_resending_what_the_client_drops() -> None:
    wrong = clean_log(resume_after=3)
    i = next(i for i, r in enumerate(wrong.records) if r[0] == "connect" and r[3] == 4)
    wrong.records[i] = ("connect", next(_t), "node-1", 3, "connection_lost")  # should be 4
    assert rules_of(wrong) == {"frames"}
    resent = clean_log(resume_after=3)
    i = next(i for i, r in enumerate(resent.records) if r[0] == "connect" and r[3] == 4)
    resent.records.insert(i + 1, ("frame", next(_t), "events", 3))  # no event: client dropped
    assert rules_of(resent) == {"frames"}


def test_gap_a_change_never_delivered() -> None:
    log = without(clean_log(), lambda r: r[0] == "event" and r[2] == 6)
    assert rules_of(log) == {"gap"}
    res = check_watch(history(), [log], truth(), "k")
    assert "1 revisions never delivered: 6 (at 6: delete k0)" in res.violations[0].message


def test_content_a_revision_with_a_change_missing_or_wrong() -> None:
    half = without(clean_log(), lambda r: r[0] == "event" and r[2] == 5 and r[3] == "k1")
    assert rules_of(half) == {"content"}
    wrong = clean_log()
    wrong.records = [
        ("event", *r[1:5], "c?") if r[0] == "event" and r[2] == 5 and r[3] == "k0" else r
        for r in wrong.records
    ]
    assert "content" in rules_of(wrong)


def test_phantom_nothing_extra_delivered_or_stored() -> None:
    extra = clean_log()
    at5 = next(i for i, r in enumerate(extra.records) if r[0] == "frame" and r[3] == 5)
    extra.records[at5:at5] = frame(4, [("k9", "put", "zz")])  # 4 did not change the prefix
    assert rules_of(extra) == {"phantom"}
    # the cluster's history holds the failed op's value: stored though nobody applied it
    t = truth()
    t.changes[7].append(("k3", "put", "never"))
    t.final["k3"] = t.samples[7]["k3"] = "never"
    log = clean_log()
    log.records[-2:-2] = [("event", next(_t), 7, "k3", "put", "never")]
    assert rules_of(log, t=t) == {"phantom"}
    # an acknowledged value at another revision than its acknowledgement's: applied twice
    t2 = truth()
    t2.changes[7] = [("k2", "put", "d"), ("k0", "put", "a")]
    t2.final["k0"] = t2.samples[7]["k0"] = "a"
    assert "phantom" in rules_of(t=t2)


def test_acknowledged_lost_from_storage_and_watch_alike() -> None:
    t = truth(samples={7: dict(FINAL)})
    del t.changes[3]  # the acknowledged put of k1 at 3, gone from the cluster's history
    log = without(clean_log(), lambda r: r[0] in ("event", "frame") and 3 in (r[2], r[3]))
    got = check_watch(history(), [log], t, "k").violations
    assert {v.rule for v in got} == {"acknowledged"}
    assert {v.watcher for v in got} == {"cluster", "w0"}  # both lack it
    # with the truth unreadable, the history alone still catches the watcher
    res = check_watch(history(), [log], None, "k")
    assert res.unread and not res.ok and {v.rule for v in res.violations} == {"acknowledged"}
    assert check_watch(history(), [clean_log()], None, "k").violations == []


def test_incomplete_a_watch_that_ended_or_fell_short() -> None:
    ended = clean_log()
    ended.records[-2:] = [("end", next(_t), "unavailable")]
    assert rules_of(ended) == {"incomplete"}
    short = clean_log()
    at7 = next(i for i, r in enumerate(short.records) if r[0] == "frame" and r[3] == 7)
    del short.records[at7:]  # stopped after 6: 7 is beyond its reach, so no gap either
    assert rules_of(short) == {"incomplete"}


def test_truth_must_replay_to_the_ranges_read() -> None:
    bad_sample = truth(samples={3: {"k0": "a"}})  # k1 missing at 3
    assert rules_of(clean_log(), t=bad_sample) == {"truth"}
    bad_final = truth(final={"k1": "cb"})  # k2 missing at the end
    assert rules_of(clean_log(), t=bad_final) == {"truth"}
    t = truth()
    t.changes[7].append(("k5", "delete", None))  # deletes a key that never existed
    ops = history() + [op("delete", "k5", "info")]
    log = clean_log()
    log.records[-2:-2] = [("event", next(_t), 7, "k5", "delete", None)]
    assert rules_of(log, t=t, ops=ops) == {"truth"}


def test_every_rule_has_a_test_here() -> None:
    import inspect
    import sys

    src = inspect.getsource(sys.modules[__name__])
    assert all(f'"{r}"' in src for r in RULES)


# -- the verdict ------------------------------------------------------------------------------


def test_the_verdict_fails_allows_loss_and_keeps_the_counts() -> None:
    gap = without(clean_log(), lambda r: r[0] == "event" and r[2] == 6)
    ok = RunResult("x")
    v = watch_verdict(history(), WatchRun("k", [clean_log()], truth()), ok, allowed=False)
    assert v.status == PASS and v.value.startswith("0 violations; 6 events, 1 progress")
    assert ok.watch_stats["events"] == 6 and ok.watch == []
    r = RunResult("x")
    v = watch_verdict(history(), WatchRun("k", [gap], truth()), r, allowed=False)
    assert v.status == FAIL and "(1 gap)" in v.value and r.watch[0].startswith("[gap] w0")
    assert (
        watch_verdict(history(), WatchRun("k", [gap], truth()), RunResult("x"), True).status
        == ALLOWED
    )
    back = clean_log()
    back.records[-2:] = [("progress", next(_t), 5), ("progress", next(_t), 8)]
    assert (
        watch_verdict(history(), WatchRun("k", [back], truth()), RunResult("x"), True).status
        == FAIL
    )
    unread = watch_verdict(
        history(),
        WatchRun("k", [clean_log()], truth(changes=None, error="x")),
        RunResult("x"),
        False,
    )
    assert unread.status == FAIL and "not read" in unread.detail


def test_the_logs_round_trip_through_watch_jsonl(tmp_path) -> None:
    w = Watchers(["http://127.0.0.1:1"], ["node-0"], WorkloadConfig(watchers=1))
    w.logs = [clean_log("w0"), clean_log("w1", resume_after=5)]
    w.dump(tmp_path / "watch.jsonl")
    back = load_logs(tmp_path / "watch.jsonl")
    assert [(b.name, b.start_revision, b.records) for b in back] == [
        (a.name, a.start_revision, [tuple(r) for r in a.records]) for a in w.logs
    ]
    assert check_watch(history(), back, truth(), "k").ok
    with pytest.raises(ValueError):
        Watchers(["http://127.0.0.1:1"], ["node-0"], WorkloadConfig(watchers=0))


# -- the recording hook, on a real (sans-IO) WatchSession -------------------------------------


def _events(rev: int, *keys: str) -> dict:
    kvs = [
        {"key": k, "value": b"v", "version": 1, "create_revision": rev, "mod_revision": rev}
        for k in keys
    ]
    return {"events": [{"type": "put", "kv": kv} for kv in kvs], "revision": rev}


def _wire(*frames: dict) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in (msgpack.packb(f) for f in frames))


def test_the_hook_records_connections_and_the_frames_the_client_drops() -> None:
    eps = Endpoints(["http://a:1", "http://b:1"])
    make = lambda rev: watch_request("ns", rev, prefix="k")  # noqa: E731
    s = WatchSession(make, 5, eps, RetryPolicy(max_attempts=3, deadline=None), 2.0,
                     progress=1.0, progress_events=True, ns="ns")  # fmt: skip
    log = WatcherLog("w0", 5)
    instrument(s, log, {"http://a:1": "node-0", "http://b:1": "node-1"}, clock=lambda: 1)
    s.attempt()
    s.start("application/msgpack; framing=length-prefixed")
    got = list(s.feed(_wire(_events(5, "k0", "k1"), {"progress": True, "revision": 7})))
    assert [type(i) for i in got] == [WatchEvent, WatchEvent, WatchProgress]
    s.retry_after(s.ended())
    s.attempt()
    s.start("application/msgpack; framing=length-prefixed")
    got = list(s.feed(_wire(_events(6, "k2"), _events(9, "k3"))))  # 6 is old: dropped
    assert [i.revision for i in got] == [9]
    assert log.records == [
        ("connect", 1, "node-0", 5, None),
        ("frame", 1, "events", 5),
        ("frame", 1, "progress", 7),
        ("connect", 1, "node-1", 8, "unavailable"),
        ("frame", 1, "events", 6),
        ("frame", 1, "events", 9),
    ]
    # With the deliveries recorded as the watcher does, the re-sent 6 is a `frames` finding.
    log.records[2:2] = [("event", 1, 5, "k0", "put", "v"), ("event", 1, 5, "k1", "put", "v")]
    log.records.insert(4, ("progress", 1, 7))
    log.records.append(("event", 1, 9, "k3", "put", "v"))
    from statekeeper.chaos.checker import watch_rules

    assert [v.rule for v in watch_rules.frames(log)] == ["frames"]
