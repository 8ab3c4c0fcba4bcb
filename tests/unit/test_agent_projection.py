"""Projections over the in-memory client: fold, save every N and when caught up, outputs in
the same txn, resume from the saved position, conflicts between two projectors."""

from __future__ import annotations

import pytest

from statekeeper.client.agent import AsyncProjection, Projection, ProjectionConflict
from statekeeper.client.agent.envelope import encode
from statekeeper.client.ops import ops
from tests.unit.test_agent_fake import AsyncMemoryClient, MemoryClient


def count(model, event):
    model = dict(model)
    model[event.type] = model.get(event.type, 0) + 1
    return model


def fill(c: MemoryClient, n: int, type_: str = "t") -> None:
    for i in range(n):
        c.append("s", [{"data": encode({"i": i}), "type": type_}])


def test_catch_up_folds_and_saves_once() -> None:
    c = MemoryClient()
    fill(c, 7)
    p = Projection(c, "counts", "s", count, {})
    assert p.catch_up() == {"t": 7} and p.position == 7
    txns = [kw for name, _, kw in c.calls if name == "txn"]
    assert len(txns) == 1
    assert c.get("proj/counts").value  # readable with a plain get


def test_restart_resumes_from_saved_position() -> None:
    c = MemoryClient()
    fill(c, 5)
    seen: list[int] = []

    def fold(model, ev):
        seen.append(ev.seq)
        return count(model, ev)

    Projection(c, "counts", "s", fold, {}).catch_up()
    fill(c, 3, "u")
    seen.clear()
    p = Projection(c, "counts", "s", fold, {})
    assert p.catch_up() == {"t": 5, "u": 3}
    assert seen == [6, 7, 8]  # nothing replayed from zero
    reads = [kw for name, _, kw in c.calls if name == "read_stream"]
    assert reads[-1]["start"] == 6


def test_checkpoint_every_and_max_events() -> None:
    c = MemoryClient()
    fill(c, 25)
    p = Projection(c, "c", "s", count, {}, checkpoint_every=10, page_size=100)
    assert p.run(max_events=25) == 25
    assert len([1 for name, *_ in c.calls if name == "txn"]) == 3  # 10, 20, caught up at 25
    q = Projection(c, "c", "s", count, {})
    assert q.load() == {"t": 25} and q.position == 25


def test_run_stops_on_event_and_waits_live() -> None:
    c = MemoryClient()
    fill(c, 2)
    polls = []

    class Stop:
        def is_set(self) -> bool:
            polls.append(1)
            return len(polls) > 3

    p = Projection(c, "c", "s", count, {}, wait=2.0)
    assert p.run(stop=Stop()) == 2
    waits = [kw["wait"] for name, _, kw in c.calls if name == "read_stream"]
    assert waits and all(w == 2.0 for w in waits)


def test_outputs_commit_in_the_same_txn() -> None:
    c = MemoryClient()
    fill(c, 4)

    def outputs(model, ev):
        return [ops.put(f"view/{ev.type}", str(model[ev.type]))]

    p = Projection(c, "c", "s", count, {}, outputs=outputs)
    p.catch_up()
    txn = [kw for name, _, kw in c.calls if name == "txn"][-1]
    assert txn["success"] == ["put", "put"]  # the record and one op per key (last wins)
    assert c.get("view/t").value == b"4"
    assert c.get("view/t").mod_revision == c.get("proj/c").mod_revision


def test_two_projectors_of_one_name_conflict() -> None:
    c = MemoryClient()
    fill(c, 2)
    a = Projection(c, "c", "s", count, {})
    b = Projection(c, "c", "s", count, {})
    a.load()
    b.catch_up()
    fill(c, 1)
    with pytest.raises(ProjectionConflict):
        a.catch_up()


def test_wrong_stream_is_refused() -> None:
    c = MemoryClient()
    fill(c, 1)
    Projection(c, "c", "s", count, {}).catch_up()
    with pytest.raises(ValueError, match="another name"):
        Projection(c, "c", "other", count, {}).catch_up()


async def test_async_projection() -> None:
    c = AsyncMemoryClient()
    fill(c.inner, 3)
    p = AsyncProjection(c, "c", "s", count, {})
    assert await p.catch_up() == {"t": 3}
    fill(c.inner, 2)
    q = AsyncProjection(c, "c", "s", count, {})
    assert await q.run(max_events=2) == 2 and q.model == {"t": 5}
