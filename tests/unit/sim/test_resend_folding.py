"""A re-send answered `replayed` is the attempt it re-sent, known applied at last
(chaos/sim/workload.py fold_replayed_resends): counted as a new write, it made the
checkers report a lost write (seed 44) and a non-linearizable key (seed 2)."""

from __future__ import annotations

from statekeeper.chaos import checker
from statekeeper.chaos.history import Op
from statekeeper.chaos.sim.workload import fold_replayed_resends

INF = float("inf")


def history() -> list[Op]:
    return [
        # p0's put, outcome unknown (its node died); it was applied at revision 5
        Op(1, 0, "put", ("k",), 10, INF, "info", {"value": "a", "idempotency_key": "ik-a"}, {}),
        # p1 writes b at revision 6, acknowledged
        Op(2, 1, "put", ("k",), 20, 30, "ok", {"value": "b", "idempotency_key": "ik-b"}, {"revision": 6}),
        # p0 re-sends a: the store answers with the stored result (revision 5), writes nothing
        Op(3, 0, "put", ("k",), 40, 50, "ok",
           {"value": "a", "idempotency_key": "ik-a", "resend_of": 1}, {"revision": 5, "replayed": True}),
    ]  # fmt: skip


def test_a_replayed_resend_counted_as_a_write_is_a_false_lost_write():
    lost = checker.lost_writes(history(), {"k": "b"}, final_revisions={"k": 6})
    assert [w.key for w in lost] == ["k"]  # what the checks reported before the folding


def test_folded_the_history_has_no_lost_write_and_is_linearizable():
    folded = fold_replayed_resends(history())
    assert [o.id for o in folded] == [1, 2]
    assert (
        folded[0].outcome == "ok"
        and folded[0].complete_time == 50
        and folded[0].output["revision"] == 5
    )
    assert checker.lost_writes(folded, {"k": "b"}, final_revisions={"k": 6}) == []
    assert checker.check(folded).valid is not False


def test_a_resend_that_was_applied_again_stays_a_write():
    h = history()
    h[2] = Op(3, 0, "put", ("k",), 40, 50, "ok",
              {"value": "a", "idempotency_key": "ik-a", "resend_of": 1}, {"revision": 7})  # fmt: skip
    assert [o.id for o in fold_replayed_resends(h)] == [1, 2, 3]
