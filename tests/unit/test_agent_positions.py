"""Where a checkpoint's stream position may point, over the in-memory client: a blind
first checkpoint over events it never folded is refused (hydrate first), a head naming
events its stream lacks is refused with a coded 404, and hydrate/state_at never fold
across a hole (truncated or archived events) but raise EventsMissing."""

from __future__ import annotations

import pytest

from statekeeper.client.agent import (
    Agent,
    CheckpointConflict,
    EventsMissing,
    EveryNSteps,
    PositionNotFound,
)
from statekeeper.client.errors import NotFound
from tests.unit.test_agent_fake import MemoryClient


def reducer(state, event):
    if event.type == "add":
        return {**state, "total": state.get("total", 0) + event.data}
    return state


def make(c: MemoryClient, agent_id: str = "a1", **kw) -> Agent:
    kw.setdefault("reducer", reducer)
    kw.setdefault("initial", {})
    return Agent(c, agent_id, **kw)


# -- a blind first checkpoint (no head, events it never folded) ----------------------------


def test_a_new_agent_over_events_without_a_checkpoint_must_hydrate_first() -> None:
    c = MemoryClient()
    a = make(c)
    for _ in range(3):
        a.log("add", 1)  # events, no checkpoint (the writer crashed before one)
    fresh = make(c)
    with pytest.raises(CheckpointConflict, match="hydrate") as err:
        fresh.checkpoint({"total": 0}, step=1)
    assert err.value.code == "checkpoint_conflict" and err.value.details["last_seq"] == 3
    assert c.get("agent/a1/head", default=None) is None  # nothing written
    with pytest.raises(CheckpointConflict, match="hydrate"):
        make(c, policy=EveryNSteps(1)).maybe_checkpoint({}, step=1)
    h = fresh.hydrate()
    assert h.state == {"total": 3}
    ck = fresh.checkpoint(h.state, step=1)
    assert ck.position == 3
    assert make(c).hydrate().state == {"total": 3}  # the three events counted once


def test_a_writer_that_logged_behind_others_must_hydrate_first() -> None:
    c = MemoryClient()
    make(c).log("add", 5)
    late = make(c)
    late.log("add", 1)  # its first event is seq 2: seq 1 was never folded by it
    with pytest.raises(CheckpointConflict, match="hydrate"):
        late.checkpoint({"total": 1})
    assert make(c).hydrate().state == {"total": 6}


def test_a_writer_that_started_the_stream_may_checkpoint_without_hydrating() -> None:
    c = MemoryClient()
    a = make(c)
    a.log("add", 1)
    a.log("add", 2)
    assert a.checkpoint({"total": 3}, step=1).position == 2


def test_latest_then_checkpoint_builds_on_the_heads_position_not_the_streams_end() -> None:
    c = MemoryClient()
    a = make(c)
    a.log("add", 1)
    a.checkpoint({"total": 1}, step=1)
    a.log("add", 10)  # after the head: b never folds it through latest()
    b = make(c)
    assert b.latest().state == {"total": 1} and b.last_seq == 1
    ck = b.checkpoint({"total": 1, "note": "b"}, step=2)
    assert ck.position == 1  # event 2 stays after the checkpoint ...
    assert make(c).hydrate().state == {"total": 11, "note": "b"}  # ... and is folded
    none = make(c, "a2")
    make(c, "a2").log("add", 4)
    assert none.latest() is None and none.last_seq == 0
    assert none.checkpoint({"total": 0}).position == 0
    assert make(c, "a2").hydrate().state == {"total": 4}


# -- a checkpoint for a missing stream ---------------------------------------------------


def test_a_brand_new_agent_checkpoints_at_position_zero_naming_no_stream() -> None:
    c = MemoryClient()
    ck = make(c).checkpoint({"total": 0}, step=0)
    assert ck.position == 0 and ("default", "agent/a1") not in c.streams


def test_a_head_naming_a_missing_stream_is_refused_with_stream_not_found() -> None:
    c = MemoryClient()
    a = make(c)
    a.log("add", 1)
    a.log("add", 2)
    a.checkpoint({"total": 3}, step=2)
    c.put("agent/ghost/head", c.get("agent/a1/head").value)  # copied without its stream
    rev = c.rev
    for op in (
        lambda g: g.checkpoint({"total": 0}, step=3),
        lambda g: g.hydrate(),
        lambda g: g.latest(),
        lambda g: g.state_at(revision=rev),
    ):
        with pytest.raises(PositionNotFound) as err:
            op(make(c, "ghost"))
        e = err.value
        assert isinstance(e, NotFound) and (e.code, e.status) == ("stream_not_found", 404)
        assert (e.agent, e.position, e.last_seq) == ("ghost", 2, 0)
        assert "'agent/ghost'" in str(e) and "does not exist" in str(e)
    assert c.rev == rev and ("default", "agent/ghost") not in c.streams  # nothing written
    make(c, "short").log("add", 1)  # a stream that ends before the head's position
    c.put("agent/short/head", c.get("agent/a1/head").value)
    with pytest.raises(PositionNotFound) as err:
        make(c, "short").hydrate()
    assert (err.value.code, err.value.last_seq) == ("position_not_found", 1)


# -- never fold across a hole ------------------------------------------------------------


def setup_truncated(c: MemoryClient) -> Agent:
    """Checkpoint at position 2, events 3..6 after it, then events below 5 truncated."""
    a = make(c)
    a.log("add", 1, step=1)
    a.log("add", 1, step=1)
    a.checkpoint({"total": 2}, step=1)
    for s in range(2, 6):
        a.log("add", 10, step=s)
    c.truncate_stream("agent/a1", 5)
    return a


@pytest.mark.parametrize("tail", [100, 2])  # the events in the hydrate batch, or read after
def test_hydrate_across_a_truncated_range_raises_events_missing(tail: int) -> None:
    c = MemoryClient()
    setup_truncated(c)
    with pytest.raises(EventsMissing) as err:
        make(c, tail=tail).hydrate()
    e = err.value
    assert (e.code, e.status, e.agent, e.position, e.first_seq) == (
        "events_missing",
        410,
        "a1",
        2,
        5,
    )
    assert "'a1'" in str(e) and "position 2" in str(e) and "first stored seq is 5" in str(e)


def test_hydrate_is_fine_when_only_events_inside_the_checkpoint_are_gone() -> None:
    c = MemoryClient()
    w = make(c)
    for _ in range(4):
        w.log("add", 1)
    w.checkpoint({"total": 4}, step=1)
    w.log("add", 1)
    c.truncate_stream("agent/a1", 5)  # 1..4 gone: all of them inside the checkpoint
    assert make(c).hydrate().state == {"total": 5}
    c.truncate_stream("agent/a1", 6)  # event 5 came after the checkpoint: a hole
    with pytest.raises(EventsMissing):
        make(c).hydrate()
    w.checkpoint({"total": 5}, step=2)  # the writer that folded it checkpoints past it
    assert make(c).hydrate().state == {"total": 5}  # nothing after position 5 is needed


def test_state_at_across_a_hole_raises_events_missing() -> None:
    c = MemoryClient()
    a = setup_truncated(c)
    with pytest.raises(EventsMissing) as err:
        a.state_at(step=3)  # from checkpoint 1 (position 2): needs events 3, 4
    assert (err.value.position, err.value.first_seq) == (2, 5)
    with pytest.raises(EventsMissing) as err:
        a.state_at(step=0)  # no checkpoint that early: needs events from seq 1
    assert (err.value.position, err.value.first_seq) == (0, 5)
    with pytest.raises(EventsMissing):
        a.state_at(step=1)  # events 3, 4 may have been of step 1 too: unknown, so refused


def test_an_archived_tail_raises_events_missing() -> None:
    """The archival feature answers 410 ``archived`` for a read inside an archived range."""
    from statekeeper.client.errors import StatekeeperError

    c = MemoryClient()
    make(c).log("add", 1)
    make(c).hydrate()
    real = c.read_stream

    def read_stream(stream, **kw):
        if kw.get("direction") == "backward" or (kw.get("start") or 1) < 4:
            raise StatekeeperError(
                "archived",
                code="archived",
                status=410,
                details={"stream": stream, "from_seq": 1, "before_seq": 4},
            )
        return real(stream, **kw)

    c.read_stream = read_stream
    with pytest.raises(EventsMissing) as err:
        make(c).hydrate()
    assert (err.value.position, err.value.first_seq, err.value.status) == (0, 4, 410)
    assert err.value.details["archived"]["before_seq"] == 4
