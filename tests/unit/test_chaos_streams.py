"""chaos.checker.streams on hand-written histories: for every rule, a history that breaks
it is caught (and named by that rule) and its clean counterpart passes."""

from __future__ import annotations

import io
import itertools
import json
import math
from typing import Any

import pytest

from statekeeper.chaos.checker.streams import RULES, check_streams
from statekeeper.chaos.history import HistoryError, HistoryWriter, Op, parse_events

MS = 1_000_000
_ids = itertools.count(1)


def data(event_id: str) -> str:
    return f"event {event_id}"


def app(
    ids: list[str],
    start: float,
    end: float | None,
    *,
    stream: str = "s",
    expect: Any = "any",
    outcome: str | None = None,
    seqs: list[int] | None = None,
    dups: list[bool] | None = None,
    first: Any = "auto",
    last: int | None = None,
    error: str | None = None,
    **extra: Any,
) -> Op:
    """An append over [start, end] ms (end None: unknown). ok answers default to new
    events at ``seqs``; a fail with ``error="expectation_failed"`` carries ``last``."""
    outcome = outcome or ("info" if end is None else "ok")
    out: dict[str, Any] = {}
    if outcome == "ok":
        dups = dups or [False] * len(ids)
        new = [s for s, d in zip(seqs or [], dups, strict=True) if not d]
        out = {
            "revision": 10,
            "seqs": seqs,
            "duplicates": dups,
            "first_seq": (new[0] if new else None) if first == "auto" else first,
            "last_seq": last if last is not None else (new[-1] if new else max(seqs or [0])),
        }
    elif error is not None:
        out = {"error": error}
        if error == "expectation_failed":
            out.update(last_seq=last, exists=bool(last))
    return Op(
        id=next(_ids),
        process=0,
        f="append",
        keys=(),
        invoke_time=int(start * MS),
        complete_time=math.inf if outcome == "info" else int(end * MS),  # type: ignore[operator]
        outcome=outcome,  # type: ignore[arg-type]
        input={
            "stream": stream,
            "events": [{"id": i, "data": data(i)} for i in ids],
            "expect": expect,
            **extra,
        },
        output=out,
        end_time=None if end is None else int(end * MS),
    )


def read(
    seen: list[str | tuple[int, str, str]],
    last: int,
    start: float,
    end: float,
    *,
    stream: str = "s",
    direction: str = "forward",
    first: int | None = 1,
    limit: int | None = None,
) -> Op:
    """An ok read_stream that returned ``seen`` (ids from seq ``first`` on, or explicit
    (seq, id, data) triples) with ``last_seq`` = ``last``."""
    events = [
        list(e) if isinstance(e, tuple) else [n, e, data(e)]
        for n, e in enumerate(seen, start=first or 1)
    ]
    inp = {"stream": stream, "start": first, "direction": direction}
    if limit is not None:
        inp["limit"] = limit
    return Op(
        id=next(_ids),
        process=1,
        f="read_stream",
        keys=(),
        invoke_time=int(start * MS),
        complete_time=int(end * MS),
        outcome="ok",
        input=inp,
        output={"revision": 9, "last_seq": last, "events": events, "pages": 1},
        end_time=int(end * MS),
    )


def final(*ids: str) -> list[tuple[int, str, str]]:
    return [(n, i, data(i)) for n, i in enumerate(ids, start=1)]


def rules(history: list[Op], streams: dict[str, list], **kw: Any) -> set[str]:
    res = check_streams(history, streams, **kw)
    return {v.rule for v in res.violations}


def clean_history() -> tuple[list[Op], dict[str, list]]:
    a1 = app(["a", "b"], 0, 5, expect=0, seqs=[1, 2])
    a2 = app(["c"], 6, 8, expect=2, seqs=[3])
    a3 = app(["d"], 7, 9, expect=1, outcome="fail", error="expectation_failed", last=3)
    a4 = app(["e"], 10, None, expect=3)  # unknown: applied (seq 4)
    a4r = app(["e"], 20, 22, expect=3, seqs=[4], dups=[True], retry_of=a4.id)
    a5 = app(["f"], 12, None)  # unknown: never applied
    a6 = app(["g"], 13, 14, outcome="fail", error="connection_failed")
    r1 = read(["a", "b", "c"], 3, 8.5, 9.5)
    r2 = read([(4, "e", data("e"))], 4, 23, 24, direction="backward", first=None, limit=1)
    history = [a1, a2, a3, a4, a4r, a5, a6, r1, r2]
    return history, {"s": final("a", "b", "c", "e")}


def test_a_clean_history_passes_with_its_counts() -> None:
    history, streams = clean_history()
    res = check_streams(history, streams, replicas={"n1": streams, "n2": streams})
    assert res.ok, [v.describe() for v in res.violations]
    assert res.stats == {
        "streams": 1,
        "appends": 7,
        "appends_ok": 3,
        "appends_failed": 2,
        "expectation_failed": 1,
        "appends_unknown": 2,
        "retries": 1,
        "duplicates_answered": 1,
        "reads_checked": 2,
        "events": 4,
        "replicas_checked": 2,
    }
    assert "3 ok / 2 failed (1 expectation) / 2 unknown" in res.summary()


def test_the_history_format_round_trips_through_the_writer() -> None:
    buf = io.StringIO()
    h = HistoryWriter(buf)
    op = h.invoke(0, "append", stream="s", events=[{"id": "a", "data": data("a")}], expect=0)
    h.ok(op, revision=3, first_seq=1, last_seq=1, seqs=[1], duplicates=[False])
    rd = h.invoke(1, "read_stream", stream="s", start=1, direction="forward")
    h.ok(rd, revision=3, last_seq=1, events=[[1, "a", data("a")]], pages=1)
    ops = parse_events(json.loads(line) for line in buf.getvalue().splitlines())
    assert [o.keys for o in ops] == [(), ()]  # invisible to the kv checks
    assert check_streams(ops, {"s": final("a")}).ok
    assert not check_streams(ops, {"s": []}).ok


def test_gap() -> None:
    history = [app(["a"], 0, 1, seqs=[1]), app(["b"], 2, None), app(["c"], 3, None)]
    assert rules(history, {"s": final("a", "b", "c")}) == set()
    bad = [(1, "a", data("a")), (2, "b", data("b")), (4, "c", data("c"))]
    assert rules(history, {"s": bad}) == {"gap"}
    starts_late = [(2, "b", data("b")), (3, "c", data("c"))]
    assert "gap" in rules(history[1:], {"s": starts_late})


def test_duplicate() -> None:
    history = [app(["a"], 0, None), app(["b"], 1, 2, seqs=[2])]
    assert rules(history, {"s": final("a", "b")}) == set()
    found = rules(history, {"s": final("a", "b", "a")})
    assert "duplicate" in found


def test_phantom() -> None:
    history = [app(["a"], 0, 1, seqs=[1])]
    assert rules(history, {"s": final("a")}) == set()
    assert rules(history, {"s": final("a", "zz")}) == {"phantom"}
    assert rules(history, {"s": [(1, "a", "other data")]}) >= {"phantom"}
    assert rules(history, {"s": [(1, None, "x")]}) >= {"phantom"}


def test_lost_acknowledged_events() -> None:
    a = app(["a", "b"], 0, 1, seqs=[1, 2])
    c = app(["c"], 2, 3, seqs=[3])
    assert rules([a, c], {"s": final("a", "b", "c")}) == set()
    assert rules([a, c], {"s": final("a", "b")}) == {"lost"}
    x = app(["x"], 1, None)  # an unknown append that took seq 3 instead
    assert "lost" in rules([a, c, x], {"s": final("a", "b", "x")})
    # a duplicate answer must name the seq where the id is
    c_dup = app(["c"], 4, 5, seqs=[2], dups=[True])
    assert "lost" in rules([a, c, c_dup], {"s": final("a", "b", "c")})
    # an answer that contradicts itself
    odd = app(["c"], 2, 3, seqs=[3], last=7)
    assert "lost" in rules([a, odd], {"s": final("a", "b", "c")})


def test_expectation_honoured_by_acks() -> None:
    a = app(["a"], 0, 1, expect=0, seqs=[1])
    b = app(["b"], 2, 3, expect=1, seqs=[2])
    assert rules([a, b], {"s": final("a", "b")}) == set()
    wrong = app(["b"], 2, 3, expect=0, seqs=[2])  # last_seq was 1, not 0: must be a 409
    assert rules([a, wrong], {"s": final("a", "b")}) == {"expectation"}


def test_expectation_failures_are_real() -> None:
    a = app(["a"], 0, 1, expect=0, seqs=[1])
    ok409 = app(["b"], 2, 3, expect=0, outcome="fail", error="expectation_failed", last=1)
    assert rules([a, ok409], {"s": final("a")}) == set()
    same = app(["b"], 2, 3, expect=1, outcome="fail", error="expectation_failed", last=1)
    assert rules([a, same], {"s": final("a")}) == {"expectation"}
    anyway = app(["b"], 2, 3, expect="any", outcome="fail", error="expectation_failed", last=1)
    assert rules([a, anyway], {"s": final("a")}) == {"expectation"}


def test_a_409_for_events_already_stored_means_the_dedup_missed_them() -> None:
    first = app(["a"], 0, None, expect=0)  # unknown, applied at seq 1
    retry = app(
        ["a"], 5, 6, expect=0, outcome="fail", error="expectation_failed", last=2, retry_of=first.id
    )
    b = app(["b"], 3, 4, seqs=[2])
    assert "expectation" in rules([first, b, retry], {"s": final("a", "b")})
    # the same 409 is fine when the retried events are not there (yet): the unknown
    # first attempt may still be applied later, above the reported last_seq
    b1 = app(["b"], 3, 4, seqs=[1])
    retry1 = app(
        ["a"], 5, 6, expect=0, outcome="fail", error="expectation_failed", last=1, retry_of=first.id
    )
    assert rules([first, b1, retry1], {"s": final("b", "a")}) == set()


def test_failed_appends_never_appear() -> None:
    f1 = app(["a"], 0, 1, expect=3, outcome="fail", error="expectation_failed", last=0)
    f2 = app(["b"], 0, 1, outcome="fail", error="connection_failed")
    assert rules([f1, f2], {"s": []}) == set()
    assert rules([f1, f2], {"s": final("a")}) == {"failed"}
    assert "failed" in rules([f1, f2], {"s": final("b")})
    # only a duplicate answer claims it: nobody appended it
    only_dup = app(["c"], 0, 1, seqs=[1], dups=[True])
    assert "failed" in rules([only_dup], {"s": final("c")})
    # a failed re-send of an unknown append: the first attempt may have applied it
    first = app(["d"], 0, None)
    retry = app(["d"], 2, 3, outcome="fail", error="connection_failed", retry_of=first.id)
    assert rules([first, retry], {"s": final("d")}) == set()


def test_unknown_appends_appear_whole_contiguous_and_once() -> None:
    u = app(["x", "y", "z"], 0, None)
    other = app(["o"], 0, None)
    assert rules([u, other], {"s": final("x", "y", "z", "o")}) == set()
    assert rules([u, other], {"s": []}) == set()  # never applied: fine
    assert rules([u, other], {"s": final("x", "y", "o")}) == {"unknown"}
    assert rules([u, other], {"s": final("x", "o", "y", "z")}) == {"unknown"}
    assert rules([u, other], {"s": final("y", "x", "z", "o")}) == {"unknown"}
    retry = app(["x", "y", "z"], 5, None, retry_of=u.id)
    assert "duplicate" in rules([u, retry], {"s": final("x", "y", "z", "x", "y", "z")})


def test_readers_see_a_prefix_of_the_final_stream() -> None:
    a = app(["a", "b", "c"], 0, 1, seqs=[1, 2, 3])
    r = read(["a", "b"], 2, 0.5, 0.9)  # concurrent with the append: before it, fine
    r_all = read(["a", "b", "c"], 3, 2, 3)
    assert rules([a, r, r_all], {"s": final("a", "b", "c")}) == set()
    other = read(["a", "x"], 2, 2, 3)  # saw an event the final stream does not have
    assert "reader" in rules([a, other], {"s": final("a", "b", "c")})
    short = read(["a", "b"], 3, 2, 3)  # served last_seq 3 but only two events
    assert rules([a, short], {"s": final("a", "b", "c")}) == {"reader"}
    bad_data = read([(1, "a", "garbled")], 1, 2, 3, first=None)
    assert "reader" in rules([a, bad_data], {"s": final("a", "b", "c")})
    tail = read([(3, "c", data("c"))], 3, 2, 3, direction="backward", first=None, limit=1)
    assert rules([a, tail], {"s": final("a", "b", "c")}) == set()
    wrong_tail = read([(2, "b", data("b"))], 3, 2, 3, direction="backward", first=None, limit=1)
    assert rules([a, wrong_tail], {"s": final("a", "b", "c")}) == {"reader"}


def test_appends_follow_commit_order() -> None:
    a = app(["a"], 0, 10, seqs=[1])
    b = app(["b"], 20, 25, seqs=[2])
    assert rules([a, b], {"s": final("a", "b")}) == set()
    a_late = app(["a"], 0, 10, seqs=[2], last=2)
    b_early = app(["b"], 20, 25, seqs=[1], last=1)  # invoked after a was acked, seq below it
    assert "order" in rules([a_late, b_early], {"s": final("b", "a")})
    # overlapping: either order is fine
    c = app(["c"], 0, 30, seqs=[2])
    d = app(["d"], 5, 25, seqs=[1])
    assert rules([c, d], {"s": final("d", "c")}) == set()
    # an unknown append seen by a reader is done when the read completed
    u = app(["u"], 0, None)
    r = read(["u"], 1, 1, 2)
    v = app(["v"], 3, None)
    assert rules([u, r, v], {"s": final("u", "v")}) == set()
    assert "order" in rules([u, r, v], {"s": [(1, "v", data("v")), (2, "u", data("u"))]})


def test_no_stale_last_seq() -> None:
    a = app(["a"], 0, 1, seqs=[1])
    b = app(["b"], 2, 3, seqs=[2])
    fresh = read(["a", "b"], 2, 4, 5)
    assert rules([a, b, fresh], {"s": final("a", "b")}) == set()
    stale = read(["a"], 1, 4, 5)  # a prefix, but older than b's acknowledgement
    assert rules([a, b, stale], {"s": final("a", "b")}) == {"stale"}
    stale409 = app(["c"], 4, 5, expect=0, outcome="fail", error="expectation_failed", last=1)
    assert rules([a, b, stale409], {"s": final("a", "b")}) == {"stale"}
    # from the future: a read completed at 5 saw seq 2, which went to an append invoked at 6
    early = read(["a", "x"], 2, 4, 5)
    x = app(["x"], 6, 7, seqs=[2])
    assert "stale" in rules([a, early, x], {"s": final("a", "x")})


def test_replicas_hold_the_final_stream() -> None:
    history = [app(["a"], 0, 1, seqs=[1]), app(["b"], 2, 3, seqs=[2])]
    streams = {"s": final("a", "b")}
    assert rules(history, streams, replicas={"n1": streams, "n2": streams}) == set()
    behind = {"s": final("a")}
    assert rules(history, streams, replicas={"n1": streams, "n2": behind}) == {"replica"}
    other = {"s": [(1, "a", data("a")), (2, "b", "x")]}
    assert rules(history, streams, replicas={"n1": other}) == {"replica"}
    assert rules(history, streams, replicas={"n1": None}) == {"replica"}


def test_an_unread_stream_is_not_ok() -> None:
    res = check_streams([app(["a"], 0, 1, seqs=[1], stream="t")], {"s": []})
    assert res.unread == ["t"] and not res.ok


def test_event_ids_shared_by_two_appends_are_a_history_error() -> None:
    with pytest.raises(HistoryError, match="two appends"):
        check_streams([app(["a", "b"], 0, 1, seqs=[1, 2]), app(["b"], 2, None)], {"s": []})
    with pytest.raises(HistoryError, match="other data"):
        retry = app(["a"], 2, None)
        retry.input["events"][0]["data"] = "changed"
        check_streams([app(["a"], 0, None), retry], {"s": []})


def test_every_rule_has_a_test_above() -> None:
    names = {n for n in globals() if n.startswith("test_")}
    covered = {
        "gap",
        "duplicate",
        "phantom",
        "lost",
        "expectation",
        "failed",
        "unknown",
        "reader",
        "order",
        "stale",
        "replica",
    }
    assert covered == set(RULES)
    assert len(names) >= len(RULES)


# -- the run's verdict and report (chaos.run_checks / chaos.report) --------------------


def test_the_stream_verdict_and_its_report_section() -> None:
    from statekeeper.chaos.report import RunResult, render_markdown
    from statekeeper.chaos.run_checks import stream_verdict
    from statekeeper.chaos.stream_reads import StreamReads

    history, streams = clean_history()
    result = RunResult(fault="none")
    v = stream_verdict(history, StreamReads(final=streams), result, allowed=False)
    assert (v.name, v.status) == ("event streams", "PASS")
    assert v.value == "0 violations; 4 events, 3 ok appends, 1 answered duplicate"
    assert "3 ok / 2 failed (1 expectation) / 2 unknown" in v.detail
    assert result.stream_stats["appends_ok"] == 3 and result.streams == []

    lost = StreamReads(final={"s": final("a", "b")})  # c and e (acked at 3, 4) are gone
    v = stream_verdict(history, lost, result, allowed=False)
    assert (v.status, v.value.split(";")[0]) == ("FAIL", "4 violations (2 lost, 2 reader)")
    assert "## Event streams" in render_markdown(result) and "[lost] s:" in render_markdown(result)
    # power loss with fsync=never: a lost acknowledged event is allowed, a gap never
    assert stream_verdict(history, lost, RunResult(fault="x"), allowed=True).status == "ALLOWED"
    gap = StreamReads(final={"s": [e for e in streams["s"] if e[0] != 2]})
    assert stream_verdict(history, gap, RunResult(fault="x"), allowed=True).status == "FAIL"
    unread = StreamReads(final={}, missing=["s"])
    v = stream_verdict(history, unread, RunResult(fault="x"), allowed=False)
    assert v.status == "FAIL" and "could not read s" in v.detail
